"""DELETE, UPDATE, MERGE, RESTORE and OPTIMIZE return typed metrics (``table.operations.metrics``): each
field equals a count made another way (rows read back before and after, the commit's own add and remove
actions, the rows of the inputs), and the metrics still read as the mapping of Delta's names and strings
that the commit's ``operationMetrics`` holds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from table import Table, write_table
from table.log.actions import AddFile, RemoveFile
from table.log.snapshot import read_commit
from table.operations.metrics import (
    DeleteMetrics,
    MergeMetrics,
    OperationMetrics,
    OptimizeMetrics,
    RestoreMetrics,
    UpdateMetrics,
)


def three_files(uri: str) -> None:
    for start in (0, 10, 20):
        ids = list(range(start, start + 10))
        write_table(uri, pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([float(i) for i in ids])}))


def rows(uri: str) -> pa.Table:
    return Table(uri).to_pyarrow_table()


def committed(uri: str) -> tuple[list[AddFile], list[RemoveFile]]:
    """The add and remove actions of the newest commit, read from the log."""
    table = Table(uri)
    actions = read_commit(table.log_store, table.version())
    return [a for a in actions if isinstance(a, AddFile)], [a for a in actions if isinstance(a, RemoveFile)]


def logged_metrics(uri: str) -> dict[str, str]:
    return Table(uri).history(1)[0].operation_metrics


def assert_logged_as_before(uri: str, metrics: OperationMetrics) -> None:
    """The commit's ``operationMetrics`` are Delta's strings, and the mapping holds each of them."""
    logged = logged_metrics(uri)
    assert logged and all(isinstance(v, str) for v in logged.values())
    assert {k: metrics[k] for k in logged} == logged


def test_a_delete_returns_delete_metrics_counting_what_it_changed(memory_uri):
    three_files(memory_uri)
    before = rows(memory_uri)
    metrics = Table(memory_uri).delete("id % 4 = 1").metrics
    after = rows(memory_uri)
    adds, removes = committed(memory_uri)
    assert type(metrics) is DeleteMetrics
    assert metrics.num_deleted_rows == before.num_rows - after.num_rows == 8
    assert metrics.num_copied_rows == after.num_rows  # every file held a deleted row: all were rewritten
    assert (metrics.num_added_files, metrics.num_removed_files) == (len(adds), len(removes))
    assert metrics.num_removed_files == 3
    assert metrics.num_attempts == 1 and metrics.num_replans == 0
    assert metrics.scan_time_ms is not None and metrics.execution_time_ms is not None
    assert_logged_as_before(memory_uri, metrics)


def test_an_update_returns_update_metrics_counting_what_it_changed(memory_uri):
    three_files(memory_uri)
    before = rows(memory_uri)
    matching = pc.sum(pc.less(before["id"], 12)).as_py()
    metrics = Table(memory_uri).update({"v": "v + 100"}, predicate="id < 12").metrics
    after = rows(memory_uri)
    adds, removes = committed(memory_uri)
    assert type(metrics) is UpdateMetrics
    assert metrics.num_updated_rows == pc.sum(pc.greater_equal(after["v"], 100)).as_py() == matching == 12
    assert metrics.num_copied_rows == 20 - matching  # the rest of the two files rewritten
    assert (metrics.num_added_files, metrics.num_removed_files) == (len(adds), len(removes))
    assert metrics.num_removed_files == 2
    assert_logged_as_before(memory_uri, metrics)


def test_a_merge_returns_merge_metrics_counting_what_it_changed(memory_uri):
    three_files(memory_uri)
    before = set(rows(memory_uri)["id"].to_pylist())
    source = pa.table({"id": pa.array([3, 5, 40, 41, 42], pa.int64()), "v": pa.array([-1.0] * 5)})
    metrics = Table(memory_uri).merge(source, "target.id = source.id") \
        .when_matched_update_all().when_not_matched_insert_all().execute().metrics
    after = rows(memory_uri)
    adds, removes = committed(memory_uri)
    matched = before & set(source["id"].to_pylist())
    assert type(metrics) is MergeMetrics
    assert metrics.num_source_rows == source.num_rows
    assert metrics.num_target_rows_updated == len(matched) == 2
    assert metrics.num_target_rows_inserted == after.num_rows - len(before) == 3
    assert metrics.num_target_rows_deleted == 0
    assert metrics.num_target_rows_copied == 8  # the rest of the one file holding ids 3 and 5
    assert metrics.num_output_rows == metrics.num_target_rows_inserted + metrics.num_target_rows_updated + 8
    assert (metrics.num_target_files_added, metrics.num_target_files_removed) == (len(adds), len(removes))
    assert_logged_as_before(memory_uri, metrics)


def test_a_restore_returns_restore_metrics_counting_the_files_it_restored_and_removed(memory_uri):
    three_files(memory_uri)
    at_one = set(Table(memory_uri).load_as_version(1).files())
    now = set(Table(memory_uri).files())
    metrics = Table(memory_uri).restore(1).metrics
    assert type(metrics) is RestoreMetrics
    assert metrics.num_removed_files == len(now - at_one) == 1
    assert metrics.num_restored_files == len(at_one - now) == 0
    assert metrics.num_of_files_after_restore == len(Table(memory_uri).files()) == len(at_one)
    assert_logged_as_before(memory_uri, metrics)


def test_optimize_reports_optimize_metrics_counting_the_files_it_compacted(memory_uri):
    three_files(memory_uri)
    report = Table(memory_uri).optimize()
    adds, removes = committed(memory_uri)
    assert type(report.metrics) is OptimizeMetrics and report.result.metrics is report.metrics
    assert (report.metrics.num_added_files, report.metrics.num_removed_files) == (len(adds), len(removes)) == (1, 3)
    assert report.metrics.num_removed_bytes == sum(r.size for r in removes)
    nothing = Table(memory_uri).optimize()
    assert nothing.metrics.num_added_files == 0 and nothing.metrics.num_removed_files == 0


def test_typed_metrics_read_as_the_mapping_callers_index(memory_uri):
    three_files(memory_uri)
    metrics = Table(memory_uri).delete("id < 3").metrics
    assert isinstance(metrics, Mapping)
    assert metrics["numDeletedRows"] == "3" and metrics.get("numDeletedRows") == "3"
    assert metrics["num_deleted_rows"] == 3  # deltalake's key, its integer value
    assert metrics.get("noSuchMetric") is None and "noSuchMetric" not in metrics
    plain = dict(metrics)
    assert metrics == plain and plain == metrics and metrics != {**plain, "numDeletedRows": "4"}
    assert list(metrics.keys()) == list(plain) and dict(metrics.items()) == plain and len(metrics) == len(plain)
    assert {**metrics} == plain and all(isinstance(v, str) for v in plain.values())
    deltalake_style = metrics.to_dict()
    assert deltalake_style["num_deleted_rows"] == 3 and deltalake_style["num_removed_files"] == 1
    assert all(isinstance(v, int) for v in deltalake_style.values())
    assert json.loads(json.dumps(metrics)) == plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        metrics.num_deleted_rows = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="read-only"):
        metrics["numDeletedRows"] = "4"
    with pytest.raises(TypeError, match="read-only"):
        metrics.update(numDeletedRows="4")
    assert metrics["numDeletedRows"] == "3"


def test_a_field_the_operation_did_not_record_is_none_and_not_a_key():
    metrics = DeleteMetrics.of({"numRemovedFiles": "2"})
    assert metrics.num_removed_files == 2 and metrics.num_deleted_rows is None
    assert "num_deleted_rows" not in metrics and metrics.to_dict() == {"num_removed_files": 2}
    assert metrics.get("num_deleted_rows") is None and metrics.get("num_removed_files") == 2
    with pytest.raises(KeyError):
        metrics["num_deleted_rows"]


def test_a_metric_that_is_not_a_number_is_refused_with_the_metrics_named():
    with pytest.raises(ValueError, match="numRemovedFiles.*two|two.*numRemovedFiles"):
        DeleteMetrics.of({"numRemovedFiles": "two"})


def test_typed_metrics_pickle_and_copy_with_the_values_they_hold(memory_uri):
    import copy
    import pickle

    three_files(memory_uri)
    metrics = Table(memory_uri).delete("id < 3").metrics
    for again in (pickle.loads(pickle.dumps(metrics)), copy.deepcopy(metrics)):
        assert type(again) is DeleteMetrics and again == metrics and again.to_dict() == metrics.to_dict()
