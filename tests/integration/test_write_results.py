"""What a write returns, on moto (S3 + DynamoDB): typed ``WriteMetrics`` whose counts equal the same counts
made without the project (the commit's actions in its JSON log file, read with boto3 and ``json``; the sizes
S3 reports for those files; the rows deltalake reads at each version), and the snapshot of the table after
the commit, which equals a fresh ``Table`` opened at that version.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

import boto3
import deltalake
import pyarrow as pa
import pytest

from logstore import TableUri
from table import CommitResult, Table, create_table, write_table
from table.log.snapshot import Snapshot
from table.operations.metrics import CloneMetrics, OperationMetrics, WriteMetrics
from tests.support.fault_harness import deltalake_options


def s3(options: dict[str, str]):
    return boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options["AWS_REGION"],
                        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"])


def logged(uri: str, options: dict[str, str], version: int) -> list[dict]:
    """The actions of commit ``version``, read from its JSON file with boto3 and json alone."""
    parsed = TableUri.parse(uri)
    body = s3(options).get_object(Bucket=parsed.bucket, Key=parsed.key(f"_delta_log/{version:020d}.json"))["Body"]
    return [json.loads(line) for line in body.read().decode().splitlines() if line]


def sizes_on_s3(uri: str, options: dict[str, str], paths: list[str]) -> list[int]:
    parsed = TableUri.parse(uri)
    client = s3(options)
    return [client.head_object(Bucket=parsed.bucket, Key=parsed.key(unquote(p)))["ContentLength"] for p in paths]


def rows_at(uri: str, options: dict[str, str], version: int) -> int:
    return deltalake.DeltaTable(uri, version=version, storage_options=deltalake_options(options)) \
        .to_pyarrow_table().num_rows


def people(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "city": pa.array(["Paris", "Lyon", "Nice"] * (count // 3)
                                                                      + ["Paris"] * (count % 3))})


def assert_snapshot_is_the_table_at(result: CommitResult, uri: str, options: dict[str, str]) -> None:
    """The result's snapshot against a fresh Table opened at its version, and deltalake's files there."""
    after = result.snapshot
    assert isinstance(after, Snapshot) and not after.time_travel
    fresh = Table(uri, version=result.version, storage_options=options)
    assert after.version == fresh.version == result.version
    assert {(f.path, f.size) for f in after.files} == {(f.path, f.size) for f in fresh.snapshot.files}
    assert after.schema == fresh.schema
    assert (after.metadata.id, after.partition_columns) == (fresh.metadata().id, fresh.metadata().partition_columns)
    if all("://" not in f.path for f in after.files):  # a clone's absolute paths: compared with the Table's only
        theirs = deltalake.DeltaTable(uri, version=result.version, storage_options=deltalake_options(options))
        assert {f"{uri}/{unquote(f.path)}" for f in after.files} == set(theirs.file_uris())


def test_writes_return_write_metrics_equal_to_the_commit_s3_and_deltalake(s3_uri, storage_options):
    results = [write_table(s3_uri, people(0, 9), partition_by=["city"], storage_options=storage_options),
               write_table(s3_uri, people(9, 4), storage_options=storage_options),
               write_table(s3_uri, people(100, 5), mode="overwrite", storage_options=storage_options)]
    assert [r.version for r in results] == [0, 1, 2]
    for result in results:
        metrics = result.metrics
        actions = logged(s3_uri, storage_options, result.version)
        adds = [a["add"] for a in actions if "add" in a]
        removes = [a["remove"] for a in actions if "remove" in a]
        assert type(metrics) is WriteMetrics
        assert metrics.num_files == metrics.num_added_files == len(adds)
        assert metrics.num_output_bytes == sum(sizes_on_s3(s3_uri, storage_options, [a["path"] for a in adds]))
        assert metrics.num_output_rows == sum(json.loads(a["stats"])["numRecords"] for a in adds)
        before = rows_at(s3_uri, storage_options, result.version - 1) if result.version else 0
        kept = 0 if removes else before
        assert metrics.num_output_rows == rows_at(s3_uri, storage_options, result.version) - kept
        assert metrics.num_removed_files == len(removes)
        assert metrics.num_removed_bytes == sum(sizes_on_s3(s3_uri, storage_options, [r["path"] for r in removes]))
        assert (metrics.num_attempts, metrics.num_retries, metrics.num_tasks, metrics.skipped) == (1, 0, 1, None)
        assert metrics.commit_seconds is not None and metrics.commit_seconds >= 0.0
        # The mapping callers indexed before: the commit's operationMetrics, strings, plus the commit's extras.
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert {k: metrics[k] for k in info["operationMetrics"]} == info["operationMetrics"]
        assert metrics["numOutputRows"] == str(metrics.num_output_rows) and metrics["num_output_rows"] == \
            metrics.num_output_rows
        assert json.loads(json.dumps(metrics)) == dict(metrics) and metrics.job_id == info["operationMetrics"]["jobId"]
        assert_snapshot_is_the_table_at(result, s3_uri, storage_options)
    # the overwrite removed every file the two writes before it added
    assert results[2].metrics.num_removed_files == results[0].metrics.num_files + results[1].metrics.num_files == 6
    assert results[2].metrics.num_removed_bytes == results[0].metrics.num_output_bytes + \
        results[1].metrics.num_output_bytes


def test_a_skipped_write_says_so_in_its_typed_metrics_and_returns_the_table_it_found(s3_uri, storage_options):
    first = write_table(s3_uri, people(0, 3), storage_options=storage_options, app_id="job", app_version=3)
    write_table(s3_uri, people(3, 3), storage_options=storage_options)
    again = write_table(s3_uri, people(0, 3), storage_options=storage_options, app_id="job", app_version=2)
    ignored = write_table(s3_uri, people(0, 3), mode="ignore", storage_options=storage_options)
    for skipped in (again, ignored):
        assert type(skipped.metrics) is WriteMetrics and skipped.skipped and skipped.metrics.skipped is True
        assert skipped.metrics["skipped"] == "true" and skipped.metrics.num_files is None
        assert skipped.snapshot.version == Table(s3_uri, storage_options=storage_options).version == 1
    assert (again.version, again.metrics.app_version_held) == (first.version, 3)
    assert rows_at(s3_uri, storage_options, 1) == 6


def test_clone_and_create_return_typed_metrics_and_the_table_they_committed(s3_uri, storage_options):
    source = s3_uri + "-source"
    write_table(source, people(0, 6), partition_by=["city"], storage_options=storage_options)
    cloned = Table(source, storage_options=storage_options).clone(s3_uri + "-clone")
    assert type(cloned.metrics) is CloneMetrics
    source_actions = logged(source, storage_options, 0)
    source_paths = [a["add"]["path"] for a in source_actions if "add" in a]
    assert cloned.metrics.source_num_of_files == len(source_paths) == 3
    assert cloned.metrics.source_table_size == sum(sizes_on_s3(source, storage_options, source_paths))
    assert cloned.metrics.num_removed_files == 0 and cloned.metrics.num_attempts == 1
    assert_snapshot_is_the_table_at(cloned, s3_uri + "-clone", storage_options)
    created = create_table(s3_uri + "-new", pa.schema([("id", pa.int64())]), storage_options=storage_options)
    assert type(created.metrics) is OperationMetrics and created.metrics.num_attempts == 1
    assert created.snapshot.version == 0 and created.snapshot.files == []
    assert created.snapshot.schema == Table(s3_uri + "-new", storage_options=storage_options).schema


@pytest.mark.parametrize("operation", ["delete", "update", "merge", "restore", "optimize"])
def test_row_level_operations_return_the_table_they_committed(s3_uri, storage_options, operation):
    write_table(s3_uri, people(0, 6), storage_options=storage_options)
    write_table(s3_uri, people(6, 6), storage_options=storage_options)
    table = Table(s3_uri, storage_options=storage_options)
    run = {
        "delete": lambda: table.delete("id < 2"),
        "update": lambda: table.update({"city": "'Rome'"}, predicate="id = 7"),
        "merge": lambda: table.merge(people(10, 3), "target.id = source.id").when_matched_update_all()
        .when_not_matched_insert_all().execute(),
        "restore": lambda: table.restore(0),
        "optimize": lambda: table.optimize().result,
    }[operation]
    result = run()
    assert result.version == 2
    assert_snapshot_is_the_table_at(result, s3_uri, storage_options)
    assert table.snapshot is result.snapshot  # the handle moved to the very snapshot the result holds
