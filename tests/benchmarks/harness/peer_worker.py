"""The delta-rs side of the benchmarks: ``deltalake==1.6.0`` with its DynamoDB log store.

Run by the driver with the peer interpreter (``.venv-peer``: deltalake, pyarrow, nothing of this
project): ``python -m tests.benchmarks.harness.peer_worker``, speaking :mod:`.jsonlines`. Every
request carries ``uri`` and ``options`` (delta-rs storage options, ``AWS_S3_LOCKING_PROVIDER=dynamodb``
included). Commands mirror :mod:`.ours_worker` one for one, so each measure runs the same steps on both
sides; timings are taken here, around the library call only.
"""

from __future__ import annotations

import time

from deltalake import DeltaTable, write_deltalake

from tests.benchmarks.harness.jsonlines import serve
from tests.benchmarks.harness.workload import (
    DML_FILES,
    bulk_table,
    merge_source,
    run_appends,
    small_append,
    timed,
)

_writers: dict[str, DeltaTable] = {}  # long-lived writers by table URI
_bulk: dict[int, object] = {}


def open_writer(req: dict) -> dict:
    """The long-lived writer: one DeltaTable kept for the URI (the table must exist)."""
    ms, table = timed(lambda: DeltaTable(req["uri"], storage_options=req["options"]))
    _writers[req["uri"]] = table
    return {"ms": ms, "version": table.version()}


def append(req: dict) -> dict:
    """``count`` one-row appends: ``shape`` "long" reuses the DeltaTable of :func:`open_writer`,
    "stateless" calls ``write_deltalake(uri, ...)`` each time."""
    uri, options, writer = req["uri"], req["options"], req.get("writer", "theirs")
    if req["shape"] == "long":
        table = _writers[uri]

        def one(seq: int) -> None:
            write_deltalake(table, small_append(writer, seq), mode="append")
    else:
        def one(seq: int) -> None:
            write_deltalake(uri, small_append(writer, seq), mode="append", storage_options=options)
    return run_appends(one, count=req["count"], first_seq=req.get("first_seq", 0),
                       start_at=req.get("start_at")).as_dict()


def open_table(req: dict) -> dict:
    open_ms, table = timed(lambda: DeltaTable(req["uri"], storage_options=req["options"]))
    files_ms, files = timed(table.file_uris)
    return {"open_ms": open_ms, "files_ms": files_ms, "files": len(files), "version": table.version()}


def read(req: dict) -> dict:
    def run():
        table = DeltaTable(req["uri"], storage_options=req["options"])
        return table.to_pyarrow_table()

    ms, data = timed(run)
    return {"ms": ms, "rows": data.num_rows}


def bulk_write(req: dict) -> dict:
    rows = req["rows"]
    if rows not in _bulk:
        _bulk.clear()
        _bulk[rows] = bulk_table(rows)
    data = _bulk[rows]
    ms, _ = timed(lambda: write_deltalake(req["uri"], data, mode="append", storage_options=req["options"]))
    return {"ms": ms, "rows": rows}


def checkpoint(req: dict) -> dict:
    table = DeltaTable(req["uri"], storage_options=req["options"])
    ms, _ = timed(table.create_checkpoint)
    return {"ms": ms, "version": table.version()}


def version(req: dict) -> dict:
    return {"version": DeltaTable(req["uri"], storage_options=req["options"]).version()}


def dml_table(req: dict) -> dict:
    """The row-level benchmark's table, as :func:`.ours_worker.dml_table` builds it."""
    data = bulk_table(req["rows"])
    step = req["rows"] // DML_FILES
    for start in range(0, req["rows"], step):
        write_deltalake(req["uri"], data.slice(start, step), mode="append", partition_by=["day"],
                        storage_options=req["options"])
    return {"files": len(DeltaTable(req["uri"], storage_options=req["options"]).file_uris())}


def dml(req: dict) -> dict:
    """One step of ``dml_steps``, timed around the library call (the table opened first)."""
    step = req["step"]
    table = DeltaTable(req["uri"], storage_options=req["options"])
    window = [time.time()]  # when the timed call began and ended (epoch), for the counting proxy
    if step["op"] == "delete":
        ms, metrics = timed(lambda: table.delete(step["predicate"]))
    elif step["op"] == "update":
        ms, metrics = timed(lambda: table.update(updates=step["updates"], predicate=step["predicate"]))
    else:
        source = merge_source(step, req["rows"])
        ms, metrics = timed(lambda: table.merge(source, step["predicate"], source_alias="source",
                                                target_alias="target").when_matched_update_all()
                            .when_not_matched_insert_all().execute())
    window.append(time.time())
    return {"ms": ms, "metrics": {k: str(v) for k, v in metrics.items()}, "version": table.version(),
            "window": window}


def read_all(req: dict) -> dict:
    """The whole table as one Arrow table, the table opened inside the timing. deltalake's pyarrow reader
    refuses deletion vectors, so this goes through its SQL reader (DataFusion), which applies them."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    def run():
        table = DeltaTable(req["uri"], storage_options=req["options"])
        return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())

    ms, data = timed(run)
    return {"ms": ms, "rows": data.num_rows}


def about(req: dict) -> dict:
    import deltalake
    import pyarrow

    return {"deltalake": deltalake.__version__, "pyarrow": pyarrow.__version__}


if __name__ == "__main__":
    serve({"open_writer": open_writer, "append": append, "open": open_table, "read": read,
           "bulk_write": bulk_write, "checkpoint": checkpoint, "version": version, "dml_table": dml_table,
           "dml": dml, "read_all": read_all, "about": about})
