"""Peak resident memory, time and CPU of the data paths a user streams through, ours against deltalake.

Every measured body runs in a fresh child process against a server stack started here (``--stack``: moto,
S3 + DynamoDB in one process, or ``servers``: SeaweedFS + dynalite, on disk, for inputs of gigabytes);
the child resets its resident-memory high-water mark (Linux ``/proc/self/clear_refs``) once its imports
and inputs are ready, runs the body, and reports ``VmHWM`` (peak resident MB during the body), the
resident MB before it, wall and CPU seconds. Commands:

- ``write GB [GB ...]``: ``write_table`` of a ``pa.RecordBatchReader`` yielding GB gigabytes (Arrow
  bytes) of ``harness.workload.bulk_table``-shaped rows, generated batch by batch; deltalake's
  ``write_deltalake`` of the same reader with ``--theirs``.
  With ``--scan``, our table is then read back streaming (``to_pyarrow_dataset().to_batches()``, the same
  with pyarrow's own read-ahead of 4 files and 16 batches, and ``to_pyarrow_reader()``, each batch dropped
  once counted).
- ``dv-read ROWS``: a full read (``to_pyarrow_table``) of a ROWS-row, 10-file table whose deletion
  vectors delete 10% of the rows (``DV_DELETE_READ``), ours against deltalake's SQL reader (its pyarrow
  reader refuses deletion vectors); ``--code DIR`` also reads with the dynacommit code in DIR (another
  checkout: before/after figures of the same table); ``--scan`` also streams our
  ``to_pyarrow_dataset().to_batches()`` of it, each batch dropped once counted.
- ``checkpoint FILES``: ``write_checkpoint`` of an in-process (``memory://``) table of FILES live files.

    PYTHONPATH=. .venv/bin/python tests/benchmarks/memory.py write 1 2 --theirs
    PYTHONPATH=. .venv/bin/python tests/benchmarks/memory.py write 1 8 --scan --stack servers
    PYTHONPATH=. .venv/bin/python tests/benchmarks/memory.py dv-read 1000000
    PYTHONPATH=. .venv/bin/python tests/benchmarks/memory.py checkpoint 100000

Prints one line per run; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GB = 1_000_000_000
BATCH_ROWS = 100_000


# --- the child side ------------------------------------------------------------------------------


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no {field} in /proc/self/status")


def _measured(body) -> dict:
    """Run ``body()`` with a fresh high-water mark; what it returns plus the figures."""
    before = _status_mb("VmRSS")
    _reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    out = body() or {}
    return {**out, "wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2),
            "rss_before_mb": round(before), "peak_mb": round(_status_mb("VmHWM"))}


def _reader(gigabytes: float):
    import pyarrow as pa

    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    from harness.workload import BULK_SCHEMA, bulk_table

    template = bulk_table(BATCH_ROWS).drop_columns(["day"])  # unpartitioned: one stream of files
    per_batch = template.nbytes
    batches = max(1, int(gigabytes * GB / per_batch))

    def generate():
        for _ in range(batches):
            yield from template.to_batches()

    schema = pa.schema([f for f in BULK_SCHEMA if f.name != "day"])
    return pa.RecordBatchReader.from_batches(schema, generate()), batches * BATCH_ROWS, batches * per_batch


def child_write(args: dict) -> dict:
    reader, rows, nbytes = _reader(args["gb"])
    if args["side"] == "ours":
        from table import write_table

        def body():
            write_table(args["uri"], reader, storage_options=args["options"])
    else:
        import deltalake

        options = {k: v for k, v in args["options"].items() if k != "DELTA_DYNAMO_TABLE_NAME"}
        options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"

        def body():
            deltalake.write_deltalake(args["uri"], reader, storage_options=options)
    return {**_measured(body), "rows": rows, "arrow_mb": round(nbytes / 1e6)}


def child_scan(args: dict) -> dict:
    """Every batch of the table through ``to_pyarrow_dataset().to_batches()`` or ``to_pyarrow_reader()``,
    each batch dropped once counted (a consumer that streams)."""
    from table import Table

    table = Table(args["uri"], storage_options=args["options"])

    def body():
        if args["how"] == "dataset":
            batches = table.to_pyarrow_dataset().to_batches()
        elif args["how"] == "dataset, pyarrow's read-ahead":
            batches = table.to_pyarrow_dataset().to_batches(fragment_readahead=4, batch_readahead=16)
        else:
            batches = table.to_pyarrow_reader()
        return {"rows": sum(batch.num_rows for batch in batches)}
    return _measured(body)


def child_dv_read(args: dict) -> dict:
    if args["side"] == "theirs":
        import pyarrow as pa
        from deltalake import DeltaTable, QueryBuilder

        options = {k: v for k, v in args["options"].items() if k != "DELTA_DYNAMO_TABLE_NAME"}

        def body():
            table = DeltaTable(args["uri"], storage_options=options)
            return {"rows": pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()).num_rows}
    elif args.get("how") == "dataset":
        from table import Table

        def body():
            batches = Table(args["uri"], storage_options=args["options"]).to_pyarrow_dataset().to_batches()
            return {"rows": sum(batch.num_rows for batch in batches)}
    else:
        from table import Table

        def body():
            return {"rows": Table(args["uri"], storage_options=args["options"]).to_pyarrow_table().num_rows}
    return _measured(body)


def child_checkpoint(args: dict) -> dict:
    sys.path.insert(0, str(ROOT))
    import tests.support.memory  # noqa: F401 - registers the in-process memory:// scheme
    from logstore import open_log_store
    from table import Table
    from table.log.checkpoint import write_checkpoint
    from tests.benchmarks.harness import deltalog
    from tests.benchmarks.harness.workload import SMALL_SCHEMA

    uri = "memory://memory-bench/checkpoint"
    adds = [deltalog.add_action(f"part-{i:06d}.snappy.parquet", size=1000 + i,
                                stats='{"numRecords":100,"minValues":{"seq":0},"maxValues":{"seq":99},'
                                      '"nullCount":{"seq":0}}') for i in range(args["files"])]
    store = open_log_store(uri)
    store.write(0, deltalog.body([*deltalog.create_actions(SMALL_SCHEMA), *adds]))
    del adds
    table = Table(uri)
    snapshot = table.snapshot

    def body():
        hint = write_checkpoint(table.log_store, snapshot)
        return {"checkpoint_rows": hint.size}
    return _measured(body)


CHILDREN = {"write": child_write, "scan": child_scan, "dv-read": child_dv_read, "checkpoint": child_checkpoint}


# --- the parent side -----------------------------------------------------------------------------


def run_child(name: str, args: dict, *, code: Path = ROOT) -> dict:
    """One child process's report (its ``ru_maxrss`` would not do: it starts at the forking parent's size)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(ROOT)]))
    process = subprocess.Popen([sys.executable, __file__, "_child", name, json.dumps(args)], stdout=subprocess.PIPE,
                               env=env, cwd=code, text=True)
    out = process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"{name} child failed with status {process.returncode}")
    return {**json.loads(out.strip().splitlines()[-1]), "load": round(os.getloadavg()[0], 1)}


def dv_table(stack, rows: int) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    from harness.workload import DML_FILES, DV_DELETE_READ, bulk_table

    from table import Table, write_table

    uri = f"s3://{stack.bucket}/memory-bench/dv-{rows}-{time.time_ns()}"
    data, step = bulk_table(rows), rows // DML_FILES
    for start in range(0, rows, step):
        write_table(uri, data.slice(start, step), partition_by=["day"], storage_options=stack.storage_options(),
                    configuration={"delta.enableDeletionVectors": "true"} if start == 0 else None)
    Table(uri, storage_options=stack.storage_options()).delete(DV_DELETE_READ)
    return uri


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        print(json.dumps(CHILDREN[sys.argv[2]](json.loads(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["write", "dv-read", "checkpoint"])
    parser.add_argument("sizes", nargs="+", type=float)
    parser.add_argument("--theirs", action="store_true", help="write: deltalake too")
    parser.add_argument("--scan", action="store_true", help="write: then scan our table streaming, both ways; "
                                                             "dv-read: also stream our to_pyarrow_dataset()")
    parser.add_argument("--code", type=Path, help="dv-read: also read with the dynacommit checkout in this folder")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stack", choices=["moto", "servers"], default="moto",
                        help="moto (default) or servers: SeaweedFS + dynalite, on disk, for gigabytes of input")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; stack {args.stack}", flush=True)
    if args.command == "checkpoint":
        for files in args.sizes:
            print("checkpoint", int(files), "files:", run_child("checkpoint", {"files": int(files)}), flush=True)
        return
    sys.path.insert(0, str(ROOT))
    if args.stack == "servers":
        from infra.servers import ServerStack as Stack
    else:
        from infra.local_stack import LocalStack as Stack

    with Stack(bucket="memory-bench").start() as stack:
        options = stack.storage_options()
        if args.command == "write":
            for gigabytes in args.sizes:
                for side in ("ours", "theirs") if args.theirs else ("ours",):
                    uri = f"s3://{stack.bucket}/memory-bench/write-{side}-{time.time_ns()}"
                    print(f"write {gigabytes:g} GB {side}:", run_child(
                        "write", {"gb": gigabytes, "side": side, "uri": uri, "options": options}), flush=True)
                    if side == "ours" and args.scan:
                        for how in ("dataset", "dataset, pyarrow's read-ahead", "reader"):
                            print(f"scan {gigabytes:g} GB ({how}):", run_child(
                                "scan", {"how": how, "uri": uri, "options": options}), flush=True)
            return
        for rows in args.sizes:
            uri = dv_table(stack, int(rows))
            for r in range(args.rounds):
                runs = [("ours", ROOT), ("theirs", ROOT)] + ([("ours, code in --code", args.code)] if args.code else [])
                for label, code in runs:
                    side = "theirs" if label == "theirs" else "ours"
                    report = run_child("dv-read", {"side": side, "uri": uri, "options": options}, code=code)
                    print(f"dv-read {int(rows):,} rows round {r + 1} {label}:", report, flush=True)
                if args.scan:
                    report = run_child("dv-read", {"side": "ours", "how": "dataset", "uri": uri, "options": options})
                    print(f"dv-read {int(rows):,} rows round {r + 1} ours, to_pyarrow_dataset().to_batches():", report,
                          flush=True)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
