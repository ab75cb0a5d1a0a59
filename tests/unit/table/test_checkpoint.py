"""Classic parquet checkpoints: schema, round trip, tombstone retention, the hint, and interop with deltalake."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import open_log_store
from logstore.errors import InvalidArgumentError
from table.log.actions import AddFile, Metadata, Protocol, RemoveFile, Txn
from table.log.checkpoint import (
    CHECKPOINT_SCHEMA,
    LastCheckpoint,
    checkpoint_actions,
    checkpoint_names,
    checkpoint_table,
    read_checkpoint,
    read_last_checkpoint,
    write_checkpoint,
)
from table.log import checkpoint as checkpoint_module
from table.log.commit import Commit, ReadScope
from table.log.properties import DEFAULT_TOMBSTONE_RETENTION_MS, parse_interval_ms
from table.log.schema import schema_string
from table.log.snapshot import load_snapshot
from table.log.state import replay
from table.log.transaction import commit

SCHEMA = pa.schema([("x", pa.int64()), ("p", pa.string())])
HOUR_MS = 3_600_000


def table_actions(configuration: dict[str, str] | None = None) -> list:
    return [
        Protocol(min_reader_version=1, min_writer_version=2),
        Metadata(id=str(uuid.uuid4()), schema_string=schema_string(SCHEMA), partition_columns=["p"],
                 configuration=configuration or {}, created_time=1),
    ]


def add(name: str, p: str | None = "a", *, tags: dict | None = None) -> AddFile:
    return AddFile(path=f"p={p}/{name}.parquet", partition_values={"p": p}, size=100, modification_time=7,
                   data_change=True, stats='{"numRecords":1,"minValues":{"x":1}}', tags=tags)


def run(store, snapshot, actions, *, scope=None, **kwargs):
    return commit(store, snapshot, Commit(actions=tuple(actions), operation="WRITE",
                                          read_scope=scope or ReadScope.blind_append(), **kwargs)).snapshot


def test_checkpoint_schema_is_the_protocol_appendix_schema():
    assert CHECKPOINT_SCHEMA.names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    add_type = CHECKPOINT_SCHEMA.field("add").type
    assert [f.name for f in add_type] == ["path", "partitionValues", "size", "modificationTime", "dataChange",
                                          "stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
                                          "clusteringProvider"]
    assert add_type.field("partitionValues").type == pa.map_(pa.string(), pa.string())
    assert add_type.field("stats").type == pa.string()
    assert [f.name for f in CHECKPOINT_SCHEMA.field("remove").type] == [
        "path", "deletionTimestamp", "dataChange", "deletionVector", "baseRowId", "defaultRowCommitVersion"]
    vector = add_type.field("deletionVector").type  # PROTOCOL.md's "Deletion Vector Descriptor Schema"
    assert [(f.name, f.type) for f in vector] == [("storageType", pa.string()), ("pathOrInlineDv", pa.string()),
                                                  ("offset", pa.int32()), ("sizeInBytes", pa.int32()),
                                                  ("cardinality", pa.int64())]
    assert CHECKPOINT_SCHEMA.field("protocol").type.field("minReaderVersion").type == pa.int32()
    assert all(f.nullable for f in CHECKPOINT_SCHEMA)


def test_checkpoint_round_trip_gives_the_same_table_state(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = run(store, None, [*table_actions({"k": "v"}), add("a0", tags={"t": "1"}), add("n0", None)])
    snapshot = run(store, snapshot, [add("a1")], app_id="job", app_version=4)
    now = int(time.time() * 1000)
    snapshot = run(store, snapshot, [snapshot.state.files["p=a/a0.parquet"].remove(deletion_timestamp=now)],
                   scope=ReadScope.whole_table())
    hint = write_checkpoint(store, snapshot)
    assert (hint.version, hint.size, hint.num_of_add_files) == (2, 2 + 1 + 2 + 1, 2)
    actions = read_checkpoint(store, 2)
    assert len(actions) == hint.size
    state = replay([(2, actions)])
    assert dict(state.files) == dict(snapshot.state.files)
    assert state.files["p=None/n0.parquet"].partition_values == {"p": None}
    assert list(state.tombstones) == ["p=a/a0.parquet"]
    assert state.tombstones["p=a/a0.parquet"].deletion_timestamp == now
    assert state.app_txns["job"].version == 4
    assert state.metadata == snapshot.metadata and state.protocol == snapshot.protocol


def test_tombstones_older_than_the_retention_are_dropped():
    now = 100 * 24 * HOUR_MS
    actions = [*table_actions({"delta.deletedFileRetentionDuration": "interval 2 hours"}), add("live")]
    removes = [RemoveFile(path=f"old{age}", data_change=True, deletion_timestamp=now - age * HOUR_MS)
               for age in (1, 3)]
    state = replay([(0, actions), (1, removes + [RemoveFile(path="undated", data_change=True)])])
    kept = [a.path for a in checkpoint_actions(state, now_ms=now) if isinstance(a, RemoveFile)]
    assert kept == ["old1"]
    default = replay([(0, table_actions()), (1, [RemoveFile(path="r", data_change=True,
                                                             deletion_timestamp=now - 6 * 24 * HOUR_MS)])])
    assert [a.path for a in checkpoint_actions(default, now_ms=now) if isinstance(a, RemoveFile)] == ["r"]
    assert [a.path for a in checkpoint_actions(default, now_ms=now + 2 * 24 * HOUR_MS)
            if isinstance(a, RemoveFile)] == []


@pytest.mark.parametrize("text, ms", [
    ("interval 7 days", DEFAULT_TOMBSTONE_RETENTION_MS),
    ("interval 1 week", DEFAULT_TOMBSTONE_RETENTION_MS),
    ("INTERVAL 1 day 12 hours", 36 * HOUR_MS),
    ("30 minutes", 30 * 60_000),
])
def test_interval_properties_parse_to_milliseconds(text, ms):
    assert parse_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["seven days", "interval 7 fortnights", "interval", "interval 7 days and more"])
def test_malformed_interval_is_a_configuration_error_naming_the_value(text):
    with pytest.raises(InvalidArgumentError, match="is not a Delta interval"):
        parse_interval_ms(text)


def test_commits_write_a_checkpoint_every_interval_and_the_hint_follows(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = run(store, None, [*table_actions({"delta.checkpointInterval": "4"}), add("f0")])
    for i in range(1, 10):
        snapshot = run(store, snapshot, [add(f"f{i}")])
    listed = [i.key.rsplit("/", 1)[-1] for i in store.objects.list(store.log_prefix) if ".checkpoint." in i.key]
    assert listed == [f"{v:020d}.checkpoint.parquet" for v in (4, 8)]
    hint = read_last_checkpoint(store)
    assert (hint.version, hint.num_of_add_files) == (8, 9)
    assert json.loads(store.objects.get(store.log_prefix + "_last_checkpoint")) == {
        "version": 8, "size": hint.size, "sizeInBytes": hint.size_in_bytes, "numOfAddFiles": 9}


def test_an_existing_checkpoint_file_is_kept_and_the_hint_never_moves_backwards(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = run(store, None, [*table_actions(), add("f0")])
    first = run(store, snapshot, [add("f1")])
    second = run(store, first, [add("f2")])
    write_checkpoint(store, second)
    (name,) = checkpoint_names(2)
    before = store.read_file(name)
    assert write_checkpoint(store, second, now_ms=1).size_in_bytes == len(before)
    assert store.read_file(name) == before
    write_checkpoint(store, first)
    assert read_last_checkpoint(store).version == 2


def test_multi_part_checkpoint_named_by_the_hint_is_read(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = run(store, None, [*table_actions(), add("f0")])
    for i in range(1, 4):
        snapshot = run(store, snapshot, [add(f"f{i}")])
    rows = checkpoint_table(snapshot.state, now_ms=0)
    for name, part in zip(checkpoint_names(3, parts=2), (rows.slice(0, 3), rows.slice(3))):
        sink = io.BytesIO()
        pq.write_table(part, sink)
        store.write_file(name, sink.getvalue())
    hint = LastCheckpoint(version=3, size=rows.num_rows, parts=2)
    store.objects.put(store.log_prefix + "_last_checkpoint", hint.to_json())
    loaded = load_snapshot(store)
    assert loaded.checkpoint_version == 3
    assert dict(loaded.state.files) == dict(snapshot.state.files)


# --- interop with deltalake -------------------------------------------------------------------------


def _copy_table_out(store, root: Path) -> None:
    for info in store.objects.list(store.uri.prefix + "/"):
        target = root / store.uri.relative(info.key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.objects.get(info.key))


def _copy_table_in(root: Path, store) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        store.objects.put(store.uri.key(path.relative_to(root).as_posix()), path.read_bytes())


@pytest.mark.interop
@pytest.mark.parametrize("slice_rows", [None, 4], ids=["one-row-group-of-files", "files-4-a-row-group"])
def test_deltalake_reads_a_table_checkpointed_by_us(memory_uri, tmp_path, monkeypatch, slice_rows):
    deltalake = pytest.importorskip("deltalake")
    if slice_rows is not None:  # the files go into the checkpoint 4 at a time, as 65,536 at a time in big tables
        monkeypatch.setattr(checkpoint_module, "CHECKPOINT_SLICE_ROWS", slice_rows)
    store = open_log_store(memory_uri)

    def data_file(i: int, p: str) -> AddFile:
        sink = io.BytesIO()
        pq.write_table(pa.table({"x": pa.array([i, i + 1000], pa.int64())}), sink)
        path = f"p={p}/part-{i:05d}.parquet"
        store.objects.put(store.uri.key(path), sink.getvalue())
        return AddFile(path=path, partition_values={"p": p}, size=len(sink.getvalue()), modification_time=1,
                       data_change=True, stats=json.dumps({"numRecords": 2, "minValues": {"x": i},
                                                           "maxValues": {"x": i + 1000}, "nullCount": {"x": 0}}))

    snapshot = run(store, None, [*table_actions(), data_file(0, "a")])
    for i in range(1, 25):
        actions: list = [data_file(i, "ab"[i % 2])]
        scope = ReadScope.blind_append()
        if i == 13:
            actions.append(snapshot.state.files["p=a/part-00000.parquet"].remove(
                deletion_timestamp=int(time.time() * 1000)))
            scope = ReadScope.of_partitions([{"p": "a"}])
        snapshot = run(store, snapshot, actions, scope=scope, app_id="job" if i == 5 else None,
                       app_version=5 if i == 5 else None)
    assert read_last_checkpoint(store).version == 20
    written = pq.ParquetFile(io.BytesIO(store.read_file(f"{20:020d}.checkpoint.parquet")))
    live = sorted(a.path for a in load_snapshot(store, version=20).files)
    # A row group of protocol, metaData and the txn; the 20 live files by path; the tombstone.
    assert written.metadata.num_row_groups == 1 + (1 if slice_rows is None else -(-len(live) // slice_rows)) + 1
    rows = written.read()
    assert [a["path"] for a in rows.column("add").to_pylist() if a is not None] == live
    assert [r["path"] for r in rows.column("remove").to_pylist() if r is not None] == ["p=a/part-00000.parquet"]
    _copy_table_out(store, tmp_path)
    for v in range(20):  # only the checkpoint can tell deltalake about versions 0-20 now
        (tmp_path / "_delta_log" / f"{v:020d}.json").unlink()
    table = deltalake.DeltaTable(str(tmp_path))
    assert table.version() == 24
    ours = sorted(a.path for a in snapshot.files)
    assert sorted(Path(u).relative_to(tmp_path).as_posix() for u in table.file_uris()) == ours
    rows = table.to_pyarrow_table()
    assert rows.num_rows == 2 * 24
    assert sorted(rows.column("x").to_pylist())[:2] == [1, 2]
    assert table.transaction_version("job") == 5


@pytest.mark.interop
def test_we_read_checkpoints_written_by_deltalake(deltars_table, memory_uri):
    deltalake = pytest.importorskip("deltalake")
    theirs = deltalake.DeltaTable(str(deltars_table))
    theirs.create_checkpoint()
    version = theirs.version()
    for v in range(version):  # leave the checkpoint as the only way to know the older versions
        (deltars_table / "_delta_log" / f"{v:020d}.json").unlink()
    store = open_log_store(memory_uri)
    _copy_table_in(deltars_table, store)
    snapshot = load_snapshot(store)
    assert snapshot.version == version and snapshot.checkpoint_version == version
    expected = sorted(Path(u).relative_to(deltars_table).as_posix() for u in theirs.file_uris())
    assert sorted(a.path for a in snapshot.files) == expected
    assert snapshot.schema.names == theirs.schema().to_arrow().names
    assert snapshot.partition_columns == theirs.metadata().partition_columns


def test_checkpoint_actions_refuse_a_state_without_a_table():
    from table.log.state import empty_state

    with pytest.raises(ValueError, match="no protocol"):
        checkpoint_actions(empty_state(), now_ms=0)


def test_txn_rows_keep_last_updated():
    state = replay([(0, [*table_actions(), Txn(app_id="a", version=1, last_updated=9)])])
    table = checkpoint_table(state, now_ms=0)
    assert [r for r in table.column("txn").to_pylist() if r] == [{"appId": "a", "version": 1, "lastUpdated": 9}]



def test_a_writer_replaces_its_own_hint_with_one_put_and_nothing_read(memory_uri):
    from tests.support.counting import CountingLogStore

    store = CountingLogStore(memory_uri)
    snapshots = [run(store, None, [*table_actions(), add("f0")])]
    for i in (1, 2):
        snapshots.append(run(store, snapshots[-1], [add(f"f{i}")]))
    write_checkpoint(store, snapshots[1])  # the first hint: listed, read (absent), put if absent
    store.wait_finished()  # the commits' temp-file DELETEs go out after they returned
    store.objects.calls.clear()
    store.objects.got.clear()
    write_checkpoint(store, snapshots[2])
    assert dict(store.objects.calls) == {"put": 2}  # the checkpoint and the hint; no LIST, no GET
    hint = read_last_checkpoint(open_log_store(memory_uri))
    assert (hint.version, hint.num_of_add_files) == (2, 3)


def test_a_hint_replaced_by_another_writer_is_read_again_and_a_newer_one_is_kept(memory_uri):
    from tests.support.counting import CountingLogStore

    ours = CountingLogStore(memory_uri)
    theirs = open_log_store(memory_uri)
    snapshots = [run(ours, None, [*table_actions(), add("f0")])]
    for i in (1, 2, 3):
        snapshots.append(run(ours, snapshots[-1], [add(f"f{i}")]))
    write_checkpoint(ours, snapshots[1])
    write_checkpoint(theirs, load_snapshot(theirs))  # another writer names version 3 meanwhile
    ours.objects.calls.clear()
    write_checkpoint(ours, snapshots[2])  # its swap on the tag of its own hint fails: it reads and leaves 3
    assert ours.objects.calls["get"] >= 1
    assert read_last_checkpoint(theirs).version == 3
    write_checkpoint(theirs, load_snapshot(theirs))  # the same version again: left as it is
    snapshots.append(run(ours, snapshots[-1], [add("f4")]))
    write_checkpoint(ours, snapshots[-1])  # a newer one replaces the other writer's hint
    hint = read_last_checkpoint(theirs)
    assert (hint.version, hint.num_of_add_files) == (4, 5)
    assert all(theirs.stat_file(name) is not None for name in checkpoint_names(hint.version, hint.parts))
