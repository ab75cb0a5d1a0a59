"""Schema changes on write, Delta's rules: ``schema_mode="merge"`` adds the data's new columns (nullable, at
the end, nested fields too) and widens byte/short/integer, and nothing else; ``schema_mode="overwrite"``
replaces schema and partitioning with an overwrite. An append that merges the schema does not conflict
with a concurrent plain append."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from table import InvalidArgumentError, SchemaMismatchError, Table, write_table
from table.log.schema import evolve_schema, schema_string
from tests.support.tables import with_rival


def schema(*fields) -> pa.Schema:
    return pa.schema(list(fields))


@pytest.mark.parametrize("table, data, expected, changes", [
    (schema(("a", pa.int64())), schema(("b", pa.string())), schema(("a", pa.int64()), ("b", pa.string())),
     ["added column 'b' (string)"]),
    (schema(("a", pa.int8()), ("c", pa.string())), schema(("a", pa.int32())),
     schema(("a", pa.int32()), ("c", pa.string())), ["widened column 'a' from byte to integer"]),
    (schema(("a", pa.int32())), schema(("a", pa.int16())), schema(("a", pa.int32())), []),
    (schema(("a", pa.int64())), schema(("a", pa.int32())), schema(("a", pa.int64())), []),
    (schema(("s", pa.struct([("x", pa.int64())]))), schema(("s", pa.struct([("x", pa.int64()), ("y", pa.bool_())]))),
     schema(("s", pa.struct([("x", pa.int64()), ("y", pa.bool_())]))), ["added column 's.y' (boolean)"]),
    (schema(pa.field("a", pa.int64(), nullable=False)), schema(("a", pa.int64()), ("n", pa.list_(pa.int64()))),
     schema(pa.field("a", pa.int64(), nullable=False), ("n", pa.list_(pa.int64()))),
     ["added column 'n' (array<long>)"]),
])
def test_merging_schemas_follows_deltas_rules(table, data, expected, changes):
    merged, found = evolve_schema(schema_string(table), data)
    assert json.dumps(merged, separators=(",", ":")) == schema_string(expected)
    assert found == changes


@pytest.mark.parametrize("table, data, complaint", [
    (schema(("a", pa.int32())), schema(("a", pa.int64())), "integer in the table and long in the data"),
    (schema(("a", pa.int64())), schema(("a", pa.string())), "long in the table and string"),
    (schema(("a", pa.float64())), schema(("a", pa.decimal128(10, 2))), "double in the table"),
    (schema(("a", pa.int64())), schema(("A", pa.string())), "differs only in case"),
])
def test_a_merge_cannot_change_a_column_type(table, data, complaint):
    with pytest.raises(SchemaMismatchError, match=complaint):
        evolve_schema(schema_string(table), data, table="t")


def test_append_with_schema_merge_adds_columns_and_fills_the_missing_with_nulls(memory_uri):
    write_table(memory_uri, pa.table({"id": pa.array([1, 2], pa.int16()), "v": [1.0, 2.0]}))
    with pytest.raises(SchemaMismatchError, match="schema_mode='merge'"):
        write_table(memory_uri, pa.table({"id": pa.array([3], pa.int32()), "x": ["new"]}))
    result = write_table(memory_uri, pa.table({"id": pa.array([3], pa.int32()), "x": ["new"]}), schema_mode="merge")
    table = Table(memory_uri)
    assert table.schema == schema(("id", pa.int32()), ("v", pa.float64()), ("x", pa.string()))
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1.0, "x": None}, {"id": 2, "v": 2.0, "x": None}, {"id": 3, "v": None, "x": "new"}]
    assert table.history(1)[0].operation_parameters["canMergeSchema"] == "true"
    assert result.version == 1
    write_table(memory_uri, pa.table({"id": pa.array([4], pa.int8())}), schema_mode="merge")  # nothing new
    assert Table(memory_uri).snapshot.metadata == table.snapshot.metadata


def test_overwrite_schema_replaces_columns_and_partitioning(memory_uri):
    write_table(memory_uri, pa.table({"id": [1, 2], "v": [1.0, 2.0]}))
    before = Table(memory_uri).snapshot.metadata
    write_table(memory_uri, pa.table({"k": ["a", "b"], "n": pa.array([1, 2], pa.int32())}), mode="overwrite",
                schema_mode="overwrite", partition_by=["k"])
    table = Table(memory_uri)
    assert table.schema == schema(("k", pa.string()), ("n", pa.int32())) and table.partition_columns == ["k"]
    assert table.snapshot.metadata.id == before.id and table.to_pyarrow_table().num_rows == 2
    assert table.history(1)[0].operation_parameters["canOverwriteSchema"] == "true"


def test_overwrite_schema_to_a_timestamp_ntz_column_upgrades_the_protocol(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}))
    write_table(memory_uri, pa.table({"at": pa.array([0], pa.timestamp("us"))}), mode="overwrite",
                schema_mode="overwrite")
    protocol = Table(memory_uri).snapshot.protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == ["timestampNtz"] and "timestampNtz" in protocol.writer_features


@pytest.mark.parametrize("kwargs, match", [
    ({"schema_mode": "overwrite"}, "needs mode='overwrite'"),
    ({"schema_mode": "overwrite", "mode": "overwrite", "partition_overwrite": "dynamic"}, "static"),
    ({"schema_mode": "replace"}, "schema_mode must be one of merge, overwrite"),
])
def test_schema_mode_arguments_are_checked(memory_uri, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        write_table(memory_uri, pa.table({"id": [1]}), **kwargs)


def test_a_schema_merging_append_does_not_conflict_with_a_concurrent_append(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}))
    result = with_rival(lambda: write_table(memory_uri, pa.table({"id": [2]})),
                        lambda: write_table(memory_uri, pa.table({"id": [3], "x": ["new"]}), schema_mode="merge"))
    assert result.version == 2 and result.metrics["numAttempts"] == "2"
    rows = sorted(Table(memory_uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "x": None}, {"id": 2, "x": None}, {"id": 3, "x": "new"}]


def test_a_schema_merging_append_conflicts_with_a_concurrent_schema_change(memory_uri):
    from table import CommitConflictError, ConflictKind

    write_table(memory_uri, pa.table({"id": [1]}))
    with pytest.raises(CommitConflictError) as caught:
        with_rival(lambda: write_table(memory_uri, pa.table({"id": [2], "y": [1.5]}), schema_mode="merge"),
                   lambda: write_table(memory_uri, pa.table({"id": [3], "x": ["new"]}), schema_mode="merge"))
    assert caught.value.kind is ConflictKind.METADATA_CHANGED
    table = Table(memory_uri)
    assert table.schema.names == ["id", "y"] and table.version == 1
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [1, 2]
