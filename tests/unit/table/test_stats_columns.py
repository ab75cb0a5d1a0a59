"""``delta.dataSkippingStatsColumns``: statistics for the listed columns only (nested fields, column mapping:
logical names in the property, physical names in the stats), a reader treating the other columns as unknown,
Z-order and ALTER following the property. Bounds are checked against pyarrow's min/max of the rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from logstore.errors import InvalidArgumentError
from table.data.read import prune_files
from table.data.stats import compute_stats
from table.data.write import write_table
from table.log import properties
from table.log.properties import format_column_list, parse_column_list
from table.table import Table


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i:05d}" for i in ids]),
        "s": pa.array([{"c": i * 2, "d": f"d{i}", "e": float(i)} for i in ids],
                      pa.struct([("c", pa.int64()), ("d", pa.string()), ("e", pa.float64())])),
        "x": pa.array([i / 3 for i in ids], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in ids]),
    })


def stats_of(uri: str) -> list[dict]:
    return [json.loads(f.stats) for f in Table(uri).snapshot.files]


def test_the_property_is_parsed_as_spark_parses_column_lists():
    assert parse_column_list("a, b.c ,`d.e`,`f``g`.h") == (("a",), ("b", "c"), ("d.e",), ("f`g", "h"))
    for bad in ("", "a,,b", "a.", "`a", "a,A", "`a`b"):
        with pytest.raises(InvalidArgumentError):
            parse_column_list(bad)
    listed = (("a",), ("b", "c"), ("d.e",), ("f`g", "h"), ("with space",))
    assert parse_column_list(format_column_list(listed)) == listed


def test_only_the_listed_columns_get_statistics_nested_fields_and_whole_structs(memory_uri):
    data = rows(0, 50)
    write_table(memory_uri, data, configuration={properties.STATS_COLUMNS: "name, s.c, X"})
    (stats,) = stats_of(memory_uri)
    assert stats["numRecords"] == 50
    assert stats["nullCount"] == {"name": 0, "s": {"c": 0}, "x": 0}
    assert stats["minValues"] == {"name": "n00000", "s": {"c": 0}, "x": 0.0}
    assert stats["maxValues"] == {"name": "n00049", "s": {"c": pc.max(pc.struct_field(data["s"], [0])).as_py()},
                                  "x": pc.max(data["x"]).as_py()}

    whole = memory_uri + "-struct"
    write_table(whole, data, configuration={properties.STATS_COLUMNS: "s"})
    (stats,) = stats_of(whole)
    assert stats["nullCount"] == {"s": {"c": 0, "d": 0, "e": 0}}
    assert stats["minValues"] == {"s": {"c": 0, "d": "d0", "e": 0.0}}
    # the same as the whole-table stats, restricted to the struct
    assert stats["maxValues"]["s"] == json.loads(compute_stats(data, num_indexed_cols=-1))["maxValues"]["s"]


def test_the_property_replaces_num_indexed_cols(memory_uri):
    write_table(memory_uri, rows(0, 10), configuration={properties.STATS_COLUMNS: "x",
                                                       properties.NUM_INDEXED_COLS: "1"})
    (stats,) = stats_of(memory_uri)
    assert set(stats["nullCount"]) == {"x"}


def test_mapped_tables_list_logical_names_and_key_stats_by_physical_names(memory_uri):
    write_table(memory_uri, rows(0, 20), configuration={"delta.columnMapping.mode": "name",
                                                        properties.STATS_COLUMNS: "name,s.d"})
    table = Table(memory_uri)
    fields = json.loads(table.snapshot.metadata.schema_string)["fields"]
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    nested = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"]
              for f in next(f for f in fields if f["name"] == "s")["type"]["fields"]}
    (stats,) = stats_of(memory_uri)
    assert stats["nullCount"] == {physical["name"]: 0, physical["s"]: {nested["d"]: 0}}
    assert stats["minValues"] == {physical["name"]: "n00000", physical["s"]: {nested["d"]: "d0"}}

    # a RENAME keeps statistics on the column: the property follows the new name
    table.alter.rename_column("name", "label")
    table.alter.rename_column("s.d", "dd")
    assert Table(memory_uri).snapshot.configuration[properties.STATS_COLUMNS] == "label,s.dd"
    more = rows(20, 5).rename_columns(["id", "label", "s", "x", "flag"])
    renamed = pa.StructArray.from_arrays(more["s"].combine_chunks().flatten(), names=["c", "dd", "e"])
    write_table(memory_uri, more.set_column(2, "s", renamed))
    newest = max(Table(memory_uri).snapshot.files, key=lambda f: f.modification_time)
    assert json.loads(newest.stats)["nullCount"] == {physical["name"]: 0, physical["s"]: {nested["d"]: 0}}

    # a DROP takes the column out of the list
    Table(memory_uri).alter.drop_columns("label")
    assert Table(memory_uri).snapshot.configuration[properties.STATS_COLUMNS] == "s.dd"


def test_columns_without_statistics_are_unknown_to_data_skipping(memory_uri):
    for start in range(0, 400, 100):
        write_table(memory_uri, rows(start, 100), configuration={properties.STATS_COLUMNS: "name"})
    table = Table(memory_uri)
    everything = table.to_pyarrow_table()
    # `id` has no statistics: no file can be skipped by it, and the rows come back all the same
    by_id = pc.field("id") >= 350
    assert len(prune_files(table.snapshot, by_id)) == 4
    assert table.to_pyarrow_table(filter=by_id).sort_by("id").equals(everything.filter(by_id).sort_by("id"))
    # `name` has them: three of the four files are skipped
    by_name = pc.field("name") >= "n00350"
    assert len(prune_files(table.snapshot, by_name)) == 1
    assert table.to_pyarrow_table(filter=by_name).sort_by("id").equals(everything.filter(by_name).sort_by("id"))


def test_the_property_is_refused_naming_what_delta_refuses(memory_uri):
    data = rows(0, 5).append_column("p", pa.array(["a"] * 5))
    cases = {"nope": "not a column", "s.zz": "not a column", "p": "partition column", "flag": "has type bool",
             "id,ID": "twice", "`id": "unclosed"}
    for value, message in cases.items():
        with pytest.raises(InvalidArgumentError, match=message):
            write_table(memory_uri, data, partition_by=["p"], configuration={properties.STATS_COLUMNS: value})
    write_table(memory_uri, data, partition_by=["p"])
    with pytest.raises(InvalidArgumentError, match="has type bool"):
        Table(memory_uri).alter.set_table_properties({properties.STATS_COLUMNS: "id,flag"})
    Table(memory_uri).alter.set_table_properties({properties.STATS_COLUMNS: "id"})
    write_table(memory_uri, data)
    newest = max(Table(memory_uri).snapshot.files, key=lambda f: f.modification_time)
    assert set(json.loads(newest.stats)["nullCount"]) == {"id"}


def test_z_order_needs_a_column_the_property_lists(memory_uri):
    write_table(memory_uri, rows(0, 100), configuration={properties.STATS_COLUMNS: "x"})
    with pytest.raises(InvalidArgumentError, match="dataSkippingStatsColumns does not name it"):
        Table(memory_uri).optimize(z_order=["id"])
    Table(memory_uri).optimize(z_order=["x"])
    assert Table(memory_uri).to_pyarrow_table().sort_by("id").equals(rows(0, 100))


def test_clustering_needs_a_column_the_property_lists(memory_uri):
    with pytest.raises(InvalidArgumentError, match="dataSkippingStatsColumns does not name it"):
        write_table(memory_uri, rows(0, 10), cluster_by=["id"], configuration={properties.STATS_COLUMNS: "x"})
    write_table(memory_uri, rows(0, 10), cluster_by=["s.c"], configuration={properties.STATS_COLUMNS: "s"})
    with pytest.raises(InvalidArgumentError, match="dataSkippingStatsColumns does not name it"):
        Table(memory_uri).alter.cluster_by(["x"])
    (stats,) = stats_of(memory_uri)
    assert set(stats["nullCount"]) == {"s"}
