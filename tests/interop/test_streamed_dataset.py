"""``to_pyarrow_dataset`` of a table of big files streams one file at a time (``StreamedFilesDataset``):
its scans, however they are started (pyarrow, DuckDB, polars, explicit read-ahead), give exactly the rows
deltalake reads from the same table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from table.data.read import to_pyarrow_dataset
from table.data.scanned import StreamedFilesDataset
from table.data.write import write_table
from table.table import Table

deltalake = pytest.importorskip("deltalake")
polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

pytestmark = pytest.mark.interop

ROWS = 140_000  # about 9.5 MB of Parquet a file: past the 8 MiB mean size of a table of big files


def big_file(start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + ROWS, dtype=np.int64)
    blobs = rng.integers(0, 256, size=ROWS * 64, dtype=np.uint8).tobytes()
    offsets = pa.py_buffer(np.arange(0, ROWS * 64 + 1, 64, dtype=np.int32).tobytes())
    payload = pa.Array.from_buffers(pa.binary(), ROWS, [None, offsets, pa.py_buffer(blobs)])
    return pa.table({"id": ids, "k": pa.array(ids % 7), "payload": payload})


@pytest.fixture
def big_files_table(s3_uri, storage_options):
    for i in range(2):
        write_table(s3_uri, big_file(i * ROWS, i), storage_options=storage_options)
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    expected = deltalake.DeltaTable(s3_uri, storage_options=options).to_pyarrow_table()
    return Table(s3_uri, storage_options=storage_options), expected.sort_by("id")


def sorted_rows(data: pa.Table | list[pa.RecordBatch], schema: pa.Schema | None = None) -> pa.Table:
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches(data, schema=schema)
    return table.sort_by("id")


def test_every_scan_of_a_table_of_big_files_gives_deltalakes_rows(big_files_table):
    table, expected = big_files_table
    assert expected.num_rows == 2 * ROWS
    assert min(table.snapshot.state.files.to_arrow()["size"].to_pylist()) > 8 * 1024 * 1024
    dataset = to_pyarrow_dataset(table)
    assert isinstance(dataset, StreamedFilesDataset) and isinstance(dataset, ds.FileSystemDataset)

    assert sorted_rows(list(dataset.to_batches()), dataset.schema).equals(expected)
    assert sorted_rows(dataset.scanner().to_table()).equals(expected)
    assert sorted_rows(dataset.to_table()).equals(expected)
    # Read-ahead given explicitly is used as given; the rows are the same.
    explicit = dataset.to_batches(fragment_readahead=4, batch_readahead=16)
    assert sorted_rows(list(explicit), dataset.schema).equals(expected)

    wanted = pc.field("k") == 3
    picked = expected.filter(wanted).select(["id", "payload"])
    assert sorted_rows(dataset.scanner(columns=["id", "payload"], filter=wanted).to_table()).equals(picked)
    assert sorted_rows(list(dataset.to_batches(columns=["id", "payload"], filter=wanted)),
                       picked.schema).equals(picked)
    assert dataset.count_rows(filter=wanted) == picked.num_rows

    con = duckdb.connect()
    con.register("t", dataset)
    assert con.sql("SELECT count(*), sum(id), sum(k) FROM t WHERE k = 3").fetchall() == [
        (picked.num_rows, pc.sum(picked["id"]).as_py(), 3 * picked.num_rows)]
    assert sorted_rows(con.sql("SELECT * FROM t").to_arrow_table()).equals(expected)

    got = polars.scan_pyarrow_dataset(dataset).filter(polars.col("k") == 3).select(["id", "payload"]).collect()
    assert sorted_rows(got.to_arrow().cast(picked.schema)).equals(picked)


def test_a_table_of_small_files_keeps_pyarrows_own_dataset(s3_uri, storage_options):
    for i in range(3):
        write_table(s3_uri, pa.table({"id": pa.array([i], pa.int64())}), storage_options=storage_options)
    dataset = to_pyarrow_dataset(Table(s3_uri, storage_options=storage_options))
    assert type(dataset) is ds.FileSystemDataset
    assert sorted(dataset.to_table()["id"].to_pylist()) == [0, 1, 2]
