"""CPU and wall time of reading a table of many small files: one GET per file through the lean client
(``to_pyarrow_table``), a HEAD and a GET through pyarrow's S3 filesystem (the same call given
``filesystem=``), and the deltalake installed beside us (the harness's peer runs 1.6.0; this is in-process).

    python -m tests.benchmarks.read_cpu [--server servers|moto] [--files 1000] [--rounds 3]

The table is built as the harness's ``read`` measure builds it (``--files`` Parquet files of 100 rows and
one commit). Each round reads it once each way, in a fresh ``Table`` (open included); the figures are
the medians of this process's CPU (``time.process_time``) and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.read_cpu")
    parser.add_argument("--server", choices=("servers", "moto"), default="servers")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import deltalake

    from logstore import open_log_store
    from table import Table
    from table.data import read as reader
    from table.data.files import filesystem_for
    from tests.benchmarks.harness import aws, deltalog
    from tests.benchmarks.harness.driver import start_stack
    from tests.benchmarks.harness.workload import SMALL_FILE_SCHEMA, small_file
    from tests.support.fault_harness import deltalake_options

    stack = start_stack(args.server)
    try:
        options = stack.options
        key = f"read-cpu/{uuid.uuid4().hex[:8]}"
        uri = f"s3://{stack.bucket}/{key}"
        items, adds = [], []
        for i in range(args.files):
            data = small_file(i)
            body = deltalog.parquet_bytes(data)
            name = f"part-{i:05d}.snappy.parquet"
            items.append((f"{key}/{name}", body))
            adds.append(deltalog.add_action(name, size=len(body), stats=deltalog.file_stats(data)))
        deltalog.put_all(aws.s3(options), stack.bucket, items)
        open_log_store(uri, storage_options=options).write(
            0, deltalog.body([*deltalog.create_actions(SMALL_FILE_SCHEMA), *adds]))

        def lean():
            return Table(uri, storage_options=options).to_pyarrow_table()

        def pyarrow_fs():
            table = Table(uri, storage_options=options)
            return reader.to_pyarrow_table(table, filesystem=filesystem_for(table.uri, table.storage_options))

        def theirs():
            return deltalake.DeltaTable(uri, storage_options=deltalake_options(options)).to_pyarrow_table()

        ways = {"lean GET": lean, "pyarrow HEAD+GET": pyarrow_fs, f"deltalake {deltalake.__version__}": theirs}
        seen: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        from table.table import forget_snapshots

        for _ in range(args.rounds):
            for name, read in ways.items():
                forget_snapshots()
                cpu, wall = time.process_time(), time.perf_counter()
                rows = read().num_rows
                seen[name].append((time.process_time() - cpu, time.perf_counter() - wall))
                if rows != args.files * 100:
                    raise SystemExit(f"{name} read {rows} rows, expected {args.files * 100}")
        for name, runs in seen.items():
            print(json.dumps({"server": args.server, "files": args.files, "way": name,
                              "cpu_ms": round(statistics.median(c for c, _ in runs) * 1000, 1),
                              "wall_ms": round(statistics.median(w for _, w in runs) * 1000, 1),
                              "load_average_1min": round(os.getloadavg()[0], 2)}), flush=True)
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
