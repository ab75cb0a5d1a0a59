"""The benchmark harness's own logic: what the counting proxy records, how requests are attributed to
operations and chained into round trips, and that both workers answer. Run with ``make bench-selftest``
(``tests/benchmarks`` is outside ``make test``). No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from tests.benchmarks.harness.driver import Proxy, Worker
from tests.benchmarks.harness.proxy import classify
from tests.benchmarks.harness.stats import critical_path, floor_ms, pct, per_operation


def rec(start, end, op, *, service="s3", status=200, log=True):
    return [start, end, service, op, status, log]


def test_requests_side_by_side_count_as_one_round_trip():
    records = [rec(0.0, 1.0, "HEAD"), rec(0.1, 0.9, "GetItem", service="dynamodb"), rec(1.0, 2.0, "PUT"),
               rec(2.5, 3.0, "PutItem", service="dynamodb")]
    assert [r[3] for r in critical_path(records)] == ["HEAD", "PUT", "PutItem"]


def test_a_request_belongs_to_the_operation_it_started_in_only():
    records = [rec(0.10, 0.20, "PUT"), rec(0.25, 0.30, "PUT"), rec(0.301, 0.40, "HEAD", status=404)]
    items = per_operation(records, [(0.05, 0.30), (0.30, 0.45)])
    assert [(i["s3"], i["round_trips"]) for i in items] == [(2, 2), (1, 1)]
    assert items[1]["ops"] == {"s3:HEAD(404)": 1}


def test_nearest_rank_percentiles():
    values = list(range(1, 101))
    assert (pct(values, 0.5), pct(values, 0.95), pct(values, 1.0), pct([7.0], 0.95)) == (50, 95, 100, 7.0)


def test_floor_sums_single_request_latencies_and_names_the_estimated_ones():
    singles = {"s3:HEAD": 2.0, "s3:PUT": 5.0, "dynamodb:PutItem": 3.0}
    total, estimated = floor_ms(["s3:HEAD(404)", "s3:PUT", "dynamodb:PutItem", "s3:UploadPartCopy"], singles)
    assert total == pytest.approx(2.0 + 5.0 + 3.0 + 3.5)  # UploadPartCopy: the median of the S3 singles
    assert estimated == ["s3:HEAD(404)", "s3:UploadPartCopy"]


@pytest.mark.parametrize(("method", "path", "headers", "expected"), [
    ("POST", "/", {"X-Amz-Target": "DynamoDB_20120810.PutItem"}, ("dynamodb", "PutItem", True)),
    ("HEAD", "/b/t/_delta_log/00000000000000000001.json", {}, ("s3", "HEAD", True)),
    ("GET", "/b?list-type=2&prefix=t%2F_delta_log%2F", {}, ("s3", "LIST", True)),
    ("GET", "/b?list-type=2&prefix=t%2Fdata", {}, ("s3", "LIST", False)),
    ("PUT", "/b/t/part-0.parquet?partNumber=1&uploadId=x", {}, ("s3", "UploadPart", False)),
    ("PUT", "/b/t/_delta_log/1.json?partNumber=1&uploadId=x", {"x-amz-copy-source": "b/t/x"},
     ("s3", "UploadPartCopy", True)),
    ("PUT", "/b/t/_delta_log/1.json", {"x-amz-copy-source": "b/t/x"}, ("s3", "COPY", True)),
    ("POST", "/b/t/part-0.parquet?uploads", {}, ("s3", "CreateMultipartUpload", False)),
    ("POST", "/b/t/part-0.parquet?uploadId=x", {}, ("s3", "CompleteMultipartUpload", False)),
    ("POST", "/b?delete", {}, ("s3", "DeleteObjects", False)),
    ("DELETE", "/b/t/part-0.parquet?uploadId=x", {}, ("s3", "AbortMultipartUpload", False)),
    ("GET", "/b?uploads&prefix=t%2F", {}, ("s3", "ListMultipartUploads", False)),
])
def test_requests_are_named_by_operation(method, path, headers, expected):
    assert classify(method, path, headers) == expected


def test_the_proxy_forwards_signed_requests_and_records_each(local_stack, tmp_path: Path):
    proxy = Proxy([local_stack.endpoint], tmp_path)
    try:
        s3 = boto3.client("s3", endpoint_url=proxy.endpoints[0], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(s3={"addressing_style": "path"}))
        ddb = boto3.client("dynamodb", endpoint_url=proxy.endpoints[0], region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        bucket, key = local_stack.bucket, "selftest/_delta_log/00000000000000000000.json"
        proxy.records(reset=True)
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * 2_000_000)  # big enough for Expect: 100-continue
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == 2_000_000
        with pytest.raises(s3.exceptions.ClientError):
            s3.head_object(Bucket=bucket, Key=key + ".missing")
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"x" * 2_000_000
        upload = s3.create_multipart_upload(Bucket=bucket, Key="selftest/data.parquet")["UploadId"]
        etag = s3.upload_part(Bucket=bucket, Key="selftest/data.parquet", UploadId=upload, PartNumber=1,
                              Body=b"y" * 100)["ETag"]
        s3.complete_multipart_upload(Bucket=bucket, Key="selftest/data.parquet", UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        ddb.get_item(TableName=local_stack.ddb_table, Key={"tablePath": {"S": "x"}, "fileName": {"S": "y"}})
        records = proxy.records(reset=True)
    finally:
        proxy.stop()
    assert [(r[2], r[3], r[4], r[5]) for r in records] == [
        ("s3", "PUT", 200, True), ("s3", "HEAD", 200, True), ("s3", "HEAD", 404, True), ("s3", "GET", 200, True),
        ("s3", "CreateMultipartUpload", 200, False), ("s3", "UploadPart", 200, False),
        ("s3", "CompleteMultipartUpload", 200, False), ("dynamodb", "GetItem", 200, True),
    ]
    assert all(r[0] <= r[1] for r in records)


@pytest.mark.parametrize("side", ["ours", "theirs"])
def test_each_worker_appends_and_opens_the_same_table(side, local_stack, s3_uri, tmp_path: Path):
    options = {**local_stack.storage_options(), "AWS_ENDPOINT_URL_DYNAMODB": local_stack.endpoint,
               "AWS_S3_LOCKING_PROVIDER": "dynamodb"}
    worker = Worker(side, f"selftest-{side}", tmp_path)
    try:
        created = worker.call("append", uri=s3_uri, options=options, shape="stateless", count=2, writer=side)
        worker.call("open_writer", uri=s3_uri, options=options)
        appended = worker.call("append", uri=s3_uri, options=options, shape="long", count=3, writer=side)
        opened = worker.call("open", uri=s3_uri, options=options)
    finally:
        worker.stop()
    assert (created["committed"], appended["committed"], appended["failures"]) == (2, 3, [])
    assert len(appended["spans"]) == len(appended["latencies_ms"]) == 3
    assert (opened["version"], opened["files"]) == (4, 5)


def _run(server: str, label: str, figures: list[dict]) -> dict:
    return {"server": server, "label": label, "date": "2026-01-01-0000", "environment": {"git": "x", "cpus": 2},
            "measures": {"m": {"figures": figures}}}


def _fig(name, ours, theirs, better="lower"):
    return {"figure": name, "unit": "ms", "ours": ours, "theirs": theirs, "better": better}


def test_chart_puts_ours_ahead_right_of_the_line_whichever_way_a_figure_is_better():
    from tests.benchmarks.harness.charts import advantage

    # 50 ms against 100 ms is twice as good; 40 commits/s against 10/s four times; 30 ms against 10 ms a third.
    assert advantage(_fig("t", 50.0, 100.0)) == 2.0
    assert advantage(_fig("c", 40.0, 10.0, better="higher")) == 4.0
    assert advantage(_fig("t", 30.0, 10.0)) == pytest.approx(1 / 3)
    # Nothing to compare: one side missing, or a zero count (0 failed appends on both sides).
    assert [advantage(_fig("x", *sides)) for sides in ((5.0, None), (0, 0), (1.0, float("nan")))] == [None] * 3


def test_chart_draws_each_compared_figure_per_server_and_skips_ours_only(tmp_path: Path):
    from PIL import Image

    from tests.benchmarks.harness.charts import draw, rows

    results = [_run("moto", "moto", [_fig("append p50", 20.0, 40.0), _fig("ours only", 3.0, None)]),
               _run("servers", "SeaweedFS + dynalite", [_fig("append p50", 30.0, 15.0),
                                                        _fig("commits/s", 50.0, 10.0, better="higher")])]
    servers, names, values = rows(results)
    assert servers == ["SeaweedFS + dynalite", "moto"]  # the tables' order: SeaweedFS first
    assert names == ["append p50", "commits/s"]
    assert values == {("append p50", "SeaweedFS + dynalite"): 0.5, ("commits/s", "SeaweedFS + dynalite"): 5.0,
                      ("append p50", "moto"): 2.0}
    out = draw(results, tmp_path / "run.png")
    with Image.open(out) as image:
        assert image.format == "PNG" and image.width > 600 and image.height > 200
    assert draw([_run("moto", "moto", [_fig("ours only", 3.0, None)])], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_a_sweep_of_writers_is_charted_as_commits_per_second_against_writers(tmp_path: Path):
    from PIL import Image

    from tests.benchmarks.harness.charts import draw_writers, writer_series

    def contention(*shapes):
        figures = []
        for writers, ours, theirs in shapes:
            figures += [_fig(f"{writers} processes × 20 appends: commits/s (median of rounds)", ours, theirs,
                             better="higher"),
                        _fig(f"{writers} processes × 20 appends: p50 append latency", 1.0, 2.0)]
        return {"figures": figures}

    moto = _run("moto", "moto", [])
    moto["measures"]["contention"] = contention((4, 12.0, 3.0), (1, 20.0, 8.0), (16, 25.0, 1.5))
    series = writer_series([moto])
    # in order of writers whatever the figures' order; latency figures are not commits/s
    assert series == {("moto", "ours"): [(1, 20.0), (4, 12.0), (16, 25.0)],
                      ("moto", "theirs"): [(1, 8.0), (4, 3.0), (16, 1.5)]}
    out = draw_writers([moto], tmp_path / "writers.png")
    with Image.open(out) as image:
        assert image.format == "PNG" and image.width > 600
    single = _run("moto", "moto", [])
    single["measures"]["contention"] = contention((4, 12.0, 3.0))
    assert draw_writers([single], tmp_path / "one.png") is None  # one shape: no line to draw
    assert not (tmp_path / "one.png").exists()


def test_a_spark_merge_run_is_charted_against_sparks_writer_of_the_same_rows(tmp_path: Path):
    from tests.benchmarks.harness.charts import load, rows

    events = [{"event": "run", "started": "2026-01-01 17:21:28 UTC", "load_before": 1.0, "load_after": 2.0},
              {"event": "setup", "servers": "SeaweedFS + dynalite", "workers": 2},
              {"event": "merge", "variant": "plain", "condition": "t.id = s.id", "seconds": 60.0},
              {"event": "merge", "variant": "pruned", "condition": "t.id = s.id AND t.day >= 8", "seconds": 20.0},
              {"event": "df.write.parquet", "of": "rows the plain merge wrote", "rows": 2_000, "seconds": 5.0},
              {"event": "df.write.parquet", "of": "whole table", "rows": 10_000, "seconds": 12.0}]
    path = tmp_path / "x-spark-merge.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    servers, names, values = rows(load(path))
    assert servers == ["run 17:21 (load 1.0-2.0)"]
    # Spark's writer is 12, 5 and 4 times as fast: the MERGE is that many times behind it.
    assert sorted(round(1 / v, 6) for v in values.values()) == [4.0, 5.0, 12.0]
    assert [n.split(" vs ")[0] for n in names] == ["plain MERGE (t.id = s.id)", "plain MERGE (t.id = s.id)",
                                                   "pruned MERGE (t.id = s.id AND t.day >= 8)"]


def test_the_spark_merge_benchmark_knows_how_many_rows_its_plain_merge_writes():
    """The count the benchmark's first write is sized by, against the rows counted one by one: each target
    row's file (write task, day), the files holding a source id, their rows, and the source rows that match
    no target row."""
    import numpy as np

    from tests.benchmarks.spark_merge import DAYS, TASKS, plain_merge_writes

    for rows, source in ((10_000, 1_000), (4_000, 400), (12_345, 1_300), (1_000, 300), (400, 0)):
        ids = np.arange(rows)
        task = np.searchsorted([(i + 1) * rows // TASKS for i in range(TASKS)], ids, side="right")
        per_day = rows // DAYS
        files = task * (rows + 1) + ids // per_day
        updates = source * 9 // 10
        updated = 8 * per_day + 2 * np.arange(updates)
        inserted = np.arange(rows, rows + source - updates)
        keys = np.concatenate([updated, inserted])
        touched = np.unique(files[keys[keys < rows]])
        expected = int(np.isin(files, touched).sum()) + int((keys >= rows).sum())
        assert plain_merge_writes(rows, source) == expected, (rows, source)
