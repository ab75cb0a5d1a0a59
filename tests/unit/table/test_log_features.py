"""Today's log formats, read and kept correct when we write: V2 checkpoints and ``delta.checkpointPolicy``,
log compaction files, metadata domains, row tracking, in-commit timestamps, type widening, clustering,
vacuum protocol check and checkpoint protection (PROTOCOL.md is the reference for every expectation).

Tables are created by committing their protocol and metadata directly (deltalake cannot create most of
these features), then written through the public API, as a user's writes would be.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from logstore import open_log_store
from table import Table, UnsupportedFeatureError, write_table
from table.errors import CommitConflictError, ConflictKind
from table.log.actions import (
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    serialize_commit,
)
from table.log.checkpoint import (
    LastCheckpoint,
    checkpoint_table,
    read_checkpoint,
    read_last_checkpoint,
    write_checkpoint,
)
from table.log.checkpoint_files import LastCheckpointV2, checkpoint_names, listed_checkpoints
from table.log.commit import Commit, IsolationLevel, ReadScope
from table.log.conflicts import Winner, check
from table.log.protocol import (
    READER_FEATURES,
    REFUSED,
    SUPPORTED_WRITER_FEATURES,
    WRITER_FEATURES,
    check_readable,
    check_writable,
)
from table.log.schema import schema_string
from table.log.snapshot import load_snapshot, read_commit
from table.log.transaction import commit
from table.maintenance.vacuum import vacuum
from table.table import forget_snapshots
from tests.support.corpus import canonical, deltalake_rows, to_directory
from tests.support.tables import with_rival

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64()),
                     "s": pa.array([f"r{i}" for i in range(start, start + count)])})


def create(uri: str, *, reader: tuple[str, ...] = (), writer: tuple[str, ...] = (),
           configuration: dict[str, str] | None = None, extra: tuple = (), schema: pa.Schema = SCHEMA):
    """A table whose protocol lists ``reader``/``writer`` features (3/7, or 1/7 without reader features)."""
    protocol = Protocol(min_reader_version=3 if reader else 1, min_writer_version=7,
                        reader_features=sorted(reader) if reader else None, writer_features=sorted(writer))
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=schema_string(schema), configuration=configuration or {},
                        created_time=1)
    store = open_log_store(uri)
    return store, commit(store, None, Commit(actions=(protocol, metadata, *extra), operation="CREATE TABLE",
                                             read_scope=ReadScope.blind_append())).snapshot


def log_names(store) -> list[str]:
    return [info.name for info in store.list_files()]


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["x"])


# --- V2 checkpoints and delta.checkpointPolicy ------------------------------------------------------------

V2 = dict(reader=("v2Checkpoint",), writer=("v2Checkpoint",))


def test_a_v2_policy_table_gets_uuid_named_v2_checkpoints_that_load_to_the_same_rows(memory_uri):
    store, _ = create(memory_uri, **V2, configuration={"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"})
    for i in range(3):
        write_table(memory_uri, rows(10 * i, 3))
    (name,) = [n for n in log_names(store) if ".checkpoint." in n]
    assert listed_checkpoints([name])[0].uuid_named and name.startswith(f"{2:020d}.checkpoint.")
    body = pq.read_table(io.BytesIO(store.read_file(name)))
    metadata = [row for row in body.column("checkpointMetadata").to_pylist() if row is not None]
    assert metadata == [{"version": 2, "tags": []}]
    hint = read_last_checkpoint(store)
    assert hint.version == 2 and hint.v2_checkpoint.path == name and hint.size == body.num_rows
    forget_snapshots()
    table = Table(memory_uri)
    assert table.snapshot.checkpoint_version == 2 and table.version == 3
    assert sorted_rows(table.to_pyarrow_table()) == sorted_rows(pa.concat_tables([rows(0, 3), rows(10, 3), rows(20, 3)]))


def test_a_v2_checkpoint_feature_without_the_v2_policy_gets_classic_checkpoints(memory_uri):
    store, _ = create(memory_uri, **V2, configuration={"delta.checkpointInterval": "1"})
    write_table(memory_uri, rows(0, 2))
    assert [n for n in log_names(store) if ".checkpoint." in n] == checkpoint_names(1)
    assert read_last_checkpoint(store).v2_checkpoint is None


def test_the_v2_policy_without_the_feature_gets_no_checkpoint_and_says_why(memory_uri):
    store, snapshot = create(memory_uri, configuration={"delta.checkpointPolicy": "v2"})
    with pytest.raises(UnsupportedFeatureError, match="checkpointPolicy=v2") as caught:
        write_checkpoint(store, snapshot)
    assert caught.value.feature == "v2Checkpoint"
    assert not [n for n in log_names(store) if ".checkpoint." in n] and read_last_checkpoint(store) is None


def _write_json_v2_checkpoint(store, snapshot, *, sidecars: int) -> str:
    """A V2 checkpoint as delta-spark writes one by default: JSON top-level file, file actions in sidecars."""
    rows_ = checkpoint_table(snapshot.state, now_ms=int(time.time() * 1000))
    files = rows_.filter(pc.or_(pc.is_valid(rows_["add"]), pc.is_valid(rows_["remove"]))).select(["add", "remove"])
    head = [CheckpointMetadata(version=snapshot.version, tags={}), snapshot.state.protocol, snapshot.state.metadata]
    step = -(-files.num_rows // sidecars)
    for i in range(sidecars):
        sink = io.BytesIO()
        pq.write_table(files.slice(i * step, step), sink)
        sidecar_name = f"{uuid.uuid4()}.parquet"
        store.write_file(f"_sidecars/{sidecar_name}", sink.getvalue())
        head.append(Sidecar(path=sidecar_name, size_in_bytes=len(sink.getvalue()), modification_time=1, tags={}))
    name = f"{snapshot.version:020d}.checkpoint.{uuid.uuid4()}.json"
    store.write_file(name, serialize_commit(head))
    return name


@pytest.mark.parametrize("sidecars", [1, 3])
def test_a_json_v2_checkpoint_with_sidecars_is_read_instead_of_the_commits(memory_uri, sidecars):
    store, snapshot = create(memory_uri, **V2)
    for i in range(4):
        write_table(memory_uri, rows(10 * i, 2))
    snapshot = load_snapshot(store)
    now = int(time.time() * 1000)
    gone = snapshot.state.files.sorted_actions()[0]
    snapshot = commit(store, snapshot, Commit(actions=(gone.remove(deletion_timestamp=now),), operation="DELETE",
                                              read_scope=ReadScope.whole_table())).snapshot
    name = _write_json_v2_checkpoint(store, snapshot, sidecars=sidecars)
    store.write_file("_last_checkpoint", LastCheckpoint(version=snapshot.version, size=0,
                                                         v2_checkpoint=LastCheckpointV2(path=name)).to_json())
    for version in range(snapshot.version + 1):  # the checkpoint alone must hold the state
        store.objects.delete([store.log_prefix + f"{version:020d}.json"])
    loaded = load_snapshot(store, snapshot.version)
    assert dict(loaded.state.files) == dict(snapshot.state.files)
    assert list(loaded.state.tombstones) == [gone.path]
    assert loaded.protocol == snapshot.protocol and loaded.metadata == snapshot.metadata
    actions = read_checkpoint(store, listed_checkpoints([name])[0])
    assert sum(isinstance(a, Sidecar) for a in actions) == sidecars
    assert sum(isinstance(a, AddFile) for a in actions) == len(snapshot.state.files)


def test_a_missing_sidecar_makes_the_checkpoint_unusable_and_the_commits_are_replayed(memory_uri, caplog):
    store, snapshot = create(memory_uri, **V2)
    write_table(memory_uri, rows(0, 2))
    snapshot = load_snapshot(store)
    name = _write_json_v2_checkpoint(store, snapshot, sidecars=1)
    (sidecar,) = [a for a in read_commit_file(store, name) if isinstance(a, Sidecar)]
    store.objects.delete([store.log_prefix + f"_sidecars/{sidecar.path}"])
    forget_snapshots()
    with caplog.at_level(logging.WARNING, logger="table.log.snapshot"):
        loaded = load_snapshot(store)
    assert "does not exist" in caplog.text and loaded.checkpoint_version is None
    assert dict(loaded.state.files) == dict(snapshot.state.files)


def read_commit_file(store, name):
    from table.log.actions import parse_commit
    return parse_commit(store.read_file(name))


def test_a_hint_naming_a_missing_v2_file_falls_back_to_another_checkpoint_of_that_version(memory_uri, caplog):
    store, snapshot = create(memory_uri, **V2)
    write_table(memory_uri, rows(0, 2))
    snapshot = load_snapshot(store)
    write_checkpoint(store, snapshot)  # classic: no v2 policy
    stale = f"{snapshot.version:020d}.checkpoint.{uuid.uuid4()}.json"
    store.write_file("_last_checkpoint", LastCheckpoint(version=snapshot.version, size=4,
                                                         v2_checkpoint=LastCheckpointV2(path=stale)).to_json())
    with caplog.at_level(logging.WARNING, logger="table.log.snapshot"):
        loaded = load_snapshot(store)
    assert loaded.checkpoint_version == snapshot.version and stale in caplog.text


def test_a_log_holding_only_a_checkpoint_is_at_the_checkpoint_version(memory_uri):
    store, snapshot = create(memory_uri)
    write_table(memory_uri, rows(0, 2))
    snapshot = load_snapshot(store)
    write_checkpoint(store, snapshot)
    store.objects.delete([store.log_prefix + n for n in ("_last_checkpoint", f"{0:020d}.json", f"{1:020d}.json")])
    forget_snapshots()
    table = Table(memory_uri)
    assert table.version == 1 and sorted_rows(table.to_pyarrow_table()) == sorted_rows(rows(0, 2))


def test_log_compaction_files_are_never_needed_and_never_trusted(memory_uri):
    store, _ = create(memory_uri)
    for i in range(3):
        write_table(memory_uri, rows(10 * i, 2))
    # A compaction of versions 1-2 that (wrongly) says only the first file is live: readers must not need
    # it, and using it would be the reader's choice; ours replays the commits.
    first = [a for a in read_commit(store, 1) if isinstance(a, AddFile)]
    store.write_file(f"{1:020d}.{2:020d}.compacted.json", serialize_commit(first))
    forget_snapshots()
    assert len(Table(memory_uri).to_pyarrow_table()) == 6
    assert Table(memory_uri, version=2).version == 2


# --- domain metadata -------------------------------------------------------------------------------------


def test_domains_are_kept_through_our_commits_and_checkpoints_and_removed_ones_are_dropped(memory_uri):
    domains = (DomainMetadata(domain="app.settings", configuration='{"a":1}', removed=False),
               DomainMetadata(domain="delta.somethingElse", configuration="{}", removed=False))
    store, snapshot = create(memory_uri, writer=("domainMetadata",), configuration={"delta.checkpointInterval": "2"},
                             extra=domains)
    snapshot = commit(store, snapshot, Commit(actions=(DomainMetadata(domain="delta.somethingElse", configuration="{}",
                                                                      removed=True),),
                                              operation="SET DOMAIN", read_scope=ReadScope.blind_append())).snapshot
    write_table(memory_uri, rows(0, 2))
    assert any(".checkpoint." in n for n in log_names(store))
    checkpointed = [a for a in read_checkpoint(store, 2) if isinstance(a, DomainMetadata)]
    assert checkpointed == [domains[0]]
    forget_snapshots()
    assert dict(Table(memory_uri).snapshot.state.domain_metadata) == {"app.settings": domains[0]}


def _domain_commit(domain: str) -> Commit:
    return Commit(actions=(DomainMetadata(domain=domain, configuration="{}", removed=False),), operation="SET",
                  read_scope=ReadScope.blind_append())


@pytest.mark.parametrize("ours, theirs, conflicts", [
    ("app.a", "app.a", True),
    ("app.a", "app.b", False),
    ("delta.rowTracking", "delta.rowTracking", False),
])
def test_two_commits_changing_the_same_domain_conflict(ours, theirs, conflicts):
    winner = Winner(5, [CommitInfo(operation="SET"), DomainMetadata(domain=theirs, configuration="{}", removed=False)])

    def judge():
        return check(_domain_commit(ours), winner, creating=False, isolation=IsolationLevel.WRITE_SERIALIZABLE,
                     types={}, lookup=lambda path: None, table="t")

    if conflicts:
        with pytest.raises(CommitConflictError) as caught:
            judge()
        assert caught.value.kind is ConflictKind.CONCURRENT_TRANSACTION and ours in str(caught.value)
    else:
        judge()


# --- row tracking ----------------------------------------------------------------------------------------

ROW_TRACKING = dict(writer=("domainMetadata", "rowTracking"), configuration={
    "delta.enableRowTracking": "true",
    "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
    "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-1"})


def adds_of(store, version) -> list[AddFile]:
    return [a for a in read_commit(store, version) if isinstance(a, AddFile)]


def high_water_mark(snapshot) -> int:
    return json.loads(snapshot.state.domain_metadata["delta.rowTracking"].configuration)["rowIdHighWaterMark"]


def test_appends_get_fresh_row_ids_above_the_high_water_mark_and_their_commit_version(memory_uri):
    store, _ = create(memory_uri, **ROW_TRACKING)
    write_table(memory_uri, rows(0, 3))
    write_table(memory_uri, rows(3, 2))
    (first,), (second,) = adds_of(store, 1), adds_of(store, 2)
    assert (first.base_row_id, first.default_row_commit_version) == (0, 1)
    assert (second.base_row_id, second.default_row_commit_version) == (3, 2)
    assert high_water_mark(load_snapshot(store)) == 4
    info = read_commit(store, 2)[0]
    assert isinstance(info, CommitInfo) and info.model_extra["tags"] == {"delta.rowTracking.preserved": "true"}


def test_a_commit_that_lost_the_race_takes_row_ids_above_the_winners(memory_uri):
    store, _ = create(memory_uri, **ROW_TRACKING)
    with_rival(lambda: write_table(memory_uri, rows(100, 5)), lambda: write_table(memory_uri, rows(0, 3)))
    rival, ours = adds_of(store, 1)[0], adds_of(store, 2)[0]
    assert (rival.base_row_id, ours.base_row_id, ours.default_row_commit_version) == (0, 5, 2)
    assert high_water_mark(load_snapshot(store)) == 7


def test_rewrites_keep_row_tracking_fields_on_removes_and_say_stable_ids_were_not_preserved(memory_uri):
    store, _ = create(memory_uri, **ROW_TRACKING)
    write_table(memory_uri, rows(0, 4))
    Table(memory_uri).delete("x = 1")
    actions = read_commit(store, 2)
    (removed,) = [a for a in actions if isinstance(a, RemoveFile)]
    (added,) = [a for a in actions if isinstance(a, AddFile)]
    assert (removed.base_row_id, removed.default_row_commit_version) == (0, 1)
    assert (added.base_row_id, added.default_row_commit_version) == (4, 2)
    assert actions[0].model_extra["tags"] == {"delta.rowTracking.preserved": "false"}


def test_a_file_given_a_deletion_vector_keeps_its_row_ids(memory_uri):
    store, _ = create(memory_uri, reader=("deletionVectors",), writer=("deletionVectors", *ROW_TRACKING["writer"]),
                      configuration={**ROW_TRACKING["configuration"], "delta.enableDeletionVectors": "true"})
    write_table(memory_uri, rows(0, 4))
    Table(memory_uri).delete("x = 1")
    actions = read_commit(store, 2)
    (readded,) = [a for a in actions if isinstance(a, AddFile)]
    assert readded.deletion_vector is not None
    assert (readded.base_row_id, readded.default_row_commit_version) == (0, 1)
    assert high_water_mark(load_snapshot(store)) == 3
    assert actions[0].model_extra["tags"] == {"delta.rowTracking.preserved": "true"}


def test_checkpoints_keep_the_row_tracking_fields_of_files_and_tombstones(memory_uri):
    store, _ = create(memory_uri, **ROW_TRACKING)
    write_table(memory_uri, rows(0, 4))
    write_table(memory_uri, rows(4, 1))
    Table(memory_uri).delete("x = 1")
    snapshot = load_snapshot(store)
    write_checkpoint(store, snapshot)
    forget_snapshots()
    reloaded = load_snapshot(store)
    assert reloaded.checkpoint_version == snapshot.version
    assert {(a.path, a.base_row_id, a.default_row_commit_version) for a in reloaded.files} == \
        {(a.path, a.base_row_id, a.default_row_commit_version) for a in snapshot.files}
    (tombstone,) = reloaded.state.tombstones.values()
    assert (tombstone.base_row_id, tombstone.default_row_commit_version) == (0, 1)


def test_suspended_row_tracking_assigns_nothing(memory_uri):
    store, _ = create(memory_uri, writer=("domainMetadata", "rowTracking"),
                      configuration={"delta.rowTrackingSuspended": "true"})
    write_table(memory_uri, rows(0, 2))
    (added,) = adds_of(store, 1)
    assert added.base_row_id is None and "delta.rowTracking" not in load_snapshot(store).state.domain_metadata


def test_a_file_without_a_row_count_is_refused_on_a_row_tracking_table(memory_uri):
    store, snapshot = create(memory_uri, **ROW_TRACKING)
    bare = AddFile(path="f.parquet", partition_values={}, size=1, modification_time=1, data_change=True)
    with pytest.raises(UnsupportedFeatureError, match="numRecords") as caught:
        commit(store, snapshot, Commit(actions=(bare,), operation="WRITE", read_scope=ReadScope.blind_append()))
    assert caught.value.feature == "rowTracking" and store.latest_version() == 0


# --- in-commit timestamps --------------------------------------------------------------------------------

ICT = dict(writer=("inCommitTimestamp",), configuration={"delta.enableInCommitTimestamps": "true"})


def ict_of(store, version) -> int:
    info = read_commit(store, version)[0]
    assert isinstance(info, CommitInfo), "commitInfo must be the first action"
    return info.in_commit_timestamp


def test_in_commit_timestamps_come_first_and_increase_even_past_our_clock(memory_uri):
    before = int(time.time() * 1000)
    store, _ = create(memory_uri, **ICT)
    write_table(memory_uri, rows(0, 1))
    assert before <= ict_of(store, 0) < ict_of(store, 1)
    future = int(time.time() * 1000) + 3_600_000  # a writer whose clock runs an hour ahead
    store.write(2, serialize_commit([CommitInfo(operation="WRITE", in_commit_timestamp=future, timestamp=future)]))
    write_table(memory_uri, rows(1, 1))
    assert ict_of(store, 3) == future + 1 and read_commit(store, 3)[0].timestamp == future + 1
    assert Table(memory_uri, timestamp=_iso(future)).version == 2


def test_the_previous_timestamp_is_read_when_the_snapshot_came_from_a_checkpoint(memory_uri):
    store, snapshot = create(memory_uri, **ICT)
    future = int(time.time() * 1000) + 3_600_000
    store.write(1, serialize_commit([CommitInfo(operation="WRITE", in_commit_timestamp=future)]))
    write_checkpoint(store, load_snapshot(store))
    forget_snapshots()
    table = Table(memory_uri)
    assert table.snapshot.checkpoint_version == 1 and table.snapshot.in_commit_timestamp is None
    write_table(table, rows(0, 1))
    assert ict_of(store, 2) == future + 1


def test_tables_without_in_commit_timestamps_get_none(memory_uri):
    store, _ = create(memory_uri, writer=("inCommitTimestamp",))
    write_table(memory_uri, rows(0, 1))
    assert ict_of(store, 1) is None


def _iso(ms: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat()


# --- type widening ---------------------------------------------------------------------------------------


def _widened_table(uri: str, type_change: dict) -> None:
    """Version 0: a float column and a file holding 3.4f (its stats say max 3.4); version 1 widens it."""
    store = open_log_store(uri)
    narrow = pa.schema([("f", pa.float32())])
    sink = io.BytesIO()
    pq.write_table(pa.table({"f": pa.array([3.4], pa.float32())}, schema=narrow), sink)
    store.objects.put(store.uri.key("f.parquet"), sink.getvalue())
    stats = '{"numRecords":1,"minValues":{"f":3.4},"maxValues":{"f":3.4},"nullCount":{"f":0}}'
    store.write(0, serialize_commit([
        Protocol(min_reader_version=1, min_writer_version=2),
        Metadata(id="w", schema_string=schema_string(narrow), created_time=1),
        AddFile(path="f.parquet", partition_values={}, size=len(sink.getvalue()), modification_time=1,
                data_change=True, stats=stats)]))
    wide = {"type": "struct", "fields": [{"name": "f", "type": type_change["toType"], "nullable": True,
                                          "metadata": {"delta.typeChanges": [type_change]}}]}
    store.write(1, serialize_commit([
        Protocol(min_reader_version=3, min_writer_version=7, reader_features=["typeWidening"],
                 writer_features=["typeWidening"]),
        Metadata(id="w", schema_string=json.dumps(wide), created_time=1,
                 configuration={"delta.enableTypeWidening": "true"})]))


def test_files_written_before_a_widening_read_as_the_wider_type_and_their_stats_do_not_prune(memory_uri):
    _widened_table(memory_uri, {"fromType": "float", "toType": "double"})
    table = Table(memory_uri)
    widened = float(pa.scalar(3.4, pa.float32()).as_py())  # 3.4000000953674316, what Spark reads too
    assert table.to_pyarrow_table().to_pylist() == [{"f": widened}]
    assert table.schema.field("f").type == pa.float64()
    # The file's stats say max 3.4 (a float's text); trusting them would drop the row.
    assert table.to_pyarrow_table(filter=pc.field("f") > 3.4).to_pylist() == [{"f": widened}]


def test_a_type_change_delta_does_not_define_is_refused_by_name(memory_uri):
    _widened_table(memory_uri, {"fromType": "float", "toType": "decimal(10,2)"})
    with pytest.raises(UnsupportedFeatureError, match="not a type widening") as caught:
        Table(memory_uri)
    assert caught.value.feature == "typeWidening"


def test_appends_to_a_widened_table_write_the_wider_type_and_keep_the_recorded_change(memory_uri):
    _widened_table(memory_uri, {"fromType": "float", "toType": "double"})
    write_table(memory_uri, pa.table({"f": [1.0000000001]}))
    table = Table(memory_uri)
    assert sorted(table.to_pyarrow_table()["f"].to_pylist()) == [1.0000000001, float(pa.scalar(3.4, pa.float32()).as_py())]
    field = json.loads(table.metadata().schema_string)["fields"][0]
    assert field["metadata"]["delta.typeChanges"] == [{"fromType": "float", "toType": "double"}]


# --- clustering, vacuum protocol check, checkpoint protection ---------------------------------------------

CLUSTERED = dict(writer=("domainMetadata", "clustering"),
                 extra=(DomainMetadata(domain="delta.clustering", configuration='{"clusteringColumns":[["x"]]}',
                                       removed=False),))


def test_appends_to_a_clustered_table_are_unclustered_files_with_stats_and_keep_the_domain(memory_uri):
    store, _ = create(memory_uri, **CLUSTERED)
    write_table(memory_uri, rows(0, 3))
    (added,) = adds_of(store, 1)
    assert added.clustering_provider is None and json.loads(added.stats)["nullCount"]["x"] == 0
    assert "delta.clustering" in load_snapshot(store).state.domain_metadata


def test_a_clustered_table_whose_files_would_lack_clustering_stats_refuses_the_write(memory_uri):
    store, _ = create(memory_uri, **CLUSTERED, configuration={"delta.dataSkippingNumIndexedCols": "0"})
    with pytest.raises(UnsupportedFeatureError, match="clustering column 'x'") as caught:
        write_table(memory_uri, rows(0, 3))
    assert caught.value.feature == "clustering" and store.latest_version() == 0


def test_vacuum_checks_the_writer_protocol_first(memory_uri):
    store, _ = create(memory_uri)
    write_table(memory_uri, rows(0, 2))
    store.write(2, serialize_commit([Protocol(min_reader_version=1, min_writer_version=7,
                                              writer_features=["someFutureFeature"])]))
    with pytest.raises(UnsupportedFeatureError) as caught:
        vacuum(Table(memory_uri), dry_run=True)
    assert caught.value.feature == "someFutureFeature"


def test_tables_with_vacuum_protocol_check_and_checkpoint_protection_are_written_and_vacuumed(memory_uri):
    store, _ = create(memory_uri, reader=("vacuumProtocolCheck",),
                      writer=("vacuumProtocolCheck", "checkpointProtection"),
                      configuration={"delta.requireCheckpointProtectionBeforeVersion": "1",
                                     "delta.checkpointInterval": "1"})
    write_table(memory_uri, rows(0, 2))
    assert checkpoint_names(1)[0] in log_names(store)
    assert vacuum(Table(memory_uri), dry_run=True).files == ()


@pytest.mark.interop
def test_a_table_we_write_with_these_features_reads_the_same_in_deltalake(memory_uri, tmp_path):
    from deltalake import DeltaTable

    create(memory_uri, reader=("v2Checkpoint",),
           writer=("v2Checkpoint", "domainMetadata", "rowTracking", "inCommitTimestamp"),
           configuration={"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2",
                          **ICT["configuration"], **ROW_TRACKING["configuration"]})
    for i in range(3):
        write_table(memory_uri, rows(10 * i, 3))
    Table(memory_uri).delete("x = 11")
    forget_snapshots()
    ours = Table(memory_uri)
    assert ours.snapshot.checkpoint_version == 4  # V2 checkpoints at 2 and 4
    directory = to_directory(ours, tmp_path / "table")
    assert DeltaTable(str(directory)).version() == ours.version == 4
    assert canonical(deltalake_rows(directory)) == canonical(ours.to_pyarrow_table())
    for version in range(ours.version + 1):
        assert canonical(deltalake_rows(directory, version)) == canonical(Table(memory_uri, version=version)
                                                                          .to_pyarrow_table())


# --- the feature tables ----------------------------------------------------------------------------------


@pytest.mark.parametrize("feature", sorted(READER_FEATURES))
def test_every_reader_feature_we_claim_is_readable(feature):
    check_readable(Protocol(min_reader_version=3, min_writer_version=7, reader_features=[feature], writer_features=[]))


@pytest.mark.parametrize("feature", ["variantType", "variantType-preview", "variantShredding",
                                     "variantShredding-preview"])
def test_variant_tables_are_read_and_written(feature):
    protocol = Protocol(min_reader_version=3, min_writer_version=7, reader_features=[feature], writer_features=[feature])
    check_readable(protocol)
    check_writable(protocol)


@pytest.mark.parametrize("feature", ["catalogManaged", "some-future-feature"])
def test_reader_features_we_cannot_read_are_refused_by_name(feature):
    with pytest.raises(UnsupportedFeatureError) as caught:
        check_readable(Protocol(min_reader_version=3, min_writer_version=7, reader_features=[feature],
                                writer_features=[feature]))
    assert caught.value.feature == feature and feature in str(caught.value)


def test_every_writer_feature_we_claim_says_how_it_is_honoured():
    assert set(WRITER_FEATURES) == SUPPORTED_WRITER_FEATURES and all(WRITER_FEATURES.values())


@pytest.mark.parametrize("feature, key, value", [("generatedColumns", "delta.generationExpression", "'r' || CAST(x AS VARCHAR)"),
                                                 ("identityColumns", "delta.identity.start", 1)])
def test_generated_and_identity_columns_listed_but_unused_are_written_and_used_ones_enforced(memory_uri, feature,
                                                                                         key, value):
    """A protocol raised from a legacy writer version lists every feature that version implied (Delta does
    so too): a table that lists these without a column using them is written as any; one using them gets
    its column computed (tests/unit/table/test_constraints.py has the rules in detail)."""
    create(memory_uri, writer=(feature,))
    assert write_table(memory_uri, rows(0, 2)).version == 1
    used = json.loads(schema_string(SCHEMA))
    column = 1 if feature == "generatedColumns" else 0
    used["fields"][column]["metadata"] = {key: value}
    other = f"{memory_uri}-used"
    create(other, writer=(feature,), schema=SCHEMA)
    store = open_log_store(other)
    current = Table(other).snapshot.metadata
    store.write(1, serialize_commit([current.model_copy(update={"schema_string": json.dumps(used)})]))
    forget_snapshots()
    omitted = rows(5, 2).drop_columns([SCHEMA.names[column]])
    write_table(other, omitted)
    got = sorted(Table(other).to_pyarrow_table().to_pylist(), key=lambda r: r["x"])
    assert got == ([{"x": 5, "s": "r5"}, {"x": 6, "s": "r6"}] if feature == "generatedColumns"
                   else [{"x": 1, "s": "r5"}, {"x": 2, "s": "r6"}])
