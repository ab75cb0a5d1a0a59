"""Deletion vectors: read as delta-kernel-rs's test tables say (tests/data/delta-kernel-rs), written by
DELETE, UPDATE and MERGE on tables with ``delta.enableDeletionVectors`` (merge-on-read) with the rows
DuckDB's own statements leave, honoured by every reader and rewriter, purged by OPTIMIZE, kept by VACUUM
while in use, and refused when corrupt."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyroaring import BitMap64

from table import CorruptDataError, Table, write_table
from table.data.deletion_vectors import decode_z85, deleted_rows, encode_z85, serialize, write_file
from table.log.actions import AddFile, DeletionVectorDescriptor, RemoveFile, serialize_commit
from table.log.snapshot import read_commit
from table.maintenance import vacuum
from tests.support.dml_reference import duckdb_delete, duckdb_merge, duckdb_update, rows_of
from tests.unit.table.test_dml import MERGES, SOURCE, make_table, table_rows

KERNEL = Path(__file__).resolve().parents[2] / "data" / "delta-kernel-rs"
DV = {"delta.enableDeletionVectors": "true"}


def copy_into(uri: str, source: Path) -> None:
    """The files of a table directory, put under ``uri`` (an in-memory table)."""
    table = Table.for_write(uri)
    for path in source.rglob("*"):
        if path.is_file():
            table.objects.put(table.uri.key(path.relative_to(source).as_posix()), path.read_bytes())


# --- reading others' vectors --------------------------------------------------------------------------


@pytest.mark.parametrize("name, column, expected", [
    ("table-with-dv-small", "value", [1, 2, 3, 4, 5, 6, 7, 8]),   # ffi/tests/.../table-with-dv-small.expected
    ("with-short-dv", "id", [3, 4, 5, 6, 7, 8, 9]),             # ffi/tests/.../with-short-dv.expected
])
def test_tables_written_by_delta_read_without_their_deleted_rows(memory_uri, name, column, expected):
    copy_into(memory_uri, KERNEL / name)
    table = Table(memory_uri)
    assert sorted(table.to_pyarrow_table()[column].to_pylist()) == expected
    assert sorted(table.to_pyarrow_dataset().to_table()[column].to_pylist()) == expected
    assert sorted(table.to_pyarrow_table(filter=pc.field(column) > 4)[column].to_pylist()) == \
        [v for v in expected if v > 4]
    assert sorted(table.to_pyarrow_dataset().to_table(filter=pc.field(column) > 4)[column].to_pylist()) == \
        [v for v in expected if v > 4]


def test_the_inline_example_of_the_protocol_and_z85():
    example = DeletionVectorDescriptor(storage_type="i", size_in_bytes=40, cardinality=6,
                                       path_or_inline_dv="wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L")
    assert list(deleted_rows(example, None, where="f")) == [3, 4, 7, 11, 18, 29]  # PROTOCOL.md's rows
    assert encode_z85(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"  # the Z85 spec's
    assert decode_z85("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    high = BitMap64([0, 5, 2**32 + 7])
    data = serialize(high)
    inline = DeletionVectorDescriptor(storage_type="i", path_or_inline_dv=encode_z85(data + b"\0" * (-len(data) % 4)),
                                      size_in_bytes=len(data), cardinality=3)
    assert list(deleted_rows(inline, None, where="f")) == [0, 5, 2**32 + 7]


def test_inline_vectors_with_the_padded_tail_of_the_rust_z85_crate():
    # delta-kernel-rs's cdf-table-with-dv (tests/data/delta-kernel-rs): its versions 4 and 5 hold these inline
    # vectors; deltalake reads the rows 0 and 5, then the row 3, as deleted. The second ends in '##093': a
    # tail of two bytes (0x03, 0x00: row 3 in a 16-bit roaring container), which standard Z85 cannot hold.
    two = DeletionVectorDescriptor(storage_type="i", size_in_bytes=36, cardinality=2,
                                   path_or_inline_dv="^Bg9^0rr910000000000iXQKl0rr91000315c8Xg000f5")
    one = DeletionVectorDescriptor(storage_type="i", size_in_bytes=34, cardinality=1,
                                   path_or_inline_dv="^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093")
    assert list(deleted_rows(two, None, where="f")) == [0, 5]
    assert list(deleted_rows(one, None, where="f")) == [3]
    assert decode_z85("##093") == bytes([0x03, 0x00])
    for bad in ("####0", "%%%%%"):  # no byte at all; a group above 2^32 - 1 that is no padded tail
        with pytest.raises(ValueError):
            decode_z85(bad)


@pytest.mark.parametrize("damage, message", [
    (lambda body: body[:5] + bytes([body[5] ^ 0xFF]) + body[6:], "checksum"),
    (lambda body: body[:1] + (99).to_bytes(4, "big") + body[5:], "size"),
])
def test_a_damaged_vector_is_corrupt_data_never_a_guess(damage, message):
    body, [(offset, size)] = write_file([BitMap64([1, 2])])
    descriptor = DeletionVectorDescriptor(storage_type="u", path_or_inline_dv=encode_z85(uuid.uuid4().bytes),
                                          offset=offset, size_in_bytes=size, cardinality=2)
    broken = damage(body)
    with pytest.raises(CorruptDataError, match=message):
        deleted_rows(descriptor, lambda path, at, length: broken[at:at + length], where="f")
    wrong_count = descriptor.model_copy(update={"cardinality": 3})
    with pytest.raises(CorruptDataError, match="deletes 2 rows, its descriptor says 3"):
        deleted_rows(wrong_count, lambda path, at, length: body[at:at + length], where="f")


# --- writing vectors ---------------------------------------------------------------------------------


partitioning = pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])


@partitioning
@pytest.mark.parametrize("predicate", ["id > 5", "v IS NULL", "id IN (1, 4, 10)", "s = 's1' OR id = 0"])
def test_a_delete_marks_rows_in_vectors_and_leaves_the_rows_duckdb_leaves(memory_uri, partitioned, predicate):
    rows = make_table(memory_uri, partitioned, **DV)
    before = {a.path for a in Table(memory_uri).add_actions()}
    result = Table(memory_uri).delete(predicate)
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_delete(rows, predicate))
    commit = read_commit(Table(memory_uri).log_store, Table(memory_uri).version)
    added = [a for a in commit if isinstance(a, AddFile)]
    assert all(a.path in before and a.deletion_vector is not None for a in added)  # no data file written
    assert result.metrics["numCopiedRows"] == "0" and result.metrics["numAddedFiles"] == "0"
    assert int(result.metrics["numDeletionVectorsAdded"]) == len(added)


@partitioning
@pytest.mark.parametrize("updates, predicate", [({"v": "v * 2"}, "id > 5"), ({"p": "'moved'"}, "id % 2 = 0")])
def test_an_update_marks_old_rows_and_writes_only_the_new_ones(memory_uri, partitioned, updates, predicate):
    rows = make_table(memory_uri, partitioned, **DV)
    result = Table(memory_uri).update(updates, predicate=predicate)
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_update(rows, updates, predicate))
    assert result.metrics["numCopiedRows"] == "0"
    commit = read_commit(Table(memory_uri).log_store, Table(memory_uri).version)
    written = sum(a.deletion_vector is None for a in commit if isinstance(a, AddFile))
    assert written >= 1


@partitioning
@pytest.mark.parametrize("name", sorted(MERGES))
def test_merges_on_a_table_with_vectors_leave_the_rows_duckdb_leaves(memory_uri, partitioned, name):
    rows = make_table(memory_uri, partitioned, **DV)
    spec = MERGES[name]
    result = spec.apply(Table(memory_uri).merge(SOURCE, spec.predicate)).execute()
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_merge(rows, SOURCE, spec))
    assert result.metrics["numTargetRowsCopied"] == "0"


def test_vectors_accumulate_and_a_file_losing_every_row_is_removed(memory_uri):
    rows = make_table(memory_uri, partitioned=False, **DV)
    table = Table(memory_uri)
    for predicate in ("id = 0", "id = 1", "id IN (2, 3)"):  # the first file holds ids 0-3
        table.delete(predicate)
        rows = duckdb_delete(rows, predicate)
        assert rows_of(table_rows(memory_uri)) == rows_of(rows)
    last = read_commit(table.log_store, table.version)
    assert [type(a).__name__ for a in last if isinstance(a, (AddFile, RemoveFile))] == ["RemoveFile"]
    updated = read_commit(table.log_store, table.version - 1)
    (vector,) = [a.deletion_vector for a in updated if isinstance(a, AddFile)]
    assert vector.cardinality == 2  # ids 0 and 1: the vector of the second delete holds the first's row too


def test_stats_of_a_file_with_a_vector_are_wide_and_still_count_every_row(memory_uri):
    make_table(memory_uri, partitioned=False, **DV)
    Table(memory_uri).delete("id = 8")
    (add,) = [a for a in Table(memory_uri).add_actions() if a.deletion_vector is not None]
    assert '"tightBounds":false' in add.stats and '"numRecords":3' in add.stats
    pruned = Table(memory_uri).to_pyarrow_table(filter=pc.field("id") == 8)
    assert pruned.num_rows == 0


def test_a_vector_on_a_file_written_without_stats_gets_the_files_row_count(memory_uri):
    """PROTOCOL.md: a file with a deletion vector must carry an accurate numRecords. A file another writer
    added without statistics (here: re-added with none) gets its row count from its footer."""
    rows = make_table(memory_uri, partitioned=False, **DV)
    table = Table(memory_uri)
    (third,) = [a for a in table.add_actions() if '"numRecords":3' in (a.stats or "")]
    stripped = third.model_copy(update={"stats": None, "data_change": False})
    table.log_store.write(table.version + 1, serialize_commit([stripped]))  # a re-add replaces the file's add
    Table(memory_uri).delete("id = 8")
    (add,) = [a for a in Table(memory_uri).add_actions() if a.deletion_vector is not None]
    assert add.path == third.path and json.loads(add.stats) == {"numRecords": 3, "tightBounds": False}
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_delete(rows, "id = 8"))


def test_optimize_purges_vectors_and_vacuum_keeps_vector_files_in_use(memory_uri):
    rows = make_table(memory_uri, partitioned=False, **DV)
    table = Table(memory_uri)
    table.delete("id IN (1, 8)")
    vector_files = {k for k in (o.key for o in table.objects.list(table.uri.key(""))) if "deletion_vector_" in k}
    assert len(vector_files) == 1
    assert vacuum(table, retention_hours=0, force=True, dry_run=False).count == 0  # nothing removed yet is old
    assert {o.key for o in table.objects.list(table.uri.key("")) if "deletion_vector_" in o.key} == vector_files
    report = table.optimize(target_size=5 * 1024 * 1024)
    assert report.result is not None and report.result.metrics["numDeletionVectorsRemoved"] == "2"
    table.refresh()
    assert all(a.deletion_vector is None for a in table.add_actions())
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_delete(rows, "id IN (1, 8)"))
    vacuum(table, retention_hours=0, force=True, dry_run=False)
    assert not any("deletion_vector_" in o.key for o in table.objects.list(table.uri.key("")))
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_delete(rows, "id IN (1, 8)"))


def test_a_table_created_with_vectors_has_the_minimal_protocol(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}, schema=pa.schema([("id", pa.int64())])), configuration=DV)
    protocol = Table(memory_uri).snapshot.protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == ["deletionVectors"] and protocol.writer_features == ["deletionVectors"]


def test_change_data_of_merge_on_read_changes(memory_uri):
    make_table(memory_uri, partitioned=False, **DV, **{"delta.enableChangeDataFeed": "true"})
    Table(memory_uri).update({"v": "-1"}, predicate="id = 9")
    Table(memory_uri).delete("id = 0")
    feed = Table(memory_uri).load_cdf(4).read_all()
    assert sorted((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist()) == [
        ("delete", 0, 0.0), ("update_postimage", 9, -1.0), ("update_preimage", 9, 9.5)]





def test_compaction_plans_purge_every_file_with_a_vector_whatever_its_size():
    from table.operations.optimize import plan_compaction

    vector = DeletionVectorDescriptor(storage_type="i", path_or_inline_dv="x", size_in_bytes=1, cardinality=1)
    big = AddFile(path="big", partition_values={}, size=10**9, modification_time=0, data_change=True)
    bins = plan_compaction([big, big.model_copy(update={"path": "big-dv", "deletion_vector": vector})], [],
                           target_size=10**6)
    assert [[f.path for f in b.files] for b in bins] == [["big-dv"]]


def test_the_change_feed_of_a_vector_change_without_change_data_files(memory_uri):
    """Another writer may keep a file with a new vector and write no change data file: the changed rows are
    then those whose deletion changed (here: our own delete of id 1, its cdc action taken out of the log)."""
    from table.log.actions import Cdc, serialize_commit

    make_table(memory_uri, partitioned=False, **DV, **{"delta.enableChangeDataFeed": "true"})
    table = Table(memory_uri)
    table.delete("id = 0")
    table.delete("id = 1")  # the same file again: its vector grows from {0} to {0, 1}
    version = table.refresh().version
    commit = read_commit(table.log_store, version)
    assert any(isinstance(a, Cdc) for a in commit)
    table.objects.put(table.uri.key(f"_delta_log/{version:020d}.json"),
                      serialize_commit([a for a in commit if not isinstance(a, Cdc)]))
    from table.table import forget_snapshots

    forget_snapshots()
    feed = Table(memory_uri).load_cdf(version - 1).read_all()
    assert sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in feed.to_pylist()) == [
        (version - 1, "delete", 0), (version, "delete", 1)]
