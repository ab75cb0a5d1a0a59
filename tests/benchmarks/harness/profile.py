"""Where our time goes: one scenario of the benchmarks under pyinstrument, in this process.

    python -m tests.benchmarks.harness.profile long|stateless|open|delete|update
        [--server servers|moto|memory] [--count N] [--files N] [--rows N]

``long``: N one-row appends on one long-lived Table; ``stateless``: N ``write_table(uri, ...)`` calls;
``open``: a cold ``Table(uri)`` (the process's remembered snapshot forgotten first) of a table of ``--files``
live files (built as :mod:`.measures` builds it); ``delete`` / ``update``: N DELETEs / UPDATEs of 100 rows of
one file each (the ``dml`` measure's first two steps, each on other rows) of a ``--rows``-row table built as
that measure builds it, the table opened before each; also the CPU of each (``--no-profile``: without the
profiler's own).
Prints pyinstrument's call tree (wall clock, so waiting on the servers shows as such). pyinstrument is
not a dependency of the project: ``.venv/bin/pip install pyinstrument`` first.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from tests.benchmarks.harness import deltalog
from tests.benchmarks.harness.driver import start_stack
from tests.benchmarks.harness.workload import SMALL_SCHEMA, small_append
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.harness.profile")
    parser.add_argument("scenario", choices=("long", "stateless", "open", "delete", "update"))
    parser.add_argument("--server", choices=("servers", "moto", "memory"), default="servers")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--no-profile", action="store_true", help="delete / update: times and CPU only")
    args = parser.parse_args()
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("pyinstrument is not installed: .venv/bin/pip install pyinstrument") from None
    from logstore import open_log_store
    from table import Table, write_table
    from table.table import forget_snapshots

    stack = None if args.server == "memory" else start_stack(args.server)
    try:
        options = None if stack is None else stack.options
        base = f"memory://profile-{uuid.uuid4().hex[:8]}" if stack is None else f"s3://{stack.bucket}/profile"
        uri = f"{base}/{uuid.uuid4().hex[:8]}"
        if args.scenario == "open":
            adds = (deltalog.add_action(f"part-{i:08d}.parquet", size=1000, stats={"numRecords": 1})
                    for i in range(args.files))
            open_log_store(uri, storage_options=options).write(
                0, deltalog.body([*deltalog.create_actions(SMALL_SCHEMA), *adds]))
        if args.scenario in ("delete", "update"):
            _dml(args, uri, options)
            return
        writer = Table.for_write(uri, storage_options=options)
        for seq in range(10):  # warm-up; for ``open`` the tenth writes the checkpoint
            write_table(writer, small_append("profile", seq))
        profiler = Profiler(interval=0.0005)
        with profiler:
            if args.scenario == "long":
                for seq in range(args.count):
                    write_table(writer, small_append("profile", 100 + seq))
            elif args.scenario == "stateless":
                for seq in range(args.count):
                    write_table(uri, small_append("profile", 100 + seq), storage_options=options)
            else:
                for _ in range(3):
                    forget_snapshots()  # cold, as a new process opens it
                    Table(uri, storage_options=options)
        print(profiler.output_text(unicode=False, color=False))
    finally:
        if stack is not None:
            stack.stop()


def _dml(args: argparse.Namespace, uri: str, options: dict | None) -> None:
    from pyinstrument import Profiler

    from table import Table, write_table
    from table.engine import Engine
    from tests.benchmarks.harness.workload import DML_FILES, bulk_table, timed

    data = bulk_table(args.rows)
    step = args.rows // DML_FILES
    for start in range(0, args.rows, step):
        write_table(uri, data.slice(start, step), partition_by=["day"], storage_options=options)
    Engine()  # loaded before, as the ``dml`` measure does
    times, cpu = [], []
    profiler = Profiler(interval=0.0005)
    for i in range(args.count + 2):  # the first two unprofiled: the first calls of the libraries
        first = (i * 7919) % (args.rows - 100)
        predicate = f"id >= {first} AND id < {first + 100}"
        table = Table(uri, storage_options=options)
        if i >= 2 and not args.no_profile:
            profiler.start()
        began = time.process_time()
        if args.scenario == "delete":
            ms, _ = timed(lambda: table.delete(predicate))
        else:
            ms, _ = timed(lambda: table.update({"x": "x * 2"}, predicate=predicate))
        cpu.append((time.process_time() - began) * 1000)
        if i >= 2 and not args.no_profile:
            profiler.stop()
        times.append(ms)
    if not args.no_profile:
        print(profiler.output_text(unicode=False, color=False))
    print(f"{args.scenario} of 100 rows, ms (the first two not profiled): {', '.join(f'{t:.0f}' for t in times)}")
    print(f"CPU of this process (every thread; with --server moto the embedded moto server's too), ms: "
          f"{', '.join(f'{t:.0f}' for t in cpu)}; median after the first two {statistics.median(cpu[2:]):.1f}")


if __name__ == "__main__":
    main()
