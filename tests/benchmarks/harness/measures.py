"""The measures, driver side. Each takes the :class:`Context` of one server stack and returns
``{"figures": [...], "detail": {...}}``: figures are what the report shows (ours, theirs, ratio
ours÷theirs), detail is everything else worth keeping in the JSON.

Ours and theirs run the same steps, A B A B: every round runs ours, then delta-rs.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.benchmarks.harness import aws, deltalog
from tests.benchmarks.harness.driver import (
    REPO_ROOT,
    BenchError,
    Proxy,
    Stack,
    Worker,
    child_env,
    start_stack,
    wait_all,
)
from tests.benchmarks.harness.stats import (
    floor_ms,
    p50,
    pct,
    per_operation,
    ratio,
    summarize_requests,
)
from tests.benchmarks.harness.workload import (
    DV_DELETE_READ,
    DV_DELETE_WRITE,
    SMALL_FILE_SCHEMA,
    SMALL_SCHEMA,
    dml_steps,
    small_file,
)

SIDES = ("ours", "theirs")
DURABLE = "ours-durable"
"""The commit measure's third writer: ours acknowledging at the DynamoDB entry (``DYNACOMMIT_COMMIT_ACK``)."""


@dataclass(frozen=True)
class Sizes:
    """How much each measure does; ``quick()`` is for checking the harness itself, not for figures."""

    rounds: int = 2  # contention: each round is long
    #: contention: (writers, appends each) per shape, a sweep (``--contention``); empty: processes x appends_per_process
    contention_shapes: tuple[tuple[int, int], ...] = ()
    long_appends: int = 200
    long_rounds: int = 10  # short blocks, so a burst of load elsewhere on the machine hits both sides alike
    stateless_appends: int = 50
    stateless_rounds: int = 5
    depths: tuple[int, ...] = (50, 2000)
    counted_long: int = 20
    counted_stateless: int = 10
    raw_writes: int = 50
    counted_raw: int = 20
    singles: int = 20
    processes: int = 4
    appends_per_process: int = 50
    many_processes: int = 16
    appends_each: int = 30
    open_files: tuple[int, ...] = (10_000, 100_000)
    open_rounds: int = 3
    theirs_open_limit_s: float = 300.0
    read_files: int = 1000
    read_rounds: int = 3
    bulk_rows: int = 2_000_000
    bulk_rounds: int = 3
    spark_rows: int = 3_000_000
    jobcommit_files: tuple[int, ...] = (1000, 10_000)
    dml_rows: int = 1_000_000
    dml_rounds: int = 2
    dv_rows: int = 1_000_000
    dv_rounds: int = 3
    small_dml_rows: int = 1_000_000
    small_dml_rounds: int = 15

    @classmethod
    def quick(cls) -> Sizes:
        return cls(long_appends=20, long_rounds=2, stateless_appends=10, stateless_rounds=2, bulk_rounds=2,
                   depths=(50, 200), counted_long=5, counted_stateless=3, raw_writes=10, counted_raw=5, singles=5,
                   appends_per_process=10, many_processes=4, appends_each=5, open_files=(2000,), open_rounds=1, read_files=100, read_rounds=1, bulk_rows=100_000, spark_rows=200_000,
                   jobcommit_files=(200,), dml_rows=100_000, dml_rounds=1, dv_rows=100_000, dv_rounds=1,
                   small_dml_rows=100_000, small_dml_rounds=2)


@dataclass
class Context:
    stack: Stack
    ours: Worker
    theirs: Worker
    sizes: Sizes
    log_dir: Path
    progress: Callable[[str], None]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    done: dict = field(default_factory=dict)  # results of the measures run so far on this stack
    _proxy: Proxy | None = None

    @property
    def options(self) -> dict[str, str]:
        return self.stack.options

    def uri(self, name: str) -> str:
        return f"s3://{self.stack.bucket}/bench-{self.run_id}/{name}"

    def key(self, uri: str) -> str:
        return uri.split("/", 3)[3]

    def worker(self, side: str) -> Worker:
        return self.ours if side == "ours" else self.theirs

    @property
    def proxy(self) -> Proxy:
        if self._proxy is None:
            self._proxy = Proxy(self.stack.upstreams, self.log_dir)
        return self._proxy

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.stop()


def fig(name: str, unit: str, ours: float | None, theirs: float | None = None, *, better: str = "lower",
        note: str = "") -> dict:
    return {"figure": name, "unit": unit, "ours": ours, "theirs": theirs, "ratio": ratio(ours, theirs),
            "better": better, "note": note}


def _create(ctx: Context, side: str, uri: str) -> None:
    """The table, created by one stateless append of the side that will write it."""
    ctx.worker(side).call("append", uri=uri, options=ctx.options, shape="stateless", count=1, writer=side)


# ------------------------------------------------------------------------------------ commit latency
def commit(ctx: Context) -> dict:
    """Long-lived writer (one Table / one DeltaTable reused) and stateless writer (``write_table(uri)`` /
    ``write_deltalake(uri)`` each call): one-row appends, p50 and p95. The long-lived shape also runs ours
    with ``DYNACOMMIT_COMMIT_ACK=durable`` (a third writer in the same rounds, so load elsewhere on the
    machine hits all three alike), compared with the same delta-rs writer."""
    s = ctx.sizes
    figures, detail = [], {}
    durable_options = dict(ctx.options, DYNACOMMIT_COMMIT_ACK="durable")
    for shape, total, rounds in (("long", s.long_appends, s.long_rounds),
                                 ("stateless", s.stateless_appends, s.stateless_rounds)):
        per_round = total // rounds
        uris = {side: ctx.uri(f"{shape}-{side}") for side in SIDES}
        runs = [(side, side, ctx.options) for side in SIDES]  # (key, worker side, options)
        if shape == "long":
            uris[DURABLE] = ctx.uri(f"{shape}-{DURABLE}")
            runs.append((DURABLE, "ours", durable_options))
        for key, side, options in runs:
            _create(ctx, side, uris[key])
            if shape == "long":
                ctx.worker(side).call("open_writer", uri=uris[key], options=options)
        latencies: dict[str, list[float]] = {key: [] for key, _, _ in runs}
        failures: dict[str, list] = {key: [] for key, _, _ in runs}
        for r in range(rounds):
            for key, side, options in runs:
                res = ctx.worker(side).call("append", uri=uris[key], options=options, shape=shape,
                                            count=per_round, writer=side, first_seq=1 + r * per_round)
                latencies[key] += res["latencies_ms"]
                failures[key] += res["failures"]
                ctx.progress(f"commit/{shape} round {r + 1}/{rounds}: {key} {per_round} appends, "
                             f"p50 {p50(res['latencies_ms']):.1f} ms")
        label = "long-lived writer" if shape == "long" else "stateless writer"
        figures.append(fig(f"{label}, {total} one-row appends: p50", "ms", p50(latencies["ours"]),
                           p50(latencies["theirs"])))
        figures.append(fig(f"{label}, {total} one-row appends: p95", "ms", pct(latencies["ours"], .95),
                           pct(latencies["theirs"], .95)))
        if shape == "long":
            figures.append(fig(f"{label}, {total} one-row appends, ours with commit_ack=durable: p50", "ms",
                               p50(latencies[DURABLE]), p50(latencies["theirs"])))
            figures.append(fig(f"{label}, {total} one-row appends, ours with commit_ack=durable: p95", "ms",
                               pct(latencies[DURABLE], .95), pct(latencies["theirs"], .95)))
        detail[shape] = {"latencies_ms": latencies, "failures": failures}
    return {"figures": figures, "detail": detail}


# ------------------------------------------------------------------------- raw log store, singles
def raw(ctx: Context) -> dict:
    """Our raw ``LogStore.write``: latency, and sequential round trips through the proxy. The floor is
    the sum of the single-request latencies of the requests it makes, each timed alone: rounds of
    "every kind of request twice, then five writes", so load elsewhere on the machine moves both alike.
    delta-rs has no raw log-store API; its commit's log requests are counted in :func:`requests`."""
    s = ctx.sizes
    rounds = max(1, s.raw_writes // 5)
    singles: dict[str, list[float]] = {}
    latencies: list[float] = []
    for r in range(rounds):
        got = ctx.ours.call("singles", options=ctx.options, bucket=ctx.stack.bucket,
                            prefix=f"bench-{ctx.run_id}/singles", count=max(1, s.singles // rounds))["samples_ms"]
        for kind, samples in got.items():
            singles.setdefault(kind, []).extend(samples)
        res = ctx.ours.call("raw_write", uri=ctx.uri("raw"), options=ctx.options, count=5, first_version=5 * r)
        latencies += res["latencies_ms"][1:] if r == 0 else res["latencies_ms"]  # version 0 has no N-1 to check
    singles_p50 = {k: p50(v) for k, v in singles.items()}
    ctx.progress("raw: single requests " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(singles_p50.items())) + " ms")
    latency = p50(latencies)
    proxy = ctx.proxy
    proxy.records(reset=True)
    counted = ctx.ours.call("raw_write", uri=ctx.uri("raw-counted"), options=ctx.stack.proxied(proxy),
                            count=s.counted_raw)
    items = per_operation(proxy.records(reset=True), counted["spans"][1:])  # version 0 skips the N-1 check
    summary = summarize_requests(items)
    floor, estimated = floor_ms(summary["typical_path"], singles_p50)
    ctx.progress(f"raw: write p50 {latency:.1f} ms, {summary['round_trips_median']:.0f} sequential round trips "
                 f"({' > '.join(summary['typical_path'])}), floor {floor:.1f} ms")
    ctx.done["singles_p50"] = singles_p50
    return {
        "figures": [
            fig("raw LogStore.write: sequential round trips", "count", summary["round_trips_median"], None),
            fig("raw LogStore.write: p50", "ms", latency, None),
            fig("raw LogStore.write: floor (sum of its requests' single p50s)", "ms", floor, None),
            fig("raw LogStore.write: p50 ÷ floor", "x", latency / floor if floor else None, None),
        ],
        "detail": {"singles_ms": singles, "singles_p50_ms": singles_p50, "write_latencies_ms": latencies,
                   "requests": summary, "floor_estimated_ops": estimated},
    }


# ------------------------------------------------------------------------------ requests per commit
def _history(ctx: Context, side: str, depth: int) -> str:
    """A table whose log already holds ``depth - 10`` commits and a delta-rs checkpoint of the last."""
    uri = ctx.uri(f"history{depth}-{side}")
    deltalog.write_history(aws.s3(ctx.options), ctx.stack.bucket, ctx.key(uri), depth - 10, SMALL_SCHEMA)
    ctx.theirs.call("checkpoint", uri=uri, options=ctx.options)
    return uri


def requests(ctx: Context) -> dict:
    """Requests per commit at two history depths, both writer shapes, through the counting proxy."""
    s = ctx.sizes
    proxy = ctx.proxy
    proxied = ctx.stack.proxied(proxy)
    figures, detail = [], {}
    for depth in s.depths:
        summaries: dict[str, dict] = {}
        for side in SIDES:
            uri = _history(ctx, side, depth)
            w = ctx.worker(side)
            w.call("open_writer", uri=uri, options=proxied)
            # The first commit on a built history finds N-1 by its N-1.json (no DynamoDB entry): not typical.
            w.call("append", uri=uri, options=proxied, shape="long", count=1, writer=side)
            proxy.records(reset=True)
            res = w.call("append", uri=uri, options=proxied, shape="long", count=s.counted_long, writer=side,
                          first_seq=1)
            summaries[f"long-{side}"] = summarize_requests(per_operation(proxy.records(reset=True), res["spans"]))
            res = w.call("append", uri=uri, options=proxied, shape="stateless", count=s.counted_stateless,
                          writer=side, first_seq=1000)
            summaries[f"stateless-{side}"] = summarize_requests(per_operation(proxy.records(reset=True), res["spans"]))
            ctx.progress(f"requests v~{depth}: {side} long-lived {summaries[f'long-{side}']['s3_mean']:.1f} S3 + "
                         f"{summaries[f'long-{side}']['dynamodb_mean']:.1f} DynamoDB, stateless "
                         f"{summaries[f'stateless-{side}']['s3_mean']:.1f} S3 + "
                         f"{summaries[f'stateless-{side}']['dynamodb_mean']:.1f} DynamoDB per commit")
        for shape, label in (("long", "long-lived"), ("stateless", "stateless")):
            o, t = summaries[f"{shape}-ours"], summaries[f"{shape}-theirs"]
            figures += [
                fig(f"requests per commit at v~{depth}, {label}: S3 (mean)", "count", o["s3_mean"], t["s3_mean"]),
                fig(f"requests per commit at v~{depth}, {label}: DynamoDB (mean)", "count", o["dynamodb_mean"],
                    t["dynamodb_mean"]),
                fig(f"sequential round trips per commit at v~{depth}, {label} (median)", "count",
                    o["round_trips_median"], t["round_trips_median"]),
            ]
        detail[f"v{depth}"] = summaries
    singles_p50 = ctx.done.get("singles_p50")
    commit_detail = ctx.done.get("commit", {}).get("detail", {}).get("long")
    first = f"v{s.depths[0]}"
    if singles_p50 and commit_detail:
        floors = {side: floor_ms(detail[first][f"long-{side}"]["typical_path"], singles_p50)[0] for side in SIDES}
        lat = {side: p50(commit_detail["latencies_ms"][side]) for side in SIDES}
        figures.append(fig("long-lived append: floor (sum of single p50s along its round trips)", "ms",
                           floors["ours"], floors["theirs"]))
        figures.append(fig("long-lived append: p50 ÷ floor", "x", lat["ours"] / floors["ours"],
                           lat["theirs"] / floors["theirs"]))
        detail["append_floor_ms"] = floors
    return {"figures": figures, "detail": detail}


# ---------------------------------------------------------------------------------------- contention
def contention(ctx: Context) -> dict:
    """N processes × M appends on one table, each a long-lived writer, started together; once per shape of
    ``Sizes.contention_shapes`` (``--contention 1x50,4x50,...``: a sweep of writers), both sides in turn.

    Each side's run of each shape starts on a fresh server stack of its own (:func:`_fresh_stack`), so that no
    run pays for the items and objects an earlier one left: moto's Query walks every item of the DynamoDB
    table and its TransactWriteItems deep-copies the whole table, and its S3 LIST walks every key of the
    bucket, so on one shared server each shape (and deltalake after ours) ran against more items than the
    one before. DynamoDB and S3 have no such cost. The DynamoDB table's item count (and its queued appends)
    at the start and end of each run is kept in the detail (``ddb_items``)."""
    s = ctx.sizes
    shapes = s.contention_shapes or ((s.processes, s.appends_per_process),)
    figures: list[dict] = []
    detail: dict[str, dict] = {}
    for processes, appends in shapes:
        shape = _contention_shape(ctx, processes, appends)
        figures += shape["figures"]
        detail[f"{processes}x{appends}"] = shape["detail"]
    # one shape keeps the old layout of the detail (rounds by side)
    return {"figures": figures, "detail": detail if len(shapes) > 1 else next(iter(detail.values()))}


@contextlib.contextmanager
def _fresh_stack(ctx: Context):
    """A fresh server stack of the kind of ``ctx.stack`` (its bucket and commit table empty) for one run of
    the contention measure; yields its options, and stops it after."""
    stack = start_stack(ctx.stack.name)
    try:
        yield stack.options
    finally:
        stack.stop()


def _ddb_items(options: dict[str, str]) -> dict[str, int]:
    """The items of the commit table: all of them, and the queued appends of group commit among them
    (``tablePath`` beginning ``dynacommit-group:``; none should be left once every writer has its outcome)."""
    client = aws.dynamodb(options)
    counts = {"items": 0, "queued": 0}
    kwargs = {"TableName": options["DELTA_DYNAMO_TABLE_NAME"], "ProjectionExpression": "tablePath"}
    while True:
        page = client.scan(**kwargs)
        counts["items"] += len(page.get("Items") or [])
        counts["queued"] += sum(1 for i in page.get("Items") or [] if i["tablePath"]["S"].startswith("dynacommit-group:"))
        if "LastEvaluatedKey" not in page:
            return counts
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _contention_shape(ctx: Context, processes: int, appends: int) -> dict:
    s = ctx.sizes
    workers = {side: [Worker(side, f"{ctx.stack.name}-{side}-contender{i}", ctx.log_dir) for i in range(processes)]
               for side in SIDES}
    rounds: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        for r in range(s.rounds):
            for side in SIDES:
                group = workers[side]
                uri = ctx.uri(f"contention-{side}-{processes}x{appends}-{r}")
                with _fresh_stack(ctx) as options:
                    items_before = _ddb_items(options)
                    ctx.worker(side).call("append", uri=uri, options=options, shape="stateless", count=1,
                                          writer=side)  # creates the table (``_create``)
                    for w in group:
                        w.call("open_writer", uri=uri, options=options)
                    start_at = time.time() + 1.0
                    for i, w in enumerate(group):
                        w.send("append", uri=uri, options=options, shape="long", count=appends,
                               writer=f"{side}{i}", first_seq=1, start_at=start_at)
                    results = wait_all(group, "append", timeout=1800)
                    wall = max(x["ended"] for x in results) - min(x["started"] for x in results)
                    committed = sum(x["committed"] for x in results)
                    final = ctx.ours.call("open", uri=uri, options=options)["version"]
                    items_after = _ddb_items(options)
                latencies = sorted(ms for x in results for ms in x["latencies_ms"])
                writers = [{"committed": x["committed"], "failures": len(x["failures"]),
                            "p50_ms": p50(x["latencies_ms"]), "max_ms": max(x["latencies_ms"], default=float("nan")),
                            "finished_after_s": x["ended"] - min(y["started"] for y in results),
                            "errors": sorted({f["error"].split(":")[0] for f in x["failures"]}),
                            "first_error": x["failures"][0]["error"] if x["failures"] else None} for x in results]
                # version 0 is the creating append: the versions the writers wrote are ``final``
                rounds[side].append({"wall_s": wall, "committed": committed, "commits_per_s": committed / wall,
                                     "final_version": final, "expected_version": committed,
                                     "versions_per_append": final / committed if committed else float("nan"),
                                     "p50_ms": p50(latencies),
                                     "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                                     if latencies else float("nan"),
                                     "writers": writers, "ddb_items": {"start": items_before, "end": items_after}})
                maxima = ", ".join(f"{w_['max_ms']:.0f}" for w_ in writers)
                ctx.progress(f"contention {processes}x{appends} round {r + 1}/{s.rounds}: {side} {committed} commits "
                             f"in {wall:.1f}s = {committed / wall:.1f}/s, {final} versions; per writer max latency "
                             f"{maxima} ms, failures {sum(w_['failures'] for w_ in writers)}; DynamoDB items "
                             f"{items_before} at the start, {items_after} at the end")
    finally:
        for group in workers.values():
            for w in group:
                w.stop()
    rate = {side: p50([x["commits_per_s"] for x in rounds[side]]) for side in SIDES}
    worst = {side: max(w_["max_ms"] for x in rounds[side] for w_ in x["writers"]) for side in SIDES}
    failed = {side: sum(w_["failures"] for x in rounds[side] for w_ in x["writers"]) for side in SIDES}
    slowest = {side: max(w_["p50_ms"] for x in rounds[side] for w_ in x["writers"]) for side in SIDES}
    versions = {side: p50([x["versions_per_append"] for x in rounds[side]]) for side in SIDES}
    median = {side: p50([x["p50_ms"] for x in rounds[side]]) for side in SIDES}
    p99 = {side: p50([x["p99_ms"] for x in rounds[side]]) for side in SIDES}
    n = f"{processes} processes × {appends} appends"
    return {
        "figures": [
            fig(f"{n}: commits/s (median of rounds)", "1/s", rate["ours"], rate["theirs"], better="higher"),
            fig(f"{n}: versions written per append", "count", versions["ours"], versions["theirs"]),
            fig(f"{n}: p50 append latency", "ms", median["ours"], median["theirs"]),
            fig(f"{n}: p99 append latency", "ms", p99["ours"], p99["theirs"]),
            fig(f"{n}: worst single append latency", "ms", worst["ours"], worst["theirs"]),
            fig(f"{n}: slowest writer's p50 latency", "ms", slowest["ours"], slowest["theirs"]),
            fig(f"{n}: failed appends (all rounds)", "count", failed["ours"], failed["theirs"]),
        ],
        "detail": rounds,
    }


# ------------------------------------------------------------------------------------- many writers
def many_writers(ctx: Context) -> dict:
    """Ours alone: ``many_processes`` long-lived writers × ``appends_each`` appends on one table, started
    together: nobody may starve (issue 7: 16 × 30, no failure). Figures: failures, commits/s, the slowest
    commit and the most attempts one commit took. Every acknowledged append is checked to be in the table
    once, at contiguous versions."""
    s = ctx.sizes
    group = [Worker("ours", f"{ctx.stack.name}-many{i}", ctx.log_dir) for i in range(s.many_processes)]
    try:
        uri = ctx.uri("many-writers")
        _create(ctx, "ours", uri)
        for w in group:
            w.call("open_writer", uri=uri, options=ctx.options)
        start_at = time.time() + 2.0
        for i, w in enumerate(group):
            w.send("append", uri=uri, options=ctx.options, shape="long", count=s.appends_each, writer=f"w{i}",
                   first_seq=1, start_at=start_at)
        results = wait_all(group, "append", timeout=3600)
    finally:
        for w in group:
            w.stop()
    wall = max(x["ended"] for x in results) - min(x["started"] for x in results)
    committed = sum(x["committed"] for x in results)
    failures = [f for x in results for f in x["failures"]]
    latencies = [ms for x in results for ms in x["latencies_ms"]]
    final = ctx.ours.call("open", uri=uri, options=ctx.options)["version"]
    if final != committed:  # version 0 created the table; each acknowledged append is one version
        raise BenchError(f"many writers: {committed} appends acknowledged but the table is at version {final}")
    n = f"{s.many_processes} writers × {s.appends_each} appends"
    ctx.progress(f"many writers: {committed} commits in {wall:.1f}s, {len(failures)} failures, slowest "
                 f"{max(latencies, default=float('nan')):.0f} ms")
    return {
        "figures": [
            fig(f"{n}: failed appends", "count", len(failures)),
            fig(f"{n}: commits/s", "1/s", committed / wall, better="higher"),
            fig(f"{n}: slowest commit", "ms", max(latencies, default=None)),
            fig(f"{n}: p50 commit", "ms", p50(latencies)),
        ],
        "detail": {"wall_s": wall, "committed": committed, "failures": failures[:20],
                   "writers": [{"committed": x["committed"], "max_ms": max(x["latencies_ms"], default=None),
                                "p50_ms": p50(x["latencies_ms"])} for x in results]},
    }


# ----------------------------------------------------------------------------------------- open
def _big_log_table(ctx: Context, name: str, files: int) -> str:
    """Version 0 with ``files`` adds written through our log store (a DynamoDB entry, as any commit),
    then ten of our one-row appends, the tenth writing our checkpoint: what a reader of a table written
    by us finds. The adds name files that were never written (opening a table reads no data file)."""
    from logstore import open_log_store

    uri = ctx.uri(name)
    adds = (deltalog.add_action(f"part-{i:08d}.parquet", size=1000, stats={"numRecords": 1}) for i in range(files))
    open_log_store(uri, storage_options=ctx.options).write(0, deltalog.body([*deltalog.create_actions(SMALL_SCHEMA),
                                                                            *adds]))
    ctx.ours.call("open_writer", uri=uri, options=ctx.options)
    ctx.ours.call("append", uri=uri, options=ctx.options, shape="long", count=10, writer="setup")
    return uri


def open_(ctx: Context) -> dict:
    """``Table(uri)`` vs ``DeltaTable(uri)`` on tables of many live files, and listing them."""
    s = ctx.sizes
    figures, detail = [], {}
    for files in s.open_files:
        uri = _big_log_table(ctx, f"open-{files}", files)
        ctx.progress(f"open: built a table of {files:,} live files")
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        theirs_ok = True
        for r in range(s.open_rounds):
            for side in SIDES:
                if side == "theirs" and not theirs_ok:
                    continue
                try:
                    res = ctx.worker(side).call("open", uri=uri, options=ctx.options,
                                                timeout=s.theirs_open_limit_s if side == "theirs" else 1800)
                except BenchError as exc:
                    if side != "theirs":
                        raise
                    ctx.progress(f"open {files:,}: delta-rs did not finish: {str(exc).splitlines()[0]}")
                    theirs_ok = False
                    ctx.theirs.stop()
                    ctx.theirs = Worker("theirs", f"{ctx.stack.name}-theirs-after-open", ctx.log_dir)
                    continue
                runs[side].append(res)
                ctx.progress(f"open {files:,} round {r + 1}/{s.open_rounds}: {side} {res['open_ms']:.0f} ms "
                             f"(+ list {res['files_ms']:.0f} ms, {res['files']:,} files)")
        o = {k: p50([x[k] for x in runs["ours"]]) for k in ("open_ms", "files_ms", "again_ms")}
        t = {k: p50([x[k] for x in runs["theirs"]]) if runs["theirs"] else None for k in ("open_ms", "files_ms")}
        figures.append(fig(f"open a table of {files:,} live files (checkpoint + 0 commits)", "ms", o["open_ms"],
                           t["open_ms"], note="" if theirs_ok else f"delta-rs did not finish in {s.theirs_open_limit_s:.0f}s"))
        figures.append(fig("open it again in the same process (remembered snapshot, checked: 1 Query + 1 LIST)", "ms",
                           o["again_ms"], None))
        figures.append(fig(f"list the {files:,} files of the opened table", "ms", o["files_ms"], t["files_ms"]))
        detail[str(files)] = runs
    return {"figures": figures, "detail": detail}


# ----------------------------------------------------------------------------------------- read
def read(ctx: Context) -> dict:
    """Open and read a table of many small real Parquet files into one pyarrow Table."""
    s = ctx.sizes
    uri = ctx.uri("small-files")
    key = ctx.key(uri)
    client = aws.s3(ctx.options)
    adds, items = [], []
    for i in range(s.read_files):
        data = small_file(i)
        name = f"part-{i:05d}.snappy.parquet"
        body = deltalog.parquet_bytes(data)
        items.append((f"{key}/{name}", body))
        adds.append(deltalog.add_action(name, size=len(body), stats=deltalog.file_stats(data)))
    deltalog.put_all(client, ctx.stack.bucket, items)
    from logstore import open_log_store

    open_log_store(uri, storage_options=ctx.options).write(
        0, deltalog.body([*deltalog.create_actions(SMALL_FILE_SCHEMA), *adds]))
    ctx.progress(f"read: built a table of {s.read_files:,} small files")
    runs: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(s.read_rounds):
        for side in SIDES:
            res = ctx.worker(side).call("read", uri=uri, options=ctx.options)
            if res["rows"] != s.read_files * 100:
                raise BenchError(f"{side} read {res['rows']} rows of {uri}, expected {s.read_files * 100}")
            runs[side].append(res["ms"])
            ctx.progress(f"read {s.read_files:,} files round {r + 1}/{s.read_rounds}: {side} {res['ms']:.0f} ms")
    return {"figures": [fig(f"read {s.read_files:,} small files (100 rows each) to pyarrow, open included", "ms",
                            p50(runs["ours"]), p50(runs["theirs"]))],
            "detail": runs}


# ----------------------------------------------------------------------------------------- bulk
def bulk(ctx: Context) -> dict:
    """Write 2M rows of mixed types as one commit to a new table; read back both sides' tables."""
    s = ctx.sizes
    writes: dict[str, list[float]] = {side: [] for side in SIDES}
    tables = {}
    for r in range(s.bulk_rounds):
        for side in SIDES:
            uri = ctx.uri(f"bulk-{side}-{r}")
            res = ctx.worker(side).call("bulk_write", uri=uri, options=ctx.options, rows=s.bulk_rows)
            writes[side].append(res["ms"])
            tables.setdefault(side, uri)
            ctx.progress(f"bulk write {s.bulk_rows:,} rows round {r + 1}/{s.bulk_rounds}: {side} {res['ms']:.0f} ms")
    reads: dict[str, dict[str, list[float]]] = {writer: {side: [] for side in SIDES} for writer in SIDES}
    for r in range(s.bulk_rounds):
        for writer, uri in tables.items():
            for side in SIDES:
                res = ctx.worker(side).call("read", uri=uri, options=ctx.options)
                if res["rows"] != s.bulk_rows:
                    raise BenchError(f"{side} read {res['rows']} rows of {uri}, expected {s.bulk_rows}")
                reads[writer][side].append(res["ms"])
                ctx.progress(f"bulk read round {r + 1}/{s.bulk_rounds} of the table {writer} wrote: {side} {res['ms']:.0f} ms")
    name = {"ours": "ours", "theirs": "delta-rs"}
    figures = [fig(f"bulk write {s.bulk_rows:,} rows, 7 mixed columns (median of rounds)", "ms", p50(writes["ours"]),
                   p50(writes["theirs"]))]
    for writer in SIDES:
        figures.append(fig(f"bulk read {s.bulk_rows:,} rows of the table {name[writer]} wrote", "ms",
                           p50(reads[writer]["ours"]), p50(reads[writer]["theirs"])))
    return {"figures": figures, "detail": {"writes_ms": writes, "reads_ms": reads}}


# ----------------------------------------------------------------------------------------- spark
def spark(ctx: Context) -> dict:
    """``write_dataframe`` to the server vs ``df.write.parquet`` to local disk (child process)."""
    s = ctx.sizes
    ctx.progress(f"spark: {s.spark_rows:,} rows, local[2] (a child process; one to two minutes)")
    with tempfile.TemporaryDirectory(prefix="dynacommit-bench-spark-") as out_dir:  # Spark's own output
        proc = subprocess.run(
            [sys.executable, "-m", "tests.benchmarks.harness.spark_job", str(s.spark_rows), ctx.uri("spark"), out_dir,
             json.dumps(ctx.options)],
            env=child_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800,
        )
    (ctx.log_dir / f"spark-{ctx.stack.name}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        raise BenchError(f"the Spark job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    f = json.loads(proc.stdout.strip().splitlines()[-1])
    ours, theirs = p50(f["ours_seconds"]) * 1000, p50(f["spark_seconds"]) * 1000
    ctx.progress(f"spark: write_dataframe {', '.join(f'{x:.1f}' for x in f['ours_seconds'])} s, df.write.parquet "
                 f"{', '.join(f'{x:.1f}' for x in f['spark_seconds'])} s, Arrow to Python only "
                 f"{', '.join(f'{x:.1f}' for x in f['arrow_only_seconds'])} s")
    for side, rounds in f["cpu_seconds"].items():
        ctx.progress(f"spark: CPU seconds of {side} (JVM / Python workers / servers): "
                     + ", ".join(f"{c['jvm']:.2f} / {c['python_workers']:.2f} / {c['servers']:.2f}" for c in rounds))
    mib = f["arrow_bytes"] / 2**20
    return {"figures": [fig(f"Spark write of {s.spark_rows:,} rows ({mib:.0f} MiB as Arrow), local[2]: write_dataframe "
                            f"to the server vs df.write.parquet to local disk", "ms", ours, theirs,
                            note="theirs = Spark's own Parquet writer, not delta-rs")],
            "detail": f}


# ----------------------------------------------------------------------------------------- job commit
def jobcommit(ctx: Context) -> dict:
    """A job commit of many tiny staged uploads (ours only; delta-rs has no staging committer)."""
    figures, detail = [], {}
    for files in ctx.sizes.jobcommit_files:
        res = ctx.ours.call("jobcommit", uri=ctx.uri(f"jobcommit-{files}"), options=ctx.options, files=files,
                            tasks=max(1, files // 100), timeout=3600)
        ctx.progress(f"jobcommit {files:,} uploads: {res['seconds']:.1f} s (complete {res['complete_seconds']:.1f} s, "
                     f"log commit {res['commit_seconds']:.2f} s; staging took {res['stage_seconds']:.1f} s)")
        figures.append(fig(f"job commit of {files:,} staged uploads: total", "ms", res["seconds"] * 1000))
        figures.append(fig(f"job commit of {files:,} staged uploads: completing the uploads", "ms",
                           res["complete_seconds"] * 1000))
        figures.append(fig(f"job commit of {files:,} staged uploads: the log commit", "ms", res["commit_seconds"] * 1000))
        detail[str(files)] = res
    return {"figures": figures, "detail": detail}


# ----------------------------------------------------------------------------------------- dml
def dml(ctx: Context) -> dict:
    """Row-level changes (``workload.dml_steps``) on the same table built by each side, timed around each
    library call; sides alternate table by table. Both sides run the same SQL through DataFusion."""
    s = ctx.sizes
    steps = dml_steps(s.dml_rows)
    runs: dict[str, dict[str, list[float]]] = {step["name"]: {side: [] for side in SIDES} for step in steps}
    rewritten: dict[str, dict[str, str]] = {}
    for r in range(s.dml_rounds):
        for side in SIDES:
            uri = ctx.uri(f"dml-{side}-{r}")
            built = ctx.worker(side).call("dml_table", uri=uri, options=ctx.options, rows=s.dml_rows)
            ctx.progress(f"dml: {side} built a table of {s.dml_rows:,} rows in {built['files']} files")
            for step in steps:
                res = ctx.worker(side).call("dml", uri=uri, options=ctx.options, rows=s.dml_rows, step=step)
                runs[step["name"]][side].append(res["ms"])
                metrics = res["metrics"]
                names = ("numRemovedFiles", "numTargetFilesRemoved", "num_removed_files", "num_target_files_removed")
                rewritten.setdefault(step["name"], {})[side] = next(
                    (str(metrics[n]) for n in names if n in metrics), "?")
                ctx.progress(f"dml round {r + 1}/{s.dml_rounds} {step['name']}: {side} {res['ms']:.0f} ms")
    figures = [fig(f"{name} ({s.dml_rows:,}-row table; files rewritten: ours {rewritten[name]['ours']}, "
                   f"delta-rs {rewritten[name]['theirs']})", "ms", p50(per_side["ours"]), p50(per_side["theirs"]))
               for name, per_side in runs.items()]
    return {"figures": figures, "detail": {"ms": runs, "files_rewritten": rewritten}}


def _small_steps(round_: int, rows: int) -> dict[str, dict]:
    """The DELETE and the UPDATE of round ``round_`` of ``small_dml``: 100 ids each, other ids every round."""
    first = (round_ * 104_729 + 5_000) % (rows - 200)
    return {"delete": {"op": "delete", "predicate": f"id >= {first} AND id < {first + 100}"},
            "update": {"op": "update", "updates": {"x": "x * 2"},
                       "predicate": f"id >= {first + 100} AND id < {first + 200}"}}


def small_dml(ctx: Context) -> dict:
    """A DELETE and an UPDATE of 100 rows of one file, ``small_dml_rounds`` times each on one table per side
    (built as ``dml`` builds it), each time other rows; the sides take turns call by call, the side going
    first changing every round, so that both see the same load. Each call opens the table first (outside
    the timing), as ``dml`` does; the first round is the first row-level call of each worker process. Then one
    more of each through the counting proxy, for the requests each side sends inside the timed call."""
    s = ctx.sizes
    uris = {side: ctx.uri(f"small-dml-{side}") for side in SIDES}
    for side in SIDES:
        built = ctx.worker(side).call("dml_table", uri=uris[side], options=ctx.options, rows=s.small_dml_rows)
        ctx.progress(f"small dml: {side} built a table of {s.small_dml_rows:,} rows in {built['files']} files")
    runs: dict[str, dict[str, list[float]]] = {op: {side: [] for side in SIDES} for op in ("delete", "update")}
    for r in range(s.small_dml_rounds):
        steps = _small_steps(r, s.small_dml_rows)
        order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
        for op, step in steps.items():
            for side in order:
                res = ctx.worker(side).call("dml", uri=uris[side], options=ctx.options, rows=s.small_dml_rows,
                                            step=step)
                runs[op][side].append(res["ms"])
            ctx.progress(f"small dml round {r + 1}/{s.small_dml_rounds} {op}: ours {runs[op]['ours'][-1]:.0f} ms, "
                         f"theirs {runs[op]['theirs'][-1]:.0f} ms")
    figures = [fig(f"{op.upper()} of 100 rows of one file ({s.small_dml_rows:,}-row table; median of "
                   f"{s.small_dml_rounds}, sides taking turns)", "ms", p50(per_side["ours"]), p50(per_side["theirs"]))
               for op, per_side in runs.items()]
    # one more of each through the counting proxy: the requests inside the timed call, by service and kind
    proxy, proxied = ctx.proxy, ctx.stack.proxied(ctx.proxy)
    counted: dict[str, dict[str, dict[str, int]]] = {op: {} for op in runs}
    for op, step in _small_steps(s.small_dml_rounds, s.small_dml_rows).items():
        for side in SIDES:
            proxy.records(reset=True)
            res = ctx.worker(side).call("dml", uri=uris[side], options=proxied, rows=s.small_dml_rows, step=step)
            began, ended = res["window"]
            kinds: dict[str, int] = {}
            for start, _, service, kind, _, _ in proxy.records(reset=True):
                if began <= start <= ended:
                    kinds[f"{service} {kind}"] = kinds.get(f"{service} {kind}", 0) + 1
            counted[op][side] = dict(sorted(kinds.items()))
        ctx.progress(f"small dml {op} requests: ours {counted[op]['ours']}, theirs {counted[op]['theirs']}")
        figures.append(fig(f"requests of one {op.upper()} of 100 rows (S3 + DynamoDB)", "count",
                           sum(counted[op]["ours"].values()), sum(counted[op]["theirs"].values())))
    return {"figures": figures, "detail": {"ms": runs, "requests": counted}}


# ----------------------------------------------------------------------------------------- deletion vectors
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}


def _objects(ctx: Context, uri: str) -> dict[str, int]:
    """Every object under the table's prefix and its size, listed by the harness's own client."""
    s3, out = aws.s3(ctx.options), {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=ctx.stack.bucket, Prefix=ctx.key(uri) + "/"):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def deletion_vectors(ctx: Context) -> dict:
    """DELETE of 1% of the rows of every file (``DV_DELETE_WRITE``) as deletion vectors against copy-on-write
    (ours both ways, delta-rs 1.6.0 copy-on-write, which is all it writes), in time and in bytes the commit
    adds to the bucket (listed before and after); then a full read of a table whose deletion vectors
    delete 10% of its rows, ours against deltalake's SQL reader (its pyarrow reader refuses the feature),
    both reading the same table, which ours wrote."""
    s = ctx.sizes
    kinds = {"ours, deletion vectors": ("ours", DELETION_VECTORS), "ours, copy-on-write": ("ours", None),
             "delta-rs, copy-on-write": ("theirs", None)}
    step = {"name": "delete 1% of every file", "op": "delete", "predicate": DV_DELETE_WRITE}
    ms: dict[str, list[float]] = {k: [] for k in kinds}
    written: dict[str, list[int]] = {k: [] for k in kinds}
    for r in range(s.dv_rounds):
        for i, (kind, (side, configuration)) in enumerate(kinds.items()):
            uri = ctx.uri(f"dv-write-{i}-{r}")
            ctx.worker(side).call("dml_table", uri=uri, options=ctx.options, rows=s.dv_rows,
                                  configuration=configuration)
            before = _objects(ctx, uri)
            res = ctx.worker(side).call("dml", uri=uri, options=ctx.options, rows=s.dv_rows, step=step)
            added = sum(size for key, size in _objects(ctx, uri).items() if key not in before)
            ms[kind].append(res["ms"])
            written[kind].append(added)
            ctx.progress(f"dv round {r + 1}/{s.dv_rounds} {step['name']}: {kind} {res['ms']:.0f} ms, {added:,} bytes")
    dv, cow, theirs = kinds
    figures = [fig(f"DELETE of 1% of the rows of every file ({s.dv_rows:,} rows): deletion vectors (ours) vs "
                   f"copy-on-write ({which})", "ms", p50(ms[dv]), p50(ms[other]))
               for which, other in (("ours", cow), ("delta-rs", theirs))]
    figures += [fig(f"bytes that DELETE adds to the bucket: deletion vectors (ours) vs copy-on-write ({which})",
                    "bytes", p50(written[dv]), p50(written[other]))
                for which, other in (("ours", cow), ("delta-rs", theirs))]

    uri = ctx.uri("dv-read")
    ctx.ours.call("dml_table", uri=uri, options=ctx.options, rows=s.dv_rows, configuration=DELETION_VECTORS)
    ctx.ours.call("dml", uri=uri, options=ctx.options, rows=s.dv_rows,
                  step={"name": "delete 10%", "op": "delete", "predicate": DV_DELETE_READ})
    reads: dict[str, list[float]] = {side: [] for side in SIDES}
    counts: dict[str, set[int]] = {side: set() for side in SIDES}
    for r in range(s.dv_rounds):
        for side in SIDES:
            res = ctx.worker(side).call("read_all", uri=uri, options=ctx.options)
            reads[side].append(res["ms"])
            counts[side].add(res["rows"])
            ctx.progress(f"dv read round {r + 1}/{s.dv_rounds}: {side} {res['ms']:.0f} ms, {res['rows']:,} rows")
    if len(counts["ours"] | counts["theirs"]) != 1:
        raise BenchError(f"the two readers disagree on the rows of the deletion-vector table: {counts}")
    figures.append(fig(f"read of a {s.dv_rows:,}-row table, 10% of its rows deleted by deletion vectors "
                       "(theirs: deltalake's SQL reader)", "ms", p50(reads["ours"]), p50(reads["theirs"])))
    return {"figures": figures, "detail": {"delete_ms": ms, "delete_bytes": written, "read_ms": reads}}


MEASURES: dict[str, Callable[[Context], dict]] = {
    "commit": commit, "raw": raw, "requests": requests, "contention": contention, "many": many_writers,
    "open": open_, "read": read, "bulk": bulk, "spark": spark, "jobcommit": jobcommit, "dml": dml,
    "smalldml": small_dml, "dv": deletion_vectors,
}
"""In run order. ``raw`` before ``requests`` (the single-request floor), ``commit`` before both."""

ONLY_ON = {"jobcommit": ("moto",)}
"""Measures run on some stacks only."""
