"""CHECK constraints, invariants, generated and identity columns: enforced by every in-process write path
(table.data.rules), changed by Table.alter, and identity values handed out once across racing writers."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from logstore import open_log_store
from logstore.errors import InvalidArgumentError
from table import CommitConflictError, ConstraintViolationError, Table, write_table
from table.data.pendingset import PendingSet
from table.log.actions import Metadata, Protocol, serialize_commit
from table.log.constraints import rules_of
from table.table import forget_snapshots
from tests.support.tables import with_rival


def data(ids, amounts) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array(amounts, pa.int64())})


def objects_under(uri: str) -> set[str]:
    from logstore import open_object_store, TableUri

    table_uri = TableUri.parse(uri)
    return {o.key for o in open_object_store(table_uri).list(table_uri.key(""))}


def data_files(uri: str) -> set[str]:
    return {k for k in objects_under(uri) if "/_delta_log/" not in k}


def rows(uri: str) -> list[dict]:
    return sorted(Table(uri).to_pyarrow_table().to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.fixture
def constrained(memory_uri) -> str:
    write_table(memory_uri, data([1, 2], [10, 20]))
    Table(memory_uri).alter.add_constraint({"amount_positive": "amount > 0"})
    return memory_uri


def refused(uri: str, action) -> ConstraintViolationError:
    """``action`` must fail with a violation of amount_positive, commit nothing and leave no data file."""
    version, files = Table(uri).version, data_files(uri)
    with pytest.raises(ConstraintViolationError) as caught:
        action()
    forget_snapshots()
    assert Table(uri).version == version
    assert data_files(uri) == files
    assert caught.value.name == "amount_positive" and caught.value.expression == "amount > 0"
    return caught.value


# --- CHECK constraints ---------------------------------------------------------------------------------


def test_add_constraint_upgrades_the_protocol_and_records_delta_s_operation(constrained):
    table = Table(constrained)
    assert table.snapshot.configuration["delta.constraints.amount_positive"] == "amount > 0"
    assert table.snapshot.protocol.min_writer_version == 3  # the legacy version that brings constraints
    entry = table.history(limit=1)[0]
    assert entry.operation == "ADD CONSTRAINT"
    assert entry.operation_parameters == {"name": "amount_positive", "expr": "amount > 0"}


def test_a_violating_append_names_constraint_expression_and_row_and_commits_nothing(constrained):
    error = refused(constrained, lambda: write_table(constrained, data([3, 4, 5], [1, -7, -8])))
    message = str(error)
    assert "CHECK constraint amount_positive (amount > 0) violated by row with values: id=4, amount=-7" in message
    assert "nothing was committed" in message


def test_null_violates_a_check_constraint_as_in_delta_spark(constrained):
    refused(constrained, lambda: write_table(constrained, data([3], [None])))


def test_every_in_process_write_path_enforces_constraints(constrained):
    uri = constrained
    refused(uri, lambda: write_table(uri, data([9], [-1]), mode="overwrite"))
    refused(uri, lambda: write_table(uri, data([1], [-1]), mode="overwrite", predicate="id = 1"))
    refused(uri, lambda: Table(uri).update({"amount": "amount - 15"}))
    refused(uri, lambda: Table(uri).merge(data([2], [-5]), "target.id = source.id")
            .when_matched_update_all().execute())
    refused(uri, lambda: Table(uri).merge(data([7], [-5]), "target.id = source.id")
            .when_not_matched_insert_all().execute())
    assert rows(uri) == [{"id": 1, "amount": 10}, {"id": 2, "amount": 20}]
    Table(uri).update({"amount": "amount - 5"})
    Table(uri).merge(data([7], [5]), "target.id = source.id").when_not_matched_insert_all().execute()
    assert rows(uri) == [{"id": 1, "amount": 5}, {"id": 2, "amount": 15}, {"id": 7, "amount": 5}]


def test_add_constraint_refuses_what_the_rows_held_break(constrained):
    write_table(constrained, data([3], [1]))
    with pytest.raises(ConstraintViolationError, match=r"id=3, amount=1.*holds rows that break it"):
        Table(constrained).alter.add_constraint({"big": "amount >= 10"})
    assert "delta.constraints.big" not in Table(constrained).snapshot.configuration
    with pytest.raises(InvalidArgumentError, match="no_such_column"):
        Table(constrained).alter.add_constraint({"bad": "no_such_column > 1"})
    with pytest.raises(InvalidArgumentError, match="already has a constraint"):
        Table(constrained).alter.add_constraint({"AMOUNT_POSITIVE": "amount > 1"})


def test_drop_constraint_lifts_the_rule_and_says_when_there_is_none(constrained):
    Table(constrained).alter.drop_constraint("amount_positive")
    write_table(constrained, data([3], [-1]))
    with pytest.raises(InvalidArgumentError, match="has no constraint 'amount_positive'"):
        Table(constrained).alter.drop_constraint("amount_positive")
    version = Table(constrained).version
    Table(constrained).alter.drop_constraint("amount_positive", raise_if_not_exists=False)
    assert Table(constrained).version == version


def test_a_constraint_and_an_append_that_breaks_it_never_both_land(memory_uri):
    """The append lands while ADD CONSTRAINT is committing: its commit read the whole table, so it checks
    again on the newest version and refuses. The other order: the append planned before the constraint
    conflicts with its metadata change."""
    write_table(memory_uri, data([1], [10]))
    with pytest.raises(ConstraintViolationError, match="id=2, amount=-1"):
        with_rival(lambda: write_table(memory_uri, data([2], [-1])),
                   lambda: Table(memory_uri).alter.add_constraint({"amount_positive": "amount > 0"}))
    forget_snapshots()
    assert "delta.constraints.amount_positive" not in Table(memory_uri).snapshot.configuration
    assert rows(memory_uri) == [{"id": 1, "amount": 10}, {"id": 2, "amount": -1}]

    other = memory_uri + "-b"
    write_table(other, data([1], [10]))
    writer = Table.for_write(other)
    with pytest.raises(CommitConflictError):
        with_rival(lambda: Table(other).alter.add_constraint({"amount_positive": "amount > 0"}),
                   lambda: write_table(writer, data([2], [-1])))
    forget_snapshots()
    assert rows(other) == [{"id": 1, "amount": 10}]
    assert data_files(other) == {k for k in data_files(other) if k.rsplit("/", 1)[-1] in
                                 {a.path.rsplit("/", 1)[-1] for a in Table(other).snapshot.files}}


# --- invariants, generated columns ----------------------------------------------------------------------


def raw_table(uri: str, fields: list[dict], *, writer_version: int = 4, partition_by=(),
              configuration: dict | None = None) -> None:
    schema = json.dumps({"type": "struct", "fields": fields})
    store = open_log_store(uri)
    store.write(0, serialize_commit([Protocol(min_reader_version=1, min_writer_version=writer_version),
                                     Metadata(id=str(uuid.uuid4()), schema_string=schema,
                                              partition_columns=list(partition_by),
                                              configuration=configuration or {}, created_time=1)]))


def field(name: str, kind: str = "long", **metadata) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": metadata}


def test_legacy_invariants_are_checked(memory_uri):
    raw_table(memory_uri, [field("id", **{"delta.invariants": json.dumps({"expression": {"expression": "id < 100"}})})],
              writer_version=2)
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64())}))
    with pytest.raises(ConstraintViolationError, match=r"invariant id \(id < 100\) violated by row with values: id=100"):
        write_table(memory_uri, pa.table({"id": pa.array([100], pa.int64())}))


def test_generated_columns_are_computed_when_omitted_and_checked_when_given(memory_uri):
    raw_table(memory_uri, [field("ts", "timestamp"), field("day", "date", **{
        "delta.generationExpression": "CAST(ts AS DATE)"}), field("n"), field("double_n", **{
            "delta.generationExpression": "n * 2"})], partition_by=["day"])
    import datetime as dt

    moments = [dt.datetime(2024, 1, 1, 23, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 2, 1, tzinfo=dt.timezone.utc)]
    write_table(memory_uri, pa.table({"ts": pa.array(moments, pa.timestamp("us", "UTC")),
                                      "n": pa.array([1, 2], pa.int64())}))
    got = Table(memory_uri).to_pyarrow_table().sort_by("n").to_pylist()
    assert [(r["day"], r["double_n"]) for r in got] == [(dt.date(2024, 1, 1), 2), (dt.date(2024, 1, 2), 4)]
    assert sorted(a.partition_values["day"] for a in Table(memory_uri).snapshot.files) == ["2024-01-01", "2024-01-02"]
    given = pa.table({"ts": pa.array(moments[:1], pa.timestamp("us", "UTC")), "day": [dt.date(2024, 1, 1)],
                      "n": pa.array([3], pa.int64()), "double_n": pa.array([7], pa.int64())})
    with pytest.raises(ConstraintViolationError, match=r"generated column double_n \(n \* 2\).*gives 7 where the "
                                                       r"expression gives 6"):
        write_table(memory_uri, given)
    write_table(memory_uri, given.set_column(3, "double_n", pa.array([6], pa.int64())))
    Table(memory_uri).update({"n": "n + 10"}, predicate="n = 1")  # the generated column follows
    assert sorted((r["n"], r["double_n"]) for r in Table(memory_uri).to_pyarrow_table().to_pylist()) == [
        (2, 4), (3, 6), (11, 22)]


# --- identity columns -----------------------------------------------------------------------------------


def identity_table(uri: str, *, start: int = 1, step: int = 1, allow_explicit: bool = False) -> None:
    raw_table(uri, [field("id", **{"delta.identity.start": start, "delta.identity.step": step,
                                   "delta.identity.allowExplicitInsert": allow_explicit}), field("v", "string")],
              writer_version=6)


def values(n: int, prefix: str = "v") -> pa.Table:
    return pa.table({"v": [f"{prefix}{i}" for i in range(n)]})


def high_water_mark(uri: str) -> int | None:
    table = Table(uri)
    return rules_of(table.snapshot.protocol, table.snapshot.metadata).identity[0].high_water_mark


def test_identity_values_are_handed_out_and_the_high_water_mark_moves(memory_uri):
    identity_table(memory_uri, start=10, step=5)
    write_table(memory_uri, values(3))
    assert high_water_mark(memory_uri) == 20
    write_table(memory_uri, values(2, "w"))
    assert [r["id"] for r in rows(memory_uri)] == [10, 15, 20, 25, 30]
    assert high_water_mark(memory_uri) == 30
    with pytest.raises(InvalidArgumentError, match="identity column"):
        write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64()), "v": ["x"]}))
    inserted = Table(memory_uri).merge(pa.table({"v": ["new", "v0"]}), "target.v = source.v") \
        .when_not_matched_insert_all().execute()
    assert inserted.version == Table(memory_uri).version
    assert {r["v"]: r["id"] for r in rows(memory_uri)}["new"] == 35 and high_water_mark(memory_uri) == 35


def test_negative_steps_and_explicit_inserts_when_allowed(memory_uri):
    identity_table(memory_uri, start=-1, step=-2, allow_explicit=True)
    write_table(memory_uri, values(3))
    assert sorted(r["id"] for r in rows(memory_uri)) == [-5, -3, -1] and high_water_mark(memory_uri) == -5
    write_table(memory_uri, pa.table({"id": pa.array([100], pa.int64()), "v": ["explicit"]}))
    assert high_water_mark(memory_uri) == -5  # explicit values do not move the mark, as in Delta


def test_merge_refuses_explicit_identity_values_unless_allowed_and_never_updates_them(memory_uri):
    """As delta-spark decides a MERGE: an insert that assigns an identity column (``insert_all`` from a
    source that has it, or an explicit value) is refused while ``delta.identity.allowExplicitInsert`` is
    false; an update of an identity column is always refused. Nothing is committed."""
    identity_table(memory_uri)
    write_table(memory_uri, values(2))
    version, before = Table(memory_uri).version, rows(memory_uri)
    source = pa.table({"id": pa.array([1, 99], pa.int64()), "v": ["v0", "new"]})
    attempts = [
        lambda t: t.merge(source, "target.v = source.v").when_not_matched_insert_all(),
        lambda t: t.merge(source, "target.v = source.v").when_not_matched_insert({"id": "source.id", "v": "source.v"}),
        lambda t: t.merge(source, "target.v = source.v").when_matched_update({"id": "source.id"}),
        lambda t: t.merge(source, "target.v = source.v").when_matched_update_all(),
    ]
    for attempt, word in zip(attempts, ["insert", "insert", "update", "update"]):
        with pytest.raises(InvalidArgumentError, match=rf"identity column 'id'.*{word}"):
            attempt(Table(memory_uri)).execute()
    with pytest.raises(InvalidArgumentError, match=r"identity column 'id'.*update"):
        Table(memory_uri).update({"id": "id + 100"})
    forget_snapshots()
    assert Table(memory_uri).version == version and rows(memory_uri) == before
    Table(memory_uri).merge(source, "target.v = source.v").when_not_matched_insert_all(except_cols=["id"]).execute()
    assert {r["v"]: r["id"] for r in rows(memory_uri)} == {"v0": 1, "v1": 2, "new": 3}


def test_merge_inserts_explicit_identity_values_when_allowed(memory_uri):
    identity_table(memory_uri, allow_explicit=True)
    write_table(memory_uri, values(2))
    source = pa.table({"id": pa.array([50, None], pa.int64()), "v": ["given", "generated"]})
    Table(memory_uri).merge(source, "target.v = source.v").when_not_matched_insert_all().execute()
    assert {r["v"]: r["id"] for r in rows(memory_uri)} == {"v0": 1, "v1": 2, "given": 50, "generated": 3}


def test_identity_appends_racing_each_other_both_commit_with_distinct_values(memory_uri):
    """The rival's identity append takes the version ours wanted and moves the mark over our values: ours
    re-plans them above it (its file rewritten under a new name, the old object deleted) and commits."""
    identity_table(memory_uri)
    write_table(memory_uri, values(2, "a"))
    ours = Table.for_write(memory_uri)
    result = with_rival(lambda: write_table(memory_uri, values(3, "rival")),
                        lambda: write_table(ours, values(4, "ours")))
    assert result.version == 3
    forget_snapshots()
    got = rows(memory_uri)
    ids = [r["id"] for r in got]
    assert sorted(ids) == list(range(1, 10)) and high_water_mark(memory_uri) == 9
    assert sorted(r["id"] for r in got if r["v"].startswith("ours")) == [6, 7, 8, 9]
    live = {a.path.rsplit("/", 1)[-1] for a in Table(memory_uri).snapshot.files}
    assert {k.rsplit("/", 1)[-1] for k in data_files(memory_uri)} == live  # the replaced object is gone


def test_a_race_lost_to_another_metadata_change_still_conflicts(memory_uri):
    identity_table(memory_uri)
    ours = Table.for_write(memory_uri)
    with pytest.raises(CommitConflictError):
        with_rival(lambda: Table(memory_uri).alter.add_constraint({"v_set": "v IS NOT NULL"}),
                   lambda: write_table(ours, values(2)))
    forget_snapshots()
    assert Table(memory_uri).to_pyarrow_table().num_rows == 0 and data_files(memory_uri) == set()


def test_pendingsets_without_identity_values_still_load():
    """A PendingSet written before tasks reported identity values reads as one that handed out none."""
    old = {"format_version": 1, "table_path": "s3://b/t", "job_id": "j", "task_id": 0, "attempt_id": 0, "files": []}
    assert PendingSet.load(json.dumps(old)).identity == {}


def test_the_commit_carries_the_identity_marks_delta_expects(memory_uri):
    identity_table(memory_uri)
    write_table(memory_uri, values(2))
    schema = json.loads(Table(memory_uri).snapshot.metadata.schema_string)
    assert schema["fields"][0]["metadata"] == {"delta.identity.start": 1, "delta.identity.step": 1,
                                               "delta.identity.allowExplicitInsert": False,
                                               "delta.identity.highWaterMark": 2}


def test_a_table_is_created_with_generated_and_identity_columns_from_arrow_field_metadata(memory_uri):
    """As deltalake's ``DeltaTable.create`` takes them: Delta column metadata on the Arrow fields. NULL in a
    generated or identity column means "not given": the writer computes it."""
    schema = pa.schema([
        pa.field("id", pa.int64(), metadata={"delta.identity.start": "100", "delta.identity.step": "10",
                                             "delta.identity.allowExplicitInsert": "false"}),
        pa.field("n", pa.int64()), pa.field("n2", pa.int64(), metadata={"delta.generationExpression": "n * 2"})])
    write_table(memory_uri, pa.table({"id": pa.nulls(2, pa.int64()), "n": [1, 2], "n2": pa.nulls(2, pa.int64())},
                                     schema=schema))
    table = Table(memory_uri)
    assert table.snapshot.protocol.min_writer_version == 6  # identity columns, legacy
    fields = json.loads(table.snapshot.metadata.schema_string)["fields"]
    assert fields[0]["metadata"] == {"delta.identity.start": 100, "delta.identity.step": 10,
                                     "delta.identity.allowExplicitInsert": False, "delta.identity.highWaterMark": 110}
    assert fields[2]["metadata"] == {"delta.generationExpression": "n * 2"}
    write_table(memory_uri, pa.table({"n": [5]}))
    assert rows(memory_uri) == [{"id": 100, "n": 1, "n2": 2}, {"id": 110, "n": 2, "n2": 4}, {"id": 120, "n": 5, "n2": 10}]


def test_change_data_of_merge_inserts_and_updates_holds_the_values_written(memory_uri):
    """The change data feed says what was written: the identity values a MERGE's inserts were handed, and
    the generated column an UPDATE computed again."""
    raw_table(memory_uri, [field("id", **{"delta.identity.start": 1, "delta.identity.step": 1,
                                          "delta.identity.allowExplicitInsert": False}),
                           field("n"), field("n2", **{"delta.generationExpression": "n * 2"})],
              writer_version=6, configuration={"delta.enableChangeDataFeed": "true"})
    write_table(memory_uri, pa.table({"n": pa.array([1], pa.int64())}))
    table = Table(memory_uri)
    table.merge(pa.table({"n": pa.array([1, 5], pa.int64())}), "target.n = source.n") \
        .when_not_matched_insert_all().execute()
    Table(memory_uri).update({"n": "n + 10"}, predicate="n = 5")
    changes = Table(memory_uri).load_cdf(starting_version=2).read_all().to_pylist()
    seen = sorted((c["_change_type"], c["id"], c["n"], c["n2"]) for c in changes)
    assert seen == [("insert", 2, 5, 10), ("update_postimage", 2, 15, 30), ("update_preimage", 2, 5, 10)]


def test_add_constraint_on_a_table_features_protocol_lists_check_constraints(memory_uri):
    write_table(memory_uri, data([1], [1]), configuration={"delta.enableDeletionVectors": "true"})
    assert Table(memory_uri).snapshot.protocol.min_writer_version == 7
    Table(memory_uri).alter.add_constraint({"amount_positive": "amount > 0"})
    protocol = Table(memory_uri).snapshot.protocol
    assert "checkConstraints" in protocol.writer_features and "deletionVectors" in protocol.writer_features
    refused(memory_uri, lambda: Table(memory_uri).update({"amount": "-1"}))  # with deletion vectors too


def test_spark_date_functions_are_evaluated_and_divergent_ones_refused(memory_uri):
    """Delta's own example of a generated column, ``YEAR(ts)``: Spark's date functions are evaluated as
    DataFusion's date_part; a Spark date pattern (date_format) is refused rather than misread."""
    import datetime as dt

    from table import UnsupportedFeatureError

    raw_table(memory_uri, [field("ts", "timestamp"), field("y", "integer", **{"delta.generationExpression": "YEAR(ts)"}),
                           field("m", "integer", **{"delta.generationExpression": "month(ts)"})], partition_by=["y"])
    write_table(memory_uri, pa.table({"ts": pa.array([dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc)],
                                                     pa.timestamp("us", "UTC"))}))
    assert [(r["y"], r["m"]) for r in Table(memory_uri).to_pyarrow_table().to_pylist()] == [(2024, 3)]
    other = memory_uri + "-format"
    raw_table(other, [field("ts", "timestamp"), field("ym", "string", **{
        "delta.generationExpression": "date_format(ts, 'yyyy-MM')"})])
    with pytest.raises(UnsupportedFeatureError, match="date_format") as caught:
        write_table(other, pa.table({"ts": pa.array([dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc)],
                                                    pa.timestamp("us", "UTC"))}))
    assert caught.value.feature == "generatedColumns"


def test_a_predicate_on_the_source_column_prunes_partitions_of_its_generated_column(memory_uri):
    """As Delta derives ``day >= DATE '2024-01-02'`` from ``ts >= ...`` when ``day`` is generated as
    ``CAST(ts AS DATE)``: files of other days are skipped by their partition values, even without any
    statistics for ``ts``."""
    import datetime as dt

    from table.engine import Engine
    from table.operations.predicate import bind_predicate

    raw_table(memory_uri, [field("ts", "timestamp"), field("day", "date", **{
        "delta.generationExpression": "CAST(ts AS DATE)"}), field("n")], partition_by=["day"],
              configuration={"delta.dataSkippingNumIndexedCols": "0"})
    for day in (1, 2, 3):
        write_table(memory_uri, pa.table({"ts": pa.array([dt.datetime(2024, 1, day, 12, tzinfo=dt.timezone.utc)],
                                                         pa.timestamp("us", "UTC")), "n": pa.array([day], pa.int64())}))
    snapshot = Table(memory_uri).snapshot
    assert all(not f.stats or '"ts"' not in f.stats for f in snapshot.files)  # nothing but partitions to go by

    def opened(predicate: str) -> list[str]:
        chosen = bind_predicate(Engine(), snapshot, predicate, what="the predicate").candidates(snapshot).files
        return sorted(f.partition_values["day"] for f in chosen)

    assert opened("ts >= TIMESTAMP '2024-01-02 00:00:00'") == ["2024-01-02", "2024-01-03"]
    assert opened("ts < TIMESTAMP '2024-01-02 00:00:00' AND n > 0") == ["2024-01-01", "2024-01-02"]
    assert opened("ts = TIMESTAMP '2024-01-03 12:00:00'") == ["2024-01-03"]
    assert opened("n = 2") == ["2024-01-01", "2024-01-02", "2024-01-03"]
    Table(memory_uri).delete("ts >= TIMESTAMP '2024-01-02 00:00:00'")
    assert [r["n"] for r in rows(memory_uri)] == [1]


def test_a_constraint_given_as_a_table_property_points_at_add_constraint(memory_uri):
    with pytest.raises(InvalidArgumentError, match=r"Table.alter.add_constraint\(\{'positive': 'n > 0'\}\)"):
        write_table(memory_uri, data([1], [1]), configuration={"delta.constraints.positive": "n > 0"})
    write_table(memory_uri, data([1], [1]))
    with pytest.raises(InvalidArgumentError, match="add_constraint"):
        Table(memory_uri).alter.set_table_properties({"delta.constraints.positive": "amount > 0"})


# --- column defaults ------------------------------------------------------------------------------------


def defaults_table(uri: str) -> None:
    """A table as delta-spark leaves it after ``ALTER COLUMN ... SET DEFAULT``: CURRENT_DEFAULT in the column's
    metadata, the writer feature allowColumnDefaults."""
    schema = json.dumps({"type": "struct", "fields": [
        field("id"), field("status", "string", CURRENT_DEFAULT="'new'"),
        {"name": "qty", "type": "integer", "nullable": False, "metadata": {"CURRENT_DEFAULT": "1 + 1"}}]})
    open_log_store(uri).write(0, serialize_commit([
        Protocol(min_reader_version=1, min_writer_version=7, writer_features=["allowColumnDefaults"]),
        Metadata(id=str(uuid.uuid4()), schema_string=schema, configuration={}, created_time=1)]))


@pytest.mark.interop
def test_rows_written_without_a_column_get_its_default(memory_uri, tmp_path):
    """PROTOCOL.md "Default Columns": a row lacking the column gets the default's value; an explicit NULL stays
    NULL. Appends and MERGE inserts (by insert_all from a source without the column, or by an insert clause
    that does not assign it) apply the same rule."""
    defaults_table(memory_uri)
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64())}))
    write_table(memory_uri, pa.table({"id": pa.array([2], pa.int64()), "status": pa.array([None], pa.string())}))
    Table(memory_uri).merge(pa.table({"id": pa.array([1, 3], pa.int64())}), "target.id = source.id") \
        .when_not_matched_insert_all().execute()
    Table(memory_uri).merge(pa.table({"id": pa.array([4], pa.int64()), "q": pa.array([9], pa.int32())}),
                            "target.id = source.id") \
        .when_not_matched_insert({"id": "source.id", "qty": "source.q"}).execute()
    assert rows(memory_uri) == [{"id": 1, "status": "new", "qty": 2}, {"id": 2, "status": None, "qty": 2},
                                {"id": 3, "status": "new", "qty": 2}, {"id": 4, "status": "new", "qty": 9}]
    from tests.support.corpus import canonical, deltalake_rows, to_directory

    theirs = deltalake_rows(to_directory(Table(memory_uri), tmp_path / "copy"))  # deltalake reads what we wrote
    assert canonical(theirs) == canonical(Table(memory_uri).to_pyarrow_table())


def test_set_and_drop_a_column_default_as_delta_spark_records_them(memory_uri):
    write_table(memory_uri, pa.table({"id": pa.array([1], pa.int64()), "n": pa.array([5], pa.int64())}))
    table = Table(memory_uri)
    with pytest.raises(InvalidArgumentError, match=r"the default of column 'n' \(id \+ 1\) is not valid SQL"):
        table.alter.set_column_default("n", "id + 1")  # a default reads no column
    with pytest.raises(InvalidArgumentError, match="does not fit the column's type"):
        table.alter.set_column_default("n", "'many'")
    result = table.alter.set_column_default("n", "40 + 2")
    snapshot = Table(memory_uri).snapshot
    assert "allowColumnDefaults" in snapshot.protocol.writer_features and snapshot.protocol.min_writer_version == 7
    assert json.loads(snapshot.metadata.schema_string)["fields"][1]["metadata"] == {"CURRENT_DEFAULT": "40 + 2"}
    entry = Table(memory_uri).history(1)[0]
    assert entry.operation == "CHANGE COLUMN" and result.version == 1
    write_table(memory_uri, pa.table({"id": pa.array([2], pa.int64())}))
    Table(memory_uri).alter.drop_column_default("n")
    assert Table(memory_uri).alter.drop_column_default("n").version == Table(memory_uri).version  # none: no commit
    write_table(memory_uri, pa.table({"id": pa.array([3], pa.int64())}))
    assert [(r["id"], r["n"]) for r in rows(memory_uri)] == [(1, 5), (2, 42), (3, None)]


@pytest.mark.parametrize("kind, metadata, feature, cites", [
    ("generated column", {"delta.generationExpression": "s.a + 1"}, "generatedColumns", "top-level fields only"),
    ("identity column", {"delta.identity.start": 1, "delta.identity.step": 1,
                         "delta.identity.allowExplicitInsert": False}, "identityColumns",
     "IDENTITY column cannot be a nested column"),
])
def test_a_rule_nested_in_a_struct_is_refused_before_a_write_saying_why_and_what_to_do(memory_uri, kind, metadata,
                                                                                       feature, cites):
    """Delta defines generated and identity columns on top-level columns only (delta-spark reads their
    metadata from top-level fields, and refuses a nested identity column): a nested one is refused by
    name, with delta-spark's rule and what to do, before anything is written; the table still reads."""
    from table import UnsupportedFeatureError

    struct = {"type": "struct", "fields": [field("a"), field("b", **metadata)]}
    raw_table(memory_uri, [field("id"), {"name": "s", "type": struct, "nullable": True, "metadata": {}}],
              writer_version=6)
    rows_in = pa.table({"id": pa.array([1], pa.int64()),
                        "s": pa.array([{"a": 1, "b": 2}], pa.struct([("a", pa.int64()), ("b", pa.int64())]))})
    with pytest.raises(UnsupportedFeatureError) as caught:
        write_table(memory_uri, rows_in)
    message = str(caught.value)
    assert f"field s.b of the table's schema is a {kind} nested in a struct" in message
    assert cites in message and "nothing was written" in message and "Copy the table without the field's metadata" in message
    assert caught.value.feature == feature
    assert data_files(memory_uri) == set() and Table(memory_uri).version == 0
    assert Table(memory_uri).to_pyarrow_table().num_rows == 0
    copy = memory_uri + "-copy"  # what the message says to do
    write_table(copy, Table(memory_uri).to_pyarrow_table())
    write_table(copy, rows_in)
    if kind == "generated column":
        Table(copy).alter.add_constraint({"b_of_a": "s.b <=> (s.a + 1)"})
        with pytest.raises(ConstraintViolationError, match="b_of_a"):
            write_table(copy, rows_in.set_column(1, "s", pa.array([{"a": 1, "b": 5}], rows_in.schema.field("s").type)))
    assert Table(copy).to_pyarrow_table().to_pylist() == rows_in.to_pylist()
