"""Where our time goes: one scenario of the benchmarks under pyinstrument, in this process.

    python -m tests.benchmarks.harness.profile long|stateless|open [--server servers|moto|memory]
        [--count N] [--files N]

``long``: N one-row appends on one long-lived Table; ``stateless``: N ``write_table(uri, ...)`` calls;
``open``: a cold ``Table(uri)`` (the process's remembered snapshot forgotten first) of a table of ``--files``
live files (built as :mod:`.measures` builds it).
Prints pyinstrument's call tree (wall clock, so waiting on the servers shows as such). pyinstrument is
not a dependency of the project: ``.venv/bin/pip install pyinstrument`` first.
"""

from __future__ import annotations

import argparse
import uuid

from tests.benchmarks.harness import deltalog
from tests.benchmarks.harness.driver import start_stack
from tests.benchmarks.harness.workload import SMALL_SCHEMA, small_append
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.harness.profile")
    parser.add_argument("scenario", choices=("long", "stateless", "open"))
    parser.add_argument("--server", choices=("servers", "moto", "memory"), default="servers")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--files", type=int, default=100_000)
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


if __name__ == "__main__":
    main()
