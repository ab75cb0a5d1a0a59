"""Which SQL engine evaluates row-level changes: DataFusion against DuckDB, on the three kinds of work the
operations give it (``table/engine.py``), over the same Arrow tables in memory.

    .venv/bin/python -m tests.benchmarks.sql_engines [--rows 2000000] [--source 200000] [--runs 3]

Each engine runs in a process of its own (so its import is timed alone); per kind of work, the best of
``--runs``. The work:

- *filter*: the row numbers a DELETE predicate selects (``v > 0.5 AND s LIKE 'a%'``);
- *update*: an UPDATE's projection, every row with its new value (``CASE WHEN <predicate> THEN v * 2 ...``);
- *merge join*: a MERGE's full outer join of the target with a source of ``--source`` rows, classifying each
  row and computing its values.

Prints one JSON line per engine. BENCHMARKS.md records a run and why DataFusion was chosen.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

PREDICATE = "v > 0.5 AND s LIKE 'a%'"
QUERIES = {
    "filter": f"SELECT __row FROM t WHERE {PREDICATE}",
    "update": f"SELECT id, CASE WHEN {PREDICATE} THEN v * 2 ELSE v END AS v, s FROM t",
    "merge join": ("SELECT t.__row, s.id AS sid, CASE WHEN t.__row IS NULL THEN 'insert' WHEN s.id IS NULL THEN "
                   "'copy' ELSE 'update' END AS action, coalesce(s.id, t.id) AS id, CASE WHEN s.id IS NOT NULL THEN "
                   "s.v ELSE t.v END AS v, t.s FROM t FULL OUTER JOIN s ON t.id = s.id"),
}


def measure(engine: str, rows: int, source_rows: int, runs: int) -> dict:
    started = time.perf_counter()
    if engine == "duckdb":
        import duckdb
    else:
        import datafusion
    imported = time.perf_counter() - started
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    target = pa.table({"id": np.arange(rows, dtype="int64"), "v": rng.random(rows),
                       "s": pa.array(rng.choice(["apple", "banana", "cherry", "avocado"], rows)),
                       "__row": np.arange(rows, dtype="int64")})
    source = pa.table({"id": rng.choice(rows * 11 // 10, source_rows, replace=False).astype("int64"),
                       "v": rng.random(source_rows)})
    if engine == "duckdb":
        con = duckdb.connect()
        con.register("t", target)
        con.register("s", source)

        def run(sql: str) -> int:
            return con.sql(sql).to_arrow_table().num_rows
    else:
        ctx = datafusion.SessionContext()
        ctx.register_record_batches("t", [target.to_batches()])
        ctx.register_record_batches("s", [source.to_batches()])

        def run(sql: str) -> int:
            return sum(b.num_rows for b in ctx.sql(sql).collect())

    best: dict[str, float] = {}
    counts: dict[str, int] = {}
    for _ in range(runs):
        for name, sql in QUERIES.items():
            t0 = time.perf_counter()
            counts[name] = run(sql)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    version = duckdb.__version__ if engine == "duckdb" else datafusion.__version__
    return {"engine": engine, "version": version, "rows": rows, "source_rows": source_rows,
            "import_s": round(imported, 3), **{f"{k}_s": round(v, 3) for k, v in best.items()},
            "result_rows": counts, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--source", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", choices=("duckdb", "datafusion"))
    args = parser.parse_args()
    if args.engine:
        print(json.dumps(measure(args.engine, args.rows, args.source, args.runs)), flush=True)
        return
    for engine in ("datafusion", "duckdb", "datafusion", "duckdb"):
        subprocess.run([sys.executable, "-m", "tests.benchmarks.sql_engines", "--engine", engine, "--rows",
                        str(args.rows), "--source", str(args.source), "--runs", str(args.runs)], check=True)


if __name__ == "__main__":
    main()
