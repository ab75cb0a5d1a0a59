"""The acknowledgement at the commit point (``DYNACOMMIT_COMMIT_ACK=durable``, issue 19 item 4): a write
returns once its DynamoDB entry has won, two round trips one after another instead of four; ``N.json`` is
then written in the background by recovery of that entry. What a durable acknowledgement promises is what
the log store contract promises (any later ``read(N)`` returns the commit, whoever dies when), and what it
gives up is said in docs/protocol.md: readers that list ``_delta_log/`` without DynamoDB see the commit only
once it is published.
"""

from __future__ import annotations

import collections
import threading
import time

import pyarrow as pa
import pytest

from logstore import (
    ConfigurationError,
    RecoveryOutcome,
    StorageOptions,
    TableNotFoundError,
    VersionExistsError,
    failpoints,
    open_log_store,
)
from logstore.external import PUBLISHED, RECOVER_BEFORE_COPY, CommitEntry
from table import Table, write_table
from tests.support.counting import CountingLogStore
from tests.support.fault_harness import deltalake_options, marker_counts, marker_rows

DURABLE = StorageOptions(commit_ack="durable")
SERVICE_TIME = 0.05


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def fill_first(store) -> None:
    """Version 0 finished, written straight into the stores."""
    store.objects.inner.put(store.commit_key(0), body(0))
    store.entries.claim(CommitEntry(store.table_path, 0, ".tmp/00000000000000000000.json.x", complete=True,
                                    expire_time=int(time.time()) + 86_400))


class HeldPublish(CountingLogStore):
    """Holds the PUT of ``N.json`` (every copy to the final name) until ``release`` is set."""

    release = threading.Event()

    def _copy_to_final(self, version, data):
        assert self.release.wait(30)
        return super()._copy_to_final(version, data)


# --- the option -------------------------------------------------------------------------------------


def test_commit_ack_is_read_from_the_storage_options_and_the_environment(monkeypatch):
    assert StorageOptions.resolve({}).commit_ack == "published"
    assert StorageOptions.resolve({"DYNACOMMIT_COMMIT_ACK": "Durable"}).commit_ack == "durable"
    monkeypatch.setenv("DYNACOMMIT_COMMIT_ACK", "durable")
    resolved = StorageOptions.resolve({})
    assert resolved.commit_ack == "durable"
    monkeypatch.delenv("DYNACOMMIT_COMMIT_ACK")
    assert StorageOptions.resolve(resolved.to_dict()) == resolved  # survives the trip to Spark executors
    assert "DYNACOMMIT_COMMIT_ACK" not in StorageOptions.resolve({}).to_dict()


@pytest.mark.parametrize("bad", ["fast", "true", "publish"])
def test_an_unknown_commit_ack_is_refused_naming_the_choices(bad):
    with pytest.raises(ConfigurationError, match=rf"DYNACOMMIT_COMMIT_ACK='{bad}'.*'published'.*'durable'"):
        StorageOptions.resolve({"DYNACOMMIT_COMMIT_ACK": bad})
    with pytest.raises(ConfigurationError, match="'published'.*'durable'"):
        StorageOptions(commit_ack=bad)


# --- the algorithm (in-memory store, real algorithm) ------------------------------------------------


def test_a_durable_write_returns_after_two_round_trips_and_publishes_with_the_same_requests(memory_uri):
    """Acknowledged at the commit point: HEAD | GetItem | PUT temp, then the PutItem. Then the background
    publish sends what the default's steps 3-4 send (recovery, with the body in hand: no read of the temp
    file), so the durable acknowledgement costs no extra request."""
    published = CountingLogStore(f"{memory_uri}-p", delay=SERVICE_TIME)
    fill_first(published)
    published.write(1, body(1))
    published.wait_finished()

    HeldPublish.release.clear()
    store = HeldPublish(memory_uri, delay=SERVICE_TIME, options=DURABLE)
    fill_first(store)
    store.write(1, body(1))
    assert store.recorder.sequential_round_trips() == 2
    entry = store.entries.get(store.table_path, 1)
    assert entry is not None and not entry.complete
    assert store.objects.inner.head(store.commit_key(1)) is None  # not published yet
    assert store.objects.inner.get(store.temp_key(entry.temp_path)) == body(1)  # the commit's durable copy
    HeldPublish.release.set()
    assert store.wait_finished(30)
    assert collections.Counter(store.calls) == collections.Counter(published.calls) == {
        "head": 1, "get_entry": 1, "put": 2, "put_entry": 1, "delete": 1, "complete_entry": 1}
    assert store.objects.inner.get(store.commit_key(1)) == body(1)
    assert store._get_entry(1).complete and store._get_entry(1).expire_time is not None
    assert list(store.objects.inner.list(store.log_prefix + ".tmp/")) == []


def test_a_durable_writers_next_commit_waits_for_the_entry_to_be_complete_not_for_the_temp_files_delete(
        memory_uri):
    """Steady state: the next write waits for the previous publish's PUT of N.json and UpdateItem, not its
    DELETE of the temp file (recovery marks complete first), so back-to-back writes overlap that DELETE."""
    release = threading.Event()

    class HeldDelete(CountingLogStore):
        def _discard_temp(self, temp_path):
            assert release.wait(30)
            return super()._discard_temp(temp_path)

    store = HeldDelete(memory_uri, options=DURABLE)
    fill_first(store)
    store.write(1, body(1))
    store.write(2, body(2))  # with the DELETE of 1's temp file still held
    assert store.objects.inner.get(store.commit_key(1)) == body(1) and store._get_entry(1).complete
    assert len(list(store.objects.inner.list(store.log_prefix + ".tmp/"))) == 2  # both temp files still there
    release.set()
    assert store.wait_finished(30)
    assert list(store.objects.inner.list(store.log_prefix + ".tmp/")) == []
    assert store.read(2) == body(2) and store._get_entry(2).complete


def test_a_reader_right_after_a_durable_ack_finishes_the_entry_while_the_writer_publishes(memory_uri):
    """Another process reads version N while the writer's background copy is held: the reader finishes the
    entry itself (recovery), and the writer's publish then finds N.json with its bytes and ends cleanly."""
    HeldPublish.release.clear()
    store = HeldPublish(memory_uri, options=DURABLE)
    fill_first(store)
    store.write(1, body(1))
    other = open_log_store(memory_uri)  # another process (same bucket and entries), default acknowledgement
    assert other.latest_version() == 1
    assert other.read(1) == body(1)
    HeldPublish.release.set()
    assert store.wait_finished(30)
    assert store._get_entry(1).complete
    assert store.objects.inner.get(store.commit_key(1)) == body(1)
    assert list(store.objects.inner.list(store.log_prefix + ".tmp/")) == []


def test_a_durable_commit_whose_publish_died_is_finished_by_the_next_reader_and_writer(memory_uri):
    """The process "dies" in the background right after the acknowledgement (failpoint ``crash`` before the
    copy): nothing of steps 3-4 happened. A reader then sees the commit (it finishes the entry), and the same
    process's next write, finding its own publish failed, finishes nothing twice."""
    store = open_log_store(memory_uri, storage_options=DURABLE)
    store.write(0, body(0))
    store.wait_finished()
    with failpoints.armed({RECOVER_BEFORE_COPY: "crash"}):
        store.write(1, body(1))
        with pytest.raises(failpoints.FailpointCrash):
            store.wait_finished()
    entry = store._get_entry(1)
    assert not entry.complete and store.objects.head(store.commit_key(1)) is None
    assert store.recover(1) is RecoveryOutcome.COPIED_AND_COMPLETED  # what the next reader or writer does
    assert store.read(1) == body(1)
    store.write(2, body(2))
    assert store.wait_finished(30)
    assert [store.read(v) for v in range(3)] == [body(0), body(1), body(2)]
    assert all(store._get_entry(v).complete for v in range(3))


def test_a_durable_writers_next_commit_finishes_its_previous_one_first(memory_uri):
    """The background publish of version 1 fails (S3 refuses every attempt's copy): the process's next write
    must not leave version 1 behind; it reads version 1's entry and recovers it before it commits 2, so that
    no entry but the newest is ever incomplete."""
    refusing = {"on": False}
    store = CountingLogStore(memory_uri, options=DURABLE,
                             refuse_put=lambda key: refusing["on"] and key.endswith("01.json"))
    store.write(0, body(0))
    store.wait_finished()
    refusing["on"] = True
    store.write(1, body(1))  # acknowledged: the refused PUT comes after
    store.wait_finished(30)
    assert not store._get_entry(1).complete
    assert store.objects.inner.head(store.commit_key(1)) is None
    refusing["on"] = False
    store.write(2, body(2))
    store.wait_finished(30)
    assert store.objects.get(store.commit_key(1)) == body(1)
    assert all(store._get_entry(v).complete for v in range(3))


@pytest.mark.parametrize("ack", ["published", "durable"])
def test_recovery_that_cannot_mark_the_entry_complete_still_leaves_no_temp_file_beside_n_json(memory_uri, ack):
    """Recovery marks complete before it deletes the temp file; when the UpdateItem is refused (a reader
    without dynamodb:UpdateItem, throttling through every attempt) the temp file must still go, because
    delta-rs <= 1.6.0 cannot finish an incomplete entry whose temp file and N.json both exist."""
    from logstore import StorageError

    class Unmarked(CountingLogStore):
        def _complete_entry(self, version, expire_time):
            raise StorageError("throttled", operation="dynamodb:UpdateItem", retryable=True)

    store = open_log_store(memory_uri, storage_options={"DYNACOMMIT_COMMIT_ACK": ack})
    fill_first(CountingLogStore(memory_uri))
    with failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        with pytest.raises(failpoints.FailpointCrash):
            store.write(1, body(1))  # won, nothing published
    with pytest.raises(StorageError, match="could not finish"):
        Unmarked(memory_uri).recover(1)
    assert store.objects.get(store.commit_key(1)) == body(1)
    assert not store._get_entry(1).complete
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []
    assert store.recover(1) is RecoveryOutcome.COMPLETED


def test_concurrent_durable_writers_each_commit_once(memory_uri):
    stores = [open_log_store(memory_uri, storage_options=DURABLE) for _ in range(4)]
    won: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        store = stores[n]
        for seq in range(10):
            data = body(f"{n}-{seq}")
            while True:
                try:
                    version = store.latest_version() + 1
                except TableNotFoundError:
                    version = 0
                try:
                    store.write(version, data)
                except VersionExistsError:
                    continue
                with lock:
                    won.append((version, data))
                break

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for store in stores:
        store.wait_finished(30)
    reader = open_log_store(memory_uri)
    assert sorted(v for v, _ in won) == list(range(40))
    assert {v: reader.read(v) for v in range(40)} == dict(won)


# --- through the table layer, on moto; deltalake as the S3-only reader -----------------------------


def test_after_a_durable_ack_our_reader_sees_the_commit_and_an_s3_only_reader_once_published(
        s3_uri, storage_options):
    """Right after a durable acknowledgement whose publish never ran (the process died in the background),
    the same process's table, a new reader with DynamoDB (ours) and deltalake without DynamoDB disagree
    only as documented: ours see version 1 at once (the reader finishes it), deltalake sees version 0 until
    then, and the same rows afterwards."""
    import deltalake

    options = dict(storage_options, DYNACOMMIT_COMMIT_ACK="durable")
    write_table(s3_uri, marker_rows("a", 0), storage_options=options)
    table = Table(s3_uri, storage_options=options)
    table.log_store.wait_finished()
    with failpoints.armed({RECOVER_BEFORE_COPY: "crash"}):
        assert write_table(table, marker_rows("a", 1)).version == 1
        with pytest.raises(failpoints.FailpointCrash):
            table.log_store.wait_finished()
    assert table.version == 1  # the writer's own snapshot
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options))
    assert theirs.version() == 0  # S3-only: 1.json is not there yet
    ours = Table(s3_uri, storage_options=storage_options)  # a reader with DynamoDB finishes the entry
    assert ours.version == 1
    expected = marker_counts(pa.concat_tables([marker_rows("a", 0), marker_rows("a", 1)]))
    assert marker_counts(ours.to_pyarrow_table(columns=["marker"])) == expected
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options))
    assert theirs.version() == 1
    assert marker_counts(pa.table(theirs.to_pyarrow_table(columns=["marker"]))) == expected


def test_a_durable_commit_on_a_checkpoint_version_is_checkpointed_only_once_published(memory_uri):
    """A checkpoint must never describe a version whose N.json is not known to hold it: at a checkpoint
    version whose publish died, the checkpoint is left to the next interval; once published, it is written."""
    options = {"DYNACOMMIT_COMMIT_ACK": "durable"}
    write_table(memory_uri, marker_rows("c", 0), storage_options=options,
                configuration={"delta.checkpointInterval": "2"})
    write_table(memory_uri, marker_rows("c", 1), storage_options=options)
    table = Table(memory_uri, storage_options=options)
    table.log_store.wait_finished()
    with failpoints.armed({RECOVER_BEFORE_COPY: "crash"}):
        assert write_table(table, marker_rows("c", 2)).version == 2
        with pytest.raises(failpoints.FailpointCrash):
            table.log_store.wait_finished()
    assert table.log_store.read_file("00000000000000000002.checkpoint.parquet") is None
    assert table.log_store.read_file("_last_checkpoint") is None
    write_table(memory_uri, marker_rows("c", 3), storage_options=options)  # finishes version 2 first
    assert write_table(memory_uri, marker_rows("c", 4), storage_options=options).version == 4
    PUBLISHED.wait_all(30)
    assert table.log_store.read_file("00000000000000000004.checkpoint.parquet") is not None
    rows = Table(memory_uri).to_pyarrow_table(columns=["marker"])
    assert marker_counts(rows) == marker_counts(pa.concat_tables([marker_rows("c", n) for n in range(5)]))
