"""A writer cut between any two steps of the protocol leaves nothing lost: the next reader or writer
finishes what was won, and what was not won never appears."""

from __future__ import annotations

import pytest

from logstore import (
    RecoveryOutcome,
    StorageError,
    VersionExistsError,
    failpoints,
    open_log_store,
)
from logstore.dynamodb import DynamoDBLogStore
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore


def crash_at(name: str):
    """The process "dies" at failpoint ``name``: nothing after it runs (FailpointCrash is not caught by the
    algorithm)."""
    return failpoints.armed({name: "crash"})


AFTER_PUT_ENTRY = "logstore.write.after_put_entry"
AFTER_COPY = "logstore.write.after_copy_to_final"
AFTER_DISCARD = "logstore.write.after_discard_temp"
UNFINISHED = [AFTER_PUT_ENTRY, AFTER_COPY]


def without_marking_complete(store):
    """The same store, whose UpdateItem marking an entry complete always fails (so the entry is left
    incomplete after N.json is written: what a writer dying right before that UpdateItem leaves)."""

    class Unmarked(type(store)):
        def _complete_entry(self, version, expire_time):
            raise StorageError("throttled", operation="dynamodb:UpdateItem", retryable=True)

    unmarked = Unmarked.__new__(Unmarked)
    unmarked.__dict__.update(store.__dict__)
    return unmarked


def body(n: int) -> bytes:
    return f'{{"commitInfo":{{"n":{n}}}}}\n'.encode()


def entry(store, version):
    return store._get_entry(version)


def test_writer_dying_after_temp_only_leaves_version_free(store, open_store):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at("logstore.write.before_put_entry"):
        store.write(1, body(1))
    reader = open_store()
    assert reader.latest_version() == 0
    assert entry(reader, 1) is None
    reader.write(1, body(11))
    assert reader.read(1) == body(11)


@pytest.mark.parametrize("step", UNFINISHED)
def test_next_reader_finishes_an_entry_won_but_unfinished(store, open_store, step):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(step):
        store.write(1, body(1))
    assert entry(store, 1) is not None and not entry(store, 1).complete
    reader = open_store()
    assert reader.latest_version() == 1
    assert reader.read(1) == body(1)
    finished = entry(reader, 1)
    assert finished.complete and finished.expire_time is not None


@pytest.mark.parametrize("step", UNFINISHED)
def test_next_writer_finishes_previous_entry_before_writing(store, open_store, step):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(step):
        store.write(1, body(1))
    writer = open_store()
    with pytest.raises(VersionExistsError):
        writer.write(1, body(99))
    writer.write(2, body(2))
    assert [writer.read(v) for v in range(3)] == [body(0), body(1), body(2)]
    assert entry(writer, 1).complete


def test_read_of_the_unfinished_version_itself_finishes_it(store, open_store):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(AFTER_PUT_ENTRY):
        store.write(1, body(1))
    assert open_store().read(1) == body(1)
    assert entry(store, 1).complete


@pytest.mark.parametrize("step,expected", [
    (AFTER_PUT_ENTRY, RecoveryOutcome.COPIED_AND_COMPLETED),
    (AFTER_COPY, RecoveryOutcome.COMPLETED),
])
def test_recover_reports_what_it_did(store, open_store, step, expected):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(step):
        store.write(1, body(1))
    other = open_store()
    assert other.recover() is expected
    assert other.recover() is RecoveryOutcome.ALREADY_COMPLETE


def test_recovery_racing_in_many_threads_is_harmless(store, open_store):
    import threading

    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(AFTER_PUT_ENTRY):
        store.write(1, body(1))
    outcomes, errors = [], []

    def run():
        try:
            outcomes.append(open_store().recover(1))
        except Exception as exc:  # collected and asserted empty below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert outcomes.count(RecoveryOutcome.COPIED_AND_COMPLETED) <= 1
    assert store.read(1) == body(1)
    assert entry(store, 1).complete


def test_delta_rs_layout_temp_is_deleted_once_commit_file_exists(store, open_store):
    store.write(0, body(0))
    from logstore.external import CommitEntry

    temp = "_commit_0b5c1a6e-0000-4000-8000-000000000001.json.tmp"
    store.objects.put(store.temp_key(temp), body(1))
    store._put_entry(CommitEntry(store.table_path, 1, temp, complete=False))
    assert open_store().recover() is RecoveryOutcome.COPIED_AND_COMPLETED
    assert store.read(1) == body(1)
    assert store.objects.head(store.temp_key(temp)) is None


def test_java_layout_temp_is_deleted_by_recovery_once_commit_file_exists(store):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(AFTER_PUT_ENTRY):
        store.write(1, body(1))
    temp = entry(store, 1).temp_path
    assert temp.startswith(".tmp/00000000000000000001.json.")
    store.recover()
    assert store.objects.head(store.temp_key(temp)) is None


def test_a_writer_whose_entry_is_never_marked_complete_still_leaves_no_temp_file(store, open_store):
    """delta-rs 1.6.0 cannot finish an entry whose temp file and N.json both exist: the temp file is gone
    however the UpdateItem sent beside its DELETE fares."""
    store.write(0, body(0))
    unmarked = without_marking_complete(store)
    unmarked.write(1, body(1))  # durable: success
    unmarked.wait_finished()  # the DELETE and the UpdateItem go out on the pool after write returned
    unfinished = entry(store, 1)
    assert not unfinished.complete
    assert store.objects.head(store.commit_key(1)) is not None
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []
    assert open_store().recover() is RecoveryOutcome.COMPLETED


def test_a_writer_dying_as_it_drops_its_temp_file_leaves_its_commit_whole(store, open_store):
    """The DELETE of the temp file and the UpdateItem go out together: dying right after the DELETE leaves
    the entry complete or not, and either way the commit is there, once."""
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at(AFTER_DISCARD):
        store.write(1, body(1))
        store.wait_finished()  # the DELETE runs on the pool: the crash there is raised here
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []
    reader = open_store()
    assert reader.latest_version() == 1 and reader.read(1) == body(1)
    assert entry(reader, 1).complete


def test_uncoordinated_writer_shadowing_our_commit_is_reported_not_hidden(store, open_store):
    """N.json written behind the external store's back (an S3-only writer): our won entry's copy finds
    different bytes, so the commit must not be reported as successful."""
    store.write(0, body(0))

    class Shadowed(type(store)):
        def _copy_to_final(self, version, data):
            self.objects.put(self.commit_key(version), body(666))
            return super()._copy_to_final(version, data)

    shadowed = Shadowed.__new__(Shadowed)
    shadowed.__dict__.update(store.__dict__)
    with pytest.raises(VersionExistsError, match="bypassed"):
        shadowed.write(1, body(1))
    assert store.read(1) == body(666)
    assert entry(store, 1).complete


def test_memory_and_dynamodb_stores_share_one_algorithm():
    from logstore.external import ExternalLogStore

    for cls in (MemoryLogStore, DynamoDBLogStore):
        assert issubclass(cls, ExternalLogStore)
        for name in ("write", "read", "recover", "latest_version", "_recover_once", "_commit", "_publish"):
            assert name not in cls.__dict__, f"{cls.__name__} overrides {name}"
    assert open_log_store("memory://x/y").__class__ is MemoryLogStore
