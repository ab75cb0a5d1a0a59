"""File statistics against pyarrow, and pruning that never skips a file holding a matching row."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table.actions import AddFile, parse_commit
from table.replay import replay
from table.stats import (
    STRING_PREFIX_LENGTH,
    Stats,
    compute_stats,
    file_may_match,
    parse_stats,
    predicates_from_expression,
)

UTC = dt.timezone.utc


def stats_of(data) -> dict:
    return json.loads(compute_stats(data))


def file_with(stats: dict | str | None, partition_values: dict | None = None) -> AddFile:
    text = stats if isinstance(stats, str) or stats is None else json.dumps(stats)
    return AddFile(
        path="f.parquet", partition_values=partition_values or {}, size=1, modification_time=0, data_change=True, stats=text
    )


# --- computing ------------------------------------------------------------------------------------


def test_numeric_bounds_and_null_counts_match_pyarrow():
    table = pa.table(
        {
            "i": pa.array([3, None, -7, 12], pa.int32()),
            "f": pa.array([0.5, -2.25, None, None], pa.float64()),
            "d": pa.array([Decimal("1.20"), Decimal("-3.45"), None, Decimal("99.99")], pa.decimal128(5, 2)),
        }
    )
    stats = stats_of(table)
    assert stats["numRecords"] == 4
    for name in ("i", "f"):
        expected = pc.min_max(table[name])
        assert stats["minValues"][name] == expected["min"].as_py()
        assert stats["maxValues"][name] == expected["max"].as_py()
        assert stats["nullCount"][name] == table[name].null_count
    parsed = parse_stats(compute_stats(table))
    assert parsed.min_value(["d"]) == Decimal("-3.45") and parsed.max_value(["d"]) == Decimal("99.99")


def test_decimals_are_written_as_exact_json_numbers():
    table = pa.table({"d": pa.array([Decimal("12345678901234567890.123456789")], pa.decimal128(38, 9))})
    text = compute_stats(table)
    assert '"d":12345678901234567890.123456789' in text


def test_dates_are_iso_days():
    table = pa.table({"d": pa.array([dt.date(2024, 2, 29), dt.date(1999, 12, 31), None])})
    stats = stats_of(table)
    assert stats["minValues"]["d"] == "1999-12-31" and stats["maxValues"]["d"] == "2024-02-29"
    assert stats["nullCount"]["d"] == 1


def test_timestamps_are_milliseconds_with_min_rounded_down_and_max_rounded_up():
    values = [dt.datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC)]
    stats = stats_of(pa.table({"t": pa.array(values, pa.timestamp("us", tz="UTC"))}))
    assert stats["minValues"]["t"] == "2024-01-01T00:00:00.000Z"
    assert stats["maxValues"]["t"] == "2024-01-01T00:00:00.002Z"


def test_a_timestamp_already_on_a_millisecond_is_not_rounded():
    moment = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    stats = stats_of(pa.table({"t": pa.array([moment], pa.timestamp("ns", tz="Europe/Paris"))}))
    assert stats["minValues"]["t"] == stats["maxValues"]["t"] == "2024-05-06T07:08:09.123Z"


def test_timestamps_without_zone_have_no_z_and_stay_wall_clock():
    stats = stats_of(pa.table({"t": pa.array([dt.datetime(2024, 1, 1, 23, 59, 59, 999999)], pa.timestamp("us"))}))
    assert stats["minValues"]["t"] == "2024-01-01T23:59:59.999"
    assert stats["maxValues"]["t"] == "2024-01-02T00:00:00.000"


def test_string_min_is_a_prefix_and_a_long_max_is_left_out():
    long_low, long_high = "a" * 40, "z" * 40
    stats = stats_of(pa.table({"s": [long_high, long_low, "m"], "short": ["x" * 32, "b", None]}))
    assert stats["minValues"]["s"] == "a" * STRING_PREFIX_LENGTH
    assert "s" not in stats["maxValues"]
    assert stats["minValues"]["short"] == "b" and stats["maxValues"]["short"] == "x" * 32


def test_string_prefix_counts_characters_not_bytes():
    stats = stats_of(pa.table({"s": ["é" * 40]}))
    assert stats["minValues"]["s"] == "é" * 32


def test_a_column_with_nan_has_no_bounds_and_infinite_bounds_are_left_out():
    stats = stats_of(pa.table({"nan": [1.0, float("nan")], "inf": [float("-inf"), float("inf")], "half": [float("inf"), 1.0]}))
    assert "nan" not in stats["minValues"] and "nan" not in stats["maxValues"]
    assert stats["nullCount"]["nan"] == 0
    assert "inf" not in stats["minValues"] and "inf" not in stats["maxValues"]
    assert stats["minValues"]["half"] == 1.0 and "half" not in stats["maxValues"]


def test_booleans_binary_and_lists_get_only_null_counts():
    table = pa.table({"b": [True, None], "bin": [b"x", None], "l": [[1], None], "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64()))})
    stats = stats_of(table)
    assert stats["minValues"] == {} and stats["maxValues"] == {}
    assert stats["nullCount"] == {"b": 1, "bin": 1, "l": 1, "m": 1}


def test_nested_structs_mirror_the_schema_and_count_parent_nulls():
    table = pa.table({"s": pa.array([{"a": 1, "inner": {"c": "x"}}, None, {"a": 5, "inner": None}])})
    stats = stats_of(table)
    assert stats["minValues"] == {"s": {"a": 1, "inner": {"c": "x"}}}
    assert stats["maxValues"] == {"s": {"a": 5, "inner": {"c": "x"}}}
    assert stats["nullCount"] == {"s": {"a": 1, "inner": {"c": 2}}}


def test_an_all_null_column_gets_a_null_count_only():
    stats = stats_of(pa.table({"x": pa.array([None, None], pa.int64())}))
    assert stats == {"numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"x": 2}}


def test_only_the_first_indexed_leaf_columns_get_stats():
    table = pa.table({"a": [1], "s": pa.array([{"b": 2, "c": 3}]), "d": [4]})
    limited = json.loads(compute_stats(table, num_indexed_cols=2))
    assert limited["nullCount"] == {"a": 0, "s": {"b": 0}}
    unlimited = json.loads(compute_stats(table, num_indexed_cols=-1))
    assert unlimited["nullCount"] == {"a": 0, "s": {"b": 0, "c": 0}, "d": 0}


def test_tables_batches_and_dictionaries_give_the_same_stats():
    table = pa.table({"s": pa.array(["b", "a", None]).dictionary_encode(), "x": [1, 2, 3]})
    plain = pa.table({"s": ["b", "a", None], "x": [1, 2, 3]})
    assert compute_stats(table) == compute_stats(plain)
    assert compute_stats(plain.to_batches()) == compute_stats(plain)
    assert compute_stats(plain.to_batches()[0]) == compute_stats(plain)
    assert json.loads(compute_stats([])) == {"numRecords": 0, "minValues": {}, "maxValues": {}, "nullCount": {}}


# --- parsing ------------------------------------------------------------------------------------------


def test_parse_stats_reads_back_what_compute_stats_wrote():
    stats = parse_stats(compute_stats(pa.table({"x": [1, None], "s": pa.array([{"y": 2.5}, None])})))
    assert stats.num_records == 2
    assert stats.min_value(["x"]) == 1 and stats.max_value(["s", "y"]) == Decimal("2.5")
    assert stats.null_count_of(["x"]) == 1 and stats.null_count_of(["s", "y"]) == 1
    assert stats.min_value(["s"]) is None and stats.min_value(["nope"]) is None


@pytest.mark.parametrize("text", [None, "", "not json", "[1,2]"])
def test_missing_or_unusable_stats_parse_to_none(text):
    assert parse_stats(text) is None


# --- pruning ------------------------------------------------------------------------------------------

X_5_TO_9 = file_with({"numRecords": 4, "minValues": {"x": 5}, "maxValues": {"x": 9}, "nullCount": {"x": 0}})
INT_SCHEMA = pa.schema([("x", pa.int64())])


@pytest.mark.parametrize(
    "op, value, may_match",
    [
        ("<", 5, False), ("<=", 5, True), ("<", 6, True),
        (">", 9, False), (">=", 9, True), (">", 8, True),
        ("==", 4, False), ("==", 10, False), ("==", 5, True), ("==", 7, True), ("==", 9, True),
        ("!=", 7, True), ("in", [1, 2, 10], False), ("in", [1, 9], True), ("in", [], False),
        ("is_null", None, False), ("not_null", None, True),
        ("<", 5.5, True), ("==", 8.5, True), ("<", Decimal("5.0"), False),
    ],
)
def test_a_file_with_min_5_and_max_9(op, value, may_match):
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", op, value)]) is may_match


def test_not_equal_prunes_a_file_whose_values_are_all_equal():
    constant = file_with({"numRecords": 3, "minValues": {"x": 7}, "maxValues": {"x": 7}, "nullCount": {"x": 1}})
    assert file_may_match(constant, None, INT_SCHEMA, [("x", "!=", 7)]) is False
    assert file_may_match(constant, None, INT_SCHEMA, [("x", "!=", 8)]) is True


def test_all_null_columns_match_only_is_null():
    all_null = file_with({"numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"x": 2}})
    assert file_may_match(all_null, None, INT_SCHEMA, [("x", "is_null", None)]) is True
    assert file_may_match(all_null, None, INT_SCHEMA, [("x", "not_null", None)]) is False
    assert file_may_match(all_null, None, INT_SCHEMA, [("x", ">", 0)]) is False
    assert file_may_match(all_null, None, INT_SCHEMA, [("x", "in", [None])]) is True


def test_conditions_are_anded():
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", ">", 6), ("x", "<", 8)]) is True
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", ">", 6), ("x", ">", 20)]) is False


def test_anything_unknown_means_the_file_may_match():
    no_stats = file_with(None)
    assert file_may_match(no_stats, None, INT_SCHEMA, [("x", "<", 0)]) is True
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("other", "<", 0)]) is True
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", "<", "a string")]) is True
    assert file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", "<", None)]) is True
    no_bounds = file_with({"numRecords": 4, "nullCount": {"x": 0}})
    assert file_may_match(no_bounds, None, INT_SCHEMA, [("x", "<", 0)]) is True


def test_an_empty_file_matches_nothing():
    empty = file_with({"numRecords": 0, "minValues": {}, "maxValues": {}, "nullCount": {}})
    assert file_may_match(empty, None, INT_SCHEMA, [("x", "is_null", None)]) is False


def test_an_unknown_operator_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown operator"):
        file_may_match(X_5_TO_9, None, INT_SCHEMA, [("x", "~", 1)])


def test_a_truncated_string_max_from_another_writer_is_treated_as_a_prefix():
    # Another writer cut the real maximum "abcz..." down to the prefix "abc".
    truncated = file_with({"numRecords": 1, "minValues": {"s": "abc"}, "maxValues": {"s": "abc"}, "nullCount": {"s": 0}})
    schema = pa.schema([("s", pa.string())])
    assert file_may_match(truncated, None, schema, [("s", ">", "abcd")]) is True
    assert file_may_match(truncated, None, schema, [("s", "==", "abcz")]) is True
    assert file_may_match(truncated, None, schema, [("s", ">", "abd")]) is False
    assert file_may_match(truncated, None, schema, [("s", "<", "abc")]) is False
    assert file_may_match(truncated, None, schema, [("s", "!=", "abc")]) is True


def test_a_timestamp_max_rounded_down_by_another_writer_still_bounds_the_millisecond():
    # delta-rs and Spark write the maximum 00:00:00.0015 as 00:00:00.001.
    stats = {"numRecords": 1, "minValues": {"t": "2024-01-01T00:00:00.001Z"}, "maxValues": {"t": "2024-01-01T00:00:00.001Z"}, "nullCount": {"t": 0}}
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    target = dt.datetime(2024, 1, 1, 0, 0, 0, 1400, tzinfo=UTC)
    assert file_may_match(file_with(stats), None, schema, [("t", ">", target)]) is True
    assert file_may_match(file_with(stats), None, schema, [("t", "==", target)]) is True
    later = dt.datetime(2024, 1, 1, 0, 0, 0, 2000, tzinfo=UTC)
    assert file_may_match(file_with(stats), None, schema, [("t", ">=", later)]) is False
    earlier = dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC)
    assert file_may_match(file_with(stats), None, schema, [("t", "<=", earlier)]) is False


def test_float32_bounds_are_compared_as_float32():
    table = pa.table({"f": pa.array([0.1, 0.2], pa.float32())})
    add = file_with(compute_stats(table))
    exact_max = pc.max(table["f"]).as_py()  # 0.2 as float32 = 0.20000000298...
    assert file_may_match(add, None, table.schema, [("f", ">=", exact_max)]) is True
    shortest = file_with({"numRecords": 2, "minValues": {"f": 0.1}, "maxValues": {"f": 0.2}, "nullCount": {"f": 0}})
    assert file_may_match(shortest, None, table.schema, [("f", ">=", exact_max)]) is True


def test_nan_predicates_never_prune_because_bounds_say_nothing_about_nan():
    # delta-rs computes bounds ignoring NaN, so a file with bounds [1, 2] may hold NaN.
    ignoring_nan = file_with({"numRecords": 3, "minValues": {"f": 1.0}, "maxValues": {"f": 2.0}, "nullCount": {"f": 0}})
    schema = pa.schema([("f", pa.float64())])
    nan = float("nan")
    assert file_may_match(ignoring_nan, None, schema, [("f", "in", [nan])]) is True
    assert file_may_match(ignoring_nan, None, schema, [("f", "==", nan)]) is True
    assert file_may_match(ignoring_nan, None, schema, [("f", "!=", 1.0)]) is True


def test_nested_columns_prune_by_their_path():
    table = pa.table({"s": pa.array([{"a": 1}, {"a": 3}])})
    add = file_with(compute_stats(table))
    assert file_may_match(add, None, table.schema, [(("s", "a"), ">", 3)]) is False
    assert file_may_match(add, None, table.schema, [(("s", "a"), ">", 2)]) is True


def test_partition_values_decide_conditions_on_partition_columns():
    partition_schema = pa.schema([("day", pa.date32()), ("region", pa.string())])
    add = file_with(None, {"day": "2024-01-02", "region": None})
    day = dt.date(2024, 1, 2)
    assert file_may_match(add, partition_schema, None, [("day", "==", day)]) is True
    assert file_may_match(add, partition_schema, None, [("day", ">", day)]) is False
    assert file_may_match(add, partition_schema, None, [("day", "!=", day)]) is False
    assert file_may_match(add, partition_schema, None, [("day", "in", [dt.date(2024, 1, 1)])]) is False
    assert file_may_match(add, partition_schema, None, [("region", "is_null", None)]) is True
    assert file_may_match(add, partition_schema, None, [("region", "not_null", None)]) is False
    assert file_may_match(add, partition_schema, None, [("region", "==", "eu")]) is False
    assert file_may_match(add, partition_schema, None, [("region", "!=", "eu")]) is False
    assert file_may_match(add, partition_schema, None, [("region", "in", ["eu", None])]) is True


def test_timestamp_partition_values_compare_as_instants():
    partition_schema = {"type": "struct", "fields": [{"name": "at", "type": "timestamp", "nullable": True, "metadata": {}}]}
    add = file_with(None, {"at": "2024-01-01 01:00:00.000000"})
    paris = dt.timezone(dt.timedelta(hours=1))
    assert file_may_match(add, partition_schema, None, [("at", "==", dt.datetime(2024, 1, 1, 2, 0, tzinfo=paris))]) is True
    assert file_may_match(add, partition_schema, None, [("at", "<", dt.datetime(2024, 1, 1, 2, 0, tzinfo=paris))]) is False


def _random_table(rng: random.Random, rows: int) -> pa.Table:
    def maybe(value):
        return None if rng.random() < 0.2 else value

    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table(
        {
            "i": pa.array([maybe(rng.randint(-5, 5)) for _ in range(rows)], pa.int64()),
            "f": pa.array([maybe(rng.choice([-1.5, 0.0, 2.25, 3.0])) for _ in range(rows)], pa.float64()),
            "s": pa.array([maybe(rng.choice(["", "a", "ab", "b" * 40, "b" * 41, "c"])) for _ in range(rows)], pa.string()),
            "t": pa.array([maybe(base + dt.timedelta(microseconds=rng.randint(0, 5000))) for _ in range(rows)], pa.timestamp("us", tz="UTC")),
            "d": pa.array([maybe(dt.date(2024, 1, rng.randint(1, 5))) for _ in range(rows)], pa.date32()),
        }
    )


_PROBES = {
    "i": [-6, -5, 0, 3, 5, 6],
    "f": [-2.0, -1.5, 0.0, 1.0, 3.0, 4.0],
    "s": ["", "a", "aa", "b" * 40, "b" * 41, "b" * 42, "c", "d"],
    "t": [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=m) for m in (0, 999, 1000, 2500, 4999, 5000, 6000)],
    "d": [dt.date(2024, 1, day) for day in range(1, 7)],
}
_ARROW_OPS = {"==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def test_pruning_never_skips_a_file_that_holds_a_matching_row():
    rng = random.Random(20240101)
    for _ in range(40):
        table = _random_table(rng, rng.randint(1, 6))
        add = file_with(compute_stats(table))
        for column, probes in _PROBES.items():
            for value in probes:
                scalar = pa.scalar(value, table[column].type)
                for op, function in _ARROW_OPS.items():
                    matches = pc.sum(pc.fill_null(function(table[column], scalar), False).cast(pa.int64())).as_py() or 0
                    if matches:
                        assert file_may_match(add, None, table.schema, [(column, op, value)]), (column, op, value, table[column])
            in_matches = pc.any(pc.is_in(table[column], value_set=pa.array(probes[:3], table[column].type))).as_py()
            if in_matches:
                assert file_may_match(add, None, table.schema, [(column, "in", probes[:3])])
            if table[column].null_count:
                assert file_may_match(add, None, table.schema, [(column, "is_null", None)])
            if table[column].null_count < len(table):
                assert file_may_match(add, None, table.schema, [(column, "not_null", None)])


def test_pruning_does_skip_files_with_disjoint_ranges():
    add = file_with(compute_stats(pa.table({"i": [10, 20], "s": ["m", "n"]})))
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    assert not file_may_match(add, None, schema, [("i", "<", 10)])
    assert not file_may_match(add, None, schema, [("i", ">", 20)])
    assert not file_may_match(add, None, schema, [("s", ">", "o")])
    assert not file_may_match(add, None, schema, [("s", "==", "a")])
    # A stored string maximum is read as a possible prefix, so "n" may stand for "nz...".
    assert file_may_match(add, None, schema, [("s", ">", "n")])


# --- predicates from expressions ----------------------------------------------------------------------


def test_conjunctions_of_simple_comparisons_are_extracted():
    expr = (
        (pc.field("x") > 5)
        & (pc.field("s") == "a \"quoted\" and (odd) value")
        & pc.field("y").isin([1, 2])
        & pc.field("z").is_null()
        & ~pc.field("w").is_null()
        & pc.field("v").is_valid()
        & (pc.field("a", "b") <= 3.5)
        & (pc.field("d") != dt.date(2024, 1, 1))
    )
    assert predicates_from_expression(expr) == [
        ("x", ">", 5),
        ("s", "==", 'a "quoted" and (odd) value'),
        ("y", "in", [1, 2]),
        ("z", "is_null", None),
        ("w", "not_null", None),
        ("v", "not_null", None),
        (("a", "b"), "<=", 3.5),
        ("d", "!=", dt.date(2024, 1, 1)),
    ]


def test_a_literal_on_the_left_flips_the_operator():
    expr = pc.Expression._call("less", [pc.scalar(5), pc.field("q")])
    assert predicates_from_expression(expr) == [("q", ">", 5)]


def test_field_names_that_look_like_expressions_are_taken_literally():
    assert predicates_from_expression(pc.field("x > 5 and y") == 1) == [("x > 5 and y", "==", 1)]


def test_what_cannot_be_understood_is_dropped():
    expr = ((pc.field("a") == 1) | (pc.field("a") == 2)) & (pc.field("b") + 1 > 3) & (pc.field("c") < 10)
    assert predicates_from_expression(expr) == [("c", "<", 10)]
    assert predicates_from_expression(pc.field("x").is_null(nan_is_null=True)) == []
    assert predicates_from_expression(pc.field("x") == pa.scalar(None, pa.int64())) == []
    assert predicates_from_expression(~(pc.field("x") > 1)) == []
    assert predicates_from_expression(pc.scalar(True)) == []


def test_timestamp_literals_keep_their_zone_and_sub_microsecond_ones_are_dropped():
    zoned = pa.scalar(dt.datetime(2024, 1, 1, 12), pa.timestamp("ms", tz="UTC"))
    assert predicates_from_expression(pc.field("t") >= zoned) == [("t", ">=", dt.datetime(2024, 1, 1, 12, tzinfo=UTC))]
    naive = pa.scalar(dt.datetime(2024, 1, 1, 12), pa.timestamp("s"))
    assert predicates_from_expression(pc.field("t") < naive) == [("t", "<", dt.datetime(2024, 1, 1, 12))]
    nanos = pa.scalar(1_000_000_001, pa.timestamp("ns"))
    assert predicates_from_expression(pc.field("t") < nanos) == []


def test_is_in_keeps_null_only_when_nulls_match():
    assert predicates_from_expression(pc.field("y").isin([1, None])) == [("y", "in", [1, None])]
    skip = pc.is_in(pc.field("y"), value_set=pa.array([1, None]), skip_nulls=True)
    assert predicates_from_expression(skip) == [("y", "in", [1])]


def test_extracted_predicates_prune_consistently_with_the_filter():
    table = pa.table({"x": [5, 7, 9], "s": ["a", "b", None]})
    add = file_with(compute_stats(table))
    for expr in (pc.field("x") > 9, pc.field("x") < 5, pc.field("s") == "c", pc.field("x").isin([1, 2])):
        assert table.filter(expr).num_rows == 0
        assert not file_may_match(add, None, table.schema, predicates_from_expression(expr))
    for expr in (pc.field("x") >= 9, pc.field("s").is_null(), (pc.field("x") == 7) & (pc.field("s") == "b")):
        assert table.filter(expr).num_rows > 0
        assert file_may_match(add, None, table.schema, predicates_from_expression(expr))


# --- against delta-rs -------------------------------------------------------------------------------


@pytest.mark.interop
def test_delta_rs_stats_never_prune_a_file_with_matching_rows(deltars_table, deltars_commits):
    state = replay((v, parse_commit(body, version=v)) for v, body in deltars_commits)
    partition_columns = state.partition_columns
    for add in state.files.values():
        assert add.stats is None or isinstance(parse_stats(add.stats), Stats)
        rows = pq.read_table(deltars_table / unquote(add.path))
        data_schema = pa.schema([f for f in rows.schema if f.name not in partition_columns])
        for column in data_schema.names:
            values = [v for v in rows[column].to_pylist() if v is not None]
            for value in values[:3]:
                for op in ("==", "<=", ">="):
                    assert file_may_match(add, None, data_schema, [(column, op, value)]), (add.path, column, op, value)
