"""The Spark DML and the Python DML run the same plan: the same MERGE, UPDATE or DELETE on copies of one
table leaves the same rows, the same protocol and schema (column ids included) and the same kind of
actions; deltalake reads both tables alike.
"""

from __future__ import annotations

import datetime
import json
import sys

import deltalake
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from spark_integration import DynacommitTable
from table import Table, write_table
from table.log.protocol import needed_features

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BASE = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": pa.array([1.0, 2.0, 3.0, 4.0])})
SEEN = [datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.datetime(2025, 6, 7, 8, 9, 10)]
WIDER = pa.table({"id": pa.array([2, 9], pa.int64()), "v": pa.array([-2.0, -9.0]),
                  "seen": pa.array(SEEN, pa.timestamp("us"))})
WIDER_DDL = "id long, v double, seen timestamp_ntz"


def deltalake_options(storage_options: dict[str, str]) -> dict[str, str]:
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def deltalake_rows(uri: str, options: dict[str, str]) -> list[dict]:
    """The table as deltalake's SQL engine reads it (its pyarrow reader refuses column mapping and deletion
    vectors; the SQL engine, delta-kernel underneath, reads both)."""
    table = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
    read = pa.RecordBatchReader.from_stream(
        deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t")).read_all()
    return sorted(read.to_pylist(), key=lambda r: r["id"])


def our_rows(uri: str, options: dict[str, str]) -> list[dict]:
    return sorted(Table(uri, storage_options=options).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def ids_of(schema_string: str) -> dict[str, int | None]:
    return {f["name"]: f["metadata"].get("delta.columnMapping.id") for f in json.loads(schema_string)["fields"]}


def copies(s3_uri: str, options: dict[str, str], **configuration) -> tuple[str, str]:
    """Two tables with the same rows and properties: one for the Spark DML, one for the Python DML."""
    spark_uri, python_uri = s3_uri, s3_uri + "-python"
    for uri in (spark_uri, python_uri):
        write_table(uri, BASE, storage_options=options, configuration=configuration or None)
    return spark_uri, python_uri


def evolve_both(spark, spark_uri: str, python_uri: str, options: dict[str, str]) -> None:
    source = spark.createDataFrame([tuple(r.values()) for r in WIDER.to_pylist()], WIDER_DDL).alias("s")
    DynacommitTable.forPath(spark, spark_uri, options).alias("t").merge(source, "t.id = s.id") \
        .withSchemaEvolution().whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    Table(python_uri, storage_options=options).merge(WIDER, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()


def test_a_merge_adding_a_timestamp_ntz_column_upgrades_the_protocol_as_the_python_merge_does(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = copies(s3_uri, storage_options)
    evolve_both(spark, spark_uri, python_uri, storage_options)
    ours, theirs = Table(spark_uri, storage_options=storage_options), Table(python_uri, storage_options=storage_options)
    reader, writer = needed_features(ours.snapshot.metadata.schema_string, ours.snapshot.metadata.configuration)
    assert "timestampNtz" in reader and "timestampNtz" in writer
    protocol = ours.snapshot.protocol
    assert protocol.min_reader_version == 3 and protocol.min_writer_version == 7
    assert "timestampNtz" in protocol.reader_features and "timestampNtz" in protocol.writer_features
    assert protocol == theirs.snapshot.protocol
    assert ours.snapshot.metadata.schema_string == theirs.snapshot.metadata.schema_string
    expected = [{"id": 1, "v": 1.0, "seen": None}, {"id": 2, "v": -2.0, "seen": SEEN[0]},
                {"id": 3, "v": 3.0, "seen": None}, {"id": 4, "v": 4.0, "seen": None},
                {"id": 9, "v": -9.0, "seen": SEEN[1]}]
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options) == expected
    assert deltalake_rows(spark_uri, storage_options) == deltalake_rows(python_uri, storage_options) == expected


def test_a_merge_evolving_a_column_mapped_table_assigns_column_ids_as_the_python_merge_does(
        spark, s3_uri, storage_options):
    spark_uri, python_uri = copies(s3_uri, storage_options, **{"delta.columnMapping.mode": "name"})
    evolve_both(spark, spark_uri, python_uri, storage_options)
    ours, theirs = Table(spark_uri, storage_options=storage_options), Table(python_uri, storage_options=storage_options)
    assert ids_of(ours.snapshot.metadata.schema_string) == ids_of(theirs.snapshot.metadata.schema_string) == \
        {"id": 1, "v": 2, "seen": 3}
    assert ours.snapshot.metadata.configuration["delta.columnMapping.maxColumnId"] == "3"
    assert ours.snapshot.protocol == theirs.snapshot.protocol
    assert "timestampNtz" in ours.snapshot.protocol.writer_features
    assert "columnMapping" in ours.snapshot.protocol.writer_features
    assert our_rows(spark_uri, storage_options) == our_rows(python_uri, storage_options)
    assert deltalake_rows(spark_uri, storage_options) == deltalake_rows(python_uri, storage_options) == \
        our_rows(python_uri, storage_options)
