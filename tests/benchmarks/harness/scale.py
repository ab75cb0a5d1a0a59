"""Scale benchmarks in the in-memory store (``memory://``): is per-commit work flat in table size?

``python -m tests.benchmarks.harness.scale files N`` builds a table of N live files (one commit of N
``add`` actions written through the log store), then times, with wall clock and process CPU:

- ``commit``: :func:`table.log.transaction.commit` of one small append, 15 times in a row (the one at
  version 10 also writes the checkpoint, reported apart);
- ``advance``: :func:`table.log.snapshot.advance` of one commit of one ``add`` (pure, no I/O);
- ``lost race``: a commit on a snapshot one version behind, so it loses once, reads the winner, checks
  it and commits at the next version (CPU only: the retry's backoff pause is wall time, not work);
- ``open``: ``Table(uri)`` from the checkpoint plus the commits after it, and ``add_actions()``;
- ``write_table``: a one-row append through the public API on a long-lived Table.

``python -m tests.benchmarks.harness.scale jobcommit FILES TASKS`` times a job commit of FILES tiny staged
uploads from TASKS tasks on the in-memory object store (:mod:`.staged`).

Each prints one JSON line. The in-memory store does no I/O, so what is measured is our CPU.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

from logstore import open_log_store
from table import Table, write_table
from table.log.actions import AddFile
from table.log.commit import Commit, ReadScope
from table.log.snapshot import advance
from table.log.transaction import commit
from tests.benchmarks.harness import deltalog
from tests.benchmarks.harness.staged import job_commit
from tests.benchmarks.harness.stats import p50
from tests.benchmarks.harness.workload import SMALL_SCHEMA, small_append
import tests.support.memory  # noqa: E402,F401 - registers the in-process memory:// scheme

COMMITS = 15


def _add(name: str) -> AddFile:
    return AddFile(path=f"{name}.parquet", partition_values={}, size=1000, modification_time=0, data_change=True,
                   stats='{"numRecords":1}')


def _commit(store, snapshot, name: str):
    return commit(store, snapshot, Commit(actions=(_add(name),), operation="WRITE",
                                          operation_parameters={"mode": "Append"}, read_scope=ReadScope.blind_append()))


def _clock(fn, /, *args):
    """``(wall ms, cpu ms, result)`` of ``fn(*args)``."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = fn(*args)
    return (time.perf_counter() - wall0) * 1000, (time.process_time() - cpu0) * 1000, result


def files(n: int) -> dict:
    uri = f"memory://scale-{uuid.uuid4().hex[:8]}/table"
    store = open_log_store(uri)
    t0 = time.perf_counter()
    adds = (deltalog.add_action(f"part-{i:08d}.parquet", size=1000, stats={"numRecords": 1}) for i in range(n))
    store.write(0, deltalog.body([*deltalog.create_actions(SMALL_SCHEMA), *adds]))
    build_wall, _, table = _clock(Table, uri)
    print(f"scale {n:,}: built in {time.perf_counter() - t0:.1f}s (replaying version 0: {build_wall:.0f} ms)",
          file=sys.stderr, flush=True)
    snapshot = table.snapshot
    commit_wall, commit_cpu, checkpoint = [], [], {}
    for i in range(COMMITS):
        wall, cpu, outcome = _clock(_commit, store, snapshot, f"c{i}")
        interval = snapshot.state.checkpoint_interval
        snapshot = outcome.snapshot
        if snapshot.version % interval == 0:
            checkpoint = {"version": snapshot.version, "wall_ms": wall, "cpu_ms": cpu}
        else:
            commit_wall.append(wall)
            commit_cpu.append(cpu)
    advance_cpu = [_clock(advance, snapshot, [(snapshot.version + 1, [_add(f"a{i}")])])[1] for i in range(5)]
    lost_cpu = []
    for i in range(3):
        stale = snapshot
        snapshot = _commit(store, stale, f"w{i}").snapshot  # the winner
        _, cpu, outcome = _clock(_commit, store, stale, f"l{i}")
        if outcome.attempts != 2:
            raise RuntimeError(f"the commit on a stale snapshot took {outcome.attempts} attempts, not 2")
        snapshot = outcome.snapshot
        lost_cpu.append(cpu)
    opens = [_clock(Table, uri) for _ in range(3)]
    opened = opens[-1][2]
    listing = [_clock(opened.add_actions)[0] for _ in range(3)]
    writer = Table(uri)
    appends = [_clock(write_table, writer, small_append("scale", i))[:2] for i in range(5)]
    return {
        "files": n, "replay_v0_ms": build_wall,
        "commit_wall_ms_p50": p50(commit_wall), "commit_cpu_ms_p50": p50(commit_cpu), "commit_cpu_ms": commit_cpu,
        "checkpoint_commit": checkpoint,
        "advance_cpu_ms_p50": p50(advance_cpu), "lost_race_commit_cpu_ms_p50": p50(lost_cpu),
        "open_wall_ms_p50": p50([o[0] for o in opens]), "open_checkpoint_version": opened.snapshot.checkpoint_version,
        "add_actions_ms_p50": p50(listing),
        "write_table_wall_ms_p50": p50([a[0] for a in appends]), "write_table_cpu_ms_p50": p50([a[1] for a in appends]),
        "live_files": len(opened.add_actions()),
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["files"] and len(argv) == 2:
        result = files(int(argv[1]))
    elif argv[:1] == ["jobcommit"] and len(argv) == 3:
        result = job_commit(f"memory://jobcommit-{uuid.uuid4().hex[:8]}/table", files=int(argv[1]), tasks=int(argv[2]))
    else:
        raise SystemExit("usage: python -m tests.benchmarks.harness.scale files N | jobcommit FILES TASKS")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
