"""Four writer processes append 25 commits each (``COMMITS``) through the fault proxy, at 10% and at 35% of requests
faulted (500, 503, throttling, dropped connections, lost responses, slow answers, evenly): then a fault-free
reader must find no acknowledged commit lost, none doubled, every error typed, ``CommitStateUnknownError``
only where the commit is then present once or absent, no definite failure that landed anyway, versions
contiguous, every DynamoDB entry finished, and the same table through ``deltalake``; and the next writer
must still commit. A fault-free run of the same harness shows the harness itself finds nothing to blame.
At 35% it also runs with ``DYNACOMMIT_COMMIT_ACK=durable``: two writers of 10 commits each; and with six writers
of six commits that must commit together (group commit, issue 23) at least once.

Each writer talks to its own listener of the proxy, so every injected fault is attributed to the commit
that was running on that writer when it happened; the figures per fault kind count the commits hit by at
least one fault of that kind (RELIABILITY.md). Run with ``-s`` to see them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import uuid
from collections import Counter

import pytest

from table import write_table
from tests.support.fault_harness import (
    CommitRecord,
    audit,
    child_env,
    judge,
    marker,
    marker_rows,
    parse_records,
    worker_command,
)
from tests.support.fault_proxy import KINDS, FaultEvent, mixed

pytestmark = pytest.mark.slow

WRITERS = 4
COMMITS = int(os.environ.get("DYNACOMMIT_FAULT_COMMITS", "25"))
"""Commits per writer at 10% and 35%: 25 in ``make test``; RELIABILITY.md's figures are of 50
(``DYNACOMMIT_FAULT_COMMITS=50``)."""
WRITER_TIMEOUT_SECONDS = 500  # below pytest's 600 s, so a stuck writer fails here with its output


@pytest.mark.parametrize("rate,commits,seed,ack,writer_count", [
    pytest.param(0.0, 10, 100, "published", WRITERS, id="fault-free"),
    pytest.param(0.10, COMMITS, 110, "published", WRITERS, id="10pct"),
    pytest.param(0.35, COMMITS, 135, "published", WRITERS, id="35pct"),
    # Acknowledged at the DynamoDB entry, N.json published in the background (DYNACOMMIT_COMMIT_ACK=durable):
    # the same judgement at the same fault rate; two writers of 10 commits keep make test's time down
    # (RELIABILITY.md's figures are of two writers of 25).
    pytest.param(0.35, 10, 235, "durable", 2, id="35pct-durable"),
    # Group commit (moto answers TransactWriteItems): six writers of six commits meet contention enough to
    # commit together; the same judgement holds (every writer told the version holding its rows), and the
    # run must have grouped (a version holding more than one writer's commit), else it proves nothing.
    pytest.param(0.35, 6, 335, "group", 6, id="35pct-group"),
])
def test_writers_under_injected_faults_lose_nothing_double_nothing_and_raise_only_typed_errors(
        local_stack, storage_options, make_fault_proxy, tmp_path, rate, commits, seed, ack, writer_count):
    grouped = ack == "group"
    ack = "published" if grouped else ack
    uri = f"s3://{local_stack.bucket}/faults/{uuid.uuid4().hex[:12]}"
    writers = [f"w{n}" for n in range(writer_count)]
    proxy = make_fault_proxy(seed=seed, labels=writers, slow_seconds=0.1)
    write_table(uri, marker_rows("init", 0), storage_options=storage_options)  # created fault-free
    proxy.set_faults(mixed(rate))

    writer_options = dict(storage_options, DYNACOMMIT_COMMIT_ACK=ack)
    records, exits = run_writers(proxy, writer_options, uri, writers, commits, tmp_path)
    proxy.clear_faults()
    events = proxy.events()
    stats = proxy.stats()

    found = audit(uri, storage_options)
    verdict = judge(records, found, expected_elsewhere=[marker("init", 0)])
    per_kind = figures_per_kind(records, events, found.marker_versions())
    latencies = [r.end - r.begin for r in records if r.ok]
    report = {"rate": rate, "ack": ack, "writers": writer_count, "commits_each": commits, "seed": seed,
              "requests": stats.total_requests, "faults": dict(stats.faults), **verdict.summary(),
              "latest_version": found.latest,
              "max_commit_seconds": round(max(latencies), 2) if latencies else None,
              "mean_commit_seconds": round(sum(latencies) / len(latencies), 2) if latencies else None,
              "writers_seconds": round(max((r.end for r in records if r.end), default=0)
                                       - min((r.begin for r in records), default=0), 1),
              "per_kind": per_kind, "error_samples": error_samples(records)}
    print(f"\nFAULT-SUITE {json.dumps(report)}")

    problems = [f"writer {w} exited with {code}: {tail(tmp_path, w)}" for w, code in exits.items() if code != 0]
    problems += [f"writer {r.writer} never finished commit {r.marker}" for r in records if r.ok is None]
    problems += verdict.failures
    problems += found.problems()
    if rate:
        problems += [] if stats.total_faults else ["the proxy injected no fault: the run proves nothing"]
    if grouped:
        together = {v: m for v, m in found.version_markers.items() if len(m) > 1}
        report["grouped_versions"] = len(together)
        problems += [] if together else ["no version holds more than one commit: nothing was grouped"]
    else:
        problems += [f"{n} commits failed without any fault: {dict(verdict.errors_by_type)}"
                     for n in [verdict.attempted - verdict.acknowledged] if n]
    try:
        after = write_table(uri, marker_rows("after", 0), storage_options=storage_options)
        if after.version != found.latest + 1:
            problems.append(f"the next writer landed at {after.version}, expected {found.latest + 1}")
    except Exception as exc:  # noqa: BLE001 - reported with the rest
        problems.append(f"the next writer, without faults, failed: {type(exc).__name__}: {exc}")
    assert not problems, "\n".join(problems) + f"\n{json.dumps(report, indent=1)}"
    assert verdict.attempted == writer_count * commits


def error_samples(records: list[CommitRecord], per_type: int = 3) -> dict[str, list[str]]:
    """What writers were told, a few messages of each error type, for the report."""
    samples: dict[str, list[str]] = {}
    for record in records:
        if record.error is not None and len(samples.setdefault(record.error_type, [])) < per_type:
            samples[record.error_type].append(record.error["message"][:240])
    return samples


def run_writers(proxy, storage_options, uri, writers, commits, tmp_path) -> tuple[list[CommitRecord], dict[str, int]]:
    """Start one writer process per label, each through its own listener; wait for all of them."""
    processes = {}
    for number, writer in enumerate(writers):
        # Half the writers keep their Table across commits (a long-lived job), half open it by URI each
        # time (a script): both the writer's and the loader's requests meet the faults.
        settings = {"uri": uri, "options": proxy.storage_options(storage_options, writer), "writer": writer,
                    "commits": commits, "reuse_table": number % 2 == 0}
        out = open(tmp_path / f"{writer}.out", "w")
        err = open(tmp_path / f"{writer}.err", "w")
        processes[writer] = (subprocess.Popen(worker_command("writer", settings), stdout=out, stderr=err,
                                              env=child_env(), start_new_session=True), out, err)
    exits = {}
    try:
        for writer, (process, out, err) in processes.items():
            try:
                exits[writer] = process.wait(timeout=WRITER_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                exits[writer] = process.wait()
    finally:
        for writer, (process, out, err) in processes.items():
            if process.poll() is None:
                process.kill()
                process.wait()
            out.close()
            err.close()
    records = []
    for writer in writers:
        found, _ = parse_records((tmp_path / f"{writer}.out").read_text())
        records += found
    return records, exits


def tail(tmp_path, writer: str, lines: int = 15) -> str:
    return "\n".join((tmp_path / f"{writer}.err").read_text().splitlines()[-lines:])


def figures_per_kind(records: list[CommitRecord], events: list[FaultEvent],
                     versions: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Per fault kind, the commits hit by at least one fault of it (``none``: by no fault at all):
    attempted, acknowledged, landed, lost, duplicated, failed (told an error)."""
    by_writer: dict[str, list[FaultEvent]] = {}
    for event in events:
        by_writer.setdefault(event.label, []).append(event)
    figures = {kind: Counter() for kind in (*KINDS, "none")}
    for record in records:
        end = record.end if record.end is not None else math.inf
        kinds = {e.kind for e in by_writer.get(record.writer, []) if record.begin <= e.at <= end} or {"none"}
        where = versions.get(record.marker, [])
        for kind in kinds:
            counts = figures[kind]
            counts["attempted"] += 1
            counts["acknowledged"] += bool(record.ok)
            counts["landed"] += bool(where)
            counts["lost"] += bool(record.ok) and where != [record.version]
            counts["duplicated"] += len(where) > 1
            counts["failed"] += record.ok is False
    return {kind: dict(counts) for kind, counts in figures.items() if counts}
