"""Our side of the benchmarks: dynacommit through its public API, in a process of its own.

``python -m tests.benchmarks.harness.ours_worker`` (our interpreter, repository root on PYTHONPATH),
speaking :mod:`.jsonlines`; commands mirror :mod:`.peer_worker` one for one, plus what only we have: the
raw log store (``raw_write``), single-request timings (``singles``) and the job commit (``jobcommit``).
Only public entry points are used (``write_table``, ``Table``, ``open_log_store``, ``commit_staged``),
so the harness measures whatever the code under them does.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import botocore.exceptions

from logstore import open_log_store
from table import Table, write_table
from table.table import forget_snapshots
from tests.benchmarks.harness import aws
from tests.benchmarks.harness.jsonlines import serve
from tests.benchmarks.harness.staged import job_commit
from tests.benchmarks.harness.workload import (
    DML_FILES,
    bulk_table,
    merge_source,
    run_appends,
    small_append,
    timed,
)

_writers: dict[str, Table] = {}  # long-lived writers by table URI
_bulk: dict[int, object] = {}
_stores: dict[str, object] = {}  # raw log stores by table URI
_clients: dict[str, tuple] = {}  # the single-request timings' clients, by endpoint


def open_writer(req: dict) -> dict:
    """The long-lived writer: one Table kept for the URI."""
    ms, table = timed(lambda: Table.for_write(req["uri"], storage_options=req["options"]))
    _writers[req["uri"]] = table
    return {"ms": ms, "version": table.version}


def append(req: dict) -> dict:
    """``count`` one-row appends: ``shape`` "long" reuses the Table of :func:`open_writer`, "stateless"
    calls ``write_table(uri, ...)`` each time."""
    uri, options, writer = req["uri"], req["options"], req.get("writer", "ours")
    if req["shape"] == "long":
        table = _writers[uri]

        def one(seq: int) -> None:
            write_table(table, small_append(writer, seq), mode="append")
    else:
        def one(seq: int) -> None:
            write_table(uri, small_append(writer, seq), mode="append", storage_options=options)
    return run_appends(one, count=req["count"], first_seq=req.get("first_seq", 0),
                       start_at=req.get("start_at")).as_dict()


def open_table(req: dict) -> dict:
    """A cold open (the process's remembered snapshots forgotten first; its clients stay, as in any
    process that opened a table before), then the same table opened again: the remembered snapshot,
    checked against the log (one Query and one LIST)."""
    forget_snapshots()
    open_ms, table = timed(lambda: Table(req["uri"], storage_options=req["options"]))
    files_ms, files = timed(table.files)
    again_ms, _ = timed(lambda: Table(req["uri"], storage_options=req["options"]))
    return {"open_ms": open_ms, "files_ms": files_ms, "again_ms": again_ms, "files": len(files),
            "version": table.version}


def read(req: dict) -> dict:
    forget_snapshots()  # a cold open, as delta-rs's
    ms, data = timed(lambda: Table(req["uri"], storage_options=req["options"]).to_pyarrow_table())
    return {"ms": ms, "rows": data.num_rows}


def bulk_write(req: dict) -> dict:
    rows = req["rows"]
    if rows not in _bulk:
        _bulk.clear()
        _bulk[rows] = bulk_table(rows)
    data = _bulk[rows]
    ms, _ = timed(lambda: write_table(req["uri"], data, mode="append", storage_options=req["options"]))
    return {"ms": ms, "rows": rows}


def raw_write(req: dict) -> dict:
    """``count`` sequential ``LogStore.write`` calls of a small body at versions ``first_version``, ...; the
    store is kept for the URI, as a long-lived writer keeps it."""
    uri = req["uri"]
    if uri not in _stores:
        _stores[uri] = open_log_store(uri, storage_options=req["options"])
    store = _stores[uri]
    body = b'{"commitInfo":{"timestamp":0,"operation":"BENCH"}}\n'
    return run_appends(lambda v: store.write(v, body), count=req["count"],
                       first_seq=req.get("first_version", 0)).as_dict()


def singles(req: dict) -> dict:
    """Each kind of request a commit makes, timed alone ``count`` times (milliseconds): the floor a
    sequence of them cannot beat. Keys are the counting proxy's operation names (``s3:HEAD(404)`` is a
    HEAD of a missing key)."""
    options, bucket, count = req["options"], req["bucket"], req.get("count", 20)
    endpoints = options["AWS_ENDPOINT_URL"] + " " + options.get("AWS_ENDPOINT_URL_DYNAMODB", "")
    if endpoints not in _clients:  # kept, so no timing includes opening a connection
        _clients[endpoints] = (aws.s3(options), aws.dynamodb(options))
    s3, ddb = _clients[endpoints]
    table = options.get("DELTA_DYNAMO_TABLE_NAME", "delta_log")
    prefix = f"{req['prefix']}/{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}/_delta_log/{i:020d}.json" for i in range(count)]
    small = b'{"commitInfo":{"timestamp":0}}\n' * 8
    out: dict[str, list[float]] = defaultdict(list)

    def time_it(kind: str, fn, /, **kwargs) -> dict:
        ms, result = timed(lambda: fn(**kwargs))
        out[kind].append(ms)
        return result

    def get(**kwargs) -> bytes:
        return s3.get_object(**kwargs)["Body"].read()

    def head_missing(**kwargs) -> None:
        try:
            s3.head_object(**kwargs)
        except botocore.exceptions.ClientError:
            pass

    for key in keys:
        time_it("s3:PUT", s3.put_object, Bucket=bucket, Key=key, Body=small)
    for key in keys:
        mpu = key + ".mpu"
        time_it("s3:HEAD", s3.head_object, Bucket=bucket, Key=key)
        time_it("s3:HEAD(404)", head_missing, Bucket=bucket, Key=key + ".missing")
        time_it("s3:GET", get, Bucket=bucket, Key=key)
        time_it("s3:COPY", s3.copy_object, Bucket=bucket, Key=key + ".copy", CopySource={"Bucket": bucket, "Key": key})
        time_it("s3:LIST", s3.list_objects_v2, Bucket=bucket, Prefix=f"{prefix}/_delta_log/", StartAfter=key)
        time_it("s3:DELETE", s3.delete_object, Bucket=bucket, Key=key + ".copy")
        upload = time_it("s3:CreateMultipartUpload", s3.create_multipart_upload, Bucket=bucket, Key=mpu)["UploadId"]
        etag = time_it("s3:UploadPart", s3.upload_part, Bucket=bucket, Key=mpu, UploadId=upload, PartNumber=1,
                       Body=small)["ETag"]
        time_it("s3:CompleteMultipartUpload", s3.complete_multipart_upload, Bucket=bucket, Key=mpu, UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
        time_it("s3:DeleteObjects", s3.delete_objects, Bucket=bucket, Delete={"Objects": [{"Key": mpu}], "Quiet": True})
    path = {"S": f"s3://{bucket}/{prefix}"}
    for i in range(count):
        name = {"S": f"{i:020d}.json"}
        time_it("dynamodb:PutItem", ddb.put_item, TableName=table, ConditionExpression="attribute_not_exists(fileName)",
                Item={"tablePath": path, "fileName": name, "tempPath": {"S": f".tmp/{i:020d}.json.x"},
                      "complete": {"S": "false"}})
        time_it("dynamodb:GetItem", ddb.get_item, TableName=table, ConsistentRead=True,
                Key={"tablePath": path, "fileName": name})
        time_it("dynamodb:UpdateItem", ddb.update_item, TableName=table, Key={"tablePath": path, "fileName": name},
                UpdateExpression="SET complete = :t, expireTime = :e", ConditionExpression="complete = :f",
                ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"},
                                           ":e": {"N": str(int(time.time()) + 86400)}})
        time_it("dynamodb:Query", ddb.query, TableName=table, ConsistentRead=True, Limit=1, ScanIndexForward=False,
                KeyConditionExpression="tablePath = :p", ExpressionAttributeValues={":p": path})
    for i in range(count):
        time_it("dynamodb:DeleteItem", ddb.delete_item, TableName=table,
                Key={"tablePath": path, "fileName": {"S": f"{i:020d}.json"}})
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    return {"samples_ms": dict(out)}


def jobcommit(req: dict) -> dict:
    return job_commit(req["uri"], files=req["files"], tasks=req["tasks"], options=req["options"])


def dml_table(req: dict) -> dict:
    """The row-level benchmark's table: ``bulk_table(rows)`` in ``DML_FILES`` appends, partitioned by day;
    with ``configuration`` (the deletion-vector benchmark's ``delta.enableDeletionVectors``) when given."""
    data = bulk_table(req["rows"])
    step = req["rows"] // DML_FILES
    for start in range(0, req["rows"], step):
        write_table(req["uri"], data.slice(start, step), partition_by=["day"], storage_options=req["options"],
                    configuration=req.get("configuration"))
    from table.engine import Engine

    Engine()  # the SQL engine loaded before the timed steps, as delta-rs's is (its import: BENCHMARKS.md)
    return {"files": len(Table(req["uri"], storage_options=req["options"]).files())}


def dml(req: dict) -> dict:
    """One step of ``dml_steps``, timed around the library call (the table opened first, as on their side)."""
    step = req["step"]
    table = Table(req["uri"], storage_options=req["options"])
    window = [time.time()]  # when the timed call began and ended (epoch), for the counting proxy
    if step["op"] == "delete":
        ms, result = timed(lambda: table.delete(step["predicate"]))
    elif step["op"] == "update":
        ms, result = timed(lambda: table.update(step["updates"], predicate=step["predicate"]))
    else:
        source = merge_source(step, req["rows"])
        ms, result = timed(lambda: table.merge(source, step["predicate"]).when_matched_update_all()
                           .when_not_matched_insert_all().execute())
    window.append(time.time())
    return {"ms": ms, "metrics": result.metrics, "version": result.version, "window": window}


def read_all(req: dict) -> dict:
    """The whole table as one Arrow table, the table opened inside the timing (rows a deletion vector
    deletes dropped)."""
    ms, data = timed(lambda: Table(req["uri"], storage_options=req["options"]).to_pyarrow_table())
    return {"ms": ms, "rows": data.num_rows}


def about(req: dict) -> dict:
    import boto3
    import pyarrow

    return {"pyarrow": pyarrow.__version__, "boto3": boto3.__version__}


if __name__ == "__main__":
    serve({"open_writer": open_writer, "append": append, "open": open_table, "read": read,
           "bulk_write": bulk_write, "raw_write": raw_write, "singles": singles, "jobcommit": jobcommit,
           "dml_table": dml_table, "dml": dml, "read_all": read_all, "about": about})
