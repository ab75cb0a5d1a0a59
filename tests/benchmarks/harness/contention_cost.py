"""What contention costs: N writer processes x M one-row appends on one table, on SeaweedFS + dynalite
(``--stack servers``, the default: no transactions, so appends race) or on one moto server (``--stack moto``:
TransactWriteItems, so contended appends commit together unless ``--group-commit off``).

    python -m tests.benchmarks.harness.contention_cost [--writers 4] [--appends 50] [--count-requests]
        [--stack servers|moto] [--group-commit on|off] [--by-caller] [--profile DIR] [--phases]

Also prints the versions the run wrote per append (1.00 without group commit), and checks that every
acknowledged append's row is in the table exactly once (read back with deltalake).

Prints commits a second, attempts per commit, latencies (p50, p99, slowest), the CPU seconds per commit of
the writers (their own clocks) and of each server (``/proc``), how busy that kept the machine's cores, and the
time the writers spent in the commit path's pauses (``logstore.deadline.sleep``: back-off, turn-taking, a
queued append's look one commit later), per commit and by the function that paused. The writers open the
table first and start together; the clock starts then. ``--count-requests`` puts one counting proxy in front of
each server (``tests/support/fault_proxy.py``, no faults) and prints the requests per commit by operation;
the proxies run in this process and cost CPU, so take the timings from a run without them.
``--by-caller`` counts, in each writer, the requests its S3 and DynamoDB clients send by operation and by the
commit-path functions that sent them (the innermost frames of ``logstore/`` and ``table/``), and prints them per
commit: where a lost race's requests go. ``--profile DIR`` runs each writer's appends under cProfile on the
CPU clock (``DIR/w<i>.prof``, merged into ``DIR/writers.prof``): where the writers' CPU goes; the profiler
slows them, so take the timings from a run without it. ``--phases`` records, in each writer, when its queued
appends were looked at, claimed (the leader's clock) and seen claimed, when its group attempts won a version
with members, and how long each of its requests took, and prints where a grouped append's time goes: from the
writer's return to its next queued append, from queueing to the claim, from the claim to the look that saw it,
from there to the return; the looks per queued append; how often a version with members came, and from the
process that led the one before; each request's latency as the writers saw it (the servers' queueing
included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid

from tests.benchmarks.harness.workload import small_append

CONTEXT = multiprocessing.get_context("spawn")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _record_phases(events: list, latencies: dict[str, list[float]]) -> None:
    """Record this writer's group-commit events in ``events`` and each request's latency (ms) by operation in
    ``latencies`` (``--phases``): ``("look", epoch s, member id, claimed)`` for each look at a queued append's
    own item, ``("claim", queued at, claimed at, seen at, version)`` for each claim its writer learned, and
    ``("lead", epoch s, version, hand-over delay)`` for each version won by a group attempt of this writer."""
    from logstore import lean, queued
    from table.log import group, group_member

    look, claimed, hand_over = (queued.Queueing.look, group_member.GroupMember._claimed,
                                queued.Queueing.hand_over)
    send = lean.LeanClient._request

    def looking(self, member_id):
        found = look(self, member_id)
        events.append(("look", time.time(), member_id, found is not None and found.claimed_by is not None))
        return found

    def seen(self, item, *args):
        events.append(("claim", group.queued_at(item.member_id), (item.claimed_at_ms or 0) / 1000, time.time(),
                       item.claimed_by))
        return claimed(self, item, *args)

    def handing(self, version, *, after=0.0):
        events.append(("lead", time.time(), version, after))
        return hand_over(self, version, after=after)

    def timed(self, operation, *args, **kwargs):
        began = time.monotonic()
        try:
            return send(self, operation, *args, **kwargs)
        finally:
            latencies.setdefault(operation, []).append((time.monotonic() - began) * 1e3)

    queued.Queueing.look = looking
    group_member.GroupMember._claimed = seen
    queued.Queueing.hand_over = handing
    lean.LeanClient._request = timed


def _deciles(values: list[float]) -> str:
    ordered = sorted(values)
    return " / ".join(f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}" for q in (0.1, 0.5, 0.9))


def _print_phases(done: list[dict]) -> None:
    """What ``--phases`` recorded (:func:`_record_phases`), over every writer: milliseconds as p10 / p50 / p90."""
    looks: dict[str, list[bool]] = {}
    gaps, waits, to_seen, to_return = [], [], [], []
    for d in done:
        returned = sorted(d["returns"])
        for event in d["events"]:
            if event[0] == "look":
                looks.setdefault(event[2], []).append(event[3])
            elif event[0] == "claim":
                queued_at, claimed_at, seen_at, _ = event[1:]
                if queued_at is None or not claimed_at:
                    continue
                waits.append((claimed_at - queued_at) * 1e3)
                to_seen.append((seen_at - claimed_at) * 1e3)
                after = [r for r in returned if r >= seen_at]
                if after:
                    to_return.append((after[0] - seen_at) * 1e3)
                before = [r for r in returned if r <= queued_at]
                if before:
                    gaps.append((queued_at - before[-1]) * 1e3)
    wins = sorted((e[1], e[2], i) for i, d in enumerate(done) for e in d["events"] if e[0] == "lead" and e[3] > 0)
    latencies: dict[str, list[float]] = {}
    for d in done:
        for operation, values in d["request_ms"].items():
            latencies.setdefault(operation, []).extend(values)
    print("request latency as the writers saw it, ms p10 / p50 / p90: " + "; ".join(
        f"{op} {_deciles(v)} ({len(v)})" for op, v in sorted(latencies.items(), key=lambda i: -len(i[1]))))
    if not waits:
        print("phases: no queued append was claimed (no group commit in this run)")
        return
    print(f"phases of a grouped append, ms p10 / p50 / p90 ({len(waits)} claims): return to the next queued append "
          f"{_deciles(gaps)}; queued to claimed (leader's clock) {_deciles(waits)}; claimed to seen "
          f"{_deciles(to_seen)}; seen to return {_deciles(to_return)}")
    counts = [len(v) for v in looks.values()]
    first = sum(1 for v in looks.values() if v and v[0])
    print(f"own-item looks per queued append {statistics.mean(counts):.2f}; claimed at the first look "
          f"{first} of {len(looks)}")
    if len(wins) > 1:
        between = [(b[0] - a[0]) * 1e3 for a, b in zip(wins, wins[1:])]
        again = sum(1 for a, b in zip(wins, wins[1:]) if a[2] == b[2])
        print(f"versions with members {len(wins)}: one every {_deciles(between)} ms; led by the writer that led the "
              f"one before {again} of {len(wins) - 1}")


CALLER_FRAMES = 4
"""Commit-path frames named per request by ``--by-caller`` (innermost first)."""


def _count_by_caller(counted: dict[str, int]) -> None:
    """Count every request of this process's S3 and DynamoDB clients in ``counted``, by operation and by the
    innermost :data:`CALLER_FRAMES` frames of ``logstore/`` and ``table/`` that sent it (the request layer
    itself, ``aws.py``, ``lean.py`` and ``retry.py``, left out)."""
    from logstore import lean

    send = lean.LeanClient._request
    skipped = {"aws.py", "lean.py", "retry.py", "s3.py", "dynamodb.py", "steps.py", "pool.py"}

    def counting(self, operation, *args, **kwargs):
        frame, names = sys._getframe(1), []
        while frame is not None and len(names) < CALLER_FRAMES:
            path = frame.f_code.co_filename
            file = os.path.basename(path)
            if (f"{os.sep}logstore{os.sep}" in path or f"{os.sep}table{os.sep}" in path) and file not in skipped:
                names.append(f"{file}:{frame.f_code.co_name}")
            frame = frame.f_back
        key = f"{operation} <- {' < '.join(names) or '(a pool thread: no caller frames)'}"
        counted[key] = counted.get(key, 0) + 1
        return send(self, operation, *args, **kwargs)

    lean.LeanClient._request = counting


def _writer(uri: str, options: dict, name: str, count: int, ready, go, results, by_caller: bool = False,
            profile: str | None = None, phases: bool = False) -> None:
    from logstore import deadline
    from table import Table, write_table

    paused: dict[str, float] = {}
    plain_sleep = deadline.sleep

    def counted_sleep(seconds: float) -> None:  # the commit path's pauses (backoff, turn-taking, retries)
        began = time.monotonic()
        try:
            plain_sleep(seconds)
        finally:
            caller = sys._getframe(1).f_code.co_name
            paused[caller] = paused.get(caller, 0.0) + time.monotonic() - began

    deadline.sleep = counted_sleep
    callers: dict[str, int] = {}
    table = Table.for_write(uri, storage_options=options)
    ready.put(name)
    go.wait()  # every writer has opened the table: all start together
    if by_caller:
        _count_by_caller(callers)
    events: list = []
    request_ms: dict[str, list[float]] = {}
    if phases:
        _record_phases(events, request_ms)
    latencies, attempts, failures, errors, returns = [], [], 0, [], []
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU time, not wall: where the writer's CPU goes
        profiler.enable()
    cpu = time.process_time()
    for seq in range(count):
        started = time.monotonic()
        try:
            result = write_table(table, small_append(name, seq), mode="append")
            attempts.append(int(result.metrics.get("numAttempts", "1")))
        except Exception as exc:  # noqa: BLE001 - counted; the run goes on
            failures += 1
            errors.append(f"{type(exc).__name__}: {exc}"[:400])
        latencies.append(time.monotonic() - started)
        returns.append(time.time())
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(profile, f"{name}.prof"))
    results.put({"latencies": latencies, "attempts": attempts, "failures": failures, "errors": errors,
                 "cpu": time.process_time() - cpu, "ended": time.time(), "paused": paused,
                 "callers": callers, "events": events, "returns": returns,
                 "request_ms": request_ms})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.harness.contention_cost")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--count-requests", action="store_true")
    parser.add_argument("--stack", choices=("servers", "moto"), default="servers")
    parser.add_argument("--group-commit", choices=("on", "off"), default="on")
    parser.add_argument("--by-caller", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="record when queued appends were claimed and seen, and each request's latency")
    parser.add_argument("--profile", metavar="DIR",
                        help="run each writer's appends under cProfile (CPU clock) and write DIR/w<i>.prof")
    args = parser.parse_args()
    from infra.local_stack import LocalStack
    from infra.servers import ServerStack
    from table import Table, write_table
    from tests.support.fault_proxy import FaultProxy

    with (ServerStack() if args.stack == "servers" else LocalStack()) as stack:
        direct = {**stack.storage_options(), "DYNACOMMIT_GROUP_COMMIT": args.group_commit}
        options = dict(direct)
        if args.stack == "servers":
            s3_endpoint, ddb_endpoint = stack.s3.endpoint, stack.dynamodb.endpoint
            servers = {"seaweedfs": stack.s3.process.pid, "dynalite": stack.dynamodb.process.pid}
        else:
            s3_endpoint = ddb_endpoint = stack.endpoint
            servers = {"moto": stack.process.pid}
        proxies = []
        if args.count_requests:
            proxies = [FaultProxy(s3_endpoint).start(), FaultProxy(ddb_endpoint).start()]
            options = {**options, "AWS_ENDPOINT_URL": proxies[0].endpoint(),
                       "AWS_ENDPOINT_URL_DYNAMODB": proxies[1].endpoint()}
        uri = f"s3://{stack.bucket}/contention/{uuid.uuid4().hex[:12]}"
        write_table(uri, small_append("creator", 0), storage_options=options)
        results, ready, go = CONTEXT.Queue(), CONTEXT.Queue(), CONTEXT.Event()
        writers = [CONTEXT.Process(target=_writer, args=(uri, options, f"w{i}", args.appends, ready, go, results,
                                                                   args.by_caller, args.profile, args.phases))
                   for i in range(args.writers)]
        for writer in writers:
            writer.start()
        for _ in writers:
            ready.get(timeout=300)  # the writers have opened the table: count from here
        for proxy in proxies:
            proxy.reset_counters()
        before = {name: _cpu_seconds(pid) for name, pid in servers.items()}
        start_at = time.time()
        go.set()
        done = [results.get() for _ in writers]
        for writer in writers:
            writer.join()
        after = {name: _cpu_seconds(pid) for name, pid in servers.items()}
        for proxy in proxies:
            proxy.stop()
        created = 1  # the creating append
        table = Table(uri, storage_options=direct)  # the proxies are stopped: read from the servers
        versions = table.version + 1 - created
        rows = table.to_pyarrow_table().to_pylist()
        import deltalake

        # queued appends of group commit left in the commit table (none should be, once every writer knows
        # its outcome: a claimed item is deleted by its writer, a withdrawn one by its withdrawal)
        from logstore.aws import dynamodb_client
        from logstore.options import StorageOptions

        scanned = dynamodb_client(StorageOptions.resolve(direct)).scan(TableName=stack.ddb_table)["Items"]
        left = [i for i in scanned if i["tablePath"]["S"].startswith("dynacommit-group:")]
        states = sorted(i.get("groupState", {}).get("S", "?") for i in left)
        peer_rows = deltalake.DeltaTable(uri, storage_options={k: v for k, v in direct.items()
                                                               if not k.startswith("DYNACOMMIT_")}).to_pyarrow_table()
    wall = max(d["ended"] for d in done) - start_at
    failures = sum(d["failures"] for d in done)
    commits = sum(len(d["latencies"]) for d in done) - failures
    attempts = [a for d in done for a in d["attempts"]]
    latencies = sorted(ms for d in done for ms in d["latencies"])
    print(f"{args.writers} x {args.appends}: {commits} commits in {wall:.1f} s = {commits / wall:.1f}/s, "
          f"{failures} failed; attempts per commit mean {statistics.mean(attempts):.2f}, most {max(attempts)}; "
          f"p50 {latencies[len(latencies) // 2] * 1e3:.0f} ms, p99 {latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3:.0f} ms, "
          f"slowest {latencies[-1] * 1e3:.0f} ms")
    ended = sorted(d["ended"] - start_at for d in done)
    print(f"writers done after {ended[0]:.1f} s (first), {ended[len(ended) // 2]:.1f} s (median), {ended[-1]:.1f} s "
          f"(last); {sum(1 for d in done for r in d['returns'] if r - start_at > ended[len(ended) // 2])} appends "
          f"returned after the median writer was done")
    for error in sorted({e for d in done for e in d["errors"]})[:3]:
        print(f"failed: {error}")
    per_commit = {"writers": sum(d["cpu"] for d in done), **{n: after[n] - before[n] for n in servers}}
    keys = [(r["writer"], r["seq"]) for r in rows] if rows and "writer" in rows[0] else []
    doubled = len(keys) - len(set(keys))
    print(f"versions written {versions} for {commits} appends = {versions / max(commits, 1):.2f} versions per append "
          f"(group commit {args.group_commit}, {args.stack}); rows {len(rows)} (deltalake reads {peer_rows.num_rows}), "
          f"doubled {doubled}, expected {commits + 1}")
    print(f"DynamoDB items at the end: {len(scanned)}, of them queued appends left {len(left)} "
          f"({', '.join(f'{st} {states.count(st)}' for st in sorted(set(states))) or 'none'})")
    print("CPU ms per commit: " + ", ".join(f"{n} {s / commits * 1e3:.1f}" for n, s in per_commit.items()))
    busy = sum(per_commit.values()) / wall
    by_caller: dict[str, float] = {}
    for d in done:
        for caller, seconds in d["paused"].items():
            by_caller[caller] = by_caller.get(caller, 0.0) + seconds
    waited = sum(by_caller.values())
    print(f"CPU busy {busy:.2f} of {os.cpu_count()} cores (writers and servers); writers paused {waited:.1f} s "
          f"in all = {waited / commits * 1e3:.0f} ms per commit, {waited / (wall * args.writers):.0%} of their time"
          + "".join(f"; {c} {s / commits * 1e3:.0f} ms" for c, s in sorted(by_caller.items(), key=lambda i: -i[1])))
    for name, proxy in zip(("S3", "DynamoDB"), proxies):
        counted = proxy.stats().requests
        print(f"{name} requests per commit: {sum(counted.values()) / commits:.2f} ("
              + ", ".join(f"{op} {n / commits:.2f}" for (_, op), n in sorted(counted.items())) + ")")

    if args.profile:
        import pstats

        merged = pstats.Stats(*(os.path.join(args.profile, f"w{i}.prof") for i in range(args.writers)))
        merged.dump_stats(os.path.join(args.profile, "writers.prof"))
        print(f"writers' profile (CPU clock, profiler overhead included): {os.path.join(args.profile, 'writers.prof')}")

    if args.phases:
        _print_phases(done)

    if args.by_caller:
        callers: dict[str, int] = {}
        for d in done:
            for key, n in d["callers"].items():
                callers[key] = callers.get(key, 0) + n
        print(f"writers' requests per commit by caller: {sum(callers.values()) / commits:.2f}")
        for key, n in sorted(callers.items(), key=lambda i: -i[1]):
            if n / commits >= 0.01:
                print(f"  {n / commits:5.2f}  {key}")


if __name__ == "__main__":
    main()