"""VACUUM on Spark (``DynacommitTable.vacuum``, ``spark_integration.vacuum``) deletes exactly the files the
in-process vacuum would: the in-process dry run on the same table is the expectation. The table has live
files in partition directories, files an overwrite removed, orphans at the top level and in a partition
directory, change data, hidden paths and a nested table; the top level is split into several range tasks."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration import DynacommitTable
from spark_integration.vacuum import TokenBucket
from table import Table, write_table
from table.cli import EXIT_ERROR, main
from table.maintenance.vacuum import vacuum
from tests.support.fault_harness import deltalake_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def rows(start: int, n: int = 6) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": [f"v{i % 2}" for i in range(n)]})


def keys(uri: str, options: dict[str, str]) -> set[str]:
    parsed = TableUri.parse(uri)
    return {parsed.relative(o.key) for o in open_object_store(uri, storage_options=options).list(parsed.key(""))}


def test_spark_vacuum_deletes_what_the_in_process_vacuum_would(spark, s3_uri, storage_options):
    import deltalake

    write_table(s3_uri, rows(0), partition_by=["p"], storage_options=storage_options)
    write_table(s3_uri, rows(100), storage_options=storage_options)
    write_table(s3_uri, rows(200), mode="overwrite", storage_options=storage_options)  # tombstones
    write_table(s3_uri, rows(300), storage_options=storage_options)
    objects = open_object_store(s3_uri, storage_options=storage_options)
    uri = TableUri.parse(s3_uri)
    for relative in ["orphan-a.parquet", "orphan-b.parquet", "orphan-c.parquet", "zz-orphan.parquet",
                     "p=v0/part-orphan.parquet", "_change_data/cdc-old.parquet", "_tmp/hidden.parquet",
                     ".hidden", "nested/_delta_log/00000000000000000000.json", "nested/part-0.parquet"]:
        objects.put(uri.key(relative), b"not referenced")
    table = Table(s3_uri, storage_options=storage_options)
    expected = vacuum(table, retention_hours=0, force=True, dry_run=True)
    assert expected.count >= 8  # 4 removed files + at least the orphans outside hidden paths and the nested table
    before = keys(s3_uri, storage_options)

    spark_table = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    dry = spark_table._vacuum(retention_hours=0, force=True, dry_run=True, range_files=2)
    assert dry == expected and keys(s3_uri, storage_options) == before
    done = spark_table._vacuum(retention_hours=0, force=True, dry_run=False, range_files=2, deletes_per_second=500)
    assert done.files == expected.files and done.nested_tables == ("nested",)
    assert done.kept_unreferenced == expected.kept_unreferenced
    assert keys(s3_uri, storage_options) == before - set(expected.files)
    assert {"_tmp/hidden.parquet", ".hidden", "nested/part-0.parquet"} <= keys(s3_uri, storage_options)

    ours = Table(s3_uri, storage_options=storage_options).to_pyarrow_table().sort_by("id")
    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options)).to_pyarrow_table()
    assert ours.num_rows == 12 and theirs.sort_by("id").select(ours.column_names).equals(ours)


def test_vacuum_refuses_a_retention_under_the_tables_and_returns_the_deleted_files(spark, s3_uri, storage_options,
                                                                                   capsys):
    write_table(s3_uri, rows(0), storage_options=storage_options)
    write_table(s3_uri, rows(10), mode="overwrite", storage_options=storage_options,
                configuration=None)
    spark_table = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    with pytest.raises(InvalidArgumentError, match="a retention of 0 h is under the table's 168 h"):
        spark_table.vacuum(0)
    frame = spark_table.vacuum()  # 7 days: the removed file is too young to go
    assert frame.columns == ["path", "size", "modificationTime"] and frame.count() == 0
    assert Table(s3_uri, storage_options=storage_options).to_pyarrow_table().num_rows == 6

    # The command line: `dynacommit vacuum --spark` deletes what the in-process dry run names, in the
    # process's active session (kept afterwards).
    expected = vacuum(Table(s3_uri, storage_options=storage_options), retention_hours=0, force=True, dry_run=True)
    assert expected.count == 1
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    assert main(["vacuum", s3_uri, "--spark", "--retention-hours", "0", "--force", "--execute", "--json", *flags]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["dryRun"] is False and [f["path"] for f in document["files"]] == list(expected.files)
    assert not keys(s3_uri, storage_options) & set(expected.files)
    assert Table(s3_uri, storage_options=storage_options).to_pyarrow_table().num_rows == 6
    assert spark.range(1).count() == 1  # the test session is still there
    assert main(["vacuum", s3_uri, "--master", "spark://127.0.0.1:1", *flags]) == EXIT_ERROR  # no --spark


def test_a_token_bucket_paces_takes_to_its_rate():
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    bucket = TokenBucket(rate=1000, capacity=1000, clock=lambda: now[0], sleep=sleep)
    waits = [bucket.take(1000) for _ in range(4)]
    assert waits == [0.0, 1.0, 1.0, 1.0] and now[0] == 3.0
    now[0] += 0.25
    assert bucket.take(500) == 0.25  # 250 saved up, 250 more to wait for
