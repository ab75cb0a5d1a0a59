"""A run's comparisons as one PNG chart, beside its markdown table (``make bench`` writes ``<stamp>.png``).

Every figure measured on both sides becomes one bar per server: how many times better dynacommit is than
deltalake 1.6.0 on that figure, on a log scale, so that 2× ahead and 2× behind are the same length on
either side of the line at 1. Figures where lower is better (times, requests, CPU) are plotted as
theirs ÷ ours, figures where higher is better (commits/s) as ours ÷ theirs: right of the line is always
dynacommit ahead. Figures with no delta-rs side (ours only) are left to the table.

A run of the contention measure over several shapes (``--contention 1x50,4x50,...``) also gets
:func:`draw_writers`: commits/s against writers, both sides on each server, the figures themselves.

``python -m tests.benchmarks.harness.charts [--writers] OUT.png RUN.json [RUN.json ...]`` draws saved runs
again (``--writers``: the commits/s-against-writers chart); runs of
``tests/benchmarks/spark_merge.py`` (``*-spark-merge.jsonl``, one series a run) are drawn the same way, against
Spark's own ``df.write.parquet``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap
from pathlib import Path

from tests.benchmarks.harness.report import SERVER_ORDER

_COLORS = {"servers": "#1f77b4", "moto": "#ff7f0e"}
_LABEL_WIDTH = 50


def advantage(figure: dict) -> float | None:
    """How many times better ours is than theirs on ``figure`` (> 1: ours ahead), or None without both
    sides or with a zero/negative value on either (no ratio to draw)."""
    ours, theirs = figure.get("ours"), figure.get("theirs")
    if not isinstance(ours, (int, float)) or not isinstance(theirs, (int, float)):
        return None
    if not (math.isfinite(ours) and math.isfinite(theirs)) or ours <= 0 or theirs <= 0:
        return None
    return ours / theirs if figure.get("better") == "higher" else theirs / ours


def rows(results: list[dict]) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """The servers (in the tables' order), the figures drawn (in measure order) and each one's advantage
    by (figure, server)."""
    runs = sorted(results, key=lambda r: SERVER_ORDER.index(r["server"]) if r["server"] in SERVER_ORDER else 9)
    servers: list[str] = []
    names: list[str] = []
    values: dict[tuple[str, str], float] = {}
    for run in runs:
        for result in run["measures"].values():
            for figure in result.get("figures", ()):
                value = advantage(figure)
                if value is None:
                    continue
                if run["label"] not in servers:
                    servers.append(run["label"])
                if figure["figure"] not in names:
                    names.append(figure["figure"])
                values[(figure["figure"], run["label"])] = value
    return servers, names, values


def draw(results: list[dict], out: Path, *, title: str | None = None) -> Path | None:
    """Write the chart of ``results`` (the JSON of one ``make bench`` run, one dict per server) to ``out``;
    None, and nothing written, when no figure has both sides."""
    servers, names, values = rows(results)
    if not names:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    bar = 0.8 / len(servers)
    height = 1.0 + 0.22 * len(names) * max(1, len(servers)) + 0.3 * sum(len(_wrap(n)) - 1 for n in names)
    fig, ax = plt.subplots(figsize=(12, max(3.0, height)))
    for i, server in enumerate(servers):
        ys, xs = [], []
        for j, name in enumerate(names):
            if (name, server) in values:
                ys.append(j + (i - (len(servers) - 1) / 2) * bar)
                xs.append(values[(name, server)])
        color = _COLORS.get(next((r["server"] for r in results if r["label"] == server), ""), None)
        bars = ax.barh(ys, [math.log10(x) for x in xs], height=bar * 0.9, label=server, color=color)
        for rect, x in zip(bars, xs):
            width = rect.get_width()
            ax.annotate(_times(x), (width, rect.get_y() + rect.get_height() / 2),
                        xytext=(3 if width >= 0 else -3, 0), textcoords="offset points",
                        ha="left" if width >= 0 else "right", va="center", fontsize=7)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)), ["\n".join(_wrap(n)) for n in names], fontsize=7)
    ax.invert_yaxis()
    span = max(abs(math.log10(v)) for v in values.values())
    limit = max(math.log10(2), span * 1.25)
    ax.set_xlim(-limit, limit)
    fine = (math.log10(1 / 3), math.log10(0.5), math.log10(2), math.log10(3)) if limit < 1.2 else ()
    ticks = sorted(t for t in (-3, -2, -1, 0, 1, 2, 3, *fine) if abs(t) <= limit)
    ax.set_xticks(ticks, [_times(10 ** t) for t in ticks], fontsize=8)
    ax.set_xlabel("times better than the other side: deltalake 1.6.0 unless the figure names another (log scale; "
                  "right of the line: dynacommit ahead)", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or _title(results), fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


_SHAPE = re.compile(r"^(\d+) processes × (\d+) appends: commits/s")


def writer_series(results: list[dict]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """Commits/s by writers from the contention figures of ``results``: ``(server label, side)`` to
    ``[(writers, commits/s), ...]`` in order of writers."""
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for run in results:
        for figure in run.get("measures", {}).get("contention", {}).get("figures", ()):
            shape = _SHAPE.match(figure.get("figure", ""))
            if shape is None:
                continue
            for side in ("ours", "theirs"):
                value = figure.get(side)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    series.setdefault((run["label"], side), []).append((int(shape.group(1)), float(value)))
    return {key: sorted(points) for key, points in series.items()}


def draw_writers(results: list[dict], out: Path, *, title: str | None = None) -> Path | None:
    """Write commits/s against writers (log-2 axis of writers) for both sides on every server to ``out``;
    None, and nothing written, with fewer than two shapes measured."""
    series = writer_series(results)
    if not any(len(points) > 1 for points in series.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for (label, side), points in sorted(series.items()):
        server = next((r["server"] for r in results if r["label"] == label), "")
        who = "dynacommit" if side == "ours" else "deltalake 1.6.0"
        ax.plot([w for w, _ in points], [v for _, v in points], marker="o" if side == "ours" else "s",
                linestyle="-" if side == "ours" else "--", color=_COLORS.get(server), label=f"{who}, {label}")
        for w, v in points:
            ax.annotate(f"{v:.1f}", (w, v), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=7)
    writers = sorted({w for points in series.values() for w, _ in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(writers, [str(w) for w in writers])
    ax.set_xlabel("writer processes on one table (one-row appends, started together)", fontsize=8)
    ax.set_ylabel("appends committed per second", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title or _title(results).replace("dynacommit against", "commits/s against writers: dynacommit and"),
                 fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _times(value: float) -> str:
    """``2.0×`` ahead or ``1/2.0×`` behind: the same number either way, the side told by the slash."""
    if value >= 1:
        return f"{value:.1f}×" if value < 100 else f"{value:,.0f}×"
    inverse = 1 / value
    return f"1/{inverse:.1f}×" if inverse < 100 else f"1/{inverse:,.0f}×"


def _wrap(name: str) -> list[str]:
    return textwrap.wrap(name, _LABEL_WIDTH) or [name]


def _title(results: list[dict]) -> str:
    env = results[0].get("environment", {})
    dates = sorted({str(r.get("date", ""))[:16] for r in results if r.get("date")})
    return (f"dynacommit against deltalake 1.6.0, same runs ({', '.join(dates) or 'undated'}; code "
            f"{env.get('git', '?')}; {env.get('cpus', '?')} CPUs)")


def spark_merge_run(events: list[dict]) -> dict:
    """One run of ``tests/benchmarks/spark_merge.py`` (its JSON lines) in the shape of a harness run: each
    MERGE against Spark's own writer writing the same rows (and the plain one also the whole table)."""
    run = next((e for e in events if e.get("event") == "run"), {})
    merges = {e["variant"]: e for e in events if e.get("event") == "merge"}
    parquet = {e["of"]: e for e in events if e.get("event") == "df.write.parquet"}
    setup = next((e for e in events if e.get("event") == "setup"), {})
    wrote, whole = parquet.get("rows the plain merge wrote"), parquet.get("whole table")
    figures = []
    for variant, against, what in (("plain", wrote, "the rows it wrote"), ("plain", whole, "the whole table"),
                                   ("pruned", wrote, "the rows the plain MERGE wrote")):
        merge = merges.get(variant)
        if merge and against:
            figures.append({"figure": f"{variant} MERGE ({merge['condition']}) vs df.write.parquet of {what} "
                                      f"({against['rows']:,} rows)",
                            "unit": "s", "ours": merge["seconds"], "theirs": against["seconds"], "better": "lower"})
    started = str(run.get("started", ""))
    label = f"run {started[11:16] or '?'} (load {run.get('load_before', '?')}-{run.get('load_after', '?')})"
    return {"server": setup.get("servers", "spark"), "label": label, "date": started[:16],
            "environment": {"git": run.get("git", "-"), "cpus": setup.get("workers", "?")},
            "measures": {"spark_merge": {"figures": figures}}}


def load(path: Path) -> list[dict]:
    """The harness runs in a saved file: a ``make bench`` JSON, or a benchmark script's JSON lines."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [spark_merge_run([json.loads(line) for line in text.splitlines() if line.strip()])]
    data = json.loads(text)
    return [data] if "server" in data else []


def main(argv: list[str]) -> int:
    if len(argv) < 2 or (argv[0] == "--writers" and len(argv) < 3):
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    if argv[0] == "--writers":
        out, paths = Path(argv[1]), argv[2:]
        written = draw_writers([r for p in paths for r in load(Path(p))], out)
        print(written or "fewer than two contention shapes: nothing drawn")
        return 0 if written else 1
    out, paths = Path(argv[0]), argv[1:]
    results = [r for p in paths for r in load(Path(p))]
    spark = all(r["measures"].keys() == {"spark_merge"} for r in results)
    written = draw(results, out, title="Spark MERGE on a standalone cluster of 2 workers, against Spark's own "
                                       "df.write.parquet to local disk" if spark else None)
    print(written or "no figure has both sides: nothing drawn")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
