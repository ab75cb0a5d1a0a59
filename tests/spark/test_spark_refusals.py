"""On Spark, a refused write is refused on the driver before any task runs (issue 27): batch writes
(``df.write.format("dynacommit")`` and ``write_dataframe``), a streaming micro-batch and a row-level
operation. The bucket has versioning on, so a file uploaded by a task and deleted again at commit
would still show as an object version and a delete marker: the tests look, and find none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_integration import DynacommitTable, register, write_dataframe
from table import AppendOnlyError, Table, write_table
from tests.support.versions import make_versioned_bucket, raw_table, table_uri, trace

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUCKET = "dynacommit-spark-refusals"
ICEBERG = {"delta.enableIcebergCompatV2": "true"}  # without the column mapping it requires: not writable


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register(spark)


@pytest.fixture(scope="module")
def bucket(local_stack) -> str:
    make_versioned_bucket(local_stack, BUCKET)
    return BUCKET


@pytest.fixture
def uri(bucket) -> str:
    return table_uri(bucket)


def frame(spark, *values: int):
    return spark.createDataFrame([(v,) for v in values], "n bigint").repartition(2)


def assert_nothing_left(uri: str, options: dict[str, str], before) -> None:
    left = trace(uri, options).since(before)
    assert left.empty, f"the refused write left traces in the versioned bucket: {left}"


def test_a_batch_write_to_a_table_with_a_refused_feature_fails_before_its_tasks_run(spark, uri, storage_options):
    raw_table(uri, storage_options, writer=["icebergCompatV2"], configuration=ICEBERG)
    before = trace(uri, storage_options)
    with pytest.raises(Exception, match="icebergCompatV2") as raised:
        frame(spark, 1, 2, 3, 4).write.format("dynacommit").mode("append").options(**storage_options).save(uri)
    assert "UnsupportedFeatureError" in f"{type(raised.value).__name__} {raised.value}"
    assert_nothing_left(uri, storage_options, before)
    assert Table(uri, storage_options=storage_options).version == 0


def test_write_dataframe_overwriting_an_append_only_table_fails_before_its_tasks_run(spark, uri, storage_options):
    import pyarrow as pa

    write_table(uri, pa.table({"n": pa.array([1, 2], pa.int64())}), configuration={"delta.appendOnly": "true"},
                storage_options=storage_options)
    before = trace(uri, storage_options)
    with pytest.raises(AppendOnlyError, match="delta.appendOnly=true.*nothing was written"):
        write_dataframe(frame(spark, 3, 4), uri, mode="overwrite", storage_options=storage_options)
    assert_nothing_left(uri, storage_options, before)
    assert sorted(Table(uri, storage_options=storage_options).to_pyarrow_table()["n"].to_pylist()) == [1, 2]


def test_a_spark_delete_on_an_append_only_table_fails_before_its_jobs_run(spark, uri, storage_options):
    import pyarrow as pa

    write_table(uri, pa.table({"n": pa.array([1, 2, 3], pa.int64())}), configuration={"delta.appendOnly": "true"},
                storage_options=storage_options)
    before = trace(uri, storage_options)
    table = DynacommitTable.forPath(spark, uri, storage_options=storage_options)
    with pytest.raises(AppendOnlyError, match="delta.appendOnly=true.*nothing was written"):
        table.delete("n = 1")
    with pytest.raises(AppendOnlyError, match="delta.appendOnly=true"):
        table.update("n = 2", {"n": "n + 10"})
    assert_nothing_left(uri, storage_options, before)
    assert Table(uri, storage_options=storage_options).version == 0


def test_a_stream_into_a_table_with_a_refused_feature_fails_before_its_first_batch_uploads(
        spark, uri, storage_options, tmp_path):
    raw_table(uri, storage_options, writer=["icebergCompatV2"], configuration=ICEBERG)
    source = tmp_path / "in"
    source.mkdir()
    Path(source / "part-00000.json").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(6)))
    before = trace(uri, storage_options)
    with pytest.raises(Exception, match="icebergCompatV2"):
        query = (spark.readStream.schema("n bigint").json(str(source)).writeStream.format("dynacommit")
                 .options(**storage_options).option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start(uri))
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
    assert_nothing_left(uri, storage_options, before)
    assert Table(uri, storage_options=storage_options).version == 0
