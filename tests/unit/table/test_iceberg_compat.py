"""IcebergCompatV1 / V2 (table.log.iceberg_compat): tables that have them are written as PROTOCOL.md requires,
and only the writes that would break a rule are refused. Evidence: a table delta-spark wrote with
IcebergCompatV2 (delta's golden table ``table-with-icebegCompatV2Enabled``: arrays, maps and structs with
nested ids), appended to here and read back by deltalake, our files' Parquet schema equal to Spark's."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from table import Table, UnsupportedFeatureError, write_table
from table.errors import DynacommitError
from tests.support.corpus import DATA, canonical, deltalake_rows, to_directory, to_memory

V2 = {"delta.enableIcebergCompatV2": "true", "delta.columnMapping.mode": "name"}
SPARK_TABLE = DATA / "delta" / "table-with-icebegCompatV2Enabled"


def new_files(before: Table, after: Table) -> list:
    old = {f.path for f in before.snapshot.files}
    return [f for f in after.snapshot.files if f.path not in old]


def field_ids(schema: pa.Schema) -> list[tuple[str, str]]:
    """Every field of a file's schema, nested ones included, with its Parquet field id."""
    found = []

    def walk(field: pa.Field, path: str) -> None:
        found.append((path, (field.metadata or {}).get(b"PARQUET:field_id", b"").decode()))
        t = field.type
        children = list(t) if pa.types.is_struct(t) else [t.key_field, t.item_field] if pa.types.is_map(t) \
            else [t.value_field] if pa.types.is_list(t) else []
        for child in children:
            walk(child, f"{path}.{child.name}")

    for top in schema:
        walk(top, top.name)
    return found


def parquet_of(table: Table, add) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(table.objects.get(table.uri.key(add.path))))


@pytest.mark.interop
def test_an_append_to_sparks_iceberg_compat_v2_table_writes_its_nested_field_ids(tmp_path):
    uri = to_memory(SPARK_TABLE)
    before = Table(uri)
    assert "icebergCompatV2" in before.protocol().writer_features
    rows = before.to_pyarrow_table()
    write_table(uri, rows.slice(0, 2))
    after = Table(uri)
    (added,) = new_files(before, after)
    assert json.loads(added.stats)["numRecords"] == 2
    spark_file = pq.ParquetFile(SPARK_TABLE / before.snapshot.files[0].path)
    # every field id, the ids of array elements and map keys and values among them, as Spark wrote them
    assert field_ids(parquet_of(after, added).schema_arrow) == field_ids(spark_file.schema_arrow)
    theirs = deltalake_rows(to_directory(after, tmp_path / "copy"))
    assert canonical(theirs) == canonical(after.to_pyarrow_table()) == canonical(pa.concat_tables([rows, rows.slice(0, 2)]))


@pytest.mark.interop
def test_a_partitioned_iceberg_compat_v2_table_materializes_partition_values_in_its_files(memory_uri, tmp_path):
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "day": ["a", "b", "a"]})
    write_table(memory_uri, data, partition_by=["day"], configuration=V2)
    table = Table(memory_uri)
    assert {"icebergCompatV2", "columnMapping"} <= set(table.protocol().writer_features)
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"]
                for f in json.loads(table.metadata().schema_string)["fields"]}
    for add in table.snapshot.files:
        content = parquet_of(table, add).read()
        assert content.column_names == [physical["id"], physical["day"]]  # the partition column last
        assert set(content.column(physical["day"]).to_pylist()) == {add.partition_values[physical["day"]]}
        assert json.loads(add.stats)["numRecords"] == content.num_rows
        assert physical["day"] not in json.loads(add.stats)["minValues"]  # statistics cover data columns only
    table.delete("id = 2")  # a rewrite writes its files the same way
    table = Table(memory_uri)
    assert all(parquet_of(table, a).schema_arrow.names[-1] == physical["day"] for a in table.snapshot.files)
    expected = [{"id": 1, "day": "a"}, {"id": 3, "day": "a"}]
    assert canonical(table.to_pyarrow_table()) == canonical(pa.Table.from_pylist(expected))
    assert canonical(deltalake_rows(to_directory(table, tmp_path / "copy"))) == canonical(pa.Table.from_pylist(expected))


def test_only_the_writes_that_break_a_rule_are_refused(memory_uri):
    with pytest.raises(UnsupportedFeatureError, match="requires column mapping in 'name' or 'id' mode") as caught:
        write_table(memory_uri, pa.table({"id": [1]}), configuration={"delta.enableIcebergCompatV2": "true"})
    assert caught.value.feature == "icebergCompatV2"
    with pytest.raises(UnsupportedFeatureError, match="'tags' has type array, which IcebergCompatV1 forbids"):
        write_table(memory_uri, pa.table({"id": [1], "tags": [["x"]]}),
                    configuration={"delta.enableIcebergCompatV1": "true", "delta.columnMapping.mode": "name"})
    with pytest.raises(UnsupportedFeatureError, match="IcebergCompatV2 requires one"):
        write_table(memory_uri, pa.table({"id": [1], "tags": [["x"]]}), configuration=V2)
    with pytest.raises(DynacommitError):
        Table(memory_uri).version  # nothing was created
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int32()), "day": ["a"]}), partition_by=["day"],
                configuration={**V2, "delta.enableTypeWidening": "true"})
    table = Table(memory_uri)
    with pytest.raises(UnsupportedFeatureError, match="deletion vectors are turned on"):
        table.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    with pytest.raises(UnsupportedFeatureError, match="partition columns \\['day'\\]"):
        write_table(memory_uri, pa.table({"id": pa.array([2], pa.int32()), "day": ["b"]}), mode="overwrite",
                    schema_mode="overwrite", partition_by=["id"])
    with pytest.raises(UnsupportedFeatureError, match="from 'integer' to 'double', a type change Iceberg cannot follow"):
        table.alter.change_column_type("id", "double")
    assert Table(memory_uri).version == 0
    write_table(memory_uri, pa.table({"id": pa.array([2], pa.int32()), "day": ["b"]}))  # what keeps the rules goes
    Table(memory_uri).alter.change_column_type("id", "long")  # Iceberg follows int to long
    assert Table(memory_uri).version == 2


def test_turning_it_on_for_a_table_with_files_is_refused(memory_uri):
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64())}), configuration={"delta.columnMapping.mode": "name"})
    with pytest.raises(ValueError, match="turn it on when creating the table, or with delta-spark"):
        Table(memory_uri).alter.set_table_properties({"delta.enableIcebergCompatV2": "true"})
    assert Table(memory_uri).version == 0
