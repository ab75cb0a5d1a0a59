"""Ways to read the bulk table (2,000,000 rows of the harness's 7 mixed columns, one file), paired in one
process: ``Table.to_pyarrow_table``, deltalake's ``DeltaTable.to_pyarrow_table``, and pyarrow scans of the same
file with the options a faster read could use.

    PYTHONPATH=. .venv/bin/python -m tests.benchmarks.bulk_read [--server servers|moto] [--rows N] [--rounds 5]

The table is written once by each side (``write_table`` and ``write_deltalake``); each round reads each table
every way, in a fresh ``Table`` (open included). Ways: ``scan`` (our dataset's fragments, pyarrow's defaults:
``pre_buffer``, a ranged GET per coalesced row group), ``whole GET`` (each file one GET through the log store's
client, then decoded from memory), ``lazy cache`` (``pre_buffer`` with a lazy read cache, two ranges ahead),
``4 MiB ranges`` (coalesced ranges of at most 4 MiB, so more GETs at once) and ``readahead 64`` (64 batches
decoded ahead instead of 16). Printed: per way and table, each round's wall time, and the medians of wall
time and of this process's CPU (``time.process_time``, all threads), with the 1-minute load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bulk_read")
    parser.add_argument("--server", choices=("servers", "moto"), default="servers")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import deltalake
    import pyarrow as pa
    import pyarrow.dataset as ds

    from logstore import open_object_store
    from table import Table, write_table
    from table.data.files import filesystem_for
    from table.data.fragments import file_path, file_rows, parquet_format
    from table.table import forget_snapshots
    from tests.benchmarks.harness.driver import start_stack
    from tests.benchmarks.harness.workload import bulk_table
    from tests.support.fault_harness import deltalake_options

    stack = start_stack(args.server)
    try:
        options = stack.options
        data = bulk_table(args.rows)
        uris = {side: f"s3://{stack.bucket}/bulk-read/{uuid.uuid4().hex[:8]}-{side}" for side in ("ours", "delta-rs")}
        write_table(uris["ours"], data, mode="append", storage_options=options)
        deltalake.write_deltalake(uris["delta-rs"], data, mode="append", storage_options=deltalake_options(options))

        def scan(scan_options: ds.ParquetFragmentScanOptions | None = None, **kwargs):
            def read(uri: str) -> pa.Table:
                forget_snapshots()
                table = Table(uri, storage_options=options)
                fs = filesystem_for(table.uri, table.storage_options)
                fmt = ds.ParquetFileFormat(default_fragment_scan_options=scan_options) if scan_options else parquet_format()
                fragments = [fmt.make_fragment(file_path(table.uri, row.path), filesystem=fs, file_size=row.size)
                             for row in file_rows(table.snapshot)]
                return ds.FileSystemDataset(fragments, table.snapshot.schema, fmt, fs).to_table(**kwargs)
            return read

        def whole(uri: str) -> pa.Table:
            forget_snapshots()
            table = Table(uri, storage_options=options)
            objects = open_object_store(table.uri, storage_options=options)
            fmt = parquet_format()
            fragments = [fmt.make_fragment(pa.py_buffer(objects.get(table.uri.key(row.path))))
                         for row in file_rows(table.snapshot)]
            return ds.FileSystemDataset(fragments, table.snapshot.schema, fmt,
                                        filesystem_for(table.uri, table.storage_options)).to_table()

        def ours(uri: str) -> pa.Table:
            forget_snapshots()
            return Table(uri, storage_options=options).to_pyarrow_table()

        def theirs(uri: str) -> pa.Table:
            return deltalake.DeltaTable(uri, storage_options=deltalake_options(options)).to_pyarrow_table()

        ways = {"to_pyarrow_table": ours, f"deltalake {deltalake.__version__}": theirs, "scan": scan(),
                "whole GET": whole,
                "lazy cache": scan(ds.ParquetFragmentScanOptions(
                    pre_buffer=True, cache_options=pa.CacheOptions(lazy=True, prefetch_limit=2))),
                "4 MiB ranges": scan(ds.ParquetFragmentScanOptions(
                    pre_buffer=True, cache_options=pa.CacheOptions(hole_size_limit=8192, range_size_limit=4 << 20))),
                "readahead 64": scan(batch_readahead=64)}
        seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
        loads = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for writer, uri in uris.items():
                for name, read in ways.items():
                    cpu, wall = time.process_time(), time.perf_counter()
                    rows = read(uri).num_rows
                    seen.setdefault((writer, name), []).append((time.process_time() - cpu, time.perf_counter() - wall))
                    if rows != args.rows:
                        raise SystemExit(f"{name} read {rows} rows of {writer}'s table, expected {args.rows}")
            loads.append(os.getloadavg()[0])
        for (writer, name), runs in seen.items():
            print(json.dumps({"server": args.server, "table": writer, "way": name,
                              "wall_ms": [round(w * 1000) for _, w in runs],
                              "wall_ms_median": round(statistics.median(w for _, w in runs) * 1000),
                              "cpu_ms_median": round(statistics.median(c for c, _ in runs) * 1000)}), flush=True)
        print(json.dumps({"load_average_1min": [round(x, 1) for x in loads]}))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
