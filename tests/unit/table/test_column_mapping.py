"""Column mapping (``delta.columnMapping.mode``): files hold physical names and Parquet field ids, the log
keys partition values and statistics by physical name, every API speaks logical names; RENAME COLUMN and
DROP COLUMNS change only the metadata; a table is switched to ``name`` mode without rewriting a file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table import InvalidArgumentError, Table, write_table
from table.log.column_mapping import ID, PHYSICAL
from tests.support.dml_reference import duckdb_merge, rows_of
from tests.unit.table.test_dml import MERGES, SOURCE, make_table, table_rows

NAME = {"delta.columnMapping.mode": "name"}


def fields(uri: str) -> list[dict]:
    return json.loads(Table(uri).snapshot.metadata.schema_string)["fields"]


def parquet_schema(uri: str) -> pa.Schema:
    table = Table(uri)
    add = table.add_actions()[0]
    return pq.read_schema(pa.BufferReader(table.objects.get(table.uri.key(add.path))))


def test_a_table_created_with_name_mode_writes_physical_names_and_field_ids(memory_uri):
    write_table(memory_uri, pa.table({"id": [1, 2], "p": ["a", "b"], "s": [{"x": 1}, None]}), partition_by=["p"],
                configuration=NAME)
    table = Table(memory_uri)
    protocol = table.snapshot.protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (2, 5)  # Delta's minimal protocol
    by_name = {f["name"]: f["metadata"] for f in fields(memory_uri)}
    assert [m[ID] for m in by_name.values()] == [1, 2, 3] and table.snapshot.configuration[
        "delta.columnMapping.maxColumnId"] == "4"  # s.x is 4
    physical = parquet_schema(memory_uri)
    assert physical.names == [by_name["id"][PHYSICAL], by_name["s"][PHYSICAL]]  # p is the partition column
    assert physical.field(0).metadata[b"PARQUET:field_id"] == b"1"
    add = table.add_actions()[0]
    assert set(add.partition_values) == {by_name["p"][PHYSICAL]}
    assert by_name["id"][PHYSICAL] in json.loads(add.stats)["minValues"]
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "p": "a", "s": {"x": 1}}, {"id": 2, "p": "b", "s": None}]
    assert table.to_pyarrow_table(columns=["s", "id"], filter=pc.field("id") > 1).to_pylist() == [
        {"s": None, "id": 2}]
    assert table.to_pyarrow_dataset().to_table(filter=pc.field("p") == "a").column("id").to_pylist() == [1]


def test_pruning_by_physical_statistics_and_partition_values(memory_uri, monkeypatch):
    from tests.unit.table.test_dml import data_reads

    make_table(memory_uri, partitioned=True, **NAME)
    reads = data_reads(monkeypatch, memory_uri)
    assert sorted(Table(memory_uri).to_pyarrow_table(filter=pc.field("id") >= 10)["id"].to_pylist()) == [10, 11]
    assert len(reads) == 2  # statistics rule out ids [0, 3] and [7, 9]; [4, 6] holds a null id too, so no range
    reads.clear()
    Table(memory_uri).to_pyarrow_table(filter=pc.field("p") == "b")
    assert len(reads) == 1


@pytest.mark.parametrize("name", sorted(MERGES))
def test_row_level_changes_on_a_mapped_table_leave_the_rows_duckdb_leaves(memory_uri, name):
    rows = make_table(memory_uri, partitioned=True, **NAME)
    spec = MERGES[name]
    spec.apply(Table(memory_uri).merge(SOURCE, spec.predicate)).execute()
    assert rows_of(table_rows(memory_uri)) == rows_of(duckdb_merge(rows, SOURCE, spec))
    Table(memory_uri).delete("id < 3")
    Table(memory_uri).update({"s": "upper(s)"}, predicate="p = 'a'")
    physical = {f["metadata"][PHYSICAL] for f in fields(memory_uri)}
    assert set(parquet_schema(memory_uri).names) <= physical


def test_schema_merge_gives_new_columns_new_ids(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}), configuration=NAME)
    write_table(memory_uri, pa.table({"id": [2], "extra": ["x"]}), schema_mode="merge")
    (_, extra) = fields(memory_uri)
    assert extra["metadata"][ID] == 2 and extra["metadata"][PHYSICAL].startswith("col-")
    assert Table(memory_uri).snapshot.configuration["delta.columnMapping.maxColumnId"] == "2"
    assert sorted(Table(memory_uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "extra": None}, {"id": 2, "extra": "x"}]


def test_switching_to_name_mode_keeps_every_file_and_renames_and_drops_cost_no_rewrite(memory_uri):
    write_table(memory_uri, pa.table({"id": [1, 2], "p": ["a", "b"], "s": [{"x": 1}, {"x": 2}]}), partition_by=["p"])
    table = Table(memory_uri)
    files = set(table.files())
    with pytest.raises(InvalidArgumentError, match="column mapping in 'name' mode"):
        table.alter.rename_column("id", "key")
    table.alter.set_table_properties(NAME)
    assert [f["metadata"][PHYSICAL] for f in fields(memory_uri)] == ["id", "p", "s"]  # the names the files use
    table.alter.rename_column("id", "key")
    table.alter.rename_column("s.x", "y")
    table.alter.rename_column("p", "part")
    write_table(memory_uri, pa.table({"key": [3], "part": ["c"], "s": [{"y": 3}]}))
    table.refresh().alter.drop_columns(["s"])
    table.refresh()
    assert set(table.files()) >= files  # no file was rewritten by the renames and the drop
    assert table.partition_columns == ["part"]
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["key"]) == [
        {"key": 1, "part": "a"}, {"key": 2, "part": "b"}, {"key": 3, "part": "c"}]
    assert Table(memory_uri, version=1).to_pyarrow_table().column_names == ["id", "p", "s"]  # time travel: old names
    table.alter.rename_column("key", "s")  # a dropped column's name is free again; its data is not read
    assert sorted(Table(memory_uri).to_pyarrow_table()["s"].to_pylist()) == [1, 2, 3]
    assert [h.operation for h in table.history(3)] == ["RENAME COLUMN", "DROP COLUMNS", "WRITE"]


@pytest.mark.parametrize("call, match", [
    (lambda t: t.alter.rename_column("nope", "x"), "no column 'nope'"),
    (lambda t: t.alter.rename_column("id", "P"), "already has a column 'P'"),
    (lambda t: t.alter.drop_columns("p"), "partition columns cannot be dropped"),
    (lambda t: t.alter.drop_columns(["id", "s"]), "without a data column"),
    (lambda t: t.alter.set_table_properties({"delta.columnMapping.mode": "none"}), "would need every file rewritten"),
    (lambda t: t.alter.set_table_properties({"delta.columnMapping.mode": "nope"}), "not one of none, name, id"),
])
def test_bad_schema_changes_are_refused_naming_the_problem(memory_uri, call, match):
    write_table(memory_uri, pa.table({"id": [1], "p": ["a"], "s": ["x"]}), partition_by=["p"], configuration=NAME)
    with pytest.raises(InvalidArgumentError, match=match):
        call(Table(memory_uri))
    assert Table(memory_uri).version == 0


def test_names_delta_refuses_without_mapping_are_fine_with_it(memory_uri):
    write_table(memory_uri, pa.table({"id": [1]}), configuration=NAME)
    Table(memory_uri).alter.add_columns(pa.field("total (eur), incl. tax", pa.float64()))
    write_table(memory_uri, pa.table({"id": [2], "total (eur), incl. tax": [9.5]}))
    assert sorted(Table(memory_uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "total (eur), incl. tax": None}, {"id": 2, "total (eur), incl. tax": 9.5}]
