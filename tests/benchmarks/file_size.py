"""Parquet bytes and write CPU: ours (before and after ``table.data.writer_settings``) against delta-rs.

For the same rows (``harness.workload.bulk_table``, the benchmarks' mixed-type rows) and the same codec:

1. one file written by pyarrow with Arrow's defaults (what every writer here did before), with the
   settings ``WriterSettings.parquet_options`` chooses now, with each choice alone, and by
   ``deltalake.write_deltalake``; bytes and the best of 3 process CPU times of the write;
2. the benchmarks' DELETE of 1% of the rows of every file (``DV_DELETE_WRITE``) on a 10-file table
   partitioned by day, copy-on-write, both sides: the bytes the rewritten files hold. Ours runs on an
   in-process (``memory://``) table, delta-rs on a local directory; the data path is the same as on S3.

    .venv/bin/python tests/benchmarks/file_size.py [--rows 1000000] [--dml-rows 300000]

Prints a table; asserts nothing (figures go to BENCHMARKS.md by hand).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.workload import DML_FILES, DV_DELETE_WRITE, bulk_table  # noqa: E402

import deltalake  # noqa: E402
from table import Table, write_table  # noqa: E402
from table.data.stats import StatsCollector  # noqa: E402
from table.data.writer_settings import WriterSettings, column_encodings  # noqa: E402

REPEATS = 3


def best_cpu(write) -> tuple[int, float]:
    """(bytes, best process CPU seconds of ``REPEATS`` calls of ``write() -> bytes``)."""
    best, size = None, 0
    for _ in range(REPEATS):
        t0 = time.process_time()
        size = write()
        cpu = time.process_time() - t0
        best = cpu if best is None else min(best, cpu)
    return size, best


def pyarrow_bytes(data: pa.Table, **options) -> int:
    sink = io.BytesIO()
    pq.write_table(data, sink, **options)
    return sink.tell()


def deltalake_bytes(data: pa.Table, codec: str) -> int:
    with tempfile.TemporaryDirectory() as directory:
        deltalake.write_deltalake(directory, data,
                                  writer_properties=deltalake.WriterProperties(compression=codec.upper()))
        return sum(p.stat().st_size for p in Path(directory).glob("*.parquet"))


def single_files(rows: int) -> None:
    data = bulk_table(rows).drop_columns(["day"])
    settings_for = {c: WriterSettings.of(compression=c) for c in ("snappy", "zstd")}
    print(f"\n1. one file of {rows:,} rows ({data.nbytes / 1e6:.1f} MB as Arrow), best of {REPEATS}")
    print(f"{'codec':7} {'writer':46} {'bytes':>12} {'vs delta-rs':>11} {'CPU ms':>8} {'vs delta-rs':>11}")
    for codec, settings in settings_for.items():
        chosen = settings.parquet_options(data.schema, data, StatsCollector(data.schema).bounded_columns())
        dictionary, encodings = column_encodings(data)
        variants = {
            "delta-rs (write_deltalake)": lambda: deltalake_bytes(data, codec),
            "ours before (Arrow's defaults)": lambda: pyarrow_bytes(data, compression=codec),
            "ours: no dictionary for near-unique columns": lambda: pyarrow_bytes(
                data, compression=codec, use_dictionary=dictionary),
            # the choice (a count of distinct values in the first rows) is timed with the write
            "ours: + DELTA_BINARY_PACKED (now)": lambda: pyarrow_bytes(data, **settings.parquet_options(
                data.schema, data, StatsCollector(data.schema).bounded_columns())),
            "ours now, zstd level 3" if codec == "zstd" else "ours now, 8 MiB pages": lambda: pyarrow_bytes(
                data, **chosen, **({"compression_level": 3} if codec == "zstd" else {"data_page_size": 8 << 20})),
            "ours now, 128k-row row groups": lambda: pyarrow_bytes(data, **chosen, row_group_size=131_072),
        }
        theirs = None
        for name, write in variants.items():
            size, cpu = best_cpu(write)
            theirs = theirs or (size, cpu)
            print(f"{codec:7} {name:46} {size:12,} {size / theirs[0]:10.2f}x {cpu * 1000:8.0f} "
                  f"{cpu / theirs[1]:10.2f}x")
    print(f"encodings chosen: dictionary {dictionary}, others {encodings}")


def added_bytes_ours(data: pa.Table, codec: str) -> tuple[int, int]:
    uri = f"memory://file-size/{codec}-{time.monotonic_ns()}"
    step = data.num_rows // DML_FILES
    for start in range(0, data.num_rows, step):
        write_table(uri, data.slice(start, step), partition_by=["day"],
                    configuration={"delta.parquet.compression.codec": codec} if start == 0 else None)
    before = {a.path for a in Table(uri).snapshot.files}
    total = sum(a.size for a in Table(uri).snapshot.files)
    Table(uri).delete(DV_DELETE_WRITE)
    return total, sum(a.size for a in Table(uri).snapshot.files if a.path not in before)


def added_bytes_theirs(data: pa.Table, codec: str) -> tuple[int, int]:
    properties = deltalake.WriterProperties(compression=codec.upper())
    with tempfile.TemporaryDirectory() as directory:
        step = data.num_rows // DML_FILES
        for start in range(0, data.num_rows, step):
            deltalake.write_deltalake(directory, data.slice(start, step), partition_by=["day"], mode="append",
                                      writer_properties=properties)
        table = deltalake.DeltaTable(directory)
        before = set(table.file_uris())
        total = sum(os.path.getsize(u) for u in before)
        table.delete(DV_DELETE_WRITE, writer_properties=properties)
        after = set(deltalake.DeltaTable(directory).file_uris())
        return total, sum(os.path.getsize(u) for u in after - before)


def rewrites(rows: int) -> None:
    data = bulk_table(rows)
    print(f"\n2. DELETE of 1% of every file of a {rows:,}-row, {DML_FILES}-append table partitioned by day "
          f"(copy-on-write): bytes")
    print(f"{'codec':7} {'side':9} {'table':>12} {'rewritten':>12} {'vs delta-rs':>11}")
    for codec in ("snappy", "zstd"):
        theirs = added_bytes_theirs(data, codec)
        ours = added_bytes_ours(data, codec)
        print(f"{codec:7} {'delta-rs':9} {theirs[0]:12,} {theirs[1]:12,} {1:10.2f}x")
        print(f"{codec:7} {'ours':9} {ours[0]:12,} {ours[1]:12,} {ours[1] / theirs[1]:10.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dml-rows", type=int, default=300_000)
    args = parser.parse_args()
    print(f"pyarrow {pa.__version__}, deltalake {deltalake.__version__}; load {os.getloadavg()[0]:.1f}")
    single_files(args.rows)
    rewrites(args.dml_rows)


if __name__ == "__main__":
    main()
