"""Unclear answers at and after the commit point: never a lost or doubled commit, never a stuck table."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import time

import pytest

from logstore import (
    CommitStateUnknownError,
    ConfigurationError,
    StorageError,
    VersionExistsError,
    open_log_store,
)
from logstore.aws import AmbiguousError
from logstore.errors import ThrottledError
from tests.support.memory import MemoryLogStore
from logstore.objects import MemoryObjectStore
from logstore.options import TableUri


def body(n: int) -> bytes:
    return f'{{"commitInfo":{{"n":{n}}}}}\n'.encode()


def store_with(memory_uri: str, cls: type[MemoryLogStore]) -> MemoryLogStore:
    return cls(TableUri.parse(memory_uri))


def test_put_that_times_out_and_lands_late_is_recognised_as_ours(memory_uri):
    """First put: no answer, nothing there when read back; it lands before our retry, whose condition
    then fails. The retry must see its own entry, not a lost race (which would delete the temp file
    and leave the version won but unreadable)."""

    class LateLanding(MemoryLogStore):
        pending = None

        def _put_entry(self, entry):
            if self.pending is None:
                self.pending = entry
                raise AmbiguousError("timeout", operation="dynamodb:PutItem")
            super()._put_entry(self.pending)  # the first attempt lands now
            super()._put_entry(entry)

    store = store_with(memory_uri, LateLanding)
    store.write(0, body(0))
    assert store.read(0) == body(0)
    store.wait_finished()  # the UpdateItem marking it complete is not waited for by write
    assert store._get_entry(0).complete


def test_put_retried_by_the_sdk_that_landed_then_was_throttled_is_ours(memory_uri):
    class ThrottledAfterLanding(MemoryLogStore):
        def _put_entry(self, entry):
            super()._put_entry(entry)
            error = ThrottledError("throttled after retries", operation="dynamodb:PutItem")
            error.retried = True
            raise error

    store = store_with(memory_uri, ThrottledAfterLanding)
    store.write(0, body(0))
    assert open_log_store(memory_uri).read(0) == body(0)


def test_definite_refusal_of_the_first_put_fails_the_write_and_leaves_nothing(memory_uri):
    class Refused(MemoryLogStore):
        def _put_entry(self, entry):
            raise ConfigurationError("AccessDenied on PutItem")

    store = store_with(memory_uri, Refused)
    with pytest.raises(ConfigurationError, match="AccessDenied"):
        store.write(0, body(0))
    assert store._get_entry(0) is None
    assert list(store.objects.list(store.log_prefix)) == []


def test_unreadable_outcome_is_commit_state_unknown_and_keeps_the_temp_file(memory_uri):
    class Blind(MemoryLogStore):
        def _put_entry(self, entry):
            super()._put_entry(entry)
            raise AmbiguousError("timeout", operation="dynamodb:PutItem")

        def _get_entry(self, version):
            raise StorageError("DynamoDB unreachable", operation="dynamodb:GetItem", retryable=True)

    store = store_with(memory_uri, Blind)
    with pytest.raises(CommitStateUnknownError, match="may or may not have happened") as info:
        store.write(0, body(0))
    assert info.value.version == 0
    temps = [o.key for o in store.objects.list(store.log_prefix + ".tmp/")]
    assert len(temps) == 1
    # What the blind writer could not see, a reader can: the entry is there and gets finished.
    assert open_log_store(memory_uri).read(0) == body(0)


def test_losing_the_conditional_put_to_another_writer_is_version_exists(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, body(0))

    class Slow(MemoryLogStore):
        def _check(self, version, **options):
            super()._check(version, **options)
            open_log_store(memory_uri).write(version, body(100))  # someone wins between check and put

    loser = store_with(memory_uri, Slow)
    with pytest.raises(VersionExistsError):
        loser.write(1, body(1))
    loser.wait_finished()  # the lost temp file's DELETE is not waited for by write
    assert store.read(1) == body(100)
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []


def test_failures_after_the_commit_point_never_fail_the_write(memory_uri):
    class ExpiredCredentials(MemoryLogStore):
        def _copy_to_final(self, version, data):
            raise ConfigurationError("ExpiredToken")

        def _mark_complete(self, version):
            raise ConfigurationError("ExpiredToken")

    store_with(memory_uri, ExpiredCredentials).write(0, body(0))  # durable: must not raise
    assert open_log_store(memory_uri).read(0) == body(0)


def test_reader_without_delete_permission_still_finishes_an_entry(memory_uri):
    class NoDelete(MemoryObjectStore):
        def delete(self, keys):
            raise StorageError("AccessDenied on DeleteObjects", operation="s3:DeleteObjects")

    class Unfinished(MemoryLogStore):
        def _copy_to_final(self, version, data):
            raise ConfigurationError("ExpiredToken")

    writer = store_with(memory_uri, Unfinished)
    writer.write(0, body(0))
    uri = TableUri.parse(memory_uri)
    no_delete = NoDelete(uri.bucket)
    no_delete._objects = writer.objects._objects  # same bucket contents, a role without s3:DeleteObject
    reader = MemoryLogStore(uri, no_delete, writer.entries)
    assert reader.latest_version() == 0
    assert reader.read(0) == body(0)
    assert reader._get_entry(0).complete


def _expire(store, versions, *, at: float) -> None:
    for v in versions:
        entry = store._get_entry(v)
        store.entries.replace(dataclasses.replace(entry, expire_time=int(at)))


def test_latest_version_lists_past_entries_that_ttl_may_have_removed(memory_uri):
    store = open_log_store(memory_uri)
    for v in range(30):
        store.write(v, body(v))
    for v in range(10, 30):
        store.entries.delete(store.table_path, v)  # TTL swept the newer items first
    _expire(store, range(10), at=time.time() - 60)
    assert store.latest_version() == 29


def test_latest_version_below_a_known_version_is_not_trusted(memory_uri):
    store = open_log_store(memory_uri)
    for v in range(30):
        store.write(v, body(v))
    for v in range(10, 30):
        store.entries.delete(store.table_path, v)
    assert store.latest_version(start=20) == 29


def test_errors_survive_pickling():
    errors = [
        VersionExistsError("s3://b/t", 3),
        CommitStateUnknownError("s3://b/t", 4, "unknown"),
        StorageError("boom", operation="s3:GetObject", retryable=True, code="500"),
        ThrottledError("slow down", operation="dynamodb:PutItem", code="ThrottlingException"),
    ]
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert vars(copy) == vars(error)


@contextlib.contextmanager
def _winner_held_after_its_put():
    """Hold the thread named ``winner`` right after its PutItem won (its entry incomplete) until ``release``
    is set; ``reached`` is set when it is held."""
    import threading

    from logstore import failpoints

    reached, release = threading.Event(), threading.Event()

    def hold_the_winner(name: str) -> None:
        if name == "logstore.write.after_put_entry" and threading.current_thread().name == "winner":
            reached.set()
            release.wait(30)

    failpoints.set_hook(hold_the_winner)
    try:
        yield reached, release
    finally:
        release.set()
        failpoints.set_hook(None)


def test_a_writer_that_loses_a_version_marks_it_and_the_winner_learns_that_others_wait(store, open_store):
    """Issue 18, item 4: a writer that keeps winning never loses a race, so it cannot tell others wait for
    the table; the writer that lost its version marks the entry (``waitingSince``), and the winner sees the
    mark when it marks the entry complete. The mark goes with the completion: complete entries keep only
    the protocol's attributes. A version nobody lost carries no mark."""
    import threading

    from logstore import VersionExistsError

    store.write(0, b'{"commitInfo":{"n":0}}\n')
    winner, loser = open_store(), open_store()
    with _winner_held_after_its_put() as (reached, release):
        thread = threading.Thread(target=winner.write, args=(1, b'{"commitInfo":{"n":1}}\n'), name="winner")
        thread.start()
        assert reached.wait(30)
        with pytest.raises(VersionExistsError):
            loser.write(1, b'{"commitInfo":{"n":"lost"}}\n')
        loser.wait_finished()  # the mark, sent after the write raised
        assert loser._get_entry(1).waiting_since is not None
        release.set()
        thread.join(30)
    winner.wait_finished()
    assert winner.waited_recently(timeout=5)
    entry = winner._get_entry(1)
    assert entry.complete and entry.waiting_since is None
    winner.write(2, b'{"commitInfo":{"n":2}}\n')  # nobody loses this one
    winner.wait_finished()
    assert not winner.waited_recently(timeout=5)


def test_a_writer_that_keeps_its_temp_file_marks_the_winner_only_after_three_lost_versions(store, open_store):
    """Issue 23, item 3: a write whose temp file is kept for the next version (a blind append whose lost
    race the winner's entry settles) retries at once and needs no turn: it marks the entry that beat it only
    once the same bytes lost WAIT_MARK_LOSSES versions in a row; a write that keeps nothing (it reads the
    winners before its next attempt) marks at its first loss (the test above)."""
    import threading

    from logstore import VersionExistsError
    from logstore.writer import WAIT_MARK_LOSSES

    assert WAIT_MARK_LOSSES == 3
    store.write(0, b'{"commitInfo":{"n":0}}\n')
    winner, loser = open_store(), open_store()
    ours = b'{"commitInfo":{"n":"ours"}}\n'
    kept, marks = None, []
    with _winner_held_after_its_put() as (reached, release):
        for version in (1, 2, 3):
            reached.clear()
            release.clear()
            thread = threading.Thread(target=winner.write, args=(version, body(version)), name="winner")
            thread.start()
            assert reached.wait(30)  # the winner holds the version, its entry incomplete
            with pytest.raises(VersionExistsError) as lost:
                loser.write(version, ours, keep_temp=True, **({} if kept is None else {"temp": kept}))
            kept = lost.value.kept
            assert kept is not None and kept.losses == version
            loser.wait_finished()  # a mark would be sent after the write raised
            marks.append(loser._get_entry(version).waiting_since is not None)
            release.set()
            thread.join(30)
            winner.wait_finished()
    assert marks == [False, False, True]
    assert winner.waited_recently(timeout=5)  # the winner of the third takes a turn before its next commit
    loser.write(4, ours, temp=kept)  # the same temp file, kept through three lost versions, commits
    loser.wait_finished()
    assert loser.read(4) == ours
