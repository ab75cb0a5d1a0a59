"""File statistics against pyarrow, their merging, and pruning that never skips a file holding a matching row.

Pruning is checked through the reader's own path: each file's stats become part of its fragment's
``partition_expression`` (``table.data.read``), and pyarrow decides which fragments a filter needs.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from decimal import Decimal
from types import SimpleNamespace
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from logstore import TableUri
from table.data.read import prune_files, to_pyarrow_dataset
from table.data.skipping import stats_guarantee
from table.data.stats import (
    STRING_PREFIX_LENGTH,
    Stats,
    StatsCollector,
    compute_stats,
    parse_stats,
)
from table.log.actions import AddFile, Metadata, Protocol, parse_commit
from table.log.schema import schema_string
from table.log.snapshot import Snapshot
from table.log.state import replay

UTC = dt.timezone.utc


def stats_of(data) -> dict:
    return json.loads(compute_stats(data))


def file_with(stats: dict | str | None, partition_values: dict | None = None, path: str = "f.parquet") -> AddFile:
    text = stats if isinstance(stats, str) or stats is None else json.dumps(stats)
    return AddFile(
        path=path, partition_values=partition_values or {}, size=1, modification_time=0, data_change=True, stats=text
    )


def snapshot_of(schema: pa.Schema, files: list[AddFile], partition_columns: tuple[str, ...] = ()) -> Snapshot:
    """A snapshot (no I/O) of a table with ``schema`` holding ``files``."""
    metadata = Metadata(id="t", schema_string=schema_string(schema), partition_columns=list(partition_columns),
                        configuration={}, created_time=1)
    protocol = Protocol(min_reader_version=3, min_writer_version=7, reader_features=["timestampNtz"],
                        writer_features=["timestampNtz"])
    return Snapshot(state=replay([(0, [protocol, metadata, *files])]), table_path="s3://bucket/t")


def kept(stats: dict | str | None, schema: pa.Schema, filter: pc.Expression) -> bool:
    """Whether a read of a one-file table with ``filter`` opens the file."""
    return bool(prune_files(snapshot_of(schema, [file_with(stats)]), filter))


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


def test_timestamps_before_year_1000_are_zero_padded_iso_8601():
    zoned = pa.array([dt.datetime(999, 1, 1), dt.datetime(5, 6, 7, 8, 9, 10)], pa.timestamp("us", tz="UTC"))
    naive = pa.array([dt.datetime(1, 1, 1)], pa.timestamp("us"))
    stats = stats_of(pa.table({"t": zoned}))
    assert stats["minValues"]["t"] == "0005-06-07T08:09:10.000Z"
    assert stats["maxValues"]["t"] == "0999-01-01T00:00:00.000Z"
    assert stats_of(pa.table({"t": naive}))["minValues"]["t"] == "0001-01-01T00:00:00.000"
    assert dt.datetime.fromisoformat(stats["maxValues"]["t"][:-1]) == dt.datetime(999, 1, 1)


def test_dates_before_year_1000_are_zero_padded():
    stats = stats_of(pa.table({"d": pa.array([dt.date(999, 12, 31), dt.date(5, 1, 2)])}))
    assert stats["minValues"]["d"] == "0005-01-02" and stats["maxValues"]["d"] == "0999-12-31"


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


# --- files in several row groups ------------------------------------------------------------------


def _rows_of_every_kind(rng: random.Random, rows: int) -> pa.Table:
    """Random rows of every kind of column that has bounds, with NaNs, long strings and all-null stretches."""

    def maybe(value):
        return None if rng.random() < 0.25 else value

    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table({
        "i": pa.array([maybe(rng.randint(-5, 5)) for _ in range(rows)], pa.int32()),
        "f": pa.array([maybe(rng.choice([-1.5, 0.25, 3.0, float("nan")] if rng.random() < 0.1 else [-1.5, 0.25, 3.0]))
                       for _ in range(rows)], pa.float64()),
        "inf": pa.array([maybe(rng.choice([float("inf"), 1.0, -2.0])) for _ in range(rows)], pa.float64()),
        "s": pa.array([maybe(rng.choice(["", "a", "ab", "c", "é" * 40, "é" * 41])) for _ in range(rows)], pa.string()),
        "t": pa.array([maybe(rng.choice([dt.datetime(999, 1, 1, tzinfo=UTC), base]) +
                             dt.timedelta(microseconds=rng.randint(0, 5000))) for _ in range(rows)],
                      pa.timestamp("us", tz="UTC")),
        "d": pa.array([maybe(dt.date(rng.choice([999, 2024]), 1, rng.randint(1, 5))) for _ in range(rows)],
                      pa.date32()),
        "dec": pa.array([maybe(Decimal(rng.randint(-999, 999)).scaleb(-2)) for _ in range(rows)], pa.decimal128(5, 2)),
        "st": pa.array([maybe({"a": maybe(rng.randint(0, 9)), "b": maybe(rng.choice(["x", "y"]))})
                        for _ in range(rows)], pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "bin": pa.array([maybe(b"x") for _ in range(rows)], pa.binary()),
        "l": pa.array([maybe([rng.randint(0, 3)]) for _ in range(rows)], pa.list_(pa.int64())),
    })


def _stats_in_row_groups(parts: list[pa.Table]) -> str:
    """The stats the staging writer gives a file written as one row group per part."""
    collector = StatsCollector(parts[0].schema)
    writer = pq.ParquetWriter(io.BytesIO(), parts[0].schema)
    for part in parts:
        collector.add(part)
        writer.write_table(part)
    writer.close()
    assert writer.writer.metadata.num_row_groups == len([p for p in parts if p.num_rows])
    return collector.stats(writer.writer.metadata)


def test_a_file_in_several_row_groups_has_the_stats_of_all_its_rows_in_one():
    """Bounds come from each row group's footer statistics: combining them must give what one row group
    holding every row gives, NaNs, long strings, infinities and all-null row groups included."""
    rng = random.Random(7)
    for _ in range(150):
        table = _rows_of_every_kind(rng, rng.randint(1, 12))
        cuts = sorted(rng.randint(1, table.num_rows) for _ in range(rng.randint(0, 3)))
        parts = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows]) if b > a]
        merged = json.loads(_stats_in_row_groups(parts), parse_float=Decimal)
        assert merged == json.loads(compute_stats(table), parse_float=Decimal)


def test_a_nan_in_any_row_group_leaves_the_file_without_bounds_for_that_column():
    parts = [pa.table({"f": [1.0, 2.0]}), pa.table({"f": [float("nan"), 0.5]})]
    stats = json.loads(_stats_in_row_groups(parts))
    assert "f" not in stats["minValues"] and "f" not in stats["maxValues"] and stats["nullCount"] == {"f": 0}


# --- what stats prove: pruning through fragment guarantees ----------------------------------------------

X = pc.field("x")
X_5_TO_9 = {"numRecords": 4, "minValues": {"x": 5}, "maxValues": {"x": 9}, "nullCount": {"x": 0}}
INT_SCHEMA = pa.schema([("x", pa.int64())])


@pytest.mark.parametrize(
    "filter, may_match",
    [
        (X < 5, False), (X <= 5, True), (X < 6, True),
        (X > 9, False), (X >= 9, True), (X > 8, True),
        (X == 4, False), (X == 10, False), (X == 5, True), (X == 7, True), (X == 9, True),
        (X != 7, True), (X.isin([1, 2, 10]), False), (X.isin([1, 9]), True),
        (X.is_null(), False), (X.is_valid(), True), (~X.is_null(), True),
        (X < 5.5, True), (X > 9.5, False), (X == 8.5, True), (~(X < 10), False), (~(X < 9), True),
        ((X == 15) | (X == 2), False), ((X == 15) | (X == 7), True),
        ((X > 6) & (X < 8), True), ((X > 6) & (X > 20), False),
    ],
)
def test_a_file_with_min_5_and_max_9(filter, may_match):
    assert kept(X_5_TO_9, INT_SCHEMA, filter) is may_match


def test_a_column_with_some_nulls_gets_no_range_so_is_null_is_never_ruled_out():
    some_nulls = {"numRecords": 4, "minValues": {"x": 5}, "maxValues": {"x": 9}, "nullCount": {"x": 1}}
    assert kept(some_nulls, INT_SCHEMA, X.is_null())
    assert kept(some_nulls, INT_SCHEMA, X.isin([None]))
    assert kept(some_nulls, INT_SCHEMA, X > 20)  # the price: a range would also claim "no nulls"


def test_an_all_null_column_is_known_null():
    all_null = {"numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"x": 2}}
    assert kept(all_null, INT_SCHEMA, X.is_null())
    assert kept(all_null, INT_SCHEMA, X.isin([None]))
    assert not kept(all_null, INT_SCHEMA, X.is_valid())
    assert not kept(all_null, INT_SCHEMA, X > 0)
    assert not kept(all_null, pa.schema([("x", pa.float64())]), pc.field("x") == 1.0)


def test_anything_unknown_means_the_file_may_match():
    assert kept(None, INT_SCHEMA, X < 0)
    assert kept("not json", INT_SCHEMA, X < 0)
    assert kept({"numRecords": 4, "minValues": {"x": 5}, "maxValues": {"x": 9}}, INT_SCHEMA, X < 0)  # no nullCount
    assert kept({"numRecords": 4, "nullCount": {"x": 0}}, INT_SCHEMA, X < 0)  # no bounds
    assert kept({"numRecords": 4, "minValues": {"x": "5"}, "maxValues": {"x": 9.0}, "nullCount": {"x": 0}},
                INT_SCHEMA, X < 0)  # not JSON integers
    assert kept({"numRecords": 4, "minValues": {"y": 5}, "maxValues": {"y": 9}, "nullCount": {"y": 0}},
                INT_SCHEMA, X < 0)  # another column's


def test_the_guarantee_is_an_expression_of_the_column_types():
    schema = pa.schema([("x", pa.int16()), ("s", pa.string()), ("f", pa.float64()), ("n", pa.int64())])
    stats = {"numRecords": 2, "minValues": {"x": 1, "s": "a", "f": 0.5}, "maxValues": {"x": 3, "s": "b", "f": 1.5},
             "nullCount": {"x": 0, "s": 1, "f": 0, "n": 2}}
    guarantee = stats_guarantee(json.dumps(stats), schema)
    expected = ((pc.field("x") >= pa.scalar(1, pa.int16())) & (pc.field("x") <= pa.scalar(3, pa.int16()))
                & pc.field("n").is_null())
    assert guarantee.equals(expected)
    assert stats_guarantee(None, schema).equals(pc.scalar(True))
    assert stats_guarantee(parse_stats(json.dumps(stats)), schema).equals(expected)


def test_floats_get_no_range_because_bounds_say_nothing_about_nan():
    # delta-rs computes bounds ignoring NaN, so a file with bounds [1, 2] may hold NaN, which
    # ~(f < 5) and is_in([nan]) match.
    schema = pa.schema([("f", pa.float64())])
    ignoring_nan = {"numRecords": 3, "minValues": {"f": 1.0}, "maxValues": {"f": 2.0}, "nullCount": {"f": 0}}
    f = pc.field("f")
    for filter in (~(f < 5), f.isin([float("nan")]), f > 1000.0, f.is_nan()):
        assert kept(ignoring_nan, schema, filter)


def test_a_string_max_that_may_be_a_truncated_prefix_is_not_a_bound():
    schema = pa.schema([("s", pa.string())])
    s = pc.field("s")
    short = {"numRecords": 1, "minValues": {"s": "abc"}, "maxValues": {"s": "abc"}, "nullCount": {"s": 0}}
    assert not kept(short, schema, s > "abc") and not kept(short, schema, s < "abc") and kept(short, schema, s == "abc")
    # A writer cut the real maximum "a" * 32 + "z" to its 32-character prefix.
    cut = {"numRecords": 1, "minValues": {"s": "a" * 32}, "maxValues": {"s": "a" * 32}, "nullCount": {"s": 0}}
    assert kept(cut, schema, s == "a" * 32 + "z") and kept(cut, schema, s > "b")
    assert not kept(cut, schema, s < "a" * 32)
    # 16 astral characters are 32 UTF-16 code units: a Java writer may have cut there.
    astral = {"numRecords": 1, "minValues": {"s": "😀" * 16}, "maxValues": {"s": "😀" * 16}, "nullCount": {"s": 0}}
    assert kept(astral, schema, s > "😀" * 17)
    # A minimum cut to a prefix is still a lower bound.
    prefix_min = {"numRecords": 1, "minValues": {"s": "abc"}, "maxValues": {"s": "abd"}, "nullCount": {"s": 0}}
    assert kept(prefix_min, schema, s == "abcz") and not kept(prefix_min, schema, s < "abc")


def test_timestamp_bounds_cover_the_millisecond_they_were_truncated_to():
    # The only value is 00:00:00.0015; delta-rs and Spark write it as 00:00:00.001 both ways.
    stats = {"numRecords": 1, "minValues": {"t": "2024-01-01T00:00:00.001Z"},
             "maxValues": {"t": "2024-01-01T00:00:00.001Z"}, "nullCount": {"t": 0}}
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    t = pc.field("t")

    def at(micros: int) -> pa.Scalar:
        return pa.scalar(dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=micros), pa.timestamp("us", tz="UTC"))

    assert kept(stats, schema, t == at(1500)) and kept(stats, schema, t > at(1400)) and kept(stats, schema, t >= at(1999))
    assert not kept(stats, schema, t >= at(2000)) and not kept(stats, schema, t > at(1999))
    assert kept(stats, schema, t <= at(1)) and not kept(stats, schema, t < at(1))


def test_timestamp_stats_are_read_with_their_zone():
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    t = pc.field("t")
    noon_utc = pa.scalar(dt.datetime(2024, 1, 1, 12, tzinfo=UTC), pa.timestamp("us", tz="UTC"))
    for written in ("2024-01-01T13:00:00.000+01:00", "2024-01-01T12:00:00.000Z", "2024-01-01T12:00:00.000",
                    "2024-01-01 12:00:00"):
        stats = {"numRecords": 1, "minValues": {"t": written}, "maxValues": {"t": written}, "nullCount": {"t": 0}}
        assert kept(stats, schema, t == noon_utc), written
        assert not kept(stats, schema, t > pa.scalar(dt.datetime(2024, 1, 1, 12, 0, 1, tzinfo=UTC), pa.timestamp("us", tz="UTC")))


def test_timestamp_ntz_stats_are_wall_clock_and_an_offset_makes_them_unusable():
    schema = pa.schema([("t", pa.timestamp("us"))])
    t = pc.field("t")
    later = pa.scalar(dt.datetime(2024, 1, 2), pa.timestamp("us"))
    naive = {"numRecords": 1, "minValues": {"t": "2024-01-01 12:00:00.123"}, "maxValues": {"t": "2024-01-01 12:00:00.123"},
             "nullCount": {"t": 0}}
    assert not kept(naive, schema, t > later)
    zoned = {**naive, "maxValues": {"t": "2024-01-01T12:00:00.123+05:00"}}
    assert kept(zoned, schema, t > later)


def test_stats_that_do_not_parse_prune_nothing():
    # What this project wrote before years below 1000 were zero-padded: not ISO-8601.
    schema = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("d", pa.date32())])
    stats = {"numRecords": 1, "minValues": {"t": "999-01-01T00:00:00.000Z", "d": "999-01-01"},
             "maxValues": {"t": "999-01-01T00:00:00.000Z", "d": "999-01-01"}, "nullCount": {"t": 0, "d": 0}}
    assert kept(stats, schema, pc.field("t") > pa.scalar(dt.datetime(2000, 1, 1, tzinfo=UTC), pa.timestamp("us", tz="UTC")))
    assert kept(stats, schema, pc.field("d") > pa.scalar(dt.date(2000, 1, 1)))
    padded = {**stats, "maxValues": {"t": "0999-01-01T00:00:00.000Z", "d": "0999-01-01"}}
    assert not kept(padded, schema, pc.field("d") > pa.scalar(dt.date(2000, 1, 1)))


def test_decimal_bounds_are_exact_up_to_15_digits_and_widened_beyond():
    small = pa.schema([("d", pa.decimal128(5, 2))])
    d = pc.field("d")
    stats = {"numRecords": 2, "minValues": {"d": 1.10}, "maxValues": {"d": 9.99}, "nullCount": {"d": 0}}
    assert kept(stats, small, d == pa.scalar(Decimal("9.99"), pa.decimal128(5, 2)))
    assert not kept(stats, small, d > pa.scalar(Decimal("9.99"), pa.decimal128(5, 2)))
    assert not kept(stats, small, d < pa.scalar(Decimal("1.10"), pa.decimal128(5, 2)))
    # delta-rs writes decimal stats through a double: these are what it wrote for the true bounds.
    wide = pa.decimal128(38, 18)
    low, high = Decimal("0.300000000000000001"), Decimal("12345678901234567890.123456789")
    through_double = '{"numRecords":2,"minValues":{"d":0.3},"maxValues":{"d":1.2345678901234567e+19},"nullCount":{"d":0}}'
    schema = pa.schema([("d", wide)])
    assert kept(through_double, schema, d == pa.scalar(low, wide))
    assert kept(through_double, schema, d == pa.scalar(high, wide))
    assert not kept(through_double, schema, d > pa.scalar(Decimal("12346000000000000000"), wide))
    assert not kept(through_double, schema, d < pa.scalar(Decimal("0.2999999"), wide))


def test_partition_values_and_stats_prune_together():
    schema = pa.schema([("day", pa.date32()), ("region", pa.string()), ("x", pa.int64())])
    files = [
        file_with(X_5_TO_9, {"day": "2024-01-02", "region": None}, path="a.parquet"),
        file_with({"numRecords": 1, "minValues": {"x": 20}, "maxValues": {"x": 30}, "nullCount": {"x": 0}},
                  {"day": "2024-01-02", "region": "eu"}, path="b.parquet"),
    ]
    snapshot = snapshot_of(schema, files, ("day", "region"))

    def paths(filter) -> list[str]:
        return sorted(f.path for f in prune_files(snapshot, filter))

    day = pc.field("day")
    assert paths(day == pa.scalar(dt.date(2024, 1, 2))) == ["a.parquet", "b.parquet"]
    assert paths(day > pa.scalar(dt.date(2024, 1, 2))) == []
    assert paths(pc.field("region").is_null()) == ["a.parquet"]
    assert paths((pc.field("region") == "eu") & (X < 10)) == []
    assert paths(X > 8) == ["a.parquet", "b.parquet"]
    assert paths(X > 10) == ["b.parquet"]


# --- the property: a file holding a matching row is never skipped ---------------------------------------

_SCHEMA = pa.schema([
    ("p", pa.string()), ("i", pa.int64()), ("n", pa.int64()), ("f", pa.float64()), ("s", pa.string()),
    ("t", pa.timestamp("us", tz="UTC")), ("tn", pa.timestamp("us")), ("d", pa.date32()),
    ("dec", pa.decimal128(5, 2)), ("big", pa.decimal128(38, 18)),
])
_BASE = dt.datetime(1969, 12, 31, 23, 59, 59, 997000)  # millisecond boundaries on both sides of the epoch
_STRINGS = ["", "a", "ab", "b" * 31, "b" * 32, "b" * 33, "b" * 40, "é" * 33, "😀" * 16 + "a", "c"]
_BIGS = [Decimal("0.300000000000000001"), Decimal("12345678901234567890.123456789"), Decimal("-1"), Decimal("0")]


def _values(rng: random.Random, column: str, rows: int, *, nulls: float) -> list:
    def one():
        if column == "i" or column == "n":
            return rng.randint(-5, 5)
        if column == "f":
            return rng.choice([-1.5, 0.0, 2.25, 3.0, float("nan")])
        if column == "s":
            return rng.choice(_STRINGS)
        if column in ("t", "tn"):
            moment = _BASE + dt.timedelta(microseconds=rng.choice([0, 1, 999, 1000, 1001, 1500, 2999, 3000, 5000]))
            return moment.replace(tzinfo=UTC) if column == "t" else moment
        if column == "d":
            return dt.date(2024, 1, rng.randint(1, 5))
        if column == "dec":
            return Decimal(rng.randint(-300, 300)).scaleb(-2)
        return rng.choice(_BIGS)

    return [None if rng.random() < nulls else one() for _ in range(rows)]


def _random_file(rng: random.Random) -> pa.Table:
    rows = rng.randint(1, 5)
    nulls = rng.choice([0.0, 0.0, 0.3, 1.0])
    columns = {name: _values(rng, name, rows, nulls=0.0 if name == "n" else nulls) for name in _SCHEMA.names[1:]}
    columns["p"] = [rng.choice(["x", "y", None])] * rows
    return pa.table(columns, schema=_SCHEMA)


def _as_other_writers_write(stats_json: str, data: pa.Table) -> str:
    """Stats as delta-rs or Spark may write them: timestamps truncated to the millisecond both ways, string
    maxima cut to 32 UTF-16 code units (Java), decimals through a double, float bounds ignoring NaN."""
    stats = json.loads(stats_json)

    def present(column: str) -> list:
        return [v for v in data[column].to_pylist() if v is not None]

    for column in ("t", "tn"):
        if present(column):
            for key, value in (("minValues", min(present(column))), ("maxValues", max(present(column)))):
                text = value.replace(tzinfo=None, microsecond=value.microsecond // 1000 * 1000).isoformat(timespec="milliseconds")
                stats[key][column] = text + ("Z" if column == "t" else "")
    if present("s"):
        cut = max(present("s")).encode("utf-16-le")[:2 * STRING_PREFIX_LENGTH]
        stats["maxValues"]["s"] = cut.decode("utf-16-le", errors="ignore")
    for key in ("minValues", "maxValues"):
        if "big" in stats[key]:
            stats[key]["big"] = float(stats[key]["big"])
    numbers = [v for v in present("f") if v == v]
    if numbers:
        stats["minValues"]["f"], stats["maxValues"]["f"] = min(numbers), max(numbers)
    return json.dumps(stats)


def _probes(column: str) -> list:
    if column == "p":
        return ["x", "y", "z"]
    if column in ("i", "n"):
        return [-6, -5, 0, 3, 5, 6, 2.5]
    if column == "f":
        return [-2.0, -1.5, 0.0, 3.0, 4.0]
    if column == "s":
        return [*_STRINGS, "aa", "b" * 32 + "a", "é" * 40, "😀" * 17, "d"]
    if column in ("t", "tn"):
        moments = [_BASE + dt.timedelta(microseconds=m) for m in (-1, 0, 500, 999, 1000, 1499, 1500, 2000, 3000, 6000)]
        return [pa.scalar(m.replace(tzinfo=UTC) if column == "t" else m, _SCHEMA.field(column).type) for m in moments]
    if column == "d":
        return [dt.date(2024, 1, day) for day in range(1, 7)]
    if column == "dec":
        return [pa.scalar(Decimal(v).scaleb(-2), pa.decimal128(5, 2)) for v in (-301, -300, 0, 150, 300, 301)]
    return [pa.scalar(v, pa.decimal128(38, 18)) for v in (*_BIGS, Decimal("0.3"), Decimal("12345678901234567890.2"))]


def _filters(rng: random.Random) -> list[pc.Expression]:
    filters = []
    for column in _SCHEMA.names:
        field = pc.field(column)
        probes = _probes(column)
        for value in probes:
            filters += [field == value, field != value, field < value, field <= value, field > value, field >= value,
                        ~(field < value)]
        plain = [v for v in probes if not isinstance(v, float)][:3]
        filters += [field.is_null(), field.is_valid(), field.isin(plain), field.isin([*plain[:1], None]),
                    (field == probes[0]) | (field == probes[-1])]
    for _ in range(30):
        a, b = rng.sample(_SCHEMA.names, 2)
        filters.append((pc.field(a) >= rng.choice(_probes(a))) & (pc.field(b) <= rng.choice(_probes(b))))
    return filters


def test_pruning_never_skips_a_file_that_holds_a_matching_row():
    rng = random.Random(20240101)
    skipped = 0
    for _ in range(12):
        tables = [_random_file(rng) for _ in range(rng.randint(2, 4))]
        files = []
        for index, table in enumerate(tables):
            stats = compute_stats(table.drop_columns(["p"]))
            if rng.random() < 0.5:
                stats = _as_other_writers_write(stats, table)
            files.append(file_with(stats, {"p": table["p"][0].as_py()}, path=f"{index}.parquet"))
        # The dataset a read builds; asking it for its fragments opens nothing.
        readable = SimpleNamespace(uri=TableUri.parse("s3://bucket/t"), snapshot=snapshot_of(_SCHEMA, files, ("p",)),
                                   storage_options=None)
        dataset = to_pyarrow_dataset(readable, filesystem=pafs.LocalFileSystem())
        for filter in _filters(rng):
            opened = {fragment.path.rsplit("/", 1)[-1] for fragment in dataset.get_fragments(filter=filter)}
            for index, table in enumerate(tables):
                if f"{index}.parquet" not in opened:
                    skipped += 1
                    assert table.filter(filter).num_rows == 0, (str(filter), table.to_pylist(), files[index].stats)
    assert skipped > 1000  # the property is not vacuous: files were skipped


# --- against delta-rs -------------------------------------------------------------------------------


@pytest.mark.interop
def test_delta_rs_stats_never_prune_a_file_with_matching_rows(deltars_table, deltars_commits):
    state = replay((v, parse_commit(body, version=v)) for v, body in deltars_commits)
    snapshot = Snapshot(state=state, table_path="s3://bucket/t")
    for add in state.files.values():
        assert add.stats is None or isinstance(parse_stats(add.stats), Stats)
        rows = pq.read_table(deltars_table / unquote(add.path))
        for column in rows.column_names:
            if column in state.partition_columns:
                continue
            field = pc.field(column)
            for value in [v for v in rows[column].to_pylist() if v is not None][:3]:
                scalar = pa.scalar(value, snapshot.schema.field(column).type)
                for filter in (field == scalar, field <= scalar, field >= scalar):
                    assert add in prune_files(snapshot, filter), (add.path, column, str(filter))
