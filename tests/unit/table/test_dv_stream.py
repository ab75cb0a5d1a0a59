"""Deletion vectors applied batch by batch: ``to_pyarrow_table``, ``to_pyarrow_reader`` and
``to_pyarrow_dataset`` of tables whose files span several scan batches give exactly the rows the
inputs hold minus those deleted, computed here with pyarrow over the inputs, with and without
projections and filters; DuckDB and polars read the stream."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from table import Table, write_table
from table.data.files import MemoryFileSystemHandler

ROWS = 300_000  # one file holding more rows than one scan batch (131,072): positions span batches


def data(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table({"id": ids, "part": pc.cast(pc.divide(ids, 150_000), pa.int32()),
                     "v": pc.multiply(pc.cast(ids, pa.float64()), 0.5), "s": pc.cast(ids, pa.string())})


@pytest.fixture
def table(memory_uri) -> tuple[str, pa.Table]:
    """Two files of 150,000 rows each (one per ``part``) plus one of 300,000, with deletion vectors
    deleting ids divisible by 7 and the id range [140,000, 160,000): every file keeps rows on both sides of
    its vector's runs, in every batch."""
    write_table(memory_uri, data(0, ROWS), partition_by=["part"],
                configuration={"delta.enableDeletionVectors": "true"})
    write_table(memory_uri, data(ROWS, ROWS).set_column(1, "part", pa.array([9] * ROWS, pa.int32())))
    Table(memory_uri).delete("id % 7 = 0 OR (id >= 140000 AND id < 160000) OR id = 599999")
    everything = pa.concat_tables([data(0, ROWS), data(ROWS, ROWS).set_column(1, "part", pa.array([9] * ROWS,
                                                                                                  pa.int32()))])
    ids = everything["id"]
    gone = pc.or_(pc.equal(pc.subtract(ids, pc.multiply(pc.divide(ids, 7), 7)), 0),
                  pc.or_(pc.and_(pc.greater_equal(ids, 140_000), pc.less(ids, 160_000)), pc.equal(ids, 599_999)))
    return memory_uri, everything.filter(pc.invert(gone))


def test_every_file_has_a_deletion_vector_and_spans_several_batches(table):
    uri, _ = table
    files = Table(uri).snapshot.files
    assert len(files) == 3 and all(f.deletion_vector is not None for f in files)


def test_the_table_reads_as_the_inputs_minus_the_deleted_rows(table):
    uri, expected = table
    assert Table(uri).to_pyarrow_table().sort_by("id").equals(expected.select(Table(uri).schema.names))


@pytest.mark.parametrize("reader", ["table", "reader", "dataset"])
def test_projections_and_filters_apply_after_the_vectors(table, reader):
    uri, expected = table
    flt = (pc.field("v") > 50_000.0) & (pc.field("part") != 1)  # columns left out of the projection
    want = expected.filter(flt).select(["s", "id"]).sort_by("id")
    t = Table(uri)
    if reader == "table":
        got = t.to_pyarrow_table(columns=["s", "id"], filter=flt)
    elif reader == "reader":
        got = t.to_pyarrow_reader(columns=["s", "id"], filter=flt).read_all()
    else:
        got = t.to_pyarrow_dataset().to_table(columns=["s", "id"], filter=flt)
    assert got.sort_by("id").equals(want)


def test_duckdb_and_polars_read_the_stream(table):
    uri, expected = table
    stream = Table(uri).to_pyarrow_reader()
    (got,) = duckdb.sql("SELECT count(*) AS n, sum(id) AS s FROM stream").fetchall()
    assert got == (expected.num_rows, pc.sum(expected["id"]).as_py())
    frame = pl.from_arrow(Table(uri).to_pyarrow_reader(columns=["id"]))
    assert frame.height == expected.num_rows and frame["id"].sum() == pc.sum(expected["id"]).as_py()


def test_the_stream_refuses_unknown_columns_before_reading(table):
    uri, _ = table
    from logstore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="nope"):
        Table(uri).to_pyarrow_reader(columns=["nope"])


def test_a_column_mapped_table_streams_under_its_logical_names(memory_uri):
    write_table(memory_uri, data(0, 20_000), partition_by=["part"],
                configuration={"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"})
    Table(memory_uri).delete("id % 5 = 0")
    t = Table(memory_uri)
    t.alter.rename_column("s", "label")
    t = Table(memory_uri)
    flt = pc.field("label") != "7"
    expected = data(0, 20_000).rename_columns(["id", "part", "v", "label"])
    expected = expected.filter(pc.not_equal(pc.subtract(expected["id"], pc.multiply(pc.divide(expected["id"], 5), 5)),
                                            0)).filter(flt)
    got = t.to_pyarrow_reader(columns=["label", "id"], filter=flt).read_all()
    assert got.sort_by("id").equals(expected.select(["label", "id"]).sort_by("id"))


def test_the_dataset_streams_its_scans_lazily_and_pinned_to_its_snapshot(table):
    from table.data.scanned import ScannedDataset
    from table.errors import DataFileMissingError

    uri, expected = table
    t = Table(uri)
    dataset = t.to_pyarrow_dataset()
    assert isinstance(dataset, ScannedDataset) and dataset.schema == t.schema
    Table(uri).delete("id < 1000")  # a later version: the dataset keeps reading its own snapshot
    for _ in range(2):  # scanned as often as asked
        assert dataset.to_table().sort_by("id").equals(expected.select(t.schema.names))
    assert dataset.count_rows() == expected.num_rows
    assert dataset.count_rows(filter=pc.field("id") < 1000) == expected.filter(pc.field("id") < 1000).num_rows
    assert dataset.head(5, columns=["id"]).num_rows == 5
    narrowed = dataset.filter(pc.field("part") == 9).filter(pc.field("id") > 500_000)
    want = expected.filter((pc.field("part") == 9) & (pc.field("id") > 500_000))
    assert narrowed.to_table(columns={"twice": pc.field("id") * 2}).column("twice").to_pylist() == \
        pc.multiply(want["id"], 2).to_pylist()
    # nothing is read when the dataset is made: a file gone since is found by the scan, not before
    later = Table(uri).to_pyarrow_dataset()
    first = Table(uri).snapshot.files[0]
    Table(uri).objects.delete([Table(uri).uri.key(first.path)])
    with pytest.raises(DataFileMissingError):
        later.to_table()


def test_duckdb_and_polars_scan_the_dataset_with_their_projections_and_filters(table):
    uri, expected = table
    dataset = Table(uri).to_pyarrow_dataset()
    want = expected.filter(pc.field("v") > 100_000.0)
    for _ in range(2):  # a registered dataset is scanned by every query
        (got,) = duckdb.sql("SELECT count(*), sum(id) FROM dataset WHERE v > 100000").fetchall()
        assert got == (want.num_rows, pc.sum(want["id"]).as_py())
    frame = pl.scan_pyarrow_dataset(dataset).filter(pl.col("v") > 100_000.0).select("id").collect()
    assert sorted(frame["id"].to_list()) == sorted(want["id"].to_pylist())


def test_pyarrow_code_reaching_past_the_dataset_is_refused_with_what_to_call(table):
    import pyarrow.dataset as ds

    uri, _ = table
    dataset = Table(uri).to_pyarrow_dataset()
    with pytest.raises(NotImplementedError, match="to_pyarrow_reader"):
        ds.Scanner.from_dataset(dataset).to_table()
    with pytest.raises(NotImplementedError, match="scanner"):
        dataset.get_fragments()


def test_a_column_mapped_table_is_a_streamed_dataset_under_its_logical_names(memory_uri):
    write_table(memory_uri, data(0, 20_000), configuration={"delta.columnMapping.mode": "name"})
    Table(memory_uri).alter.rename_column("s", "label")
    dataset = Table(memory_uri).to_pyarrow_dataset()
    assert dataset.schema.names == ["id", "part", "v", "label"]
    got = duckdb.sql("SELECT label FROM dataset WHERE id >= 19990 ORDER BY id").fetchall()
    assert [g for (g,) in got] == [str(i) for i in range(19_990, 20_000)]


class _Counting(MemoryFileSystemHandler):
    """The in-memory table's filesystem, counting the reads of deletion vector files."""

    def __init__(self, objects):
        super().__init__(objects)
        self.vector_reads = 0

    def open_input_file(self, path):
        if "deletion_vector_" in path:
            self.vector_reads += 1
        return super().open_input_file(path)


def test_the_vectors_of_one_vector_file_are_read_in_one_request_unless_far_apart(memory_uri, monkeypatch):
    import pyarrow.fs as pafs

    from table.data import vector_rows as reading

    for start in range(0, 60_000, 10_000):
        write_table(memory_uri, data(start, 10_000), configuration={"delta.enableDeletionVectors": "true"}
                    if start == 0 else None)
    Table(memory_uri).delete("id % 3 = 0")  # one vector file for the six files
    t = Table(memory_uri)
    files = t.snapshot.files
    assert len({f.deletion_vector.path_or_inline_dv for f in files}) == 1 and len(files) == 6
    expected = data(0, 60_000).filter(pc.not_equal(pc.subtract(pc.field("id"), pc.multiply(
        pc.divide(pc.field("id"), 3), 3)), 0))
    for gap, reads in ((reading.VECTOR_GAP, 1), (0, 6)):
        monkeypatch.setattr(reading, "VECTOR_GAP", gap)
        handler = _Counting(t.objects)
        got = pa.Table.from_batches(list(reading.surviving_batches(t.uri, t.schema, [], files,
                                                                   pafs.PyFileSystem(handler))))
        assert got.sort_by("id").equals(expected.select(got.column_names))
        assert handler.vector_reads == reads
