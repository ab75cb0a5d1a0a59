"""Arrow ↔ Delta schema conversion, schema differences, and partition value serialization."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from decimal import Decimal

import pyarrow as pa
import pytest

from table.errors import (
    SchemaMismatchError,
    UnsupportedFeatureError,
    UnsupportedTypeError,
)
from table.log.schema import (
    arrow_to_delta,
    arrow_type_to_delta,
    check_schema,
    delta_to_arrow,
    parse_partition_value,
    partition_value_to_string,
    required_features,
    schema_diff,
    schema_string,
    type_change_problems,
)

PRIMITIVES = [
    (pa.int64(), "long"),
    (pa.int32(), "integer"),
    (pa.int16(), "short"),
    (pa.int8(), "byte"),
    (pa.float32(), "float"),
    (pa.float64(), "double"),
    (pa.string(), "string"),
    (pa.binary(), "binary"),
    (pa.bool_(), "boolean"),
    (pa.date32(), "date"),
    (pa.timestamp("us", tz="UTC"), "timestamp"),
    (pa.timestamp("us"), "timestamp_ntz"),
    (pa.decimal128(10, 2), "decimal(10,2)"),
    (pa.decimal128(38, 0), "decimal(38,0)"),
]


def _field(name, delta_type, nullable=True):
    return {"name": name, "type": delta_type, "nullable": nullable, "metadata": {}}


@pytest.mark.parametrize("arrow_type, delta_type", PRIMITIVES, ids=[d for _, d in PRIMITIVES])
def test_every_primitive_round_trips_both_ways(arrow_type, delta_type):
    schema = pa.schema([pa.field("c", arrow_type, nullable=False)])
    delta = arrow_to_delta(schema)
    assert delta == {"type": "struct", "fields": [_field("c", delta_type, nullable=False)]}
    assert delta_to_arrow(delta) == schema
    assert delta_to_arrow(json.dumps(delta)) == schema


def test_nested_struct_array_and_map_round_trip_with_their_nullability():
    schema = pa.schema(
        [
            pa.field("a", pa.int32(), nullable=False),
            pa.field("b", pa.struct([pa.field("d", pa.int32(), nullable=False)])),
            pa.field("c", pa.list_(pa.field("element", pa.int32(), nullable=False))),
            pa.field("e", pa.list_(pa.field("element", pa.struct([pa.field("d", pa.int32(), nullable=False)])))),
            pa.field("f", pa.map_(pa.string(), pa.field("value", pa.string(), nullable=True))),
            pa.field("g", pa.map_(pa.string(), pa.field("value", pa.list_(pa.int64()), nullable=False))),
        ]
    )
    delta = arrow_to_delta(schema)
    # PROTOCOL.md's own example schema, field for field.
    assert delta["fields"][:5] == [
        _field("a", "integer", nullable=False),
        _field("b", {"type": "struct", "fields": [_field("d", "integer", nullable=False)]}),
        _field("c", {"type": "array", "elementType": "integer", "containsNull": False}),
        _field(
            "e",
            {
                "type": "array",
                "elementType": {"type": "struct", "fields": [_field("d", "integer", nullable=False)]},
                "containsNull": True,
            },
        ),
        _field("f", {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}),
    ]
    assert delta["fields"][5]["type"]["valueType"] == {"type": "array", "elementType": "long", "containsNull": True}
    assert delta["fields"][5]["type"]["valueContainsNull"] is False
    assert delta_to_arrow(delta) == schema


def test_schema_string_is_compact_json_a_delta_reader_accepts():
    text = schema_string(pa.schema([("x", pa.int64())]))
    assert text == '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'


@pytest.mark.parametrize(
    "arrow_type, delta_type",
    [
        (pa.timestamp("ns", tz="America/New_York"), "timestamp"),
        (pa.timestamp("s", tz="+02:00"), "timestamp"),
        (pa.timestamp("ms"), "timestamp_ntz"),
        (pa.timestamp("ns"), "timestamp_ntz"),
        (pa.large_string(), "string"),
        (pa.string_view(), "string"),
        (pa.large_binary(), "binary"),
        (pa.binary(16), "binary"),
        (pa.date64(), "date"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.decimal256(20, 4), "decimal(20,4)"),
        (pa.large_list(pa.int64()), {"type": "array", "elementType": "long", "containsNull": True}),
    ],
    ids=str,
)
def test_arrow_encodings_of_one_delta_type_map_to_it(arrow_type, delta_type):
    assert arrow_type_to_delta(arrow_type, column="c") == delta_type


@pytest.mark.parametrize(
    "arrow_type, advice",
    [
        (pa.uint64(), "int64"),
        (pa.uint8(), "int16"),
        (pa.time32("s"), "int64"),
        (pa.duration("us"), "int64"),
        (pa.float16(), "float32"),
        (pa.null(), "the type the column is meant to have"),
        (pa.decimal256(50, 2), "precision <= 38"),
    ],
    ids=str,
)
def test_types_delta_cannot_store_raise_naming_column_type_and_cast(arrow_type, advice):
    schema = pa.schema([("ok", pa.int64()), ("s", pa.struct([("bad", arrow_type)]))])
    with pytest.raises(UnsupportedTypeError) as info:
        arrow_to_delta(schema)
    message = str(info.value)
    assert "'s.bad'" in message
    assert str(arrow_type) in message
    assert advice in message
    assert isinstance(info.value, TypeError)


def test_unsupported_type_error_survives_pickling_as_spark_ships_it():
    error = UnsupportedTypeError("c", pa.uint64(), cast_to="int64")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.column == "c"


def test_delta_types_we_cannot_read_raise_unsupported_feature():
    schema = {"type": "struct", "fields": [_field("i", "interval day to second")]}
    with pytest.raises(UnsupportedFeatureError) as info:
        delta_to_arrow(schema)
    assert "'i'" in str(info.value) and "interval" in str(info.value)


def test_variant_columns_read_as_their_unshredded_parquet_struct_at_any_depth():
    variant = pa.struct([pa.field("metadata", pa.binary(), nullable=False),
                         pa.field("value", pa.binary(), nullable=False)])
    schema = delta_to_arrow({"type": "struct", "fields": [
        _field("v", "variant"),
        _field("a", {"type": "array", "elementType": {"type": "variant"}, "containsNull": True})]})
    assert schema.field("v").type == variant
    assert schema.field("a").type == pa.list_(pa.field("element", variant))
    assert required_features({"type": "struct", "fields": [_field("v", "variant")]}) == {"variantType"}


def test_widened_columns_are_marked_so_that_their_old_statistics_are_not_trusted():
    widened = _field("w", "long")
    widened["metadata"] = {"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]}
    nested = _field("s", {"type": "struct", "fields": [
        {"name": "x", "type": "double", "nullable": True,
         "metadata": {"delta.typeChanges": [{"fromType": "float", "toType": "double"}]}}]})
    schema = delta_to_arrow({"type": "struct", "fields": [widened, nested, _field("plain", "long")]})
    assert b"delta.typeChanges" in schema.field("w").metadata and b"delta.typeChanges" in schema.field("s").metadata
    assert schema.field("plain").metadata is None


@pytest.mark.parametrize("source, target, allowed", [
    ("byte", "short", True), ("short", "long", True), ("integer", "long", True), ("long", "integer", False),
    ("float", "double", True), ("integer", "double", True), ("long", "double", False),
    ("date", "timestamp_ntz", True), ("date", "timestamp", False),
    ("decimal(10,2)", "decimal(12,4)", True), ("decimal(10,2)", "decimal(11,4)", False),
    ("decimal(10,2)", "decimal(10,1)", False), ("integer", "decimal(10,0)", True), ("integer", "decimal(11,2)", False),
    ("long", "decimal(20,0)", True), ("long", "decimal(19,0)", False), ("string", "binary", False),
])
def test_type_widening_allows_exactly_the_changes_protocol_md_lists(source, target, allowed):
    field = _field("c", target)
    field["metadata"] = {"delta.typeChanges": [{"fromType": source, "toType": target}]}
    problems = type_change_problems({"type": "struct", "fields": [field]})
    assert (problems == []) is allowed


def test_bare_decimal_means_sparks_default_precision():
    assert delta_to_arrow({"type": "struct", "fields": [_field("d", "decimal")]}).field("d").type == pa.decimal128(10, 0)


# --- schema_diff --------------------------------------------------------------------------------------


TABLE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("tags", pa.list_(pa.field("element", pa.string(), nullable=False))),
        pa.field("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    ]
)


def test_identical_schemas_and_other_encodings_of_them_have_no_differences():
    data = pa.schema(
        [
            pa.field("point", pa.struct([("y", pa.float64()), ("x", pa.float64())])),
            pa.field("name", pa.large_string()),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("tags", pa.large_list(pa.field("element", pa.dictionary(pa.int8(), pa.string()), nullable=False))),
        ]
    )
    assert schema_diff(TABLE, TABLE) == []
    assert schema_diff(TABLE, data) == []
    assert schema_diff(arrow_to_delta(TABLE), data) == []
    assert schema_diff(schema_string(TABLE), data) == []


def test_non_nullable_data_into_a_nullable_column_is_fine():
    data = pa.schema([pa.field(f.name, f.type, nullable=False) for f in TABLE])
    assert schema_diff(TABLE, data) == []


def test_nullable_data_into_a_non_nullable_column_is_a_difference():
    data = pa.schema([pa.field("id", pa.int64(), nullable=True), *list(TABLE)[1:]])
    assert schema_diff(TABLE, data) == ["column 'id' is not nullable in the table, but the data column is nullable"]


def test_differences_are_named_column_by_column():
    data = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("point", pa.struct([("x", pa.float64()), ("z", pa.float64())])),
            pa.field("extra", pa.bool_()),
        ]
    )
    assert schema_diff(TABLE, data) == [
        "column 'id': type differs: expected long, found integer",
        "missing column 'name' (string): the data has no such column",
        "column 'tags': the table's array cannot contain nulls, but the data's can",
        "missing column 'point.y' (double): the data has no such column",
        "extra column 'point.z' (double) is not in the table",
        "extra column 'extra' (boolean) is not in the table",
    ]


def test_a_timestamp_with_zone_is_not_a_timestamp_without_one():
    table = pa.schema([("at", pa.timestamp("us", tz="UTC"))])
    assert schema_diff(table, pa.schema([("at", pa.timestamp("ns", tz="Europe/Paris"))])) == []
    assert schema_diff(table, pa.schema([("at", pa.timestamp("us"))])) == [
        "column 'at': type differs: expected timestamp, found timestamp_ntz"
    ]


def test_a_column_differing_only_in_case_is_reported_once_as_such():
    table = pa.schema([("userId", pa.int64())])
    assert schema_diff(table, pa.schema([("userid", pa.int64())])) == [
        "column 'userid' differs only in case from the table's column 'userId'; rename it to match"
    ]


def test_check_schema_raises_listing_differences_and_the_fix():
    with pytest.raises(SchemaMismatchError) as info:
        check_schema(TABLE, pa.schema([("id", pa.string())]), table="s3://b/t")
    error = info.value
    assert error.differences[0] == "column 'id': type differs: expected long, found string"
    message = str(error)
    assert "s3://b/t" in message and "expected long, found string" in message and "Cast" in message
    assert pickle.loads(pickle.dumps(error)).differences == error.differences


def test_schema_diff_refuses_data_with_types_delta_cannot_store():
    with pytest.raises(UnsupportedTypeError):
        schema_diff(TABLE, pa.schema([("id", pa.uint64())]))


# --- required features --------------------------------------------------------------------------------


def test_timestamp_ntz_anywhere_requires_the_timestamp_ntz_feature():
    nested = pa.schema([("s", pa.struct([("l", pa.list_(pa.timestamp("us")))]))])
    assert required_features(arrow_to_delta(nested)) == {"timestampNtz"}
    assert required_features(schema_string(pa.schema([("t", pa.timestamp("us", tz="UTC"))]))) == set()


def test_column_metadata_implies_writer_features():
    schema = {
        "type": "struct",
        "fields": [
            {"name": "x", "type": "integer", "nullable": True,
             "metadata": {"delta.invariants": '{"expression": {"expression": "x > 3"}}'}},
            {"name": "y", "type": "long", "nullable": True,
             "metadata": {"delta.generationExpression": "x + 1", "delta.columnMapping.id": 2}},
        ],
    }
    assert required_features(schema) == {"invariants", "generatedColumns", "columnMapping"}


# --- partition values ---------------------------------------------------------------------------------

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "value, arrow_type, text",
    [
        ("a b/c=d%", pa.string(), "a b/c=d%"),
        (True, pa.bool_(), "true"),
        (False, pa.bool_(), "false"),
        (-42, pa.int64(), "-42"),
        (7, pa.int8(), "7"),
        (1.5, pa.float64(), "1.5"),
        (Decimal("1.20"), pa.decimal128(5, 2), "1.20"),
        (dt.date(2017, 12, 10), pa.date32(), "2017-12-10"),
        (dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=UTC), pa.timestamp("us", tz="UTC"), "2024-01-01 01:02:03.456789"),
        (dt.datetime(2024, 1, 1, 1, 2, 3), pa.timestamp("us"), "2024-01-01 01:02:03.000000"),
        (b"\x01\x02\x03", pa.binary(), "\x01\x02\x03"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_partition_values_serialize_as_the_protocol_says_and_parse_back(value, arrow_type, text):
    assert partition_value_to_string(value, arrow_type) == text
    assert parse_partition_value(text, arrow_type_to_delta(arrow_type, column="p")) == value


def test_zoned_timestamps_are_written_in_utc():
    paris = dt.timezone(dt.timedelta(hours=1))
    value = dt.datetime(2024, 1, 1, 1, 0, 0, tzinfo=paris)
    assert partition_value_to_string(value, pa.timestamp("us", tz="UTC")) == "2024-01-01 00:00:00.000000"
    scalar = pa.scalar(dt.datetime(2024, 1, 1, 0, 0, 0, 1), pa.timestamp("ns", tz="Europe/Paris"))
    assert partition_value_to_string(scalar, scalar.type) == "2024-01-01 00:00:00.000001"


def test_null_and_empty_partition_values_are_null():
    assert partition_value_to_string(None, pa.int64()) is None
    assert partition_value_to_string("", pa.string()) is None
    for delta_type in ("string", "long", "date", "timestamp"):
        assert parse_partition_value(None, delta_type) is None
        assert parse_partition_value("", delta_type) is None


def test_timestamps_parse_in_every_form_the_protocol_allows():
    expected = dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    assert parse_partition_value("1970-01-01 00:00:00.123456", "timestamp") == expected
    assert parse_partition_value("1970-01-01T00:00:00.123456Z", "timestamp") == expected
    assert parse_partition_value("1970-01-01 00:00:00", "timestamp") == expected.replace(microsecond=0)
    assert parse_partition_value("1970-01-01 00:00:00", "timestamp_ntz") == dt.datetime(1970, 1, 1)


def test_special_floats_use_java_spellings():
    assert partition_value_to_string(float("inf"), pa.float64()) == "Infinity"
    assert partition_value_to_string(float("-inf"), pa.float32()) == "-Infinity"
    assert partition_value_to_string(float("nan"), pa.float64()) == "NaN"
    assert parse_partition_value("Infinity", "double") == float("inf")


def test_float_partition_values_are_read_as_the_float32_the_column_holds():
    stored = pa.array([0.1], pa.float32())[0].as_py()
    assert parse_partition_value("0.1", "float") == stored
    assert parse_partition_value(partition_value_to_string(stored, pa.float32()), "float") == stored
    assert parse_partition_value("0.1", "double") == 0.1


def test_malformed_partition_values_raise_naming_value_and_type():
    with pytest.raises(ValueError, match="'abc' is not a valid long"):
        parse_partition_value("abc", "long")
    with pytest.raises(ValueError, match="not a valid boolean"):
        parse_partition_value("yes", "boolean")
    with pytest.raises(ValueError, match="not a valid float"):
        parse_partition_value("one", "float")
    with pytest.raises(TypeError):
        partition_value_to_string("5", pa.int64())
    with pytest.raises(UnsupportedTypeError):
        partition_value_to_string(1, pa.uint64())
