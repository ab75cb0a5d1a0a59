"""The corpus: tables other Delta implementations wrote (delta-spark through delta-kernel-rs's and delta's golden
tables, Databricks Runtime, delta-rs), read here and compared with expectations we did not compute.

The expectations, per table, are one or more of:

- the ``expected/`` rows the golden tables ship (written by Spark when the table was made);
- the rows delta-kernel-rs's tests publish for its test tables (copied below, with where they come from);
- deltalake's SQL reader (delta-rs, ``QueryBuilder``) reading the same files at every version;
- values the table's own log states independently of its data (one-row files whose statistics give the
  exact value, commit timestamps written in ``commitInfo``).

Every table of the corpus is read; none is refused any more (the last, with shredded variants, reads since
shredded files are rebuilt). A table we should read but refuse with a typed error is listed in
:data:`READ_GAPS` or :data:`CDF_GAPS`, with why. When support lands, these tests fail: take the table off the
list. No table may ever read as something other than its expectation: either the right
rows, or a typed error. Where each table comes from, and its license: ``tests/data/README.md``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore.errors import InvalidArgumentError

from logstore.errors import CorruptLogError, DynacommitError
from table import Table, UnsupportedFeatureError, write_table
from table.log.actions import CommitInfo, Sidecar
from table.log.checkpoint_files import listed_checkpoints
from table.log.snapshot import read_commit
from table.table import forget_snapshots
from tests.support.corpus import DATA, canonical, deltalake_rows, read_expected, to_directory, to_memory, unpack


@dataclasses.dataclass(frozen=True)
class Case:
    """One corpus table: ``source`` under tests/data (a directory, or a .tar.zst), ``inside`` the path of the
    table in it, ``expected`` the golden rows' directory in it, ``covers`` what it exercises."""

    source: str
    covers: str
    inside: str = ""
    expected: str | None = None
    deltalake: str | None = None  # why deltalake cannot be the expectation, when it cannot

    @property
    def name(self) -> str:
        return Path(self.source).name.removesuffix(".tar.zst")


def golden(name: str, covers: str, **kwargs) -> Case:
    """A delta-kernel-rs golden table (kernel/tests/golden_data): the table in ``<name>/delta``, Spark's rows
    in ``<name>/expected``."""
    return Case(f"delta-kernel-rs/golden/{name}.tar.zst", covers, inside=f"{name}/delta", expected=f"{name}/expected",
                **kwargs)


def kernel(name: str, covers: str, **kwargs) -> Case:
    """A delta-kernel-rs test table (kernel/tests/data)."""
    return Case(f"delta-kernel-rs/{name}.tar.zst", covers, inside=name, **kwargs)


DELTALAKE_REFUSES = "deltalake 1.6.6 refuses the table ({})"

CASES = [
    golden("basic-with-inserts-deletes-checkpoint", "classic checkpoint, deletes"),
    golden("basic-with-inserts-merge", "MERGE"),
    golden("basic-with-inserts-updates", "UPDATE"),
    golden("basic-with-inserts-overwrite-restore", "overwrite and RESTORE"),
    golden("basic-with-vacuum-protocol-check-feature", "vacuumProtocolCheck (reader and writer feature)",
           deltalake=DELTALAKE_REFUSES.format("vacuumProtocolCheck")),
    golden("multi-part-checkpoint", "multi-part checkpoint"),
    golden("only-checkpoint-files", "commits before the checkpoint cleaned up"),
    golden("corrupted-last-checkpoint-kernel", "unreadable _last_checkpoint"),
    golden("v2-checkpoint-json", "V2 checkpoint, JSON, sidecars"),
    golden("v2-checkpoint-parquet", "V2 checkpoint, Parquet, sidecars"),
    golden("dv-partitioned-with-checkpoint", "deletion vectors in a checkpoint, partitions"),
    golden("dv-with-columnmapping", "deletion vectors and column mapping"),
    golden("table-with-columnmapping-mode-name", "column mapping, name mode"),
    golden("table-with-columnmapping-mode-id", "column mapping, id mode"),
    golden("data-reader-timestamp_ntz-name-mode", "timestampNtz with column mapping (name)"),
    golden("data-reader-timestamp_ntz-id-mode", "timestampNtz with column mapping (id)"),
    golden("log-replay-dv-key-cases", "deletion vectors: logical file keys in replay"),
    golden("data-reader-timestamp_ntz", "timestampNtz"),
    golden("kernel-timestamp-int96", "INT96 timestamps"),
    golden("kernel-timestamp-pst", "timestamps written in a non-UTC session"),
    golden("kernel-timestamp-timestamp_micros", "TIMESTAMP_MICROS"),
    golden("kernel-timestamp-timestamp_millis", "TIMESTAMP_MILLIS"),
    golden("data-reader-date-types-utc", "dates"),
    golden("data-reader-date-types-America", "dates written in a non-UTC session"),
    golden("data-reader-partition-values", "partition values of every type"),
    golden("data-reader-primitives", "primitive types"),
    golden("data-reader-nested-struct", "nested structs"),
    golden("data-reader-map", "maps"),
    golden("data-reader-array-complex-objects", "arrays of structs and maps"),
    golden("decimal-various-scale-precision", "decimals"),
    golden("basic-decimal-table", "decimal partition values",
           deltalake="deltalake 1.6.6 fails to parse the negative decimal partition value -2342342.23423"),
    golden("data-skipping-partition-and-data-column", "statistics and partitions"),
    golden("log-replay-latest-metadata-protocol", "the latest protocol and metaData win"),
    golden("log-replay-special-characters-a", "paths with special characters"),
    golden("snapshot-data2-deleted", "versions with deletes (time travel)"),
    golden("snapshot-repartitioned", "repartitioned table (time travel)"),
    golden("time-travel-partition-changes-b", "partitioning changed by an overwrite (time travel)"),
    golden("time-travel-schema-changes-b", "schema changed (time travel)"),
    golden("time-travel-start-start20-start40", "time travel"),
    golden("deltalog-getChanges", "txn actions, removes"),
    golden("125-iterator-bug", "many small commits"),
    kernel("v2-checkpoints-json-with-sidecars", "V2 checkpoints, JSON, sidecar files"),
    kernel("v2-checkpoints-parquet-with-sidecars", "V2 checkpoints, Parquet, sidecar files"),
    kernel("v2-checkpoints-json-without-sidecars", "V2 checkpoint, JSON, file actions inline"),
    kernel("v2-checkpoints-parquet-without-sidecars", "V2 checkpoint, Parquet, file actions inline"),
    kernel("v2-checkpoints-json-with-last-checkpoint", "_last_checkpoint naming a V2 checkpoint (JSON)"),
    kernel("v2-checkpoints-parquet-with-last-checkpoint", "_last_checkpoint naming a V2 checkpoint (Parquet)"),
    kernel("v2-classic-checkpoint-json", "classic-named V2 checkpoint; the hint names a file that is gone"),
    kernel("v2-classic-checkpoint-parquet", "classic-named V2 checkpoint; the hint names a file that is gone"),
    kernel("compacted-log-files-table", "log compaction files (never needed), deletion vectors"),
    kernel("cdf-table", "change data feed, partitioned"),
    kernel("cdf-table-non-partitioned", "change data feed"),
    kernel("cdf-table-with-dv", "change data feed with deletion vectors"),
    kernel("cdf-table-with-cdc-and-dvs", "change data files and deletion vectors"),
    kernel("cdf-table-update-ops", "change data feed of UPDATE"),
    kernel("cdf-table-delete-conditional-two-rows", "change data feed of DELETE"),
    kernel("cdf-column-mapping-name-mode", "change data feed with column mapping (name, reader version 2)"),
    kernel("unshredded-variant", "variant (unshredded, nested in arrays, structs and maps)"),
    kernel("timestamp-partitioned-table", "timestamp partition values, deletionVectors listed"),
    Case("delta-rs/cdc_ict_table", "in-commit timestamps, change data feed"),
    Case("delta-rs/checkpoint-v2-table", "V2 checkpoints written by delta-spark, identity columns"),
    Case("delta-rs/table_with_liquid_clustering", "clustering preview, row tracking, deletion vectors"),
    Case("delta-rs/table_with_column_mapping", "column mapping: names with spaces, a reader ignoring it sees nulls"),
    Case("delta-rs/table_with_edge_timestamps", "timestamps at year 9999 (INT96)",
         deltalake="deltalake 1.6.6 overflows casting the INT96 values to nanoseconds"),
    Case("delta-rs/spark-variant-checkpoint", "variant (preview feature) with a checkpoint"),
    Case("delta-rs/spark-shredded-variant-preview-delta", "variantShredding-preview listed (files unshredded), "
         "variants nested in arrays, structs and maps, a checkpoint",
         deltalake=DELTALAKE_REFUSES.format("variantShredding-preview")),
    Case("delta-rs/delta-2.2.0-partitioned-types", "partition values of several types"),
    Case("delta-rs/table_with_null_stats_in_notnull_struct", "null statistics in a non-nullable struct"),
    Case("delta/type-widening", "type widening: integers, floats, decimals, date to timestamp_ntz",
         deltalake=DELTALAKE_REFUSES.format("typeWidening-preview")),
    Case("delta/type-widening-nested", "type widening in structs, maps and arrays",
         deltalake=DELTALAKE_REFUSES.format("typeWidening-preview")),
    Case("delta/collations-table", "collations (a writer feature: read, appended to; SQL over its collated columns refused)"),
    Case("delta/table-with-icebegCompatV2Enabled", "IcebergCompatV2: column mapping, nested ids of arrays and maps"),
]


READ_GAPS: dict[str, tuple[type[Exception], str]] = {}
CDF_GAPS: dict[str, tuple[type[Exception], str]] = {}
"""Tables we refuse with a typed error though we should read them (their rows, or their change feed):
name -> (the error, why). Their tests are strict xfails: when a gap is closed the test passes, fails as an
unexpected pass, and the entry must go."""


def _gap(name: str, gaps: dict[str, tuple[type[Exception], str]]):
    if name not in gaps:
        return ()
    error, why = gaps[name]
    return (pytest.mark.xfail(raises=error, strict=True, reason=why),)


MALFORMED: dict[str, tuple[type[Exception], str]] = {
    "delta-kernel-rs/golden/deltalog-invalid-protocol-version.tar.zst": (UnsupportedFeatureError, "reader version 99"),
    "delta-kernel-rs/golden/deltalog-state-reconstruction-without-metadata.tar.zst": (CorruptLogError, "metaData"),
    "delta-kernel-rs/golden/deltalog-state-reconstruction-without-protocol.tar.zst": (CorruptLogError, "protocol"),
}
"""Tables the golden corpus makes broken on purpose: source -> (the error, what it must name)."""

EXPECTED_DIFFERS: dict[str, tuple[set[str], str]] = {
    "data-reader-partition-values": (
        {"as_timestamp"},
        "its partition value '2021-09-08 11:11:11' has no zone: PROTOCOL.md stores partition timestamps in UTC, "
        "and delta-kernel-rs and deltalake read it so (as we do), while the expected rows were written by a "
        "Spark session in another zone (delta-kernel-rs skips this table for that reason)"),
}
"""Golden tables whose ``expected/`` rows disagree with PROTOCOL.md on some columns: those columns are
compared with deltalake instead (``test_reads_every_version_as_deltalake_reads_it``)."""

V2_PUBLISHED_IDS = {
    # delta-kernel-rs kernel/tests/integration/log/v2_checkpoints.rs: the ids each table holds
    "v2-checkpoints-json-with-sidecars": [0] * 3 + [*range(30), *range(100), *range(100), *range(1000)],
    "v2-checkpoints-parquet-with-sidecars": [0] * 3 + [*range(30), *range(100), *range(100), *range(1000)],
    "v2-checkpoints-json-without-sidecars": [*range(10), 2718],
    "v2-checkpoints-parquet-without-sidecars": [*range(10), 2718],
    "v2-checkpoints-json-with-last-checkpoint": list(range(10)),
    "v2-checkpoints-parquet-with-last-checkpoint": list(range(10)),
    "v2-classic-checkpoint-json": list(range(20)),
    "v2-classic-checkpoint-parquet": list(range(20)),
}


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The directory of a corpus table (archives unpacked once per module)."""
    root = tmp_path_factory.mktemp("corpus")

    def locate(source: str, inside: str = "") -> Path:
        path = DATA / source
        base = unpack(path, root) if source.endswith(".tar.zst") else path
        return base / inside if inside else base

    return locate


def _read(uri: str, version: int | None = None) -> pa.Table:
    return Table(uri, version=version).to_pyarrow_table()


def _versions(table_dir: Path) -> list[int]:
    """Every version whose commit file is in the log, from the oldest a checkpoint or version 0 makes
    readable."""
    names = [p.name for p in (table_dir / "_delta_log").iterdir()]
    commits = sorted(int(n[:20]) for n in names if re.fullmatch(r"\d{20}\.json", n))
    checkpoints = [ref.version for ref in listed_checkpoints(names)]
    oldest = 0 if 0 in commits else min(checkpoints)
    return [v for v in range(oldest, max(commits + checkpoints) + 1) if v in commits or v in checkpoints]


def _without(rows: list, columns: set[str]) -> list:
    return sorted((tuple(item for item in row if item[0] not in columns) for row in rows), key=repr)


# --- the rows -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c in CASES if c.expected], ids=lambda c: c.name)
def test_reads_the_rows_the_golden_tables_expect(case, unpacked):
    table = Table(to_memory(unpacked(case.source, case.inside)))
    got = table.to_pyarrow_table()
    expected = read_expected(unpacked(case.source, case.expected))
    assert sorted(got.column_names) == sorted(expected.column_names)
    skip, _ = EXPECTED_DIFFERS.get(case.name, (set(), ""))
    assert _without(canonical(got), skip) == _without(canonical(expected), skip)


@pytest.mark.interop
@pytest.mark.parametrize("case", [pytest.param(c, marks=_gap(c.name, READ_GAPS), id=c.name)
                                  for c in CASES if c.deltalake is None])
def test_reads_every_version_as_deltalake_reads_it(case, unpacked):
    """At the versions deltalake cannot read (test tables whose data files were never kept), we must not
    read rows either."""
    directory = unpacked(case.source, case.inside)
    uri = to_memory(directory)
    for version in _versions(directory):
        try:
            theirs = deltalake_rows(directory, version)
        except Exception:  # noqa: BLE001 - whatever deltalake raises, we must raise too
            with pytest.raises(DynacommitError):
                _read(uri, version)
            continue
        ours = _read(uri, version)
        assert sorted(ours.column_names) == sorted(theirs.column_names), f"version {version}"
        assert canonical(ours) == canonical(theirs), f"version {version}"


@pytest.mark.parametrize("name", sorted(V2_PUBLISHED_IDS))
def test_v2_checkpoint_tables_hold_the_ids_delta_kernel_rs_publishes_and_are_read_from_their_checkpoint(
        name, unpacked):
    directory = unpacked(f"delta-kernel-rs/{name}.tar.zst", name)
    table = Table(to_memory(directory))
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == sorted(V2_PUBLISHED_IDS[name])
    newest = listed_checkpoints([p.name for p in (directory / "_delta_log").iterdir()])[0]
    assert table.snapshot.checkpoint_version == newest.version
    if "with-sidecars" in name:
        sidecars = list((directory / "_delta_log" / "_sidecars").glob("*.parquet"))
        assert sidecars and len(table.snapshot.state.files) > 100


def test_variant_columns_read_as_delta_kernel_rs_publishes_them(unpacked):
    table = Table(to_memory(unpacked("delta-kernel-rs/unshredded-variant.tar.zst", "unshredded-variant")))
    got = {row["id"]: row for row in table.to_pyarrow_table().to_pylist()}
    published = (DATA / "delta-kernel-rs" / "unshredded-variant.expected.in").read_text()
    # each row of kernel's expected table: "| id | {metadata: <hex>, value: <hex>} | ..."
    first = {}
    for line in published.splitlines():
        match = re.match(r'\s*"\| (\d+)\s*\| \{metadata: ([0-9a-f]+), value: ([0-9a-f]+)\}', line)
        if match:
            first.setdefault(int(match.group(1)), (bytes.fromhex(match.group(2)), bytes.fromhex(match.group(3))))
    assert len(first) == 100 and set(got) == set(first)
    for key, (metadata, value) in first.items():
        assert got[key]["v"] == {"metadata": metadata, "value": value}
        assert got[key]["struct_of_variants"] == {"v": {"metadata": metadata, "value": value}}


@pytest.mark.parametrize("name", ["type-widening", "type-widening-nested"])
def test_widened_columns_read_as_the_values_their_files_hold_in_the_new_type(name, unpacked):
    """Each file of these tables holds one row, so its statistics (min = max) state each value; the
    expectation is that value in the table's current type. Statistics keep timestamps to the millisecond,
    and a float's statistic is its shortest text: the float 3.4 written before the widening reads as the
    double Spark's cast gives, 3.4000000953674316."""
    from decimal import Decimal

    directory = unpacked(f"delta/{name}")
    table = Table(to_memory(directory))
    stats = [json.loads(add.stats, parse_float=Decimal) for add in table.snapshot.files]
    assert all(s["numRecords"] == 1 for s in stats)
    got = table.to_pyarrow_table().to_pylist()
    if name == "type-widening":
        want = [{c: _as(table.schema.field(c).type, v) for c, v in s["minValues"].items() if c != "float_double"}
                for s in stats]
        got_ms = [{c: v.replace(microsecond=v.microsecond // 1000 * 1000) if isinstance(v, dt.datetime) else v
                   for c, v in row.items() if c != "float_double"} for row in got]
        assert canonical(pa.Table.from_pylist(got_ms)) == canonical(pa.Table.from_pylist(want))
        assert sorted(r["float_double"] for r in got) == [1.234567890123, pa.scalar(3.4, pa.float32()).as_py()]
    else:  # nested: statistics hold the struct field; the map and the array are the values written
        assert sorted(r["struct"]["a"] for r in got) == sorted(s["minValues"]["struct"]["a"] for s in stats)
        assert table.schema.field("map").type == pa.map_(pa.int64(), pa.int64())
        assert {tuple(r["array"]) for r in got} == {(4, 5), (9223372036854775807, -9223372036854775808)}


def _as(arrow_type: pa.DataType, value):
    """A statistic as a value of the column's type: decimals as themselves, numbers as the column's number
    type, a date's text at midnight."""
    if pa.types.is_floating(arrow_type):
        return float(value)
    if pa.types.is_timestamp(arrow_type):
        return dt.datetime.fromisoformat(value)
    return value


def test_edge_timestamps_read_as_the_values_their_statistics_state(unpacked):
    table = Table(to_memory(unpacked("delta-rs/table_with_edge_timestamps")))
    want = []
    for add in table.snapshot.files:
        values = json.loads(add.stats)["minValues"]
        want.append({k: dt.datetime.fromisoformat(v.replace("Z", "+00:00")) if isinstance(v, str) else v
                     for k, v in values.items()})
    assert canonical(table.to_pyarrow_table()) == canonical(pa.Table.from_pylist(want))
    assert max(r["BIG_DATE"] for r in want).year == 9999


# --- the log ---------------------------------------------------------------------------------------------


def test_metadata_domains_of_a_checkpoint_only_log_are_read(unpacked):
    directory = unpacked("delta-rs/table-with-domain-metadata")
    table = Table(to_memory(directory))
    assert table.version == 108  # delta-rs's test: the version of its only checkpoint
    domains = table.snapshot.state.domain_metadata
    assert "delta.clustering" in domains and json.loads(domains["delta.clustering"].configuration)


def test_in_commit_timestamps_are_the_commit_timestamps_of_the_change_feed(unpacked):
    directory = unpacked("delta-rs/cdc_ict_table")
    uri = to_memory(directory)
    store = Table(uri).log_store
    ict = {v: next(a for a in read_commit(store, v) if isinstance(a, CommitInfo)).in_commit_timestamp
           for v in range(Table(uri).version + 1)}
    changes = Table(uri).load_cdf(0).read_all()
    for version, moment in zip(changes["_commit_version"].to_pylist(), changes["_commit_timestamp"].to_pylist()):
        assert int(moment.timestamp() * 1000) == ict[version]


CDF_PUBLISHED: dict[str, tuple[int, int | None, tuple[str, ...], list[tuple]]] = {
    # delta-kernel-rs kernel/tests/integration/features/cdf.rs: (starting version, ending version, columns,
    # rows of (*columns, _change_type, _commit_version)); update_pre/update_post are what delta-spark's tests
    # wrote in their change data files
    "cdf-table-with-dv": (0, None, ("value",), [
        *((i, "insert", 0) for i in range(10)), (0, "delete", 1), (9, "delete", 1), (0, "insert", 2), (9, "insert", 2),
        (0, "delete", 3), (1, "delete", 3), (4, "delete", 3), (5, "delete", 3), (1, "insert", 4), (4, "insert", 4),
        (3, "delete", 5), (0, "insert", 5), (5, "insert", 5), (3, "insert", 6)]),
    "cdf-table-update-ops": (0, 2, ("id",), [
        *((i, "insert", 0) for i in range(10)), *((i, "update_pre", 1) for i in range(20, 25)),
        *((i, "update_post", 2) for i in range(30, 35))]),
    "cdf-table-delete-conditional-two-rows": (0, None, ("id",), [
        *((i, "insert", 0) for i in range(10)), (2, "delete", 1), (8, "delete", 1)]),
    "cdf-column-mapping-name-mode": (1, None, ("id", "name", "value"), [
        (1, "Alice", 100.0, "delete", 4), (2, "Bob", 200.0, "update_preimage", 2),
        (2, "Bob", 250.0, "update_postimage", 2), (4, "David", 400.0, "insert", 3)]),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=_gap(n, CDF_GAPS)) for n in sorted(CDF_PUBLISHED)])
def test_the_change_feed_holds_the_rows_delta_kernel_rs_publishes(name, unpacked):
    start, end, columns, published = CDF_PUBLISHED[name]
    changes = Table(to_memory(unpacked(f"delta-kernel-rs/{name}.tar.zst", name))).load_cdf(start, end).read_all()
    got = sorted(zip(*(changes[c].to_pylist() for c in (*columns, "_change_type", "_commit_version"))))
    assert got == sorted(published)


@pytest.mark.interop
@pytest.mark.parametrize("name", ["cdf-table", "cdf-table-non-partitioned", "cdf-table-with-cdc-and-dvs",
                                  "cdc_ict_table"])
def test_the_change_feed_is_the_one_deltalake_reads(name, unpacked):
    """``_commit_timestamp`` aside: deltalake 1.6 gives commitInfo.timestamp, PROTOCOL.md the file's time or
    the in-commit timestamp (tested above). (deltalake cannot read the feeds of the tables above: it does not
    decode their URL-encoded file names, and reads no feed of a column-mapping table.)"""
    from deltalake import DeltaTable

    directory = unpacked("delta-rs/cdc_ict_table") if name == "cdc_ict_table" else \
        unpacked(f"delta-kernel-rs/{name}.tar.zst", name)
    theirs = pa.RecordBatchReader.from_stream(DeltaTable(str(directory)).load_cdf(starting_version=0)).read_all()
    ours = Table(to_memory(directory)).load_cdf(0).read_all()
    assert canonical(ours.drop(["_commit_timestamp"])) == canonical(theirs.drop(["_commit_timestamp"]))


def test_a_column_mapping_table_never_reads_as_null_columns(unpacked):
    """A reader that ignores column mapping finds no column by its logical name and returns nulls (deltalake's
    pyarrow reader does, for 'Super Name'). We raise, or read what deltalake's SQL reader reads."""
    directory = unpacked("delta-rs/table_with_column_mapping")
    try:
        ours = Table(to_memory(directory)).to_pyarrow_table()
    except UnsupportedFeatureError as exc:
        assert exc.feature == "columnMapping"
        return
    assert all(ours[c].null_count < len(ours) for c in ours.column_names)
    assert canonical(ours) == canonical(deltalake_rows(directory))


@pytest.mark.parametrize("source", sorted(MALFORMED), ids=lambda s: Path(s).name.removesuffix(".tar.zst"))
def test_tables_broken_on_purpose_are_refused_with_a_typed_error(source, unpacked):
    error, names = MALFORMED[source]
    name = Path(source).name.removesuffix(".tar.zst")
    with pytest.raises(error, match=names):
        Table(to_memory(unpacked(source, f"{name}/delta"))).to_pyarrow_table()


def test_an_identity_table_delta_spark_wrote_gets_values_above_its_high_water_mark(unpacked):
    """delta-rs's checkpoint-v2-table (written by delta-spark) has an identity column ``id``: an append that
    omits it gets values above the recorded high-water mark, the mark moves, and one that gives it is
    refused (allowExplicitInsert is false)."""
    from table.log.constraints import rules_of

    uri = to_memory(unpacked("delta-rs/checkpoint-v2-table"))
    table = Table(uri)
    before = table.to_pyarrow_table()
    (identity,) = rules_of(table.snapshot.protocol, table.snapshot.metadata).identity
    assert identity.high_water_mark >= max(before.column(identity.column).to_pylist())
    new = before.slice(0, 3).drop_columns([identity.column])
    write_table(uri, new)
    after = Table(uri)
    ids = after.to_pyarrow_table().column(identity.column).to_pylist()
    assert len(ids) == len(set(ids)) == before.num_rows + 3
    added = sorted(set(ids) - set(before.column(identity.column).to_pylist()))
    assert added == [identity.high_water_mark + identity.step * k for k in (1, 2, 3)]
    (moved,) = rules_of(after.snapshot.protocol, after.snapshot.metadata).identity
    assert moved.high_water_mark == added[-1]
    with pytest.raises(InvalidArgumentError, match="identity column"):
        write_table(uri, before.slice(0, 1))


@pytest.mark.parametrize("source, feature", [
    ("delta-rs/table_with_liquid_clustering", "liquid"),
])
def test_tables_we_read_but_may_not_write_refuse_writes_by_name(source, feature, unpacked):
    uri = to_memory(unpacked(source))
    table = Table(uri)
    with pytest.raises(UnsupportedFeatureError) as caught:
        write_table(uri, table.to_pyarrow_table().slice(0, 1) if len(table.to_pyarrow_table()) else
                    table.schema.empty_table())
    assert caught.value.feature == feature
    assert Table(uri).version == table.version


@pytest.mark.interop
def test_sparks_collations_table_takes_appends_and_refuses_sql_over_its_collated_columns(unpacked, tmp_path):
    """Delta's collations-table (Databricks Runtime): UTF8_LCASE and UNICODE string columns. An append is
    written (the collations kept in the schema, UTF-8 binary statistics, as the collations RFC allows) and
    read back by deltalake; a DELETE, whose predicate we would evaluate byte for byte rather than by the
    collation, is refused naming the columns."""
    uri = to_memory(unpacked("delta/collations-table"))
    before = Table(uri)
    rows = pa.table({"id": pa.array([1, 2], pa.int32()), "utf8_binary_col": ["a", "B"], "utf8_lcase_col": ["a", "B"],
                     "unicode_col": ["a", "B"]})
    write_table(uri, rows)
    after = Table(uri)
    assert after.metadata().schema_string == before.metadata().schema_string
    assert canonical(after.to_pyarrow_table()) == canonical(rows)
    assert canonical(deltalake_rows(to_directory(after, tmp_path / "copy"))) == canonical(rows)
    with pytest.raises(UnsupportedFeatureError, match=r"collated string columns \(unicode_col \(icu.UNICODE\), "
                                                      r"utf8_lcase_col \(spark.UTF8_LCASE\)\); DELETE") as caught:
        after.delete("utf8_lcase_col = 'b'")
    assert caught.value.feature == "collations" and Table(uri).version == after.version
    after.alter.set_table_properties({"delta.columnMapping.mode": "name"})
    Table(uri).alter.rename_column("utf8_lcase_col", "lower_col")  # its collation follows the new name
    fields = {f["name"]: f["metadata"] for f in json.loads(Table(uri).metadata().schema_string)["fields"]}
    assert fields["lower_col"]["__COLLATIONS"] == {"lower_col": "spark.UTF8_LCASE"}
    assert fields["unicode_col"]["__COLLATIONS"] == {"unicode_col": "icu.UNICODE"}


# --- writing to them -----------------------------------------------------------------------------------


def _without_table_version(schema: dict) -> dict:
    """A schema with ``tableVersion`` taken out of every type change (Delta 3.2's preview wrote it; PROTOCOL.md
    does not define it)."""
    text = json.dumps(schema)
    return json.loads(re.sub(r', "tableVersion": \d+|"tableVersion": \d+, ', "", text))


def _canonical_schema(schema: dict) -> str:
    """The schema with every change's keys in one order, to compare ours with Spark's."""
    return json.dumps(_without_table_version(schema), sort_keys=True)


@pytest.mark.parametrize("name", ["type-widening", "type-widening-nested"])
def test_our_widening_of_sparks_tables_records_what_spark_recorded(name, unpacked, tmp_path):
    """Each table: version 0 written narrow, version 1 turns widening on, version 2 a Spark write that widened
    every column. We replay version 2 on version 1: the nested table's changes (integers to long in a struct,
    a map and an array) by a write with schema_mode="merge", as Spark's automatic widening did; the other's
    (integers to double and decimal among them, which only an explicit change applies) by
    t.alter.change_column_type per column, then the same rows appended. The schema, type changes included,
    must be the one Spark wrote, and the rows those of Spark's table."""
    import shutil

    source = unpacked(f"delta/{name}")
    copy = tmp_path / name
    shutil.copytree(source, copy)
    commit = [json.loads(line) for line in (copy / "_delta_log" / "00000000000000000002.json").read_text().splitlines()]
    (copy / "_delta_log" / "00000000000000000002.json").unlink()
    (copy / "_delta_log" / ".00000000000000000002.json.crc").unlink()
    spark_schema = json.loads(next(a["metaData"]["schemaString"] for a in commit if "metaData" in a))
    added = next(a["add"]["path"] for a in commit if "add" in a)
    rows = pq.read_table(copy / added)
    (copy / added).unlink()
    uri = to_memory(copy)
    if name == "type-widening-nested":
        write_table(uri, rows, schema_mode="merge")
    else:
        for field in spark_schema["fields"]:
            Table(uri).alter.change_column_type(field["name"], field["type"])
        write_table(uri, rows.cast(Table(uri).schema))
    ours = Table(uri)
    assert _canonical_schema(json.loads(ours.metadata().schema_string)) == _canonical_schema(spark_schema)
    assert ours.protocol() == Table(to_memory(source)).protocol()  # the preview feature kept, nothing added
    assert canonical(ours.to_pyarrow_table()) == canonical(Table(to_memory(source)).to_pyarrow_table())


@pytest.mark.parametrize("name", ["type-widening", "type-widening-nested"])
def test_appends_and_deletes_on_sparks_widened_tables_keep_their_type_changes(name, unpacked):
    uri = to_memory(unpacked(f"delta/{name}"))
    before = Table(uri)
    rows = before.to_pyarrow_table()
    write_table(uri, rows.slice(0, 1))
    after = Table(uri)
    assert after.metadata().schema_string == before.metadata().schema_string
    assert canonical(after.to_pyarrow_table()) == canonical(pa.concat_tables([rows, rows.slice(0, 1)]))
    after.delete()
    assert Table(uri).to_pyarrow_table().num_rows == 0
    assert Table(uri).metadata().schema_string == before.metadata().schema_string



@pytest.mark.interop
def test_appends_to_a_spark_v2_checkpoint_table_write_v2_checkpoints_deltalake_reads(unpacked, tmp_path):
    """delta-spark's table has delta.checkpointPolicy=v2 and delta.checkpointInterval=1: each of our commits
    checkpoints, and each checkpoint must be a V2 one."""
    directory = unpacked("delta-kernel-rs/v2-checkpoints-json-with-sidecars.tar.zst",
                         "v2-checkpoints-json-with-sidecars")
    uri = to_memory(directory)
    before = Table(uri)
    write_table(uri, pa.table({"id": pa.array([5000, 5001], before.schema.field("id").type)}))
    forget_snapshots()
    after = Table(uri)
    assert after.snapshot.checkpoint_version == after.version == before.version + 1
    newest = listed_checkpoints([f.name for f in after.log_store.list_files()])[0]
    assert newest.uuid_named and newest.version == after.version
    theirs = deltalake_rows(to_directory(after, tmp_path / "copy"))
    assert canonical(theirs) == canonical(after.to_pyarrow_table())
    assert sorted(theirs["id"].to_pylist()) == sorted(V2_PUBLISHED_IDS["v2-checkpoints-json-with-sidecars"] + [5000, 5001])


def test_appends_to_a_spark_table_with_in_commit_timestamps_come_after_its_last_commit(unpacked):
    uri = to_memory(unpacked("delta-rs/cdc_ict_table"))
    table = Table(uri)
    last = next(a for a in read_commit(table.log_store, table.version) if isinstance(a, CommitInfo))
    write_table(uri, table.to_pyarrow_table().slice(0, 1))
    ours = read_commit(table.log_store, table.version + 1)
    assert isinstance(ours[0], CommitInfo) and ours[0].in_commit_timestamp > last.in_commit_timestamp
    assert not any(isinstance(a, Sidecar) for a in ours)
