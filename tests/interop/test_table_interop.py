"""Tables written here read identically in implementations we did not write, and the other way round.

Both directions go through moto S3: our writes commit through DynamoDB; current ``deltalake`` writes
with ``AWS_S3_ALLOW_UNSAFE_RENAME`` (it has no DynamoDB log store any more), which is safe here because
each test has one writer at a time. Readers: ``deltalake`` (delta-rs), polars (``pl.read_delta``, its own
Parquet reader over delta-rs's file list) and DuckDB (SQL over our pyarrow dataset).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from table.data.read import to_pyarrow_dataset
from table.data.write import write_table
from table.table import Table

deltalake = pytest.importorskip("deltalake")
polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

pytestmark = pytest.mark.interop


@pytest.fixture
def deltars_options(storage_options) -> dict[str, str]:
    """Our storage options as current deltalake takes them (plain S3, no DynamoDB)."""
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    cities = ["Paris", "São Paulo", "a/b=c %", None]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "city": pa.array([cities[i % 4] for i in ids]),
        "day": pa.array([dt.date(2024, 1, 1 + i % 3) for i in ids], pa.date32()),
        "at": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, i) for i in ids], pa.timestamp("us", tz="UTC")),
        "price": pa.array([Decimal(i) / 100 for i in ids], pa.decimal128(10, 2)),
        "ok": pa.array([i % 2 == 0 for i in ids]),
        "ratio": pa.array([None if i % 5 == 0 else i / 7 for i in ids], pa.float64()),
        "tags": pa.array([[f"t{i}", "x"] if i % 3 else [] for i in ids], pa.list_(pa.string())),
        "where": pa.array([{"lat": i / 10, "lon": -i / 10} for i in ids],
                          pa.struct([("lat", pa.float64()), ("lon", pa.float64())])),
    })


def same_rows(expected: pa.Table, got: pa.Table) -> None:
    got = got.select(expected.column_names).cast(expected.schema).sort_by("id")
    assert got.equals(expected.sort_by("id")), f"expected\n{expected.sort_by('id')}\ngot\n{got}"


@pytest.mark.parametrize("partition_by", [[], ["city"], ["day", "city"]], ids=["plain", "city", "day-city"])
def test_tables_we_write_read_identically_in_deltalake_polars_and_duckdb(s3_uri, storage_options, deltars_options,
                                                                        partition_by):
    write_table(s3_uri, batch(0, 12), partition_by=partition_by, storage_options=storage_options)
    write_table(s3_uri, batch(12, 12), storage_options=storage_options)
    write_table(s3_uri, batch(100, 8), mode="overwrite", partition_overwrite="dynamic",
                storage_options=storage_options)
    write_table(s3_uri, batch(200, 5), storage_options=storage_options)
    ours = Table(s3_uri, storage_options=storage_options)
    expected = ours.to_pyarrow_table()
    assert expected.num_rows > 0 and ours.version == 3

    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    assert theirs.version() == 3
    assert theirs.metadata().partition_columns == partition_by
    same_rows(expected, theirs.to_pyarrow_table())
    for version in range(4):
        same_rows(Table(s3_uri, version=version, storage_options=storage_options).to_pyarrow_table(),
                  deltalake.DeltaTable(s3_uri, version=version, storage_options=deltars_options).to_pyarrow_table())

    same_rows(expected, polars.read_delta(s3_uri, storage_options=deltars_options).to_arrow())

    con = duckdb.connect()
    con.register("t", to_pyarrow_dataset(ours))
    same_rows(expected, con.sql("SELECT * FROM t").to_arrow_table())
    counted = con.sql("SELECT city, count(*) AS n, sum(id) AS s FROM t GROUP BY city").to_arrow_table()
    by_city = {r["city"]: (r["n"], r["s"]) for r in counted.to_pylist()}
    for city in set(expected["city"].to_pylist()):
        rows = expected.filter(pc.field("city").is_null() if city is None else pc.field("city") == city)
        assert by_city[city] == (rows.num_rows, pc.sum(rows["id"]).as_py())


def test_checkpoints_written_on_our_commits_are_read_by_deltalake(s3_uri, storage_options, deltars_options):
    for i in range(12):
        write_table(s3_uri, batch(i * 3, 3), partition_by=["city"] if i == 0 else None,
                    storage_options=storage_options)
    ours = Table(s3_uri, storage_options=storage_options)
    assert ours.version == 11
    assert ours.log_store.stat_file("00000000000000000010.checkpoint.parquet") is not None
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    assert theirs.version() == 11
    same_rows(ours.to_pyarrow_table(), theirs.to_pyarrow_table())


@pytest.mark.parametrize("partition_by", [None, ["city"], ["day"]], ids=["plain", "city", "day"])
def test_tables_deltalake_writes_read_identically_here(s3_uri, storage_options, deltars_options, partition_by):
    deltalake.write_deltalake(s3_uri, batch(0, 10), partition_by=partition_by, storage_options=deltars_options)
    for start in (10, 20, 30):
        deltalake.write_deltalake(s3_uri, batch(start, 10), mode="append", storage_options=deltars_options)
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    theirs.delete("id < 5")
    theirs.create_checkpoint()
    deltalake.write_deltalake(s3_uri, batch(40, 10), mode="append", storage_options=deltars_options)
    theirs.update_incremental()

    ours = Table(s3_uri, storage_options=storage_options)
    assert ours.version == theirs.version()
    assert ours.partition_columns == (partition_by or [])
    same_rows(ours.to_pyarrow_table(), theirs.to_pyarrow_table())
    assert ours.to_pyarrow_table().num_rows == 45
    for version in range(ours.version + 1):
        same_rows(deltalake.DeltaTable(s3_uri, version=version, storage_options=deltars_options).to_pyarrow_table(),
                  Table(s3_uri, version=version, storage_options=storage_options).to_pyarrow_table())
    filtered = ours.to_pyarrow_table(filter=(pc.field("id") >= 20) & (pc.field("id") < 25))
    assert sorted(filtered["id"].to_pylist()) == list(range(20, 25))


def test_we_append_and_overwrite_partitions_of_a_deltalake_table(s3_uri, storage_options, deltars_options):
    deltalake.write_deltalake(s3_uri, batch(0, 12), partition_by=["day", "city"], storage_options=deltars_options)
    write_table(s3_uri, batch(12, 12), storage_options=storage_options)
    write_table(s3_uri, batch(100, 2), mode="overwrite", partition_overwrite="dynamic",
                storage_options=storage_options)
    ours = Table(s3_uri, storage_options=storage_options)
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltars_options)
    assert theirs.version() == ours.version == 2
    same_rows(ours.to_pyarrow_table(), theirs.to_pyarrow_table())
    rewritten = {(r["day"], r["city"]) for r in batch(100, 2).select(["day", "city"]).to_pylist()}
    left = {(r["day"], r["city"]) for r in ours.to_pyarrow_table(filter=pc.field("id") < 100)
            .select(["day", "city"]).to_pylist()}
    assert not rewritten & left
    # deltalake writing again after us is not tested: current deltalake does not coordinate through
    # DynamoDB, so its commits are invisible to readers that trust the DynamoDB entries (by design).
