"""Delta tables built fast for the measures that need a big log or many files: commit files and data
files written directly to S3 (the Delta protocol's JSON, nothing of the code under measurement), so
set-up costs seconds, not the thousands of real commits it would take.

A history built here has no DynamoDB entries: as for any table whose entries expired (they live a day),
the first real commit finds version N-1 by its ``N-1.json``.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

_DELTA_TYPES = {
    pa.int64(): "long", pa.int32(): "integer", pa.float64(): "double", pa.string(): "string",
    pa.bool_(): "boolean", pa.date32(): "date", pa.timestamp("us", tz="UTC"): "timestamp",
}


def schema_string(schema: pa.Schema) -> str:
    return json.dumps({"type": "struct", "fields": [
        {"name": f.name, "type": _DELTA_TYPES[f.type], "nullable": True, "metadata": {}} for f in schema]})


def create_actions(schema: pa.Schema) -> list[dict]:
    now = int(time.time() * 1000)
    return [
        {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": {},
                        "engineInfo": "dynacommit-bench"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": schema_string(schema), "partitionColumns": [], "configuration": {},
                      "createdTime": now}},
    ]


def add_action(path: str, *, size: int, stats: dict | None = None) -> dict:
    add = {"path": path, "partitionValues": {}, "size": size, "modificationTime": int(time.time() * 1000),
           "dataChange": True}
    if stats is not None:
        add["stats"] = json.dumps(stats, separators=(",", ":"))
    return {"add": add}


def append_actions(adds: Iterable[dict]) -> list[dict]:
    return [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE",
                            "operationParameters": {"mode": "Append"}, "engineInfo": "dynacommit-bench"}},
            *adds]


def body(actions: Sequence[dict]) -> bytes:
    return ("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n").encode()


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue()


def file_stats(table: pa.Table) -> dict:
    """numRecords plus min/max/nullCount of the numeric and string columns."""
    stats: dict = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in table.column_names:
        column = table.column(name)
        stats["nullCount"][name] = column.null_count
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_string(column.type):
            bounds = pc.min_max(column).as_py()
            stats["minValues"][name], stats["maxValues"][name] = bounds["min"], bounds["max"]
    return stats


def put_all(client, bucket: str, items: Sequence[tuple[str, bytes]], *, threads: int = 16) -> None:
    """PUT every ``(key, body)``, ``threads`` at a time."""
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(lambda item: client.put_object(Bucket=bucket, Key=item[0], Body=item[1]), items):
            pass


def commit_key(table_key: str, version: int) -> str:
    return f"{table_key}/_delta_log/{version:020d}.json"


def write_history(client, bucket: str, table_key: str, versions: int, schema: pa.Schema) -> None:
    """Commits ``0 .. versions-1`` of a table: the create, then appends of one (log-only) file each.
    The ``add`` actions name files that were never written: the measures using this table only commit."""
    items = [(commit_key(table_key, 0), body(create_actions(schema)))]
    for v in range(1, versions):
        add = add_action(f"history-{v:06d}.parquet", size=1000, stats={"numRecords": 1})
        items.append((commit_key(table_key, v), body(append_actions([add]))))
    put_all(client, bucket, items)
