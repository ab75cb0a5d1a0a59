"""replaceWhere on Spark (issue 25, item 3): ``df.write.format("dynacommit").mode("overwrite").option(
"replaceWhere", ...)`` and ``write_dataframe(..., replace_where=...)`` run the plan the Python
``write_table(..., predicate=...)`` runs (:mod:`table.operations.replace_where`), the tasks checking and
staging the rows. The expectation is independent of the Spark path: the same overwrite through Python on a
twin table, and deltalake reading both; the rows are also computed by hand.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from spark_integration import register, write_dataframe
from table import Table, write_table
from tests.support.versions import make_versioned_bucket, table_uri, trace

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUCKET = "dynacommit-spark-replace-where"
SCHEMA = "id bigint, day string, v double"


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


@pytest.fixture(scope="module")
def bucket(local_stack) -> str:
    make_versioned_bucket(local_stack, BUCKET)
    return BUCKET


def start(uri: str, options: dict[str, str], configuration: dict[str, str] | None = None) -> None:
    rows = pa.table({"id": pa.array(range(12), pa.int64()), "day": [f"d{i % 3}" for i in range(12)],
                     "v": [float(i) for i in range(12)]})
    write_table(uri, rows, partition_by=["day"], storage_options=options, configuration=configuration)


def replacement(spark, ids: list[int], day: str):
    return spark.createDataFrame([(i, day, 100.0 + i) for i in ids], SCHEMA).repartition(2)


def rows_of(uri: str, options: dict[str, str]) -> list[tuple]:
    data = QueryBuilder().register("t", DeltaTable(uri, storage_options=options)).execute(
        "SELECT id, day, v FROM t").read_all()
    return sorted(zip(data.column("id").to_pylist(), data.column("day").to_pylist(), data.column("v").to_pylist()))


@pytest.mark.parametrize("predicate, ids, day, configuration", [
    ("day = 'd1'", [1, 4, 50], "d1", None),                                     # partitions only: files removed
    ("id < 6 AND day = 'd0'", [0, 3], "d0", {"delta.enableChangeDataFeed": "true"}),  # rows rewritten, CDF
    ("v >= 9", [20, 21], "d2", {"delta.enableDeletionVectors": "true"}),       # deletion vectors
], ids=["partition", "rows-with-change-data", "deletion-vectors"])
def test_spark_replace_where_replaces_what_the_python_one_replaces(spark, bucket, storage_options, predicate, ids,
                                                                   day, configuration):
    ours, twin = table_uri(bucket), table_uri(bucket)
    start(ours, storage_options, configuration)
    start(twin, storage_options, configuration)
    df = replacement(spark, ids, day)

    df.write.format("dynacommit").mode("overwrite").option("replaceWhere", predicate) \
        .options(**storage_options).save(ours)
    write_table(twin, pa.Table.from_pandas(df.toPandas(), preserve_index=False), mode="overwrite",
                predicate=predicate, storage_options=storage_options)

    # By hand: the rows the predicate does not select stay, the data's rows are added.
    before = [(i, f"d{i % 3}", float(i)) for i in range(12)]
    kept = [r for r in before if not _selects(predicate, r)]
    expected = sorted(kept + [(i, day, 100.0 + i) for i in ids])
    assert rows_of(ours, storage_options) == expected
    assert rows_of(twin, storage_options) == expected

    ours_table, twin_table = Table(ours, storage_options=storage_options), Table(twin, storage_options=storage_options)
    entry = ours_table.history(1)[0]
    assert entry.operation == "WRITE"
    assert json.loads(entry.operation_parameters["predicate"]) == [predicate]
    assert entry.operation_parameters["mode"] == "Overwrite"
    for metric in ("numOutputRows", "numDeletedRows", "numRemovedFiles"):
        assert entry.operation_metrics.get(metric) == twin_table.history(1)[0].operation_metrics.get(metric), metric
    # The same kind of actions: deletion vectors where the Python plan gives them, change data where it writes it.
    assert _kinds(ours_table) == _kinds(twin_table)
    if configuration and "delta.enableChangeDataFeed" in configuration:
        assert _changes(ours_table) == _changes(twin_table)


def test_write_dataframe_replace_where_and_a_row_outside_the_predicate_leaves_nothing(spark, bucket, storage_options):
    uri = table_uri(bucket)
    start(uri, storage_options)
    result = write_dataframe(replacement(spark, [7, 8], "d2"), uri, mode="overwrite", replace_where="day = 'd2'",
                             storage_options=storage_options)
    assert result.version == 1
    assert rows_of(uri, storage_options) == sorted(
        [(i, f"d{i % 3}", float(i)) for i in range(12) if i % 3 != 2] + [(7, "d2", 107.0), (8, "d2", 108.0)])

    before = trace(uri, storage_options)
    outside = spark.createDataFrame([(30, "d2", 1.0), (31, "d0", 2.0)], SCHEMA).repartition(2)
    with pytest.raises(Exception, match="does not select") as raised:
        outside.write.format("dynacommit").mode("overwrite").option("replaceWhere", "day = 'd2'") \
            .options(**storage_options).save(uri)
    assert "31" in str(raised.value)
    assert Table(uri, storage_options=storage_options).version == 1
    left = trace(uri, storage_options).since(before)
    assert left.empty, f"the refused replaceWhere left traces in the versioned bucket: {left}"


def test_spark_replace_where_refuses_bad_uses_before_any_task(spark, bucket, storage_options):
    uri = table_uri(bucket)
    df = replacement(spark, [1], "d1")
    with pytest.raises(Exception, match="no table at"):
        df.write.format("dynacommit").mode("overwrite").option("replaceWhere", "day = 'd1'") \
            .options(**storage_options).save(uri)
    start(uri, storage_options)
    with pytest.raises(Exception, match=r"needs \.mode\('overwrite'\)"):
        df.write.format("dynacommit").mode("append").option("replaceWhere", "day = 'd1'") \
            .options(**storage_options).save(uri)
    with pytest.raises(Exception, match="partitionOverwriteMode"):
        df.write.format("dynacommit").mode("overwrite").option("replaceWhere", "day = 'd1'") \
            .option("partitionOverwriteMode", "dynamic").options(**storage_options).save(uri)
    with pytest.raises(Exception, match="replaceWhere predicate"):
        df.write.format("dynacommit").mode("overwrite").option("replaceWhere", "nope = 1") \
            .options(**storage_options).save(uri)
    assert Table(uri, storage_options=storage_options).version == 0


def _selects(predicate: str, row: tuple) -> bool:
    id_, day, v = row
    return {"day = 'd1'": day == "d1", "id < 6 AND day = 'd0'": id_ < 6 and day == "d0", "v >= 9": v >= 9}[predicate]


def _kinds(table: Table) -> dict[str, object]:
    """What the newest commit did: whether it added files with a deletion vector, plain files and change
    data, and how many files it removed (Spark's tasks each write their own files: their count differs)."""
    actions = [json.loads(line) for line in table.log_store.read(table.version).splitlines() if line.strip()]
    adds = [a["add"] for a in actions if "add" in a]
    return {"with_dv": any(a.get("deletionVector") for a in adds), "plain": any(not a.get("deletionVector")
            for a in adds), "cdc": any("cdc" in a for a in actions), "removes": sum(1 for a in actions if "remove" in a)}


def _changes(table: Table) -> list[tuple]:
    feed = table.load_cdf(starting_version=table.version, ending_version=table.version).read_all()
    return sorted(zip(feed.column("id").to_pylist(), feed.column("_change_type").to_pylist()))
