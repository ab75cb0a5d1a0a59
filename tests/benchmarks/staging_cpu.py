"""CPU of staging Parquet through :class:`~table.data.staging.StagingWriter` into the in-memory object store:
encoding and the multipart sink's handling of the bytes, no network. Prints the CPU seconds of 5 rounds.

    PYTHONPATH=. .venv/bin/python -m tests.benchmarks.staging_cpu [--rows 4000000] [--compression zstd]

Runs on code without the ``compression`` argument too (leave ``--compression`` out), to compare commits.

4,000,000 rows of an int64, a float64 and a string column (122 MiB as Arrow), in batches of 131,072 rows.
"""

from __future__ import annotations

import argparse
import time
import uuid

import numpy as np
import pyarrow as pa

from logstore import TableUri
from logstore.objects import MemoryObjectStore
from table.data.staging import StagingWriter
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.staging_cpu")
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--compression", default=None, help="a codec name (default: the writer's, snappy)")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    data = pa.table({"a": rng.integers(0, 1 << 60, args.rows), "b": rng.random(args.rows),
                     "c": pa.array(rng.integers(0, 1 << 40, args.rows).astype(str))})
    rounds, size = [], 0
    for _ in range(5):
        objects, uri = MemoryObjectStore(), TableUri.parse("memory://bench/t")
        started = time.process_time()
        codec = {} if args.compression is None else {"compression": args.compression}
        writer = StagingWriter(objects, uri, schema=data.schema, partition_by=[], job_id=str(uuid.uuid4()), task_id=0,
                               **codec)
        for batch in data.to_batches(max_chunksize=1 << 17):
            writer.write(batch)
        pending = writer.finish()
        rounds.append(time.process_time() - started)
        size = sum(f.size for f in pending.files)
    print(f"{data.nbytes / 2**20:.0f} MiB as Arrow -> {size / 2**20:.0f} MiB of {args.compression or 'snappy'} Parquet; CPU s "
          f"{', '.join(f'{r:.3f}' for r in rounds)}; best {min(rounds):.3f}")


if __name__ == "__main__":
    main()
