"""A worker process for the row-level race tests: runs a list of operations on one table and prints what it
was told about each, one JSON line per operation.

    python dml_worker.py '{"uri": ..., "options": {...}, "start_at": <epoch seconds>, "ops": [...]}'

Each op is ``{"kind": "delete"|"update"|"merge"|"append"|"optimize", ...}`` with the arguments of
:func:`run`. The worker waits until ``start_at`` so that the processes of a test really overlap.
"""

from __future__ import annotations

import json
import sys
import time

import pyarrow as pa

from table import Table, write_table
from tests.support.fault_harness import describe_error


def arrow(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def run(op: dict, uri: str, options: dict[str, str], schema: pa.Schema):
    kind = op["kind"]
    if kind == "append":
        return write_table(uri, arrow(op["rows"], schema), storage_options=options)
    table = Table(uri, storage_options=options)
    if kind == "delete":
        return table.delete(op.get("predicate"))
    if kind == "update":
        return table.update(op["updates"], predicate=op.get("predicate"))
    if kind == "optimize":
        report = table.optimize(target_size=op.get("target_size", 8 * 1024 * 1024))
        return report.result
    if kind == "merge":
        builder = table.merge(arrow(op["rows"], schema), op["predicate"])
        if op.get("update_all"):
            builder = builder.when_matched_update_all()
        if op.get("updates"):
            builder = builder.when_matched_update(op["updates"])
        if op.get("insert_all"):
            builder = builder.when_not_matched_insert_all()
        return builder.execute()
    raise ValueError(f"unknown op {kind}")


def main() -> None:
    settings = json.loads(sys.argv[1])
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in settings["schema"]])
    time.sleep(max(0.0, settings.get("start_at", 0) - time.time()))
    for index, op in enumerate(settings["ops"]):
        began = time.time()
        try:
            result = run(op, settings["uri"], settings["options"], schema)
        except Exception as exc:  # noqa: BLE001 - reported, judged by the test
            print(json.dumps({"op": index, "ok": False, "error": describe_error(exc), "begin": began,
                              "end": time.time()}), flush=True)
            continue
        version = None if result is None else result.version
        metrics = {} if result is None else result.metrics
        print(json.dumps({"op": index, "ok": True, "version": version, "replans": metrics.get("numReplans"),
                          "skipped": metrics.get("numAttempts") is None, "begin": began, "end": time.time()}),
              flush=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
