"""Transactions: commitInfo, the conflict matrix, rebase and retry, idempotent app transactions, creation races.

A race is made deterministic by committing on a snapshot that another commit has already overtaken:
the log store then refuses the version exactly as it does when two writers collide.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pytest

from logstore import TableUri, open_log_store
from logstore.errors import CommitStateUnknownError, VersionExistsError
from logstore.memory import MemoryLogStore
from table.errors import AppendOnlyError, CommitConflictError, UnsupportedFeatureError
from table.log.actions import (
    AddFile,
    Metadata,
    Protocol,
    Txn,
    parse_commit,
    serialize_commit,
)
from table.log.checkpoint import read_last_checkpoint, write_checkpoint
from table.log.schema import schema_string
from table.log.snapshot import advance, load_snapshot
from table.log.transaction import (
    CommitRetriesExhaustedError,
    ReadOnlySnapshotError,
    ReadScope,
    client_version,
    commit,
)
from tests.support.counting import CountingLogStore

SCHEMA = pa.schema([("x", pa.int64()), ("p", pa.string())])


def metadata(schema: pa.Schema = SCHEMA, configuration: dict[str, str] | None = None,
             partition_columns: Sequence[str] = ("p",)) -> Metadata:
    return Metadata(id=str(uuid.uuid4()), schema_string=schema_string(schema), partition_columns=list(partition_columns),
                    configuration=configuration or {}, created_time=1)


PROTOCOL = Protocol(min_reader_version=1, min_writer_version=2)


def add(name: str, p: str = "a") -> AddFile:
    return AddFile(path=f"p={p}/{name}.parquet", partition_values={"p": p}, size=100, modification_time=1,
                   data_change=True)


def write(store, snapshot, actions, *, operation="WRITE", scope=None, **kwargs):
    return commit(store, snapshot, actions, operation=operation, operation_parameters={"mode": "Append"},
                  read_scope=scope or ReadScope.blind_append(), **kwargs)


def overwrite(store, snapshot, new: AddFile, *, partition: str | None = None, **kwargs):
    """Remove every file (of ``partition``) the snapshot holds and add ``new``."""
    now = int(time.time() * 1000)
    removes = [f.remove(deletion_timestamp=now) for f in snapshot.files
               if partition is None or f.partition_values["p"] == partition]
    scope = ReadScope.whole_table() if partition is None else ReadScope.partitions([{"p": partition}])
    return commit(store, snapshot, [*removes, new], operation="WRITE", read_scope=scope,
                  operation_parameters={"mode": "Overwrite"}, **kwargs)


@pytest.fixture
def store(memory_uri):
    return open_log_store(memory_uri)


@pytest.fixture
def base(store):
    """A table at version 1 with a file in p=a and one in p=b."""
    created = write(store, None, [PROTOCOL, metadata(), add("a0")], operation="CREATE TABLE")
    return write(store, created.snapshot, [add("b0", "b")]).snapshot


def last_commit(store) -> list:
    version = store.latest_version()
    return parse_commit(store.read(version))


# --- what a commit writes ---------------------------------------------------------------------------


def test_commit_writes_commit_info_first_and_the_txn_of_the_application(store, base):
    outcome = write(store, base, [add("a1")], app_id="job", app_version=3, operation_metrics={"numFiles": "1"},
                    engine_info="test-engine")
    assert (outcome.version, outcome.skipped, outcome.attempts) == (2, False, 1)
    info, txn, added = last_commit(store)
    body = json.loads(store.read(2).splitlines()[0])["commitInfo"]
    assert body["operation"] == "WRITE" and body["operationParameters"] == {"mode": "Append"}
    assert body["isBlindAppend"] is True and body["readVersion"] == 1
    assert body["operationMetrics"] == {"numFiles": "1", "numAttempts": "1"} and body["engineInfo"] == "test-engine"
    assert body["clientVersion"] == client_version() and client_version().startswith("dynacommit-")
    assert uuid.UUID(body["txnId"]) and abs(body["timestamp"] - time.time() * 1000) < 60_000
    assert isinstance(txn, Txn) and (txn.app_id, txn.version) == ("job", 3)
    assert added == add("a1")
    assert outcome.snapshot.version == 2 and outcome.snapshot.state.app_version("job") == 3


def test_commit_refuses_malformed_arguments_before_writing(store, base):
    with pytest.raises(ValueError, match="together"):
        write(store, base, [add("x")], app_id="job")
    with pytest.raises(ValueError, match="must be a string"):
        commit(store, base, [add("x")], operation="WRITE", operation_parameters={"n": 1},  # type: ignore[dict-item]
               read_scope=ReadScope.blind_append())
    with pytest.raises(ValueError, match="protocol and a metaData"):
        write(store, None, [add("x")])
    assert store.latest_version() == 1


# --- the conflict matrix ----------------------------------------------------------------------------


def test_concurrent_appends_do_not_conflict_and_the_loser_rebases(store, base):
    write(store, base, [add("a1")])
    outcome = write(store, base, [add("a2")])
    assert (outcome.version, outcome.attempts) == (3, 2)
    assert sorted(f.path for f in outcome.snapshot.files) == sorted(f.path for f in load_snapshot(store).files)
    assert {"p=a/a1.parquet", "p=a/a2.parquet"} <= {f.path for f in outcome.snapshot.files}
    assert json.loads(store.read(3).splitlines()[0])["commitInfo"]["readVersion"] == 2


def test_second_of_two_whole_table_overwrites_conflicts_naming_the_winner(store, base):
    winner = commit(store, base, [f.remove(deletion_timestamp=1) for f in base.files] + [add("w1")],
                    operation="OVERWRITE TABLE", operation_parameters={"mode": "Overwrite"},
                    read_scope=ReadScope.whole_table())
    with pytest.raises(CommitConflictError) as caught:
        overwrite(store, base, add("w2"))
    error = caught.value
    assert (error.version, error.operation) == (winner.version, "OVERWRITE TABLE")
    assert "p=a/a0.parquet" in error.reason and "concurrent delete" in error.reason
    assert "re-read the table" in str(error)
    assert store.latest_version() == 2


def test_partition_overwrite_conflicts_with_a_concurrent_append_to_that_partition(store, base):
    write(store, base, [add("a1", "a")])
    with pytest.raises(CommitConflictError) as caught:
        overwrite(store, base, add("a-new", "a"), partition="a")
    assert caught.value.version == 2 and "p=a/a1.parquet" in caught.value.reason
    assert "partition p=a" in caught.value.reason and "concurrent append" in caught.value.reason


def test_partition_overwrite_does_not_conflict_with_an_append_to_another_partition(store, base):
    write(store, base, [add("b1", "b")])
    outcome = overwrite(store, base, add("a-new", "a"), partition="a")
    assert (outcome.version, outcome.attempts) == (3, 2)
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/a-new.parquet", "p=b/b0.parquet",
                                                                   "p=b/b1.parquet"]


def test_metadata_change_conflicts_with_a_concurrent_append_either_way(store, base):
    changed = metadata(configuration={"owner": "me"})
    write(store, base, [add("a1")])
    with pytest.raises(CommitConflictError, match="concurrent append"):
        write(store, base, [changed], operation="SET TBLPROPERTIES")
    later = load_snapshot(store)
    write(store, later, [changed], operation="SET TBLPROPERTIES")
    with pytest.raises(CommitConflictError) as caught:
        write(store, later, [add("a2")])
    assert caught.value.operation == "SET TBLPROPERTIES" and "metadata" in caught.value.reason


def test_reading_a_partition_another_commit_deleted_from_conflicts(store, base):
    overwrite(store, base, add("a-new", "a"), partition="a")
    with pytest.raises(CommitConflictError, match=r"removed file 'p=a/a0.parquet' in partition p=a"):
        commit(store, base, [add("derived", "b")], operation="WRITE", operation_parameters={},
               read_scope=ReadScope.partitions([{"p": "a"}]))


def _typed_table(store, column: str, arrow_type: pa.DataType, value: str):
    """A table partitioned by ``column`` of ``arrow_type`` holding one file with partition value ``value``."""
    schema = pa.schema([("x", pa.int64()), (column, arrow_type)])
    first = AddFile(path="f0.parquet", partition_values={column: value}, size=1, modification_time=1, data_change=True)
    return write(store, None, [PROTOCOL, metadata(schema, partition_columns=[column]), first],
                 operation="CREATE TABLE").snapshot


@pytest.mark.parametrize("arrow_type, ours, theirs", [
    (pa.timestamp("us", tz="UTC"), "2024-01-01 00:00:00.000000", "2024-01-01 00:00:00"),  # us vs delta-rs
    (pa.timestamp("us", tz="UTC"), "2024-01-01 01:00:00.000000", "2024-01-01T01:00:00Z"),
    (pa.float64(), "1.0", "1"),
    (pa.int32(), "7", "+7"),
    (pa.decimal128(10, 2), "1.50", "1.5"),
    (pa.bool_(), "true", "True"),
])
def test_a_concurrent_append_to_the_same_partition_spelled_differently_conflicts(store, arrow_type, ours, theirs):
    created = _typed_table(store, "k", arrow_type, ours)
    concurrent = AddFile(path="theirs.parquet", partition_values={"k": theirs}, size=1, modification_time=1,
                         data_change=True)
    write(store, created, [concurrent])
    replacement = AddFile(path="ours.parquet", partition_values={"k": ours}, size=1, modification_time=1,
                          data_change=True)
    with pytest.raises(CommitConflictError, match="theirs.parquet"):
        commit(store, created, [created.files[0].remove(deletion_timestamp=1), replacement], operation="WRITE",
               operation_parameters={"mode": "Overwrite"}, read_scope=ReadScope.partitions([{"k": ours}]))


def test_a_concurrent_append_to_another_typed_partition_does_not_conflict(store):
    created = _typed_table(store, "k", pa.timestamp("us", tz="UTC"), "2024-01-01 00:00:00.000000")
    write(store, created, [AddFile(path="theirs.parquet", partition_values={"k": "2024-01-01 00:00:00.000001"},
                                   size=1, modification_time=1, data_change=True)])
    outcome = commit(store, created, [created.files[0].remove(deletion_timestamp=1)], operation="WRITE",
                     operation_parameters={"mode": "Overwrite"},
                     read_scope=ReadScope.partitions([{"k": "2024-01-01 00:00:00.000000"}]))
    assert (outcome.version, outcome.attempts) == (2, 2)


def test_covers_compares_typed_values_and_takes_what_does_not_parse_as_covered():
    scope = ReadScope.partitions([{"t": "2024-01-01 00:00:00.000000", "f": "NaN"}])
    types = {"t": "timestamp", "f": "double"}
    assert scope.covers({"t": "2024-01-01 00:00:00", "f": "nan"}, types=types)
    assert not scope.covers({"t": "2024-01-01 00:00:00", "f": "nan"})  # without types: as strings
    assert not scope.covers({"t": "2024-01-02 00:00:00", "f": "NaN"}, types=types)
    assert not scope.covers({"t": None, "f": "NaN"}, types=types)
    assert scope.covers({"t": "yesterday", "f": "NaN"}, types=types)
    assert ReadScope.partitions([{"p": None}]).covers({"p": ""}, types={"p": "string"})
    assert not ReadScope.partitions([{"p": "a"}]).covers({"p": "A"}, types={"p": "string"})


# --- idempotent application transactions ------------------------------------------------------------


def test_replayed_app_version_is_skipped_with_the_version_that_holds_it(store, base):
    first = write(store, base, [add("a1")], app_id="job", app_version=1)
    again = write(store, first.snapshot, [add("a1-again")], app_id="job", app_version=1)
    assert (again.skipped, again.version, again.attempts) == (True, first.version, 0)
    later = write(store, first.snapshot, [add("a2")]).snapshot
    older = write(store, later, [add("a0-again")], app_id="job", app_version=0)
    assert (older.skipped, older.version) == (True, first.version)
    assert store.latest_version() == 3


def test_app_version_held_in_a_checkpoint_is_found_by_scanning_back(store, base):
    snapshot = write(store, base, [add("a1")], app_id="job", app_version=7).snapshot
    for i in range(10):
        snapshot = write(store, snapshot, [add(f"x{i}")]).snapshot
    assert read_last_checkpoint(store).version == 10
    loaded = load_snapshot(store)
    assert loaded.checkpoint_version == 10 and "job" not in loaded.txn_versions
    outcome = write(store, loaded, [add("dup")], app_id="job", app_version=7)
    assert (outcome.skipped, outcome.version) == (True, 2)


def test_other_attempt_of_the_same_job_landing_first_makes_ours_skip(store, base):
    winner = write(store, base, [add("attempt-1")], app_id="job", app_version=5)
    outcome = write(store, base, [add("attempt-2")], app_id="job", app_version=5)
    assert (outcome.skipped, outcome.version, outcome.attempts) == (True, winner.version, 1)
    assert outcome.snapshot.version == winner.version
    assert "p=a/attempt-2.parquet" not in {f.path for f in load_snapshot(store).files}


# --- creation races ---------------------------------------------------------------------------------


def test_concurrent_create_with_the_same_schema_becomes_an_append(store):
    write(store, None, [PROTOCOL, metadata(), add("first")], operation="CREATE TABLE")
    outcome = write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE")
    assert (outcome.version, outcome.attempts) == (1, 2)
    assert [type(a).__name__ for a in last_commit(store)] == ["CommitInfo", "AddFile"]
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/first.parquet", "p=a/second.parquet"]


def test_concurrent_create_with_another_schema_conflicts(store):
    write(store, None, [PROTOCOL, metadata(), add("first")], operation="CREATE TABLE")
    other = metadata(pa.schema([("y", pa.string()), ("p", pa.string())]))
    with pytest.raises(CommitConflictError, match="different schema") as caught:
        write(store, None, [PROTOCOL, other, add("second")], operation="CREATE TABLE")
    assert (caught.value.version, caught.value.operation) == (0, "CREATE TABLE")


# --- guards -----------------------------------------------------------------------------------------


def test_removing_data_from_an_append_only_table_is_refused_before_writing(store):
    snapshot = write(store, None, [PROTOCOL, metadata(configuration={"delta.appendOnly": "true"}), add("a0")]).snapshot
    with pytest.raises(AppendOnlyError, match="delta.appendOnly=true"):
        overwrite(store, snapshot, add("a1"))
    assert store.latest_version() == 0
    assert write(store, snapshot, [add("a1")]).version == 1


def test_time_travelled_snapshot_is_refused(store, base):
    with pytest.raises(ReadOnlySnapshotError, match="time travel"):
        write(store, load_snapshot(store, 0), [add("x")])


def test_table_needing_an_unsupported_writer_feature_is_refused(store):
    with pytest.raises(UnsupportedFeatureError, match="writer version 4"):
        write(store, None, [Protocol(min_reader_version=1, min_writer_version=4), metadata()])


def test_losing_every_attempt_raises_retries_exhausted_naming_attempts(store, base):
    write(store, base, [add("a1")])
    with pytest.raises(CommitRetriesExhaustedError, match="1 attempts") as caught:
        write(store, base, [add("a2")], max_attempts=1)
    assert caught.value.attempts == 1 and caught.value.last_version == 2


def test_unknown_commit_state_propagates_untouched(memory_uri, base):
    raised = CommitStateUnknownError(memory_uri, 2, "the answer was lost")

    class Unanswered(MemoryLogStore):
        def write(self, version: int, body: bytes, *, overwrite: bool = False) -> None:
            raise raised

    with pytest.raises(CommitStateUnknownError) as caught:
        write(Unanswered(TableUri.parse(memory_uri)), base, [add("a1")])
    assert caught.value is raised


def test_a_failing_checkpoint_never_fails_the_commit(memory_uri, caplog):
    uri = TableUri.parse(memory_uri)
    store = CountingLogStore(uri, refuse_put=lambda key: ".checkpoint." in key)
    snapshot = write(store, None, [PROTOCOL, metadata(), add("f0")]).snapshot
    with caplog.at_level(logging.ERROR, logger="table.log.transaction"):
        for i in range(1, 11):
            snapshot = write(store, snapshot, [add(f"f{i}")]).snapshot
    assert snapshot.version == 10 and store.latest_version() == 10
    assert "writing its checkpoint failed" in caplog.text
    assert read_last_checkpoint(store) is None


# --- cost does not grow with history ----------------------------------------------------------------


def test_an_append_at_version_1000_makes_the_same_calls_as_at_version_50(memory_uri):
    plain = open_log_store(memory_uri)
    snapshot = None
    counts = {}
    for version in range(1001):
        actions = [PROTOCOL, metadata(), add("f0")] if version == 0 else [add(f"f{version}")]
        if version in (50, 1000):
            counting = CountingLogStore(memory_uri)
            outcome = write(counting, snapshot, actions)
            assert outcome.version == version
            snapshot = outcome.snapshot
            counts[version] = (dict(counting.objects.calls), dict(counting.entry_calls))
            continue
        plain.write(version, serialize_commit(actions))
        snapshot = advance(snapshot, [(version, actions)], table_path=plain.table_path)
        if version and version % 10 == 0:
            write_checkpoint(plain, snapshot)
    # both versions are multiples of 10, so both commits also checkpoint: the calls are the same
    assert counts[50] == counts[1000]
    assert counts[1000][0].get("list", 0) == 0


def test_commit_records_how_many_attempts_it_took(store, base):
    write(store, base, [add("other")])  # someone else wins the next version while we hold the base
    outcome = write(store, base, [add("mine")])
    assert outcome.version == base.version + 2 and outcome.attempts == 2
    body = json.loads(store.read(outcome.version).splitlines()[0])["commitInfo"]
    assert body["operationMetrics"]["numAttempts"] == "2"


def test_an_attempt_that_landed_but_reported_a_lost_race_is_not_committed_twice(memory_uri):
    """Belt and braces for a lost answer: if the log store ever says "taken" for a version our own
    attempt won, the winner's txnId shows it is ours, so the transaction does not commit again."""

    class LostAnswer(MemoryLogStore):
        fooled = False

        def write(self, version, body, *, overwrite=False):
            super().write(version, body, overwrite=overwrite)
            if not self.fooled:
                self.fooled = True
                raise VersionExistsError(self.table_path, version)

    store = LostAnswer(TableUri.parse(memory_uri))
    store.fooled = True  # creating the table goes through untouched
    base = write(store, None, [PROTOCOL, metadata(), add("a0")], operation="CREATE TABLE").snapshot
    store.fooled = False
    outcome = write(store, base, [add("mine")])
    assert (outcome.version, outcome.skipped) == (1, False)
    assert list(store.list_from(0)) == [0, 1]
    assert [f.path for f in outcome.snapshot.files].count("p=a/mine.parquet") == 1
