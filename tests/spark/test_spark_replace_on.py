"""replaceOn / replaceUsing on Spark (issue 25, item 3): ``df.write.format("dynacommit").mode("overwrite")
.option("replaceOn" | "replaceUsing", ...)`` and ``write_dataframe(..., replace_on= | replace_using=)`` run the
plan ``write_table`` runs (:mod:`table.operations.replace_on`): the tasks stage the rows and send back the
values the condition reads, the driver commits the DELETE part and the rows at once. The expectation is
DuckDB's (the target rows no data row matches, then the data), read back through deltalake.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from logstore.errors import InvalidArgumentError
from spark_integration import register, write_dataframe
from table import Table, write_table
from tests.support.versions import make_versioned_bucket, table_uri

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUCKET = "dynacommit-spark-replace-on"
SCHEMA = "id bigint, day string, v double"


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


@pytest.fixture(scope="module")
def bucket(local_stack) -> str:
    make_versioned_bucket(local_stack, BUCKET)
    return BUCKET


def start(uri: str, options: dict[str, str], configuration: dict[str, str] | None = None) -> pa.Table:
    rows = pa.table({"id": pa.array([*range(8), None], pa.int64()), "day": [f"d{i % 2}" for i in range(9)],
                     "v": [float(i) for i in range(9)]})
    write_table(uri, rows, partition_by=["day"], storage_options=options, configuration=configuration)
    return rows


def rows_of(uri: str, options: dict[str, str]) -> list[tuple]:
    data = QueryBuilder().register("t", DeltaTable(uri, storage_options=options)).execute(
        "SELECT id, day, v FROM t").read_all()
    return sorted(zip(data.column("id").to_pylist(), data.column("day").to_pylist(), data.column("v").to_pylist()),
                  key=repr)


def expected(target: pa.Table, data: pa.Table, condition: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("target_rows", target)
    con.register("data_rows", data)
    kept = con.sql(f"SELECT id, day, v FROM target_rows AS t WHERE NOT EXISTS "
                   f"(SELECT 1 FROM data_rows AS s WHERE {condition})").to_arrow_table()
    both = pa.concat_tables([kept.cast(data.schema), data.select(["id", "day", "v"])])
    return sorted(zip(*(both.column(c).to_pylist() for c in ("id", "day", "v"))), key=repr)


def test_spark_replace_on_and_replace_using_replace_the_matching_rows(spark, bucket, storage_options):
    ours = table_uri(bucket)
    base = start(ours, storage_options, {"delta.enableDeletionVectors": "true"})
    df = spark.createDataFrame([(2, "d0", 102.0), (None, "d1", 100.0), (20, "d0", 120.0)], SCHEMA).repartition(2)
    data = pa.Table.from_pandas(df.toPandas(), preserve_index=False).cast(base.schema)

    df.write.format("dynacommit").mode("overwrite").option("replaceOn", "t.id <=> s.id") \
        .option("targetAlias", "t").option("sourceAlias", "s").options(**storage_options).save(ours)
    want = expected(base, data, "t.id IS NOT DISTINCT FROM s.id")
    assert rows_of(ours, storage_options) == want
    table = Table(ours, storage_options=storage_options)
    entry = table.history(1)[0]
    assert entry.operation == "WRITE" and entry.operation_parameters["replaceOnCond"] == "t.id <=> s.id"
    assert entry.operation_metrics["numDeletedRows"] == "2" and entry.operation_metrics["numOutputRows"] == "3"

    after = table.to_pyarrow_table().select(["id", "day", "v"])
    more = spark.createDataFrame([(7, "d1", 7.5), (30, "d1", 30.0)], SCHEMA)
    write_dataframe(more, ours, mode="overwrite", replace_using=["id", "day"], storage_options=storage_options)
    more_rows = pa.Table.from_pandas(more.toPandas(), preserve_index=False).cast(base.schema)
    assert rows_of(ours, storage_options) == expected(after, more_rows, "t.id = s.id AND t.day = s.day")
    assert Table(ours, storage_options=storage_options).history(1)[0].operation_parameters["replaceUsingCols"] == \
        "(id, day)"


def test_spark_replace_on_refuses_bad_uses_before_any_task(spark, bucket, storage_options):
    ours = table_uri(bucket)
    start(ours, storage_options)
    df = spark.createDataFrame([(1, "d1", 1.0)], SCHEMA)
    with pytest.raises(Exception, match="needs .mode\\('overwrite'\\)"):
        df.write.format("dynacommit").mode("append").option("replaceUsing", "id").options(**storage_options).save(ours)
    with pytest.raises(InvalidArgumentError, match="which the data does not have"):
        write_dataframe(df.drop("v"), ours, mode="overwrite", replace_using="v", storage_options=storage_options)
    assert Table(ours, storage_options=storage_options).version == 0
