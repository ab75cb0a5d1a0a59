"""The Spark committer's pieces that need no JVM: task-side staging and abort, driver-side selection,
schema conversion."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from logstore import StorageOptions, TableUri, open_object_store
from spark_integration.read import spark_schema
from spark_integration.write import StageTask, arrow_write_schema, select_pendingsets
from table import Table, write_table
from table.data.pendingset import PendingSet
from table.data.writespec import WriteSpec
from table.errors import SchemaMismatchError

SPARK_SCHEMA = StructType([
    StructField("id", LongType(), nullable=False),
    StructField("name", StringType()),
    StructField("p", IntegerType()),
])


def pendingset(task_id: int, attempt_id: int) -> PendingSet:
    return PendingSet(table_path="s3://b/t", job_id="job", task_id=task_id, attempt_id=attempt_id, files=[])


def test_select_keeps_the_first_pendingset_of_each_task_and_returns_the_rest_as_strays():
    first, duplicate, other = pendingset(0, 0), pendingset(0, 1), pendingset(1, 0)
    kept, strays = select_pendingsets([other, first, duplicate])
    assert kept == [first, other]
    assert strays == [duplicate]


def test_a_new_table_gets_nullable_columns_in_delta_types():
    schema = arrow_write_schema(SPARK_SCHEMA)
    assert schema == pa.schema([("id", pa.int64()), ("name", pa.string()), ("p", pa.int32())])
    assert all(f.nullable for f in schema)


def test_into_an_existing_table_a_dataframe_is_written_with_the_table_schema_and_other_types_are_refused(memory_uri):
    schema = pa.schema([pa.field("p", pa.int32()), pa.field("id", pa.int64(), nullable=False),
                        pa.field("name", pa.string())])
    write_table(memory_uri, pa.table({"p": [1], "id": [1], "name": ["a"]}, schema=schema))
    table = Table(memory_uri)
    plan = WriteSpec.of().plan(table, arrow_write_schema(SPARK_SCHEMA))
    assert plan.schema == table.schema and plan.schema.field("id").nullable is False
    other = StructType([StructField("id", LongType()), StructField("name", LongType()), StructField("p", IntegerType())])
    with pytest.raises(SchemaMismatchError, match="name"):
        WriteSpec.of().plan(table, arrow_write_schema(other))


def test_spark_schema_maps_delta_timestamps_and_keeps_nullability():
    schema = spark_schema(pa.schema([pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("ntz", pa.timestamp("us")),
                                     pa.field("d", pa.date32(), nullable=False)]))
    assert [(f.dataType, f.nullable) for f in schema] == [(TimestampType(), True), (TimestampNTZType(), True),
                                                           (DateType(), False)]


def test_stage_task_repr_names_the_job_but_not_the_options(local_stack):
    options = StorageOptions.resolve(local_stack.storage_options())
    task = StageTask(table_path="s3://b/t", options=options, schema=arrow_write_schema(SPARK_SCHEMA),
                     partition_by=(), job_id="j1")
    assert repr(task) == "StageTask(job=j1, table=s3://b/t)"
    assert options.secret_access_key not in repr(task)


def _failing_hook(task, pending):
    raise RuntimeError("injected after finish")


def _failing_source(first: pa.RecordBatch):
    yield first
    raise RuntimeError("injected while reading: the JVM side of the task failed")


@pytest.mark.parametrize("failure", ["after finish", "while writing", "while reading"])
def test_a_failing_task_aborts_its_own_uploads(s3_uri, storage_options, failure):
    """Task abort without the job's sweep: the task itself leaves no upload behind."""
    options = StorageOptions.resolve(storage_options)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("p", pa.int32())])
    task = StageTask(table_path=s3_uri, options=options, schema=schema, partition_by=("p",), job_id="j2",
                     hook=_failing_hook if failure == "after finish" else None)
    good = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"], "p": pa.array([0, 1], pa.int32())})
    bad = pa.record_batch({"id": pa.array([3, None], pa.int64()), "name": ["c", "d"],
                           "p": pa.array([0, 1], pa.int32())})
    batches = {"after finish": [good], "while writing": [good, bad], "while reading": _failing_source(good)}[failure]
    with pytest.raises((RuntimeError, SchemaMismatchError), match="injected|NOT NULL"):
        task.run(batches, task_id=0, attempt_id=0)
    uri = TableUri.parse(s3_uri)
    assert open_object_store(uri, storage_options=options).list_uploads(uri.key("")) == []


def test_public_names_are_pinned():
    import spark_integration

    assert spark_integration.__all__ == ["DynacommitDataSource", "DynacommitMergeBuilder", "DynacommitTable",
                                         "read_dataframe", "register", "write_dataframe"]
    assert spark_integration.DynacommitDataSource.name() == "dynacommit"


# --- the driver's commit returns once its entry is finished (issue 18, item 1) ---------------------


@pytest.mark.parametrize("path", ["batch", "streaming"])
def test_a_spark_commit_returns_with_its_entry_marked_complete(path, s3_uri, storage_options, local_stack):
    """A Spark driver's commit may be the last thing its Python process does (a Spark Connect server's
    data source runner, a forked worker that ends with ``os._exit``): it waits for its own UpdateItem,
    here held 2 s by the fault proxy, before it returns."""
    from pyspark.sql.types import LongType, StructField, StructType

    from logstore import open_log_store
    from spark_integration.datasource import DynacommitDataSource, StagedMessage
    from spark_integration.streaming import StreamMessage
    from tests.support.fault_harness import item_problems, table_items
    from tests.support.fault_proxy import FaultProxy, FaultRule

    write_table(s3_uri, pa.table({"id": pa.array([0], pa.int64())}), storage_options=storage_options)
    with FaultProxy(local_stack.endpoint, seed=18, slow_seconds=2.0) as proxy:
        options = proxy.storage_options(storage_options)
        extra = {} if path == "batch" else {"checkpointLocation": "/cp"}
        source = DynacommitDataSource({"path": s3_uri, **options, **extra})
        schema = StructType([StructField("id", LongType())])
        writer = source.writer(schema, False) if path == "batch" else source.streamWriter(schema, False)
        job_id = writer.job_id if path == "batch" else writer.job_id(0)
        task = StageTask(table_path=writer.table_path, options=writer.options.storage, schema=writer.job.schema,
                         partition_by=writer.job.partition_by, job_id=job_id)
        [pending] = task.run(pa.table({"id": pa.array([1, 2], pa.int64())}).to_batches(), task_id=0, attempt_id=0)
        proxy.set_faults([FaultRule("slow", 1.0, service="dynamodb", operation="UpdateItem")])
        if path == "batch":
            writer.commit([StagedMessage(pendingset=pending.model_dump_json())])
        else:
            writer.commit([StreamMessage(pendingset=pending.model_dump_json(), query_id="q", batch_id=0)], 0)
        items = table_items(open_log_store(s3_uri, storage_options=storage_options))
    assert len(items) == 2
    assert item_problems(items) == []
