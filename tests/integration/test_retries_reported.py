"""A retried or re-planned commit says so, and the log records it (issue 27, item 5).

While a MERGE re-planned after a conflict, stderr said "nothing was committed ... re-run the job" and the
commit then landed; its ``commitInfo`` said ``numAttempts=1``, and ``numReplans`` was only in the returned
metrics. Now a re-plan is one warning that says the operation is being retried, the conflict itself is
logged at INFO where the job commit deletes the attempt's files, and ``commitInfo.operationMetrics`` holds
``numAttempts`` counted across re-plans and ``numReplans`` (string values, as Delta writes every metric), so
``history()``, ``dynacommit history`` and deltalake's history show them.

The race is made at will: a rival commit lands when our operation is about to write its entry
(``tests.support.tables.with_rival``), so the first attempt loses and conflicts, and the second plan wins:
two attempts, one re-plan.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pytest

from table import Table, write_table
from table.cli import main
from table.log.actions import CommitInfo
from table.log.snapshot import read_commit
from tests.support.tables import with_rival


def rows(ids, v=0.0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v + i for i in ids], pa.float64())})


def upsert(uri, options):
    return (Table(uri, storage_options=options).merge(rows([2, 7], v=100.0), "target.id = source.id")
            .when_matched_update({"v": "target.v + 1"}).when_not_matched_insert_all().execute())


def replanned_merge(uri, options):
    write_table(uri, rows([1, 2, 3]), storage_options=options)
    rival = lambda: Table(uri, storage_options=options).update({"v": "v + 10"}, predicate="id = 2")  # noqa: E731
    return with_rival(rival, lambda: upsert(uri, options))


def commit_info(uri, options, version) -> CommitInfo:
    actions = read_commit(Table(uri, storage_options=options).log_store, version)
    return next(a for a in actions if isinstance(a, CommitInfo))


def test_a_re_planned_merge_records_its_attempts_and_re_plans_in_the_log(target):
    uri, options = target
    result = replanned_merge(uri, options)
    assert (result.metrics["numAttempts"], result.metrics["numReplans"], result.metrics["numRetries"]) == ("2", "1", "1")
    info = commit_info(uri, options, result.version)
    assert info.operation == "MERGE"
    assert (info.operation_metrics["numAttempts"], info.operation_metrics["numReplans"]) == ("2", "1")
    newest = Table(uri, storage_options=options).history(limit=1)[0]
    assert (newest.operation_metrics["numAttempts"], newest.operation_metrics["numReplans"]) == ("2", "1")
    # the row the rival updated was updated again by the re-planned merge (the serial order: rival, merge)
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1.0}, {"id": 2, "v": 13.0}, {"id": 3, "v": 3.0}, {"id": 7, "v": 107.0}]


def test_a_merge_that_commits_at_once_records_one_attempt_and_no_re_plan(target):
    uri, options = target
    write_table(uri, rows([1, 2, 3]), storage_options=options)
    result = upsert(uri, options)
    info = commit_info(uri, options, result.version)
    assert (info.operation_metrics["numAttempts"], info.operation_metrics["numReplans"]) == ("1", "0")
    assert (result.metrics["numAttempts"], result.metrics["numReplans"]) == ("1", "0")


def test_a_re_plan_is_logged_as_a_retry_not_as_a_failure(memory_uri, caplog):
    caplog.set_level(logging.INFO)
    replanned_merge(memory_uri, None)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "MERGE" in warnings[0] and "retrying" in warnings[0], warnings
    assert "re-plan 1" in warnings[0] and "re-run" not in warnings[0]
    assert not any("re-run the job" in w or "nothing was committed to" in w for w in warnings)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("nothing was committed to" in m for m in infos), "the attempt's cleanup is still in --verbose"


def test_dynacommit_history_shows_attempts_and_re_plans_and_fits_a_terminal(memory_uri, capsys):
    replanned_merge(memory_uri, None)
    assert main(["history", memory_uri]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:4] == ["version", "timestamp", "operation", "attempts"], header
    merge = [line for line in out.splitlines() if " MERGE " in line]
    assert len(merge) == 1 and merge[0].split()[3:5] == ["2", "(1"], merge  # "2 (1 re-plan)"
    assert max(len(line) for line in out.splitlines()) <= 120, out
    assert main(["history", memory_uri, "--json", "--limit", "1"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert (entry["operationMetrics"]["numAttempts"], entry["operationMetrics"]["numReplans"]) == ("2", "1")
    assert json.loads(entry["operationParameters"]["notMatchedPredicates"]) == [{"actionType": "insert"}]  # whole


@pytest.mark.slow
def test_deltalake_reads_the_history_of_a_re_planned_merge(s3_uri, storage_options):
    """Another Delta reader takes the commit with its new metrics (string values, as Delta's)."""
    deltalake = pytest.importorskip("deltalake")
    result = replanned_merge(s3_uri, storage_options)
    theirs = deltalake.DeltaTable(s3_uri, storage_options=storage_options).history(1)[0]
    assert theirs["operation"] == "MERGE" and theirs["version"] == result.version
    assert (theirs["operationMetrics"]["numAttempts"], theirs["operationMetrics"]["numReplans"]) == ("2", "1")
