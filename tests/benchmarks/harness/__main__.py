"""``make bench``: run the benchmarks, print progress, write JSON results and a markdown table.

    python -m tests.benchmarks.harness [--servers servers,moto] [--bench commit,raw,...] [--quick]

``--bench`` picks measures (default: all, in this order): commit, raw, requests, contention, many (ours alone:
16 writers x 30 appends, nobody may starve), open, read,
bulk, spark, jobcommit (moto only), dml (DELETE, UPDATE, MERGE), smalldml (DELETE and UPDATE of 100 rows, 15
times each, the sides taking turns), dv (DELETE with deletion vectors vs
copy-on-write, a read through deletion vectors), and scale (the in-memory scale benchmarks, once
per run, no server).
``--servers`` picks the stacks, in order: ``servers`` (SeaweedFS + dynalite) and ``moto``.
``--quick`` shrinks every measure to check the harness itself; its figures mean nothing. ``--many 32x15``
sets the writers and appends of the many measure; ``--contention 1x50,4x50,8x50,16x20,32x10`` runs the
contention measure once per shape (both sides, ``--rounds`` rounds each) and draws commits/s against writers
(``<stamp>-writers.png``, harness/charts.py). Each side's run of each contention shape starts on a fresh server
stack of its own: on one shared moto server every later run paid for the items the earlier ones left (moto's
Query and TransactWriteItems cost in proportion to every item of the DynamoDB table, its LIST to every key of
the bucket; DynamoDB's and S3's do not), so deltalake paid for ours and 32 writers for 16.

Results go to ``tests/benchmarks/results/`` (``--out``): ``<stamp>-<server>.json`` per stack,
``<stamp>-scale.json``, ``<stamp>.md`` (the tables pasted into BENCHMARKS.md) and ``<stamp>.png`` (the
same comparisons as a chart, harness/charts.py), the JSON written after each measure so an interrupted
run keeps what it measured. Workers' logs go to ``<stamp>-logs/``.
A measure that fails is reported as failed and the run goes on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pyarrow

from tests.benchmarks.harness.charts import draw, draw_writers
from tests.benchmarks.harness.driver import (
    REPO_ROOT,
    SERVERS,
    BenchError,
    Worker,
    child_env,
    start_stack,
)
from tests.benchmarks.harness.measures import MEASURES, ONLY_ON, Context, Sizes, fig
from tests.benchmarks.harness.report import render
from tests.benchmarks.harness.stats import p50

RESULTS = Path(__file__).resolve().parent.parent / "results"
SCALE_FILES = (1000, 100_000, 1_000_000)
MEASURED_CODE = ("logstore", "table", "spark_integration", "infra", "pyproject.toml")
SCALE_FILES_QUICK = (1000, 10_000)


class Progress:
    def __init__(self):
        self.started = time.monotonic()
        self.where = ""

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {self.where}{message}", flush=True)


def _git() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        # Only changes to the code under measurement count, not to the harness or the docs.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *MEASURED_CODE],
                               cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return head + (" (uncommitted changes)" if dirty else "")


CPU_FIGURES = {"bulk_write", "read", "read_all", "dml"}
"""Commands whose median CPU per request is a figure of the tables (every command's is in the JSON)."""


def _add_peak_memory(measured: dict, ctx: Context) -> None:
    """Peak resident memory of each side's worker process during the measure (the largest over its
    requests, per command and overall; each request's high-water mark starts afresh), next to its times;
    and the CPU each request took (``cpu_ms`` in the JSON; the median per command of :data:`CPU_FIGURES`)."""
    peaks = {side: ctx.worker(side).peaks_mb for side in ("ours", "theirs")}
    by_command = {side: {} for side in peaks}
    for side, calls in peaks.items():
        for cmd, mb in calls:
            by_command[side][cmd] = max(mb, by_command[side].get(cmd, 0.0))
    measured["peak_rss_mb"] = by_command
    for cmd in sorted(set(by_command["ours"]) | set(by_command["theirs"])):
        measured.setdefault("figures", []).append(fig(
            f"peak resident memory of the worker process during a {cmd!r} request (largest; theirs: deltalake)",
            "MB", by_command["ours"].get(cmd), by_command["theirs"].get(cmd)))
    cpu = {side: {} for side in peaks}
    for side in cpu:
        for cmd, seconds in ctx.worker(side).cpu_s:
            cpu[side].setdefault(cmd, []).append(seconds * 1000)
    measured["cpu_ms"] = cpu
    for cmd in sorted(set(cpu["ours"]) & set(cpu["theirs"]) & CPU_FIGURES):
        measured["figures"].append(fig(
            f"CPU of the worker process per {cmd!r} request, median (all its threads; theirs: deltalake)", "ms",
            p50(cpu["ours"][cmd]), p50(cpu["theirs"][cmd])))


def _environment(peer: dict) -> dict:
    return {"git": _git(), "cpus": os.cpu_count(), "python": platform.python_version(), "pyarrow": pyarrow.__version__,
            "deltalake": peer.get("deltalake"), "peer_pyarrow": peer.get("pyarrow"), "platform": platform.platform()}


def _save(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))


def run_stack(server: str, names: list[str], sizes: Sizes, out: Path, stamp: str, logs: Path,
              progress: Progress, command: str) -> dict:
    progress.where = f"{server}/"
    progress("starting the servers")
    stack = start_stack(server)
    ours = theirs = None
    ctx = None
    result = {"server": server, "label": stack.label, "versions": stack.versions, "date": stamp, "command": command,
              "measures": {}}
    path = out / f"{stamp}-{server}.json"
    try:
        ours = Worker("ours", f"{server}-ours", logs)
        theirs = Worker("theirs", f"{server}-theirs", logs)
        result["environment"] = _environment(theirs.call("about"))
        ctx = Context(stack, ours, theirs, sizes, logs, progress)
        for side in ("ours", "theirs"):  # imports, clients, connections, the first table
            ctx.worker(side).call("append", uri=ctx.uri(f"warmup-{side}"), options=stack.options, shape="stateless",
                                  count=3, writer=side)
        for name in names:
            if name not in MEASURES:
                continue
            if server not in ONLY_ON.get(name, (server,)):
                progress(f"{name}: runs on {', '.join(ONLY_ON[name])} only; skipped")
                continue
            progress(f"{name}: start (load average {os.getloadavg()[0]:.1f})")
            started, load_before = time.monotonic(), os.getloadavg()[0]
            for side in ("ours", "theirs"):
                ctx.worker(side).peaks_mb.clear()
                ctx.worker(side).cpu_s.clear()
            try:
                measured = MEASURES[name](ctx)
                _add_peak_memory(measured, ctx)
            except Exception as exc:  # noqa: BLE001 - one broken measure must not lose the others
                traceback.print_exc()
                measured = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                for side in ("ours", "theirs"):  # a worker may be stuck in the failed command
                    ctx.worker(side).stop()
                ctx.ours = Worker("ours", f"{server}-ours-after-{name}", logs)
                ctx.theirs = Worker("theirs", f"{server}-theirs-after-{name}", logs)
            measured["seconds"] = time.monotonic() - started
            # Other processes on the machine move every figure; the 1-minute load average says how much.
            measured["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
            ctx.done[name] = measured
            result["measures"][name] = measured
            _save(path, result)
            progress(f"{name}: done in {measured['seconds']:.0f}s")
    finally:
        if ctx is not None:
            ctx.close()
            ours, theirs = ctx.ours, ctx.theirs
        for w in (ours, theirs):
            if w is not None:
                w.stop()
        stack.stop()
    _save(path, result)
    progress(f"results in {path}")
    return result


def run_scale(quick: bool, sizes: Sizes, out: Path, stamp: str, progress: Progress) -> dict:
    progress.where = "memory/"
    result: dict = {"date": stamp, "files": [], "jobcommit": []}
    runs = [("files", str(n)) for n in (SCALE_FILES_QUICK if quick else SCALE_FILES)]
    runs += [("jobcommit", str(n), str(max(1, n // 100))) for n in sizes.jobcommit_files]
    for argv in runs:
        progress(f"scale {' '.join(argv)}")
        proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.harness.scale", *argv], env=child_env(),
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise BenchError(f"scale {' '.join(argv)} failed:\n{proc.stderr[-4000:]}")
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        result[argv[0]].append(figures)
        if argv[0] == "files":
            progress(f"scale {int(argv[1]):,} files: commit CPU p50 {figures['commit_cpu_ms_p50']:.1f} ms, advance "
                     f"{figures['advance_cpu_ms_p50']:.1f} ms, checkpoint commit {figures['checkpoint_commit'].get('cpu_ms', 0):.0f} ms, "
                     f"open {figures['open_wall_ms_p50']:.0f} ms")
        else:
            progress(f"jobcommit {int(argv[1]):,} uploads in memory: {figures['seconds'] * 1000:.0f} ms")
        _save(out / f"{stamp}-scale.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.harness", description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="servers,moto", help="comma-separated: " + ", ".join(SERVERS))
    parser.add_argument("--bench", default="all", help="comma-separated: " + ", ".join([*MEASURES, "scale"]) + " (or all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the harness (figures meaningless)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--many", metavar="WRITERSxAPPENDS", help="sizes of the many measure (default 16x30)")
    parser.add_argument("--contention", metavar="WxA,WxA", help="shapes of the contention measure, a sweep of "
                        "writers (default 4x50)")
    parser.add_argument("--rounds", type=int, help="rounds of the contention measure (default 2)")
    args = parser.parse_args(argv)
    known = [*MEASURES, "scale"]
    names = known if args.bench == "all" else [n.strip() for n in args.bench.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if unknown or any(s not in SERVERS for s in servers):
        parser.error(f"unknown measure or server in {args.bench!r} / {args.servers!r}; measures: {', '.join(known)}; "
                     f"servers: {', '.join(SERVERS)}")
    sizes = Sizes.quick() if args.quick else Sizes()
    if args.many:
        writers, _, appends = args.many.partition("x")
        if not (writers.isdigit() and appends.isdigit() and int(writers) > 0 and int(appends) > 0):
            parser.error(f"--many takes WRITERSxAPPENDS, e.g. 32x15; got {args.many!r}")
        sizes = dataclasses.replace(sizes, many_processes=int(writers), appends_each=int(appends))
    if args.contention:
        shapes = [shape.strip().partition("x") for shape in args.contention.split(",") if shape.strip()]
        if not shapes or not all(w.isdigit() and a.isdigit() and int(w) > 0 and int(a) > 0 for w, _, a in shapes):
            parser.error(f"--contention takes WRITERSxAPPENDS shapes separated by commas, e.g. 1x50,4x50; "
                         f"got {args.contention!r}")
        sizes = dataclasses.replace(sizes, contention_shapes=tuple((int(w), int(a)) for w, _, a in shapes))
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error(f"--rounds must be at least 1, got {args.rounds}")
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    stamp = time.strftime("%Y-%m-%d-%H%M")
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / f"{stamp}-logs"
    logs.mkdir(exist_ok=True)
    command = "python -m tests.benchmarks.harness " + " ".join(argv if argv is not None else sys.argv[1:])
    progress = Progress()
    results = []
    if any(n in MEASURES for n in names):
        for server in servers:
            results.append(run_stack(server, names, sizes, args.out, stamp, logs, progress, command.strip()))
    scale = run_scale(args.quick, sizes, args.out, stamp, progress) if "scale" in names else None
    table = render(results, scale)
    (args.out / f"{stamp}.md").write_text(f"Command: `{command.strip()}`\n\n{table}")
    chart = draw(results, args.out / f"{stamp}.png") if results else None
    if results and len(sizes.contention_shapes) > 1:
        draw_writers(results, args.out / f"{stamp}-writers.png")
    progress.where = ""
    progress(f"done; tables in {args.out / (stamp + '.md')}" + (f", chart in {chart}" if chart else "") + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
