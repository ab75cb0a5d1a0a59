"""Type widening written here (PROTOCOL.md, "Type Widening"): ``t.alter.change_column_type`` for every change
Delta allows, top-level and nested, recorded in ``delta.typeChanges``; files written before a change read as
the new type; schema evolution (``schema_mode="merge"``, MERGE) widens where Delta's automatic widening does,
only with ``delta.enableTypeWidening=true``; everything else refused before anything is committed.

The expectation for old files is computed another way: each Parquet file read on its own with pyarrow and
cast with ``pyarrow.compute.cast`` (deltalake 1.6 refuses the ``typeWidening`` reader feature, see
:func:`test_deltalake_refuses_the_feature_by_name_or_reads_what_we_read`).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table import InvalidArgumentError, SchemaMismatchError, Table, write_table
from table.log.schema import record_type_changes

WIDEN = {"delta.enableTypeWidening": "true"}


def _schema_json(table: Table) -> dict:
    return json.loads(table.metadata().schema_string)


def _field(table: Table, name: str) -> dict:
    return next(f for f in _schema_json(table)["fields"] if f["name"] == name)


def _files_cast(table: Table) -> pa.Table:
    """Every live file of ``table`` read on its own with pyarrow, each column cast to the table's type."""
    parts = []
    for add in table.snapshot.files:
        raw = pq.read_table(io.BytesIO(table.objects.get(table.uri.key(add.path))))
        parts.append(pa.table({f.name: pc.cast(raw[f.name], f.type) for f in table.schema}))
    return pa.concat_tables(parts)


def _rows(rows: pa.Table) -> list:
    return sorted(rows.to_pylist(), key=repr)


CHANGES = [
    # (arrow type written first, its values, the Delta type widened to, a value only the new type holds)
    (pa.int8(), [-128, 127], "short", 32767),
    (pa.int16(), [-32768, 5], "integer", 2**31 - 1),
    (pa.int32(), [-(2**31), 7], "long", 2**63 - 1),
    (pa.int8(), [3, -4], "double", 0.5),
    (pa.int16(), [300, -1], "decimal(10,0)", Decimal("9999999999")),
    (pa.int32(), [2**31 - 1, -5], "decimal(12,2)", Decimal("1234567890.12")),
    (pa.int64(), [2**63 - 1, -(2**63)], "decimal(20,0)", Decimal("99999999999999999999")),
    (pa.int64(), [12, -1], "decimal(23,3)", Decimal("12345678901234567890.125")),
    (pa.int32(), [2**31 - 1, 1], "double", 0.25),
    (pa.float32(), [3.4, -0.1], "double", 1.0000000001),
    (pa.date32(), [dt.date(2024, 2, 29), dt.date(1969, 12, 31)], "timestamp_ntz", dt.datetime(2024, 1, 1, 12, 30, 1)),
    (pa.decimal128(5, 2), [Decimal("123.45"), Decimal("-0.01")], "decimal(7,2)", Decimal("12345.67")),
    (pa.decimal128(5, 2), [Decimal("123.45"), Decimal("-9.99")], "decimal(9,6)", Decimal("123.456789")),
]


@pytest.mark.parametrize("arrow_type, values, to_type, wider", CHANGES,
                         ids=[f"{a}->{t}" for a, _, t, _ in CHANGES])
def test_every_widening_delta_allows_reads_old_files_as_the_new_type(memory_uri, arrow_type, values, to_type, wider):
    write_table(memory_uri, pa.table({"c": pa.array(values, arrow_type), "k": [1, 2]}), configuration=WIDEN)
    before = Table(memory_uri)
    from_type = _field(before, "c")["type"]
    before.alter.change_column_type("c", to_type)
    table = Table(memory_uri)
    assert _field(table, "c")["metadata"]["delta.typeChanges"] == [{"fromType": from_type, "toType": to_type}]
    assert _rows(table.to_pyarrow_table()) == _rows(_files_cast(table))
    write_table(memory_uri, pa.table({"c": pa.array([wider], table.schema.field("c").type), "k": [3]}))
    after = Table(memory_uri)
    got = {r["k"]: r["c"] for r in after.to_pyarrow_table().to_pylist()}
    assert got[3] == wider and _rows(after.to_pyarrow_table()) == _rows(_files_cast(after))
    assert Table(memory_uri, version=0).schema.field("c").type == arrow_type  # time travel keeps the old type
    assert after.history(limit=2)[1].operation == "CHANGE COLUMN"


def test_nested_fields_array_elements_and_map_keys_and_values_widen_recorded_at_their_struct_field(memory_uri):
    data = pa.table({
        "s": pa.array([{"a": 1, "b": "x"}], pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "arr": pa.array([[1, 2]], pa.list_(pa.int16())),
        "m": pa.array([[(1, 1.5)]], pa.map_(pa.int32(), pa.float32())),
        "deep": pa.array([[{"z": [1]}]], pa.list_(pa.struct([("z", pa.list_(pa.int8()))]))),
    })
    write_table(memory_uri, data, configuration=WIDEN)
    alter = Table(memory_uri).alter
    alter.change_column_type("s.a", "long")
    alter.change_column_type("arr.element", pa.float64())
    alter.change_column_type("m.key", "long")
    alter.change_column_type("m.value", "double")
    alter.change_column_type("deep.element.z.element", "integer")
    table = Table(memory_uri)
    fields = {f["name"]: f for f in _schema_json(table)["fields"]}
    assert fields["s"]["metadata"] == {}
    assert fields["s"]["type"]["fields"][0]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long"}]
    assert fields["arr"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "double", "fieldPath": "element"}]
    assert fields["m"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "key"},
        {"fromType": "float", "toType": "double", "fieldPath": "value"}]
    z = fields["deep"]["type"]["elementType"]["fields"][0]
    assert z["metadata"]["delta.typeChanges"] == [{"fromType": "byte", "toType": "integer", "fieldPath": "element"}]
    assert table.to_pyarrow_table().to_pylist() == [
        {"s": {"a": 1, "b": "x"}, "arr": [1.0, 2.0], "m": [(1, 1.5)], "deep": [{"z": [1]}]}]
    assert table.schema.field("m").type == pa.map_(pa.int64(), pa.float64())


def test_successive_changes_of_a_column_are_all_recorded_in_order(memory_uri):
    write_table(memory_uri, pa.table({"e": pa.array([1], pa.int16())}), configuration=WIDEN)
    Table(memory_uri).alter.change_column_type("e", "integer")
    Table(memory_uri).alter.change_column_type("e", "long")
    table = Table(memory_uri)
    assert _field(table, "e")["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "integer"}, {"fromType": "integer", "toType": "long"}]
    assert table.to_pyarrow_table().to_pylist() == [{"e": 1}]


def test_turning_widening_on_gives_the_table_the_reader_and_writer_feature(memory_uri):
    write_table(memory_uri, pa.table({"x": pa.array([1], pa.int32())}))
    assert Table(memory_uri).protocol().min_writer_version == 2
    Table(memory_uri).alter.set_table_properties(WIDEN)
    protocol = Table(memory_uri).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert "typeWidening" in protocol.reader_features and "typeWidening" in protocol.writer_features


@pytest.mark.parametrize("arrow_type, to_type, complaint", [
    (pa.int64(), "integer", "not a type widening"),
    (pa.int32(), "decimal(9,0)", "not a type widening"),
    (pa.decimal128(10, 2), "decimal(10,3)", "not a type widening"),
    (pa.float64(), "float", "not a type widening"),
    (pa.int64(), "double", "not a type widening"),
    (pa.string(), "long", "not a type widening"),
    (pa.timestamp("us"), "date", "not a type widening"),
    (pa.int32(), "no such type", "not a primitive type"),
])
def test_changes_delta_does_not_allow_are_refused_and_nothing_is_committed(memory_uri, arrow_type, to_type, complaint):
    write_table(memory_uri, pa.table({"c": pa.array([None], arrow_type)}), configuration=WIDEN)
    with pytest.raises(InvalidArgumentError, match=complaint):
        Table(memory_uri).alter.change_column_type("c", to_type)
    assert Table(memory_uri).version == 0


def test_a_change_needs_the_property_and_names_it(memory_uri):
    write_table(memory_uri, pa.table({"c": pa.array([1], pa.int32())}))
    with pytest.raises(InvalidArgumentError, match="delta.enableTypeWidening=true"):
        Table(memory_uri).alter.change_column_type("c", "long")
    with pytest.raises(InvalidArgumentError, match="has no column 'nope'"):
        Table(memory_uri).alter.change_column_type("nope", "long")
    assert Table(memory_uri).version == 0


# --- schema evolution ----------------------------------------------------------------------------------


def test_a_merge_append_widens_within_a_family_and_records_it(memory_uri):
    write_table(memory_uri, pa.table({"i": pa.array([1], pa.int32()), "f": pa.array([1.5], pa.float32()),
                                      "d": pa.array([dt.date(2024, 1, 1)]),
                                      "n": pa.array([Decimal("1.5")], pa.decimal128(4, 1))}), configuration=WIDEN)
    wide = pa.table({"i": pa.array([2**40], pa.int64()), "f": [0.1], "d": pa.array([dt.datetime(2024, 1, 2, 3)]),
                     "n": pa.array([Decimal("12345.12")], pa.decimal128(8, 2))})
    write_table(memory_uri, wide, schema_mode="merge")
    table = Table(memory_uri)
    assert [(f["name"], f["type"], f["metadata"]["delta.typeChanges"]) for f in _schema_json(table)["fields"]] == [
        ("i", "long", [{"fromType": "integer", "toType": "long"}]),
        ("f", "double", [{"fromType": "float", "toType": "double"}]),
        ("d", "timestamp_ntz", [{"fromType": "date", "toType": "timestamp_ntz"}]),
        ("n", "decimal(8,2)", [{"fromType": "decimal(4,1)", "toType": "decimal(8,2)"}]),
    ]
    assert _rows(table.to_pyarrow_table()) == _rows(_files_cast(table))
    assert sorted(table.to_pyarrow_table()["i"].to_pylist()) == [1, 2**40]


def test_a_merge_append_without_the_property_is_refused_naming_it(memory_uri):
    write_table(memory_uri, pa.table({"i": pa.array([1], pa.int32())}))
    with pytest.raises(SchemaMismatchError, match="delta.enableTypeWidening=true"):
        write_table(memory_uri, pa.table({"i": pa.array([2**40], pa.int64())}), schema_mode="merge")
    assert Table(memory_uri).version == 0


def test_integers_to_double_or_decimal_are_never_automatic(memory_uri):
    """Delta applies these only by an explicit ALTER (an integer column silently turned decimal surprises)."""
    write_table(memory_uri, pa.table({"i": pa.array([1], pa.int32())}), configuration=WIDEN)
    for data in (pa.table({"i": [0.5]}), pa.table({"i": pa.array([Decimal("1.5")], pa.decimal128(12, 1))})):
        with pytest.raises(SchemaMismatchError, match="integer in the table"):
            write_table(memory_uri, data, schema_mode="merge")
    assert Table(memory_uri).version == 0


def test_merge_schema_evolution_widens_and_old_target_rows_are_cast(memory_uri):
    write_table(memory_uri, pa.table({"id": pa.array([1, 2], pa.int32()), "v": pa.array([1.5, 2.5], pa.float32())}),
                configuration=WIDEN)
    source = pa.table({"id": pa.array([2, 2**33], pa.int64()), "v": [0.1, 0.2]})
    Table(memory_uri).merge(source, "target.id = source.id", merge_schema=True) \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    table = Table(memory_uri)
    assert table.schema == pa.schema([("id", pa.int64()), ("v", pa.float64())])
    rows = {r["id"]: r["v"] for r in table.to_pyarrow_table().to_pylist()}
    assert rows == {1: float(pa.scalar(1.5, pa.float32()).as_py()), 2: 0.1, 2**33: 0.2}
    assert [c["toType"] for f in _schema_json(table)["fields"] for c in f["metadata"]["delta.typeChanges"]] == \
        ["long", "double"]


# --- other operations on widened tables -----------------------------------------------------------------


def test_dml_and_optimize_rewrite_old_files_in_the_new_type(memory_uri):
    write_table(memory_uri, pa.table({"k": [1, 2, 3], "c": pa.array([1, 2, 3], pa.int16())}), configuration=WIDEN)
    write_table(memory_uri, pa.table({"k": [4], "c": pa.array([4], pa.int16())}))
    Table(memory_uri).alter.change_column_type("c", "decimal(12,2)")
    Table(memory_uri).update({"c": "c + 0.25"}, predicate="k = 2")
    Table(memory_uri).delete("k = 3")
    Table(memory_uri).optimize()
    table = Table(memory_uri)
    assert {r["k"]: r["c"] for r in table.to_pyarrow_table().to_pylist()} == {
        1: Decimal("1.00"), 2: Decimal("2.25"), 4: Decimal("4.00")}
    for add in table.snapshot.files:  # every file written since holds the new type
        raw = pq.read_schema(io.BytesIO(table.objects.get(table.uri.key(add.path))))
        assert raw.field("c").type == pa.decimal128(12, 2)


def test_a_column_mapped_table_widens_by_logical_name(memory_uri):
    write_table(memory_uri, pa.table({"a": pa.array([1], pa.int32())}),
                configuration={**WIDEN, "delta.columnMapping.mode": "name"})
    Table(memory_uri).alter.rename_column("a", "a b")
    Table(memory_uri).alter.change_column_type("a b", "long")
    write_table(memory_uri, pa.table({"a b": pa.array([2**40], pa.int64())}))
    assert sorted(Table(memory_uri).to_pyarrow_table()["a b"].to_pylist()) == [1, 2**40]


def test_recording_keeps_earlier_changes_and_new_fields_alone():
    old = {"type": "struct", "fields": [
        {"name": "e", "type": "integer", "nullable": True,
         "metadata": {"delta.typeChanges": [{"fromType": "short", "toType": "integer"}]}}]}
    new = {"type": "struct", "fields": [
        {"name": "e", "type": "long", "nullable": True,
         "metadata": {"delta.typeChanges": [{"fromType": "short", "toType": "integer"}]}},
        {"name": "n", "type": "long", "nullable": True, "metadata": {}}]}
    recorded = record_type_changes(old, new)
    assert recorded["fields"][0]["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "integer"}, {"fromType": "integer", "toType": "long"}]
    assert recorded["fields"][1]["metadata"] == {}


@pytest.mark.interop
def test_deltalake_refuses_the_feature_by_name_or_reads_what_we_read(memory_uri, tmp_path):
    from deltalake import DeltaTable

    from tests.support.corpus import canonical, to_directory

    write_table(memory_uri, pa.table({"c": pa.array([1, 2], pa.int32())}), configuration=WIDEN)
    Table(memory_uri).alter.change_column_type("c", "long")
    write_table(memory_uri, pa.table({"c": pa.array([2**40], pa.int64())}))
    directory = to_directory(Table(memory_uri), tmp_path / "t")
    try:
        theirs = DeltaTable(str(directory)).to_pyarrow_table()
    except Exception as exc:  # noqa: BLE001 - deltalake 1.6 raises DeltaProtocolError
        assert "typeWidening" in str(exc) or "TypeWidening" in str(exc)
        return
    assert canonical(theirs) == canonical(Table(memory_uri).to_pyarrow_table())


def test_the_change_feed_reads_across_a_widening_in_the_new_type(memory_uri):
    write_table(memory_uri, pa.table({"k": [1, 2], "c": pa.array([1, 2], pa.int32()),
                                      "s": pa.array([{"x": 1.5}, {"x": 2.5}], pa.struct([("x", pa.float32())]))}),
                configuration={**WIDEN, "delta.enableChangeDataFeed": "true"})
    Table(memory_uri).alter.change_column_type("c", "decimal(12,1)")
    Table(memory_uri).alter.change_column_type("s.x", "double")
    Table(memory_uri).update({"c": "c + 0.5"}, predicate="k = 2")
    changes = Table(memory_uri).load_cdf(0).read_all()
    assert changes.schema.field("c").type == pa.decimal128(12, 1)
    got = sorted((r["_change_type"], r["k"], r["c"]) for r in changes.to_pylist())
    assert got == [("insert", 1, Decimal("1.0")), ("insert", 2, Decimal("2.0")),
                   ("update_postimage", 2, Decimal("2.5")), ("update_preimage", 2, Decimal("2.0"))]


def test_a_widening_racing_an_append_plans_again_and_both_land(memory_uri):
    """A metadata change conflicts with every concurrent commit (Delta's rule): the widening that loses the
    race to an append is planned again on the newest version, and the append's rows read in the new type."""
    from tests.support.tables import with_rival

    write_table(memory_uri, pa.table({"c": pa.array([1], pa.int32())}), configuration=WIDEN)
    result = with_rival(lambda: write_table(memory_uri, pa.table({"c": pa.array([2], pa.int32())})),
                        lambda: Table(memory_uri).alter.change_column_type("c", "long"))
    table = Table(memory_uri)
    assert result.version == 2 and result.metrics["numReplans"] == "1"
    assert table.schema.field("c").type == pa.int64() and sorted(table.to_pyarrow_table()["c"].to_pylist()) == [1, 2]
    assert _field(table, "c")["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
