"""Files written with the encodings ``table.data.writer_settings`` chooses (no dictionary for near-unique
columns, ``DELTA_BINARY_PACKED`` integers and timestamps, zstd from the table's property, statistics on
indexed columns only) read identically in deltalake, polars and DuckDB, after appends and after a
copy-on-write DELETE rewrote them. The expected rows are computed from the inputs with pyarrow."""

from __future__ import annotations

import datetime as dt
import io
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table.data.read import to_pyarrow_dataset
from table.data.write import write_table
from table.table import Table

deltalake = pytest.importorskip("deltalake")
polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

pytestmark = pytest.mark.interop


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "small": pa.array([i % 1000 for i in ids], pa.int32()),                # near-unique in a file, dense
        "scattered": pa.array([random.Random(i).getrandbits(62) - (1 << 61) for i in ids], pa.int64()),
        "name": pa.array([f"user-{i * 7919}" if i % 11 else None for i in ids]),
        "kind": pa.array([["a", "b", "c"][i % 3] for i in ids]),
        "at": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i) for i in ids],
                       pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i // 3000) for i in ids], pa.date32()),
        "x": pa.array([random.Random(-i).random() for i in ids], pa.float64()),
    })


def same_rows(expected: pa.Table, got: pa.Table) -> None:
    got = got.select(expected.column_names).cast(expected.schema).sort_by("id")
    assert got.equals(expected.sort_by("id"))


def test_files_with_the_chosen_encodings_read_identically_in_deltalake_polars_and_duckdb(
        s3_uri, storage_options, tmp_path):
    config = {"delta.parquet.compression.codec": "zstd", "delta.dataSkippingNumIndexedCols": "3"}
    write_table(s3_uri, rows(0, 6000), configuration=config, storage_options=storage_options)
    write_table(s3_uri, rows(6000, 4000), storage_options=storage_options)
    table = Table(s3_uri, storage_options=storage_options)
    first = table.add_actions()[0]
    footer = pq.read_metadata(io.BytesIO(table.objects.get(table.uri.key(first.path))))
    encodings = {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i).encodings
                 for i in range(footer.num_columns)}
    assert "DELTA_BINARY_PACKED" in encodings["id"] and "DELTA_BINARY_PACKED" in encodings["at"]
    assert "RLE_DICTIONARY" not in encodings["scattered"] and "RLE_DICTIONARY" in encodings["kind"]
    assert footer.row_group(0).column(0).compression == "ZSTD"

    table.delete("id % 7 = 0")  # copy-on-write: every file rewritten with the same settings
    everything = pa.concat_tables([rows(0, 6000), rows(6000, 4000)])
    expected = everything.filter(pc.not_equal(pc.subtract(everything["id"],
                                                          pc.multiply(pc.divide(everything["id"], 7), 7)), 0))
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"

    ours = Table(s3_uri, storage_options=storage_options)
    same_rows(expected, ours.to_pyarrow_table())
    same_rows(expected, deltalake.DeltaTable(s3_uri, storage_options=options).to_pyarrow_table())
    same_rows(expected, polars.read_delta(s3_uri, storage_options=options).to_arrow())
    con = duckdb.connect()
    con.register("t", to_pyarrow_dataset(ours))
    same_rows(expected, con.sql("SELECT * FROM t").to_arrow_table())
    # DuckDB's own Parquet reader, over the rewritten files' bytes
    for i, add in enumerate(ours.add_actions()):
        (tmp_path / f"{i}.parquet").write_bytes(ours.objects.get(ours.uri.key(add.path)))
    direct = con.sql(f"SELECT * FROM read_parquet('{tmp_path}/*.parquet')").to_arrow_table()
    same_rows(expected.drop_columns([c for c in ours.partition_columns]), direct)
