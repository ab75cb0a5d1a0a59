"""The table's rules on rows in Spark's tasks: CHECK constraints on a batch append, a streaming micro-batch
and a MERGE (rewritten rows and inserts), identity values handed out by several tasks, DynacommitTable's
addConstraint / dropConstraint."""

from __future__ import annotations

import pyarrow as pa
import pytest

from logstore import TableUri, open_object_store
from spark_integration import DynacommitTable, register, write_dataframe
from table import Table, write_table
from table.log.constraints import rules_of

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def data_files(uri: str, options: dict[str, str]) -> set[str]:
    table_uri = TableUri.parse(uri)
    return {o.key for o in open_object_store(table_uri, storage_options=options).list(table_uri.key(""))
            if "/_delta_log/" not in o.key}


def violation(error: BaseException) -> str:
    """The text of an error raised in a task, as Spark and the job commit pass it on."""
    return str(error)


def test_spark_writes_and_merges_enforce_check_constraints(spark, s3_uri, storage_options):
    write_table(s3_uri, pa.table({"id": pa.array([1, 2], pa.int64()), "amount": pa.array([10, 20], pa.int64())}),
                storage_options=storage_options)
    dt = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    dt.addConstraint("amount_positive", "amount > 0")
    files, version = data_files(s3_uri, storage_options), Table(s3_uri, storage_options=storage_options).version
    bad = spark.createDataFrame([(3, 5), (4, -1)], "id long, amount long").repartition(2)
    with pytest.raises(Exception) as caught:
        write_dataframe(bad, s3_uri, storage_options=storage_options)
    assert "CHECK constraint amount_positive (amount > 0) violated by row with values: id=4, amount=-1" in \
        violation(caught.value)
    register(spark)
    with pytest.raises(Exception) as caught:
        bad.write.format("dynacommit").mode("append").options(**storage_options).save(s3_uri)
    assert "amount_positive" in violation(caught.value)
    source = spark.createDataFrame([(2, -3), (9, -9)], "id long, amount long")
    # a rewrite task stages its inserted and its updated rows through one writer: one violating MERGE tells
    with pytest.raises(Exception) as caught:
        dt.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    assert "id=9, amount=-9" in violation(caught.value)
    assert Table(s3_uri, storage_options=storage_options).version == version
    assert data_files(s3_uri, storage_options) == files
    ok = spark.createDataFrame([(2, 7), (9, 9)], "id long, amount long")
    dt.alias("t").merge(ok.alias("s"), "t.id = s.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    dt.dropConstraint("amount_positive")
    write_dataframe(bad, s3_uri, storage_options=storage_options)
    got = sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "amount": 10}, {"id": 2, "amount": 7}, {"id": 3, "amount": 5}, {"id": 4, "amount": -1},
                   {"id": 9, "amount": 9}]


def test_identity_values_from_several_spark_tasks_are_distinct_and_move_the_mark(spark, s3_uri, storage_options):
    uri = s3_uri
    identity_table_on_s3(uri, storage_options)
    frame = spark.createDataFrame([(f"v{i}",) for i in range(40)], "v string").repartition(4)
    write_dataframe(frame, uri, storage_options=storage_options)
    register(spark)
    frame.write.format("dynacommit").mode("append").options(**storage_options).save(uri)
    table = Table(uri, storage_options=storage_options)
    ids = table.to_pyarrow_table().column("id").to_pylist()
    assert len(ids) == 80 and len(set(ids)) == 80 and min(ids) >= 1
    (identity,) = rules_of(table.snapshot.protocol, table.snapshot.metadata).identity
    assert identity.high_water_mark == max(ids)
    source = spark.createDataFrame([("v1",), ("new1",), ("new2",)], "v string").repartition(2)
    DynacommitTable.forPath(spark, uri, storage_options=storage_options).alias("t") \
        .merge(source.alias("s"), "t.v = s.v").whenNotMatchedInsertAll().execute()
    table = Table(uri, storage_options=storage_options)
    merged = table.to_pyarrow_table().to_pylist()
    new_ids = [r["id"] for r in merged if r["v"].startswith("new")]
    assert len(merged) == 82 and len({r["id"] for r in merged}) == 82
    assert min(new_ids) > identity.high_water_mark  # above the mark the appends left
    (moved,) = rules_of(table.snapshot.protocol, table.snapshot.metadata).identity
    assert moved.high_water_mark == max(new_ids)
    # as the Python MERGE and UPDATE plan them: no explicit identity values, no update of one
    explicit = spark.createDataFrame([(1000, "explicit")], "id long, v string")
    dt = DynacommitTable.forPath(spark, uri, storage_options=storage_options)
    with pytest.raises(ValueError, match=r"identity column 'id'.*insert"):
        dt.alias("t").merge(explicit.alias("s"), "t.v = s.v").whenNotMatchedInsertAll().execute()
    with pytest.raises(ValueError, match=r"identity column 'id'.*update"):
        dt.update(set={"id": "id + 1000"})
    assert Table(uri, storage_options=storage_options).version == table.version


def identity_table_on_s3(uri: str, options: dict[str, str]) -> None:
    import json
    import uuid

    from logstore import open_log_store
    from table.log.actions import Metadata, Protocol, serialize_commit

    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]})
    open_log_store(uri, storage_options=options).write(0, serialize_commit([
        Protocol(min_reader_version=1, min_writer_version=6),
        Metadata(id=str(uuid.uuid4()), schema_string=schema, configuration={}, created_time=1)]))


def test_a_streaming_micro_batch_gets_its_generated_column_and_fails_on_a_violation(spark, s3_uri, storage_options,
                                                                                    tmp_path):
    from tests.spark.test_spark_streaming import json_files, run_to_end, stream_into

    register(spark)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", pa.int32()),
                        pa.field("k10", pa.int64(), metadata={"delta.generationExpression": "k * 10"})])
    write_table(s3_uri, schema.empty_table(), storage_options=storage_options)
    Table(s3_uri, storage_options=storage_options).alter.add_constraint({"small": "id < 15"})
    source = json_files(tmp_path / "in", files=2, rows=10)
    with pytest.raises(Exception) as caught:
        run_to_end(stream_into(spark, source, s3_uri, tmp_path / "cp", storage_options))
    assert "CHECK constraint small (id < 15) violated by row with values: id=15" in str(caught.value)
    table = Table(s3_uri, storage_options=storage_options)
    assert sorted((r["id"], r["k10"]) for r in table.to_pyarrow_table().to_pylist()) == [
        (i, (i % 2) * 10) for i in range(10)]  # the first micro-batch committed, the second nothing


def test_a_spark_update_computes_the_generated_column_again_and_its_change_data_says_so(spark, s3_uri,
                                                                                      storage_options):
    schema = pa.schema([pa.field("n", pa.int64()),
                        pa.field("n2", pa.int64(), metadata={"delta.generationExpression": "n * 2"})])
    write_table(s3_uri, pa.table({"n": [1, 2], "n2": pa.nulls(2, pa.int64())}, schema=schema),
                configuration={"delta.enableChangeDataFeed": "true"}, storage_options=storage_options)
    DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options).update("n = 1", {"n": "n + 10"})
    table = Table(s3_uri, storage_options=storage_options)
    assert sorted((r["n"], r["n2"]) for r in table.to_pyarrow_table().to_pylist()) == [(2, 4), (11, 22)]
    changes = table.load_cdf(starting_version=1).read_all().to_pylist()
    assert sorted((c["_change_type"], c["n"], c["n2"]) for c in changes) == [
        ("update_postimage", 11, 22), ("update_preimage", 1, 2)]


def test_spark_appends_and_merge_inserts_write_column_defaults(spark, s3_uri, storage_options):
    """The rule of tests/unit/table/test_constraints.py on Spark: a batch append lacking the column, and a
    MERGE insert that does not assign it, write the column's default."""
    write_table(s3_uri, pa.table({"id": pa.array([1], pa.int64()), "status": ["given"]}), storage_options=storage_options)
    dt = DynacommitTable.forPath(spark, s3_uri, storage_options=storage_options)
    dt.setColumnDefault("status", "'new'")
    write_dataframe(spark.createDataFrame([(2,), (3,)], "id long").repartition(2), s3_uri,
                    storage_options=storage_options)
    source = spark.createDataFrame([(3,), (4,)], "id long")
    dt.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    got = sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "status": "given"}, {"id": 2, "status": "new"}, {"id": 3, "status": "new"},
                   {"id": 4, "status": "new"}]
