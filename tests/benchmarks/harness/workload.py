"""What both workers write and how they time it: the same data and the same loop on either side.

pyarrow and the standard library only (the peer worker imports this). Data is deterministic: both
sides write the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

SMALL_SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("payload", pa.string())])

BULK_SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("k", pa.int32()),
    ("x", pa.float64()),
    ("s", pa.string()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("flag", pa.bool_()),
    ("day", pa.date32()),
])
"""Mixed types, about 45 bytes a row as Arrow."""

SMALL_FILE_SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string())])


DML_FILES = 10
"""Appends that build a row-level benchmark table: each spans ``rows / DML_FILES`` ids, so about
``rows / 10,000 / DML_FILES`` days; the table holds one file per day (its partition)."""


def dml_steps(rows: int) -> list[dict]:
    """The row-level changes the benchmark times, in order, on a table of ``bulk_table(rows)`` partitioned
    by ``day`` (10,000 ids a day): the same SQL for both sides (DataFusion's dialect on both)."""
    middle, quarter = rows // 2, rows // 4
    return [
        {"name": "delete 100 rows of one file", "op": "delete", "predicate": f"id >= {middle} AND id < {middle + 100}"},
        {"name": "update 100 rows of one file", "op": "update", "updates": {"x": "x * 2"},
         "predicate": f"id >= {quarter} AND id < {quarter + 100}"},
        {"name": "merge 10,000 source rows (5,000 updates, 5,000 inserts)", "op": "merge",
         "predicate": "target.id = source.id", "first_id": rows * 3 // 5, "source_rows": 10_000, "overlap": 5000},
        {"name": "delete 0.1% of rows from every file", "op": "delete", "predicate": "k = 7"},
        {"name": "delete the first tenth of the days (whole partitions)", "op": "delete",
         "predicate": f"day < '{_day(rows // 10)}'"},
    ]


DV_DELETE_READ = "k < 100"
"""What the deletion-vector read benchmark deletes before reading: 10% of the rows, spread over every file."""

DV_DELETE_WRITE = "k >= 500 AND k < 510"
"""The deletion-vector write benchmark's DELETE: 1% of the rows, spread over every file (the case where
copy-on-write rewrites the whole table and a deletion vector writes a few bytes a file)."""


def _day(row: int) -> str:
    import datetime as dt

    return (dt.date(1970, 1, 1) + dt.timedelta(days=19_000 + row // 10_000)).isoformat()


def merge_source(step: dict, rows: int) -> pa.Table:
    """The MERGE source of a ``dml_steps`` step: ``overlap`` ids from ``first_id`` (present in the table,
    new ``x``), then ids past the table's last (new rows)."""
    fresh = step["source_rows"] - step["overlap"]
    ids = list(range(step["first_id"], step["first_id"] + step["overlap"])) + list(range(rows, rows + fresh))
    source = bulk_table(rows + fresh).take(pa.array(ids))
    return source.set_column(2, "x", pc.negate(source.column("x")))


def small_append(writer: str, seq: int) -> pa.Table:
    """The one row of one append."""
    return pa.table({"writer": [writer], "seq": [seq], "payload": [f"{writer}-{seq:06d}"]}, schema=SMALL_SCHEMA)


def bulk_table(rows: int, *, seed: int = 7) -> pa.Table:
    """``rows`` rows of :data:`BULK_SCHEMA`, the same for the same ``rows`` and ``seed``."""
    ids = pa.array(range(rows), pa.int64())
    k = pc.subtract(ids, pc.multiply(pc.divide(ids, 1000), 1000))
    x = pc.random(rows, initializer=seed)
    s = pc.cast(pc.multiply(ids, 2654435761), pa.string())
    ts = pc.cast(pc.add(pc.multiply(ids, 1_000_000), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC"))
    day = pc.cast(pc.cast(pc.add(pc.divide(ids, 10_000), 19_000), pa.int32()), pa.date32())
    return pa.table([ids, pc.cast(k, pa.int32()), x, s, ts, pc.less(x, 0.5), day], schema=BULK_SCHEMA)


def small_file(index: int, rows: int = 100) -> pa.Table:
    """The rows of small file number ``index`` (ids ``index * rows ...``)."""
    ids = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
    return pa.table([ids, pc.divide(pc.cast(ids, pa.float64()), 7.0), pc.cast(ids, pa.string())],
                    schema=SMALL_FILE_SCHEMA)


@dataclass
class Appends:
    """What an append loop saw: per append its latency and its wall-clock span (epoch seconds, to match
    the counting proxy's records), and the appends that raised."""

    latencies_ms: list[float] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    def as_dict(self) -> dict:
        return {"latencies_ms": self.latencies_ms, "spans": self.spans, "failures": self.failures,
                "started": self.started, "ended": self.ended, "committed": len(self.latencies_ms)}


def sleep_until(epoch: float | None) -> None:
    """Wait for a start time the driver gave several workers, so they begin together."""
    if epoch is not None:
        delay = epoch - time.time()
        if delay > 0:
            time.sleep(delay)


def run_appends(append: Callable[[int], None], *, count: int, first_seq: int = 0,
                start_at: float | None = None) -> Appends:
    """Call ``append(seq)`` ``count`` times, timing each; an exception is recorded, not raised (a
    starved writer is a result, not a crash)."""
    out = Appends()
    sleep_until(start_at)
    out.started = time.time()
    for seq in range(first_seq, first_seq + count):
        began, t0 = time.time(), time.perf_counter()
        try:
            append(seq)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            out.failures.append({"seq": seq, "error": f"{type(exc).__name__}: {exc}"[:500],
                                 "ms": (time.perf_counter() - t0) * 1000})
            continue
        out.latencies_ms.append((time.perf_counter() - t0) * 1000)
        out.spans.append((began, time.time()))
    out.ended = time.time()
    return out


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """``(milliseconds, result)`` of one call."""
    t0 = time.perf_counter()
    result = fn()
    return (time.perf_counter() - t0) * 1000, result
