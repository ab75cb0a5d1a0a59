"""Row-level changes racing other writers: Delta's conflict rules decide, and a real conflict costs a
re-plan on the newest version, never a lost or doubled row, never a file removed twice.

A rival commit is made at the moment our operation is about to write its log entry (after it planned
and staged its files: ``tests.support.tables.with_rival``). The expected rows are those of a serial
order of the two operations, computed by DuckDB over the input rows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import CommitConflictError, ConflictKind, Table, write_table
from table.errors import CommitTimeoutError
from table.log.actions import RemoveFile
from table.log.commit import IsolationLevel, ReadScope
from table.log.conflicts import Rebase, Winner, check
from table.log.snapshot import read_commit
from tests.support.dml_reference import duckdb_delete, duckdb_update, rows_of
from tests.support.tables import with_rival

SERIALIZABLE = {"delta.isolationLevel": "Serializable"}


def rows(ids, p="a", v=0.0):
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids)),
                     "v": pa.array([v + i for i in ids], pa.float64())})


def setup(uri, partitioned=True, configuration=None) -> pa.Table:
    first, second = rows([1, 2, 3], "a"), rows([10, 11], "b")
    write_table(uri, first, partition_by=["p"] if partitioned else None, configuration=configuration)
    write_table(uri, second)
    return pa.concat_tables([first, second])


def current(uri) -> pa.Table:
    return Table(uri).to_pyarrow_table().select(["id", "p", "v"])


def removed_twice(uri) -> list[str]:
    """Paths removed by more than one commit of the table's log: must never happen."""
    table = Table(uri)
    seen: set[str] = set()
    twice: list[str] = []
    for version in range(table.version + 1):
        for action in read_commit(table.log_store, version):
            if isinstance(action, RemoveFile):
                if action.path in seen:
                    twice.append(action.path)
                seen.add(action.path)
    return twice


def test_a_concurrent_append_does_not_stop_a_delete_under_write_serializable(memory_uri):
    base = setup(memory_uri)
    appended = rows([4], "a")  # matches the predicate: the serial order is the delete, then the append
    result = with_rival(lambda: write_table(memory_uri, appended), lambda: Table(memory_uri).delete("id < 5"))
    assert result.metrics["numReplans"] == "0" and result.metrics["numAttempts"] == "2"
    expected = pa.concat_tables([duckdb_delete(base, "id < 5"), appended])
    assert rows_of(current(memory_uri)) == rows_of(expected)


def test_under_serializable_an_append_the_delete_would_have_selected_makes_it_plan_again(memory_uri):
    base = setup(memory_uri, configuration=SERIALIZABLE)
    appended = rows([4], "a")
    result = with_rival(lambda: write_table(memory_uri, appended), lambda: Table(memory_uri).delete("id < 5"))
    assert result.metrics["numReplans"] == "1"
    # the serial order is the append, then the delete, which deletes the appended row too
    assert rows_of(current(memory_uri)) == rows_of(duckdb_delete(pa.concat_tables([base, appended]), "id < 5"))
    commit = read_commit(Table(memory_uri).log_store, Table(memory_uri).version)
    assert next(a for a in commit if type(a).__name__ == "CommitInfo").isolationLevel == "Serializable"


def test_under_serializable_an_append_the_predicate_rules_out_is_no_conflict(memory_uri):
    base = setup(memory_uri, partitioned=False, configuration=SERIALIZABLE)
    appended = rows([50, 60], "a")  # statistics [50, 60]: no row with id < 5 (Delta would conflict here)
    result = with_rival(lambda: write_table(memory_uri, appended), lambda: Table(memory_uri).delete("id < 5"))
    assert result.metrics["numReplans"] == "0"
    assert rows_of(current(memory_uri)) == rows_of(duckdb_delete(pa.concat_tables([base, appended]), "id < 5"))


def test_two_deletes_of_the_same_file_both_take_effect_and_remove_it_once(memory_uri):
    base = setup(memory_uri)
    result = with_rival(lambda: Table(memory_uri).delete("id = 1"), lambda: Table(memory_uri).delete("id = 2"))
    assert result.metrics["numReplans"] == "1"
    assert rows_of(current(memory_uri)) == rows_of(duckdb_delete(base, "id IN (1, 2)"))
    assert removed_twice(memory_uri) == []


def test_concurrent_updates_of_the_same_row_lose_no_update(memory_uri):
    base = setup(memory_uri)
    bump = {"v": "v + 100"}
    result = with_rival(lambda: Table(memory_uri).update(bump, predicate="id = 2"),
                        lambda: Table(memory_uri).update(bump, predicate="id = 2"))
    assert result.metrics["numReplans"] == "1"
    twice = duckdb_update(duckdb_update(base, bump, "id = 2"), bump, "id = 2")
    assert rows_of(current(memory_uri)) == rows_of(twice)


def test_two_merges_inserting_the_same_new_key_leave_it_once(memory_uri):
    setup(memory_uri)
    source = rows([7], "a", v=100.0)

    def upsert():
        return Table(memory_uri).merge(source, "target.id = source.id") \
            .when_matched_update({"v": "target.v + 1"}).when_not_matched_insert_all().execute()

    result = with_rival(upsert, upsert)
    assert result.metrics["numReplans"] == "1" and result.metrics["numTargetRowsUpdated"] == "1"
    got = [r for r in current(memory_uri).to_pylist() if r["id"] == 7]
    assert got == [{"id": 7, "p": "a", "v": 108.0}]


def test_a_merge_racing_a_compaction_of_its_files_plans_again_and_removes_each_file_once(memory_uri):
    base = setup(memory_uri)
    write_table(memory_uri, rows([4, 5], "a"))  # a second small file in partition a: something to compact
    base = pa.concat_tables([base, rows([4, 5], "a")])
    source = rows([2, 5], "a", v=-100.0)
    result = with_rival(lambda: Table(memory_uri).optimize(target_size=5 * 1024 * 1024),
                        lambda: Table(memory_uri).merge(source, "target.id = source.id")
                        .when_matched_update({"v": "source.v"}).execute())
    assert result.metrics["numReplans"] == "1"
    assert rows_of(current(memory_uri)) == rows_of(duckdb_update(base, {"v": "-100.0 + id"}, "id IN (2, 5)"))
    assert removed_twice(memory_uri) == []


def test_a_compaction_losing_to_a_merge_plans_again(memory_uri):
    setup(memory_uri)
    write_table(memory_uri, rows([4, 5], "a"))
    merge = Table(memory_uri).merge(rows([2], "a", v=9.0), "target.id = source.id").when_matched_update_all()
    report = with_rival(merge.execute, lambda: Table(memory_uri).optimize(target_size=5 * 1024 * 1024))
    assert report.result is not None and report.result.metrics["numReplans"] == "1"
    assert removed_twice(memory_uri) == []
    assert sorted(current(memory_uri)["id"].to_pylist()) == [1, 2, 3, 4, 5, 10, 11]


def test_a_schema_change_in_between_makes_a_delete_plan_again_on_the_new_schema(memory_uri):
    base = setup(memory_uri)
    widened = pa.table({"id": pa.array([20], pa.int64()), "p": ["a"], "v": [20.0], "note": ["x"]})
    result = with_rival(lambda: write_table(memory_uri, widened, schema_mode="merge"),
                        lambda: Table(memory_uri).delete("v >= 11"))
    assert result.metrics["numReplans"] == "1"
    assert Table(memory_uri).schema.names == ["id", "p", "v", "note"]
    assert rows_of(current(memory_uri)) == rows_of(duckdb_delete(base, "v >= 11"))


def test_re_planning_stops_at_the_deadline_with_the_conflict_and_commits_nothing(memory_uri):
    setup(memory_uri)
    options = {"DYNACOMMIT_TIMEOUT_SECONDS": "1.5"}
    table = Table(memory_uri, storage_options=options)
    before = Table(memory_uri).version
    from logstore import failpoints
    from table.log.transaction import BEFORE_WRITE

    def rival_every_time(name: str) -> None:
        if name == BEFORE_WRITE and not rival_every_time.inside:
            rival_every_time.inside = True
            try:
                Table(memory_uri).update({"v": "v + 1"}, predicate="id = 1")
            finally:
                rival_every_time.inside = False
    rival_every_time.inside = False
    failpoints.set_hook(rival_every_time)
    try:
        with pytest.raises((CommitConflictError, CommitTimeoutError)) as caught:
            table.delete("id = 1")
    finally:
        failpoints.set_hook(None)
    if isinstance(caught.value, CommitConflictError):
        assert caught.value.kind.delta_exception in ("ConcurrentDeleteDeleteException",
                                                     "ConcurrentDeleteReadException")
    after = Table(memory_uri)
    assert 1 in after.to_pyarrow_table()["id"].to_pylist()  # our delete never landed; every rival update did
    assert all(h.operation == "UPDATE" for h in after.history(after.version - before))


def test_a_re_plan_that_runs_out_of_time_reading_the_table_again_raises_the_conflict(memory_uri):
    """The deadline may pass between a conflict and reading the newest version for the re-plan (once seen on
    a loaded machine): the caller learns of the conflict, not of a bare DeadlineExceededError, and nothing of
    ours is committed. The pause comes from a handler of the re-plan's warning that waits out the deadline."""
    import logging
    import time

    from logstore import deadline, failpoints
    from table.log.transaction import BEFORE_WRITE

    setup(memory_uri)
    table = Table(memory_uri, storage_options={"DYNACOMMIT_TIMEOUT_SECONDS": "2"})
    before = Table(memory_uri).version

    def one_rival(name: str) -> None:
        if name == BEFORE_WRITE and not one_rival.done:
            one_rival.done = True
            Table(memory_uri).update({"v": "v + 1"}, predicate="id = 1")
    one_rival.done = False

    class OutOfTime(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "planning it again" in record.getMessage():
                time.sleep(max(0.0, deadline.remaining(0.0)) + 0.05)

    rewrite_log = logging.getLogger("table.operations.rewrite")
    handler = OutOfTime(level=logging.WARNING)
    rewrite_log.addHandler(handler)
    failpoints.set_hook(one_rival)
    try:
        with pytest.raises(CommitConflictError) as caught:
            table.delete("id = 1")
    finally:
        failpoints.set_hook(None)
        rewrite_log.removeHandler(handler)
    assert caught.value.kind.delta_exception in ("ConcurrentDeleteDeleteException", "ConcurrentDeleteReadException")
    after = Table(memory_uri)
    assert after.version == before + 1 and [h.operation for h in after.history(1)] == ["UPDATE"]
    assert 1 in after.to_pyarrow_table()["id"].to_pylist()


# --- the rules themselves, without I/O ---------------------------------------------------------------


def _add(path, ids, p="a", blind=False):
    from table.log.actions import AddFile, CommitInfo

    stats = f'{{"numRecords":{len(ids)},"minValues":{{"id":{min(ids)}}},"maxValues":{{"id":{max(ids)}}},' \
            f'"nullCount":{{"id":0}}}}'
    return [CommitInfo(operation="WRITE", is_blind_append=blind),
            AddFile(path=path, partition_values={"p": p}, size=1, modification_time=1, data_change=True, stats=stats)]


@pytest.mark.parametrize("isolation, blind, ids, conflict", [
    (IsolationLevel.WRITE_SERIALIZABLE, True, [1], False),    # blind appends are ordered after us
    (IsolationLevel.SERIALIZABLE, True, [1], True),           # ... unless the table is Serializable
    (IsolationLevel.SERIALIZABLE, True, [50], False),         # and never when statistics rule them out
    (IsolationLevel.WRITE_SERIALIZABLE, False, [1], True),    # rows added by a DML that we would have selected
    (IsolationLevel.WRITE_SERIALIZABLE, False, [50], False),
])
def test_a_predicate_read_conflicts_only_with_files_it_may_have_selected(isolation, blind, ids, conflict):
    from table.log.commit import Commit

    def matcher(add):
        return '"minValues":{"id":1}' in add.stats  # "may hold an id < 5"

    ours = Commit(actions=(), operation="DELETE", read_scope=ReadScope.of_predicate(["f0"], matcher, "id < 5"))
    winner = Winner(7, _add("new.parquet", ids, blind=blind))
    if conflict:
        with pytest.raises(CommitConflictError) as caught:
            check(ours, winner, creating=False, isolation=isolation, types={}, lookup=lambda p: None, table="t")
        assert caught.value.kind is ConflictKind.CONCURRENT_APPEND
    else:
        assert isinstance(check(ours, winner, creating=False, isolation=isolation, types={}, lookup=lambda p: None,
                                table="t"), Rebase)


@pytest.mark.parametrize("data_change, ours_removes, kind", [
    (True, False, ConflictKind.CONCURRENT_DELETE_READ),
    (False, False, None),  # a compaction moved rows we read and did not change
    (False, True, ConflictKind.CONCURRENT_DELETE_DELETE),
    (True, True, ConflictKind.CONCURRENT_DELETE_DELETE),
])
def test_a_removal_of_a_file_a_predicate_read(data_change, ours_removes, kind):
    from table.log.actions import AddFile, CommitInfo
    from table.log.commit import Commit

    read = AddFile(path="f0", partition_values={}, size=1, modification_time=1, data_change=True)
    actions = (read.remove(deletion_timestamp=1),) if ours_removes else ()
    ours = Commit(actions=actions, operation="DELETE", read_scope=ReadScope.of_predicate(["f0"], lambda a: False))
    winner = Winner(7, [CommitInfo(operation="OPTIMIZE"), read.remove(deletion_timestamp=2, data_change=data_change)])
    if kind is None:
        assert isinstance(check(ours, winner, creating=False, isolation=IsolationLevel.SERIALIZABLE, types={},
                                lookup=lambda p: None, table="t"), Rebase)
        return
    with pytest.raises(CommitConflictError) as caught:
        check(ours, winner, creating=False, isolation=IsolationLevel.SERIALIZABLE, types={}, lookup=lambda p: None,
              table="t")
    assert caught.value.kind is kind
