"""Summaries: percentiles, ratios, and what the counting proxy's records say about one operation
(requests by service, and sequential round trips: the longest chain of requests each of which started
only after the previous one had finished)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence

Record = Sequence  # [start, end, service, op, status, log] as the proxy records it


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0 or math.isnan(ours) or math.isnan(theirs):
        return None
    return ours / theirs


def op_name(record: Record) -> str:
    """``service:op``, with ``(404)`` for a HEAD or GET of a missing key (a different cost upstream)."""
    name = f"{record[2]}:{record[3]}"
    return name + "(404)" if record[3] in ("HEAD", "GET") and record[4] == 404 else name


def within(records: Sequence[Record], span: Sequence[float]) -> list[Record]:
    """The records of requests made during ``span`` (epoch seconds, one clock): the proxy stamps a request
    after the client sent it and before the client has its answer, so no margin is needed, and none may
    be taken (the next operation's first request follows within a millisecond)."""
    return [r for r in records if span[0] <= r[0] <= span[1]]


def critical_path(records: Sequence[Record]) -> list[Record]:
    """The longest chain of requests in which each starts after the previous one ended: the sequential
    round trips; requests running side by side count once."""
    ordered = sorted(records, key=lambda r: r[0])
    best: list[list[Record]] = []
    for i, r in enumerate(ordered):
        chain = max((best[j] for j in range(i) if ordered[j][1] <= r[0]), key=len, default=[])
        best.append([*chain, r])
    return max(best, key=len, default=[])


def per_operation(records: Sequence[Record], spans: Sequence[Sequence[float]]) -> list[dict]:
    """For each span (one append, one write): its requests by service and its sequential round trips,
    in all and counting only the log's requests (``_delta_log/`` keys and DynamoDB)."""
    out = []
    for span in spans:
        mine = within(records, span)
        path = critical_path(mine)
        out.append({
            "s3": sum(1 for r in mine if r[2] == "s3"),
            "dynamodb": sum(1 for r in mine if r[2] == "dynamodb"),
            "ops": dict(Counter(op_name(r) for r in mine)),
            "round_trips": len(path),
            "path": [op_name(r) for r in path],
            "log_round_trips": len(critical_path([r for r in mine if r[5]])),
        })
    return out


def summarize_requests(items: Sequence[dict]) -> dict:
    """Mean and median requests per operation, by service, and the round trips."""
    if not items:
        return {}
    ops: Counter = Counter()
    for item in items:
        ops.update(item["ops"])
    paths = Counter(tuple(item["path"]) for item in items)
    return {
        "n": len(items),
        "s3_mean": statistics.fmean(i["s3"] for i in items),
        "s3_median": p50([i["s3"] for i in items]),
        "dynamodb_mean": statistics.fmean(i["dynamodb"] for i in items),
        "dynamodb_median": p50([i["dynamodb"] for i in items]),
        "round_trips_median": p50([i["round_trips"] for i in items]),
        "log_round_trips_median": p50([i["log_round_trips"] for i in items]),
        "ops_per_operation": {k: v / len(items) for k, v in sorted(ops.items())},
        "typical_path": list(paths.most_common(1)[0][0]),
    }


def floor_ms(path: Sequence[str], singles_p50: dict[str, float]) -> tuple[float, list[str]]:
    """The sum of the single-request p50 latencies along ``path``; operations without a single-request
    timing count as the closest measured one (``HEAD(404)`` as ``HEAD``) and are listed as estimated."""
    total, estimated = 0.0, []
    for op in path:
        if op in singles_p50:
            total += singles_p50[op]
            continue
        base = op.replace("(404)", "")
        if base in singles_p50:
            total += singles_p50[base]
        else:
            same_service = [v for k, v in singles_p50.items() if k.split(":")[0] == op.split(":")[0]]
            total += p50(same_service)
        estimated.append(op)
    return total, estimated
