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

from logstore import TableUri, deadline, failpoints, open_log_store
from logstore.errors import (
    ArgumentTypeError,
    CommitStateUnknownError,
    InvalidArgumentError,
    VersionExistsError,
)
from tests.support.memory import MemoryLogStore
from table.errors import (
    AppendOnlyError,
    CommitConflictError,
    CommitTimeoutError,
    ConflictKind,
    ReadOnlySnapshotError,
    TableExistsError,
    UnsupportedFeatureError,
)
from table.log.actions import (
    AddFile,
    Metadata,
    Protocol,
    Txn,
    parse_commit,
    serialize_commit,
)
from table.log.checkpoint import read_last_checkpoint, write_checkpoint
from table.log.commit import (
    Commit,
    IsolationLevel,
    OnExisting,
    ReadScope,
    client_version,
)
from table.log.schema import schema_string
from table.log.snapshot import advance, load_snapshot
from table.log.transaction import AFTER_LOST, BEFORE_WRITE, CommitStatus, commit
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


def raw(store, snapshot, actions, *, operation="WRITE", parameters=None, scope=None, timeout=None, **kwargs):
    """Commit ``actions`` as given (a Commit built here) on ``snapshot``."""
    built = Commit(actions=tuple(actions), operation=operation, operation_parameters=parameters or {},
                   read_scope=scope or ReadScope.blind_append(), **kwargs)
    return commit(store, snapshot, built, timeout=timeout)


def write(store, snapshot, actions, *, operation="WRITE", scope=None, **kwargs):
    return raw(store, snapshot, actions, operation=operation, parameters={"mode": "Append"}, scope=scope, **kwargs)


def overwrite(store, snapshot, new: AddFile, *, partition: str | None = None, **kwargs):
    """Remove every file (of ``partition``) the snapshot holds and add ``new``."""
    now = int(time.time() * 1000)
    removes = [f.remove(deletion_timestamp=now) for f in snapshot.files
               if partition is None or f.partition_values["p"] == partition]
    scope = ReadScope.whole_table() if partition is None else ReadScope.of_partitions([{"p": partition}])
    return raw(store, snapshot, [*removes, new], parameters={"mode": "Overwrite"}, scope=scope, **kwargs)


@pytest.fixture
def store(memory_uri):
    return open_log_store(memory_uri)


@pytest.fixture
def base(store):
    """A table at version 1 with a file in p=a and one in p=b (WriteSerializable, the default)."""
    created = write(store, None, [PROTOCOL, metadata(), add("a0")], operation="CREATE TABLE")
    return write(store, created.snapshot, [add("b0", "b")]).snapshot


@pytest.fixture
def serializable(store):
    """The same table as ``base``, at isolation level Serializable."""
    created = write(store, None, [PROTOCOL, metadata(configuration={"delta.isolationLevel": "Serializable"}),
                                  add("a0")], operation="CREATE TABLE")
    return write(store, created.snapshot, [add("b0", "b")]).snapshot


def last_commit(store) -> list:
    version = store.latest_version()
    return parse_commit(store.read(version))


# --- what a commit writes ---------------------------------------------------------------------------


def test_commit_writes_commit_info_first_and_the_txn_of_the_application(store, base):
    outcome = write(store, base, [add("a1")], app_id="job", app_version=3, operation_metrics={"numFiles": "1"},
                    engine_info="test-engine")
    assert (outcome.version, outcome.status, outcome.attempts) == (2, CommitStatus.COMMITTED, 1)
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
    with pytest.raises(InvalidArgumentError, match="together"):
        write(store, base, [add("x")], app_id="job")
    with pytest.raises(ArgumentTypeError, match="must be a string"):
        raw(store, base, [add("x")], parameters={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="protocol and a metaData"):
        write(store, None, [add("x")])
    with pytest.raises(InvalidArgumentError, match="app_version must be an int >= 0"):
        write(store, base, [add("x")], app_id="job", app_version=True)
    assert store.latest_version() == 1


# --- the conflict matrix ----------------------------------------------------------------------------


def test_concurrent_appends_do_not_conflict_and_the_loser_rebases(store, base):
    write(store, base, [add("a1")])
    outcome = write(store, base, [add("a2")])
    assert (outcome.version, outcome.attempts) == (3, 2)
    # the winner was judged by its entry (tests/unit/table/test_lost_race.py): the snapshot comes when asked
    after = outcome.snapshot or outcome.catch_up()
    assert sorted(f.path for f in after.files) == sorted(f.path for f in load_snapshot(store).files)
    assert {"p=a/a1.parquet", "p=a/a2.parquet"} <= {f.path for f in after.files}
    # the same bytes went to the next version, as Delta writes its prepared actions again after a conflict
    # check: readVersion is the version the commit read
    assert json.loads(store.read(3).splitlines()[0])["commitInfo"]["readVersion"] == 1


def test_an_append_losing_to_a_commit_without_a_summary_rebases_and_records_the_version_it_rebased_on(store, base):
    store.write(2, serialize_commit([add("a1")]))  # a writer that leaves no commitSummary (Delta, delta-rs)
    outcome = write(store, base, [add("a2")])
    assert (outcome.version, outcome.attempts) == (3, 2)
    assert sorted(f.path for f in outcome.snapshot.files) == sorted(f.path for f in load_snapshot(store).files)
    assert json.loads(store.read(3).splitlines()[0])["commitInfo"]["readVersion"] == 2


def test_second_of_two_whole_table_overwrites_conflicts_naming_the_winner(store, base):
    winner = raw(store, base, [f.remove(deletion_timestamp=1) for f in base.files] + [add("w1")],
                 operation="OVERWRITE TABLE", parameters={"mode": "Overwrite"}, scope=ReadScope.whole_table())
    with pytest.raises(CommitConflictError) as caught:
        overwrite(store, base, add("w2"))
    error = caught.value
    assert (error.version, error.operation, error.kind) == (winner.version, "OVERWRITE TABLE",
                                                            ConflictKind.CONCURRENT_DELETE_DELETE)
    assert "p=a/a0.parquet" in error.reason and "also removed" in error.reason
    assert "re-read the table" in str(error)
    assert store.latest_version() == 2


def test_partition_overwrite_and_a_concurrent_blind_append_to_it_both_land_under_write_serializable(store, base):
    """Delta's default level orders the blind append after the overwrite: its rows stay."""
    write(store, base, [add("a1", "a")])
    outcome = overwrite(store, base, add("a-new", "a"), partition="a")
    assert (outcome.version, outcome.attempts) == (3, 2)
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/a-new.parquet", "p=a/a1.parquet",
                                                                   "p=b/b0.parquet"]


def test_partition_overwrite_conflicts_with_a_concurrent_blind_append_to_it_under_serializable(store, serializable):
    write(store, serializable, [add("a1", "a")])
    with pytest.raises(CommitConflictError) as caught:
        overwrite(store, serializable, add("a-new", "a"), partition="a")
    error = caught.value
    assert (error.version, error.kind) == (2, ConflictKind.CONCURRENT_APPEND)
    assert "p=a/a1.parquet" in error.reason and "partition p=a" in error.reason and "Serializable" in error.reason
    assert store.latest_version() == 2


def test_partition_overwrite_conflicts_with_a_concurrent_write_that_is_not_a_blind_append(store, base):
    """A winner that read the table (its own overwrite of another partition, adding into ours too) conflicts
    at every level."""
    raw(store, base, [base.files[1].remove(deletion_timestamp=1), add("b1", "b"), add("a1", "a")],
        parameters={"mode": "Overwrite"}, scope=ReadScope.of_partitions([{"p": "b"}]))
    with pytest.raises(CommitConflictError) as caught:
        overwrite(store, base, add("a-new", "a"), partition="a")
    assert caught.value.kind is ConflictKind.CONCURRENT_APPEND and "p=a/a1.parquet" in caught.value.reason


def test_partition_overwrite_does_not_conflict_with_an_append_to_another_partition(store, base):
    write(store, base, [add("b1", "b")])
    outcome = overwrite(store, base, add("a-new", "a"), partition="a")
    assert (outcome.version, outcome.attempts) == (3, 2)
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/a-new.parquet", "p=b/b0.parquet",
                                                                   "p=b/b1.parquet"]


def test_metadata_change_conflicts_with_a_concurrent_append_either_way(store, base):
    changed = metadata(configuration={"owner": "me"})
    write(store, base, [add("a1")])
    with pytest.raises(CommitConflictError) as caught:
        write(store, base, [changed], operation="SET TBLPROPERTIES")
    assert caught.value.kind is ConflictKind.CONCURRENT_APPEND
    later = load_snapshot(store)
    write(store, later, [changed], operation="SET TBLPROPERTIES")
    with pytest.raises(CommitConflictError) as caught:
        write(store, later, [add("a2")])
    assert caught.value.operation == "SET TBLPROPERTIES" and "metadata" in caught.value.reason
    assert caught.value.kind is ConflictKind.METADATA_CHANGED


def test_reading_a_partition_another_commit_deleted_from_conflicts(store, base):
    overwrite(store, base, add("a-new", "a"), partition="a")
    with pytest.raises(CommitConflictError, match=r"removed file 'p=a/a0.parquet' in partition p=a") as caught:
        raw(store, base, [add("derived", "b")], scope=ReadScope.of_partitions([{"p": "a"}]))
    assert caught.value.kind is ConflictKind.CONCURRENT_DELETE_READ


def _typed_table(store, column: str, arrow_type: pa.DataType, value: str):
    """A table partitioned by ``column`` of ``arrow_type`` holding one file with partition value ``value``."""
    schema = pa.schema([("x", pa.int64()), (column, arrow_type)])
    first = AddFile(path="f0.parquet", partition_values={column: value}, size=1, modification_time=1, data_change=True)
    serializable = {"delta.isolationLevel": "Serializable"}
    return write(store, None, [PROTOCOL, metadata(schema, serializable, partition_columns=[column]), first],
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
        raw(store, created, [created.files[0].remove(deletion_timestamp=1), replacement],
            parameters={"mode": "Overwrite"}, scope=ReadScope.of_partitions([{"k": ours}]))


def test_a_concurrent_append_to_another_typed_partition_does_not_conflict(store):
    created = _typed_table(store, "k", pa.timestamp("us", tz="UTC"), "2024-01-01 00:00:00.000000")
    write(store, created, [AddFile(path="theirs.parquet", partition_values={"k": "2024-01-01 00:00:00.000001"},
                                   size=1, modification_time=1, data_change=True)])
    outcome = raw(store, created, [created.files[0].remove(deletion_timestamp=1)], parameters={"mode": "Overwrite"},
                  scope=ReadScope.of_partitions([{"k": "2024-01-01 00:00:00.000000"}]))
    assert (outcome.version, outcome.attempts) == (2, 2)


def test_covers_compares_typed_values_and_takes_what_does_not_parse_as_covered():
    scope = ReadScope.of_partitions([{"t": "2024-01-01 00:00:00.000000", "f": "NaN"}])
    types = {"t": "timestamp", "f": "double"}
    assert scope.covers_partition({"t": "2024-01-01 00:00:00", "f": "nan"}, types=types)
    assert not scope.covers_partition({"t": "2024-01-01 00:00:00", "f": "nan"})  # without types: as strings
    assert not scope.covers_partition({"t": "2024-01-02 00:00:00", "f": "NaN"}, types=types)
    assert not scope.covers_partition({"t": None, "f": "NaN"}, types=types)
    assert scope.covers_partition({"t": "yesterday", "f": "NaN"}, types=types)
    assert ReadScope.of_partitions([{"p": None}]).covers_partition({"p": ""}, types={"p": "string"})
    assert not ReadScope.of_partitions([{"p": "a"}]).covers_partition({"p": "A"}, types={"p": "string"})


# --- idempotent application transactions ------------------------------------------------------------


def test_replayed_app_version_is_skipped_with_the_version_that_holds_it(store, base):
    first = write(store, base, [add("a1")], app_id="job", app_version=1)
    again = write(store, first.snapshot, [add("a1-again")], app_id="job", app_version=1)
    assert (again.status, again.version, again.attempts) == (CommitStatus.ALREADY_COMMITTED, first.version, 0)
    later = write(store, first.snapshot, [add("a2")]).snapshot
    older = write(store, later, [add("a0-again")], app_id="job", app_version=0)
    assert (older.status, older.version) == (CommitStatus.ALREADY_COMMITTED, first.version)
    assert store.latest_version() == 3


def test_app_version_held_in_a_checkpoint_is_found_by_scanning_back(store, base):
    snapshot = write(store, base, [add("a1")], app_id="job", app_version=7).snapshot
    for i in range(10):
        snapshot = write(store, snapshot, [add(f"x{i}")]).snapshot
    assert read_last_checkpoint(store).version == 10
    loaded = load_snapshot(store)
    assert loaded.checkpoint_version == 10 and "job" not in loaded.txn_versions
    outcome = write(store, loaded, [add("dup")], app_id="job", app_version=7)
    assert (outcome.status, outcome.version) == (CommitStatus.ALREADY_COMMITTED, 2)


def test_other_attempt_of_the_same_job_landing_first_makes_ours_skip(store, base):
    winner = write(store, base, [add("attempt-1")], app_id="job", app_version=5)
    outcome = write(store, base, [add("attempt-2")], app_id="job", app_version=5)
    assert (outcome.status, outcome.version, outcome.attempts) == (CommitStatus.ALREADY_COMMITTED, winner.version, 1)
    assert outcome.snapshot.version == winner.version
    assert "p=a/attempt-2.parquet" not in {f.path for f in load_snapshot(store).files}


# --- creation races ---------------------------------------------------------------------------------


def test_concurrent_create_with_the_same_schema_becomes_an_append(store):
    write(store, None, [PROTOCOL, metadata(), add("first")], operation="CREATE TABLE")
    outcome = write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE")
    assert (outcome.version, outcome.attempts) == (1, 2)
    assert [type(a).__name__ for a in last_commit(store)] == ["CommitInfo", "AddFile"]
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/first.parquet", "p=a/second.parquet"]


@pytest.mark.parametrize("first_files", [[], [add("first")]], ids=["empty-version-0", "version-0-with-a-file"])
def test_concurrent_create_in_mode_error_raises_table_exists_and_writes_nothing(store, first_files):
    write(store, None, [PROTOCOL, metadata(), *first_files], operation="CREATE TABLE")
    with pytest.raises(TableExistsError, match="created .* while this write was running"):
        write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE",
              on_existing=OnExisting.FAIL)
    assert store.latest_version() == 0


@pytest.mark.parametrize("first_files", [[], [add("first")]], ids=["empty-version-0", "version-0-with-a-file"])
def test_concurrent_create_in_mode_ignore_skips_and_writes_nothing(store, first_files):
    write(store, None, [PROTOCOL, metadata(), *first_files], operation="CREATE TABLE")
    outcome = write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE",
                    on_existing=OnExisting.SKIP)
    assert (outcome.status, outcome.version) == (CommitStatus.SKIPPED, 0)
    assert store.latest_version() == 0


def test_concurrent_create_by_an_overwrite_conflicts(store):
    write(store, None, [PROTOCOL, metadata()], operation="CREATE TABLE")
    with pytest.raises(CommitConflictError) as caught:
        raw(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE OR REPLACE TABLE",
            scope=ReadScope.whole_table(), on_existing=OnExisting.CONFLICT)
    assert caught.value.kind is ConflictKind.CONCURRENT_CREATE and store.latest_version() == 0


@pytest.mark.parametrize("winner_protocol, winner_config, feature", [
    (Protocol(min_reader_version=3, min_writer_version=7, reader_features=["catalogManaged"],
              writer_features=["catalogManaged"]), {}, "catalogManaged"),
    (Protocol(min_reader_version=1, min_writer_version=7, writer_features=["someFutureFeature"]),
     {}, "someFutureFeature"),
])
def test_an_append_does_not_rebase_onto_a_concurrently_created_table_it_may_not_write(store, winner_protocol,
                                                                                     winner_config, feature):
    """The winner's protocol and metadata are checked, not only our own (a writer-version-4 table with
    constraints we do not enforce must not get our append)."""
    store.write(0, serialize_commit([winner_protocol, metadata(configuration=winner_config)]))
    with pytest.raises(UnsupportedFeatureError, match=feature):
        write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE")
    assert store.latest_version() == 0


@pytest.mark.parametrize("winner_protocol", [
    Protocol(min_reader_version=1, min_writer_version=3),
    Protocol(min_reader_version=3, min_writer_version=7, reader_features=[], writer_features=["checkConstraints"]),
])
def test_an_append_does_not_rebase_onto_a_concurrently_created_table_with_rules_it_did_not_check(store,
                                                                                               winner_protocol):
    """The winner created the table with a CHECK constraint our rows were never checked against: a conflict,
    not a rebase."""
    store.write(0, serialize_commit([winner_protocol, metadata(configuration={"delta.constraints.c": "x > 0"})]))
    with pytest.raises(CommitConflictError, match="constraints") as caught:
        write(store, None, [PROTOCOL, metadata(), add("second")], operation="CREATE TABLE")
    assert caught.value.kind is ConflictKind.CONCURRENT_CREATE and store.latest_version() == 0


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
    with pytest.raises(UnsupportedFeatureError, match="writer version 8"):
        write(store, None, [Protocol(min_reader_version=1, min_writer_version=8), metadata()])


def test_losing_every_attempt_until_the_deadline_raises_commit_timeout_and_commits_nothing(store, base):
    """Another writer takes each version just before our attempt writes it; retries are bounded by time."""
    rival = open_log_store(store.table_path.replace("memory://", "memory://", 1))

    def take_the_next_version(name: str) -> None:
        if name == BEFORE_WRITE:
            version = rival.latest_version() + 1
            rival.write(version, serialize_commit([add(f"rival-{version}")]))

    failpoints.set_hook(take_the_next_version)
    try:
        with pytest.raises(CommitTimeoutError, match="all lost the race") as caught:
            write(store, base, [add("mine")], timeout=0.3)
    finally:
        failpoints.set_hook(None)
    assert caught.value.attempts >= 2 and isinstance(caught.value, TimeoutError)
    log = [parse_commit(store.read(v)) for v in range(2, store.latest_version() + 1)]
    assert all("p=a/mine.parquet" not in {getattr(a, "path", None) for a in actions} for actions in log)


def test_after_losing_the_commit_goes_to_the_version_after_the_newest_not_the_next_one(store, base):
    """A commit that lands while we back off must not cost another attempt: we rebase onto the newest
    version after the pause (the cause of starving writers)."""
    rival = open_log_store(store.table_path)
    # we will lose version 2 to this, a commit whose entry says nothing of it (a Delta writer's): the loser
    # reads the winners (a winner with a summary is judged by it: tests/unit/table/test_lost_race.py)
    store.write(2, serialize_commit([add("first-winner")]))

    def commit_during_our_pause(name: str) -> None:
        if name == AFTER_LOST:
            rival.write(rival.latest_version() + 1, serialize_commit([add("won-while-we-slept")]))

    failpoints.set_hook(commit_during_our_pause)
    try:
        outcome = write(store, base, [add("mine")])
    finally:
        failpoints.set_hook(None)
    assert (outcome.version, outcome.attempts) == (4, 2)
    assert {"p=a/mine.parquet", "p=a/won-while-we-slept.parquet"} <= {f.path for f in outcome.snapshot.files}


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
    with caplog.at_level(logging.ERROR, logger="table.log.outcome"):
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
            plain.wait_finished()  # else the counted writer may find N-1 not yet marked complete and finish it
            counting = CountingLogStore(memory_uri)
            outcome = write(counting, snapshot, actions)
            counting.wait_finished()  # the UpdateItem sent after the write returned
            assert outcome.version == version
            snapshot = outcome.snapshot
            counts[version] = (dict(counting.objects.calls), dict(counting.entry_calls))
            continue
        plain.write(version, serialize_commit(actions))
        snapshot = advance(snapshot, [(version, actions)], table_path=plain.table_path)
        if version and version % 10 == 0:
            write_checkpoint(plain, snapshot)
    # both versions are multiples of 10, so both commits also checkpoint: the calls are the same, and the
    # two listings are the checkpoint's look for a newer checkpoint (it starts after its own file) and log
    # cleanup's (it stops at the first commit younger than the retention: the first)
    assert counts[50] == counts[1000]
    assert counts[1000][0].get("list", 0) == 2


def test_commit_records_how_many_attempts_it_took(store, base):
    # someone else wins the next version while we hold the base, and leaves no commitSummary: the loser
    # builds its entry again (one that reuses its bytes records the attempt that built them)
    store.write(2, serialize_commit([add("other")]))
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
    assert (outcome.version, outcome.status) == (1, CommitStatus.COMMITTED)
    assert list(store.list_from(0)) == [0, 1]
    assert [f.path for f in outcome.snapshot.files].count("p=a/mine.parquet") == 1


# --- compaction, isolation levels -------------------------------------------------------------------


def compaction(snapshot, paths, new: AddFile):
    """Rewrite the files at ``paths`` into ``new`` without changing data (dataChange=false)."""
    rewritten = [f for f in snapshot.files if f.path in paths]
    return ([f.remove(deletion_timestamp=1, data_change=False) for f in rewritten]
            + [new.model_copy(update={"data_change": False})], ReadScope.of_files([f.path for f in rewritten]))


def test_a_compaction_does_not_conflict_with_a_concurrent_append_to_its_partition(store, serializable):
    write(store, serializable, [add("a1", "a")])
    actions, scope = compaction(serializable, {"p=a/a0.parquet"}, add("a-compacted", "a"))
    outcome = raw(store, serializable, actions, operation="OPTIMIZE", scope=scope)
    assert outcome.version == 3
    assert sorted(f.path for f in load_snapshot(store).files) == ["p=a/a-compacted.parquet", "p=a/a1.parquet",
                                                                   "p=b/b0.parquet"]


def test_a_compaction_conflicts_with_a_concurrent_removal_of_a_file_it_rewrites(store, base):
    overwrite(store, base, add("a-new", "a"), partition="a")
    actions, scope = compaction(base, {"p=a/a0.parquet"}, add("a-compacted", "a"))
    with pytest.raises(CommitConflictError) as caught:
        raw(store, base, actions, operation="OPTIMIZE", scope=scope)
    assert caught.value.kind is ConflictKind.CONCURRENT_DELETE_DELETE and "p=a/a0.parquet" in caught.value.reason


def test_a_partition_overwrite_conflicts_with_a_concurrent_compaction_of_that_partition(store, base):
    """A compaction's removes carry dataChange=false, yet the rows it rewrote would survive our overwrite."""
    actions, scope = compaction(base, {"p=a/a0.parquet"}, add("a-compacted", "a"))
    raw(store, base, actions, operation="OPTIMIZE", scope=scope)
    with pytest.raises(CommitConflictError) as caught:
        raw(store, base, [add("a-new", "a")], parameters={"mode": "Overwrite"},
            scope=ReadScope.of_partitions([{"p": "a"}]))
    assert caught.value.kind is ConflictKind.CONCURRENT_DELETE_READ and caught.value.operation == "OPTIMIZE"


def test_isolation_level_comes_from_the_table_and_an_unknown_value_is_the_stricter_one():
    assert IsolationLevel.of({}) is IsolationLevel.WRITE_SERIALIZABLE
    assert IsolationLevel.of({"delta.isolationLevel": "serializable"}) is IsolationLevel.SERIALIZABLE
    assert IsolationLevel.of({"delta.isolationLevel": "WriteSerializable"}) is IsolationLevel.WRITE_SERIALIZABLE
    assert IsolationLevel.of({"delta.isolationLevel": "SnapshotIsolation"}) is IsolationLevel.SERIALIZABLE


# --- taking turns on a contended table (issue 18, item 4) ----------------------------------------------


def test_on_a_contended_table_the_commit_that_lost_more_races_goes_first(memory_uri):
    """Who sends its put first wins a version. After a lost race a commit that reads the winners pauses the
    less the more races it lost (none after QUEUE_LENGTH of them), and a new commit whose newest entry a
    waiting writer marked pauses longer than any of them: the writer that just won no longer takes the next
    version from writers that have been trying for longer."""
    from table.log import transaction

    store = open_log_store(memory_uri)
    write(store, None, [PROTOCOL, metadata(), add("f0")])

    def attempts_after(lost: int):
        attempt = transaction._Attempts(store, None, load_snapshot(store), deadline.Deadline(0, 120, "t"))
        attempt.contention.lost_at = time.monotonic()
        attempt.contention.rebase_seconds = 0.2
        attempt.attempts = lost
        return attempt

    pauses = {lost: [attempts_after(lost)._backoff() for _ in range(20)] for lost in range(1, 40)}
    queue = transaction.QUEUE_LENGTH
    for lost in range(9, queue + 1):
        assert max(pauses[lost]) < min(pauses[lost - 8]), (lost, pauses[lost], pauses[lost - 8])
    assert all(p == 0 for lost in range(queue, 40) for p in pauses[lost])
    # A new commit takes a turn only when a writer waits for the table: its newest entry was marked
    # (issue 23 item 3; before, any race this process lost in the last CONTENDED_SECONDS made it pause).
    assert attempts_after(0)._turn_pause() == 0  # contended, but nobody marked our entry: no pause
    store.waited_recently = lambda timeout: True  # the mark of a writer that waits, seen on our newest entry
    fresh = [attempts_after(0)._turn_pause() for _ in range(20)]
    assert min(fresh) > max(pauses[1]) + 0.2  # longer than any loser's pause, by a rebase
    calm = attempts_after(0)
    calm.contention.lost_at = time.monotonic() - transaction.CONTENDED_SECONDS - 1
    store.waited_recently = lambda timeout: False
    assert calm._turn_pause() == 0  # no mark: no pause


def test_a_lost_race_settled_by_the_winners_entry_gives_way_only_to_a_writer_that_lost_more(memory_uri):
    """Issue 23 item 3: such a loser retries at once (``_yield_pause`` 0), unless the winner's entry carries
    the waiting mark of another writer and we lost fewer than WAIT_MARK_LOSSES versions: then about one
    commit, so that the writer that has waited longer goes first."""
    from logstore.entry_store import CommitEntry
    from logstore.writer import WAIT_MARK_LOSSES, KeptTemp
    from table.log import transaction

    store = open_log_store(memory_uri)
    write(store, None, [PROTOCOL, metadata(), add("f0")])

    def loser(losses: int, marked: bool):
        attempt = transaction._Attempts(store, None, load_snapshot(store), deadline.Deadline(0, 120, "t"))
        attempt.contention.commit_seconds = 0.05
        winner = CommitEntry(store.table_path, 1, ".tmp/x", complete=False,
                             waiting_since=int(time.time()) if marked else None)
        attempt.kept = KeptTemp(store, ".tmp/ours", b"{}", winner, [winner], losses=losses)
        return attempt

    assert all(loser(n, marked=False)._yield_pause() == 0 for n in range(1, 6))  # nobody waits: at once
    for n in range(1, WAIT_MARK_LOSSES):
        pauses = [loser(n, marked=True)._yield_pause() for _ in range(20)]
        assert all(0.025 <= p <= 0.05 for p in pauses), pauses  # about one commit (0.05 s measured)
    assert all(loser(n, marked=True)._yield_pause() == 0 for n in range(WAIT_MARK_LOSSES, 8))  # we waited longer
