"""The markdown tables of a run, from its JSON results (``python -m tests.benchmarks.harness report
FILE.json ...`` renders saved results again)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

SERVER_ORDER = ("servers", "moto")  # throughput is closer to real services on SeaweedFS: it comes first


def _num(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "x":
        return f"{value:.2f}×"
    if unit in ("count",):
        return f"{value:.1f}" if value != int(value) else f"{int(value)}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.2f}×"


def side_by_side(results: list[dict]) -> str:
    """One row per figure, for each server: ours, delta-rs, ours÷delta-rs."""
    runs = sorted(results, key=lambda r: SERVER_ORDER.index(r["server"]) if r["server"] in SERVER_ORDER else 9)
    rows: dict[str, dict] = {}
    for run in runs:
        for measure, result in run["measures"].items():
            if "error" in result:
                rows.setdefault(f"{measure}: failed", {"unit": "", "better": ""})[run["server"]] = {"error": result["error"]}
                continue
            for f in result["figures"]:
                row = rows.setdefault(f["figure"], {"unit": f["unit"], "better": f["better"], "note": f.get("note", "")})
                row[run["server"]] = f
    head = "| measure | unit |" + "".join(f" {r['label']}: ours | delta-rs | ratio |" for r in runs)
    rule = "|---|---|" + "---|---|---|" * len(runs)
    lines = [head, rule]
    for name, row in rows.items():
        unit = row["unit"] + (" (higher is better)" if row.get("better") == "higher" else "")
        cells = []
        for run in runs:
            f = row.get(run["server"])
            if f is None:
                cells += ["", "", ""]
            elif "error" in f:
                cells += [f"failed: {f['error'][:80]}", "", ""]
            else:
                cells += [_num(f["ours"], f["unit"]), _num(f["theirs"], f["unit"]), _ratio(f["ratio"])]
        note = f" ({row['note']})" if row.get("note") else ""
        lines.append(f"| {name}{note} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scale_table(scale: dict) -> str:
    """Per-commit CPU and open time by table size, and the job commits."""
    sizes = scale.get("files", [])
    lines = []
    if sizes:
        rows = [
            ("commit of one small append, CPU p50 (ms)", "commit_cpu_ms_p50"),
            ("the same, wall p50 (ms)", "commit_wall_ms_p50"),
            ("advance by one commit, CPU p50 (ms)", "advance_cpu_ms_p50"),
            ("commit after one lost race, CPU p50 (ms)", "lost_race_commit_cpu_ms_p50"),
            ("commit that writes the checkpoint, CPU (ms)", None),
            ("open: Table(uri) from checkpoint + tail, wall p50 (ms)", "open_wall_ms_p50"),
            ("add_actions() of the opened table, p50 (ms)", "add_actions_ms_p50"),
            ("write_table one-row append on a long-lived Table, wall p50 (ms)", "write_table_wall_ms_p50"),
        ]
        lines.append("| in-memory store | " + " | ".join(f"{s['files']:,} files" for s in sizes) + " | largest ÷ smallest |")
        lines.append("|---|" + "---|" * (len(sizes) + 1))
        for label, key in rows:
            values = [s["checkpoint_commit"].get("cpu_ms") if key is None else s.get(key) for s in sizes]
            spread = (values[-1] / values[0]) if values and values[0] and values[-1] is not None else None
            lines.append(f"| {label} | " + " | ".join(_num(v, "ms") for v in values) + f" | {_ratio(spread)} |")
    jobs = scale.get("jobcommit", [])
    if jobs:
        lines += ["", "| job commit, in-memory object store | total (ms) | completing uploads (ms) | log commit (ms) | CPU (ms) |",
                  "|---|---|---|---|---|"]
        for j in jobs:
            lines.append(f"| {j['files']:,} staged uploads from {j['tasks']} tasks | {_num(j['seconds'] * 1000, 'ms')} | "
                         f"{_num(j['complete_seconds'] * 1000, 'ms')} | {_num(j['commit_seconds'] * 1000, 'ms')} | "
                         f"{_num(j['cpu_seconds'] * 1000, 'ms')} |")
    return "\n".join(lines)


def render(results: list[dict], scale: dict | None) -> str:
    parts = []
    if results:
        env = results[0]["environment"]
        parts.append(f"Code: `{env.get('git', '?')}`; {env.get('cpus')} CPUs; Python {env.get('python')}; "
                     f"pyarrow {env.get('pyarrow')}; deltalake {env.get('deltalake')} (peer); "
                     + "; ".join(f"{r['label']}: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
                                 for r in results) + ".")
        loads = [x for r in results for m in r["measures"].values() for x in (m.get("load_average") or {}).values()]
        if loads:
            parts.append(f"1-minute load average of the machine during the measures: {min(loads):.1f} to "
                         f"{max(loads):.1f} ({env.get('cpus')} CPUs); every figure moves with it.")
        parts.append("")
        parts.append(side_by_side(results))
    if scale:
        parts += ["", scale_table(scale)]
    return "\n".join(parts) + "\n"


def main(paths: list[str]) -> None:
    loaded = [json.loads(Path(p).read_text()) for p in paths]
    print(render([r for r in loaded if "server" in r], next((r for r in loaded if "files" in r or "jobcommit" in r), None)))


if __name__ == "__main__":
    main(sys.argv[1:])
