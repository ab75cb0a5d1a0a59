"""OPTIMIZE on Spark (``DynacommitTable.optimize()``, ``dynacommit optimize --spark``): the same plan, files
and rows as the in-process OPTIMIZE, one commit with ``dataChange=false``, nothing visible after a failure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from logstore.errors import InvalidArgumentError
from spark_integration import DynacommitTable
from table import Table, write_table
from table.cli import main
from tests.support.spark_hooks import spark_hooks
from table.data.files import filesystem_for
from table.data.read import files_dataset

CONFIGURATION = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}


def make_table(uri: str, options: dict[str, str]) -> pa.Table:
    """Six small files in two partitions, column mapped, one file with a deletion vector; its rows."""
    generator = np.random.default_rng(7)
    written = []
    for i in range(6):
        rows = pa.table({"id": np.arange(40) + 100 * i, "x": generator.integers(0, 1000, 40),
                         "y": generator.integers(0, 1000, 40), "p": ["ab"[i % 2]] * 40})
        write_table(uri, rows, partition_by=["p"], configuration=CONFIGURATION if i == 0 else None,
                    storage_options=options)
        written.append(rows)
    Table(uri, storage_options=options).delete("id < 20")
    everything = pa.concat_tables(written)
    return everything.filter(pa.compute.greater_equal(everything["id"], 20))


def by_id(rows: pa.Table) -> list[dict]:
    return sorted(rows.select(["id", "x", "y", "p"]).to_pylist(), key=lambda r: r["id"])


def files_of(uri: str, options: dict[str, str], *, ordered: bool = True) -> list[tuple[str, bool, list[int]]]:
    """Each live file as (partition, dataChange, its ids in file order, or sorted if not ``ordered``), read
    file by file."""
    table = Table(uri, storage_options=options)
    filesystem = filesystem_for(table.uri, table.storage_options)
    found = []
    for add in table.snapshot.files:
        rows = files_dataset(table.uri, table.schema, table.partition_columns, [add], filesystem,
                             layout=table.snapshot.layout).to_table()
        ids = rows["id"].to_pylist()
        found.append((rows["p"][0].as_py(), add.data_change, ids if ordered else sorted(ids)))
    return sorted(found)


def pending_uploads(uri: str, options: dict[str, str]) -> list:
    return open_object_store(uri, storage_options=options).list_uploads(TableUri.parse(uri).key(""))


def data_keys(uri: str, options: dict[str, str]) -> set[str]:
    parsed = TableUri.parse(uri)
    objects = open_object_store(uri, storage_options=options)
    return {o.key for o in objects.list(parsed.key("")) if "/_delta_log/" not in "/" + parsed.relative(o.key)}


def test_compaction_and_z_order_on_spark_write_the_files_the_in_process_optimize_writes(
        spark, s3_uri, storage_options):
    here, there = f"{s3_uri}-here", f"{s3_uri}-spark"
    expected = make_table(here, storage_options)
    make_table(there, storage_options)
    table = DynacommitTable.forPath(spark, there, storage_options)
    compacted = table.optimize().executeCompaction()
    Table(here, storage_options=storage_options).optimize()
    assert compacted.metrics["numRemovedFiles"] == "6" and compacted.metrics["numAddedFiles"] == "2"
    # the same rows in the same files; files of equal size are packed in path order, and paths hold job ids
    assert files_of(there, storage_options, ordered=False) == files_of(here, storage_options, ordered=False)
    clustered = table.optimize().executeZOrderBy("x", "y")
    Table(here, storage_options=storage_options).optimize(z_order=["x", "y"])
    assert clustered.version == 8 and clustered.metrics["numRemovedFiles"] == "2"
    assert files_of(there, storage_options) == files_of(here, storage_options)
    assert all(not changed for _, changed, _ in files_of(there, storage_options))
    assert by_id(Table(there, storage_options=storage_options).to_pyarrow_table()) == by_id(expected)
    entry = Table(there, storage_options=storage_options).history(limit=1)[0]
    assert (entry.operation, entry.operation_parameters["zOrderBy"]) == ("OPTIMIZE", '["x","y"]')
    assert pending_uploads(there, storage_options) == []


def test_where_picks_partitions_and_refuses_a_data_column(spark, s3_uri, storage_options):
    expected = make_table(s3_uri, storage_options)
    table = DynacommitTable.forPath(spark, s3_uri, storage_options)
    with pytest.raises(InvalidArgumentError, match="must name partition columns only"):
        table.optimize().where("x > 5").executeCompaction()
    result = table.optimize().where("p = 'b'").executeZOrderBy(["y"])
    assert result.metrics["numRemovedFiles"] == "3"
    after = Table(s3_uri, storage_options=storage_options)
    assert sorted(f.partition_values[after.snapshot.layout.physical_name("p")] for f in after.snapshot.files) == \
        ["a", "a", "a", "b"]
    assert json.loads(after.history(limit=1)[0].operation_parameters["predicate"]) == ["p = 'b'"]
    assert by_id(after.to_pyarrow_table()) == by_id(expected)


class FailFirstAttempt:
    """Attempt 0 of bin task 0 fails after staging; it records what it staged first."""

    def __init__(self, marker_dir: Path):
        self.marker_dir = str(marker_dir)

    def __call__(self, task, pending):
        if pending.task_id == 0 and pending.attempt_id == 0:
            Path(self.marker_dir, "failed.json").write_text(pending.model_dump_json())
            raise RuntimeError("injected failure after staging")


def test_a_task_failing_after_staging_is_retried_and_the_optimize_lands_once(spark, s3_uri, storage_options,
                                                                             tmp_path):
    expected = make_table(s3_uri, storage_options)
    builder = DynacommitTable.forPath(spark, s3_uri, storage_options).optimize()
    with spark_hooks(task=FailFirstAttempt(tmp_path)):
        result = builder.executeZOrderBy("x")
    assert json.loads((tmp_path / "failed.json").read_text())["files"], "the failed attempt had staged a file"
    assert result.metrics["numAddedFiles"] == "2"
    after = Table(s3_uri, storage_options=storage_options)
    assert len(after.snapshot.files) == 2 and by_id(after.to_pyarrow_table()) == by_id(expected)
    assert pending_uploads(s3_uri, storage_options) == []


def test_a_driver_failing_after_staging_commits_nothing_and_uploads_abort_clears_what_it_staged(
        spark, s3_uri, storage_options):
    make_table(s3_uri, storage_options)
    keys = data_keys(s3_uri, storage_options)

    class DriverDied(BaseException):
        """The driver stopping between staging and the commit (as a kill would, but in this process)."""

    def crash() -> None:
        raise DriverDied()

    builder = DynacommitTable.forPath(spark, s3_uri, storage_options).optimize()
    with pytest.raises(DriverDied):
        with spark_hooks(staged=crash):
            builder.executeCompaction()
    assert Table(s3_uri, storage_options=storage_options).version == 6
    assert data_keys(s3_uri, storage_options) == keys, "nothing was completed"
    assert pending_uploads(s3_uri, storage_options), "the staged files are incomplete uploads"
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    assert main(["uploads", "abort", s3_uri, "--older-than-hours", "0", "--execute", *flags]) == 0
    assert pending_uploads(s3_uri, storage_options) == []


def test_the_optimize_command_runs_on_spark(spark, s3_uri, storage_options, capsys):
    expected = make_table(s3_uri, storage_options)
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    assert main(["optimize", s3_uri, "--spark", "--zorder-by", "x", "--json", "--execute", *flags]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["filesRemoved"], document["filesAdded"], document["zOrderBy"]) == (6, 2, ["x"])
    assert by_id(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()) == by_id(expected)
    assert spark.range(1).count() == 1  # the test session is still there
