"""Writers of three kinds race on one table: dynacommit (through DynamoDB), deltalake 1.6.6 (an S3
conditional PUT of ``N.json``, no DynamoDB item: every deltalake from 1.6.1 on) and deltalake 1.6.0 (the
DynamoDB log store, in the peer interpreter). Every acknowledged commit must be in the table exactly once,
whoever wrote it; our writers may lose a version to a writer that skipped DynamoDB, and then commit at the
next one (never reporting success for a version that holds another writer's commit); every DynamoDB entry
ends complete with its ``N.json``; deltalake reads what we read. Our writers go through the fault proxy in
the second run (10% of their requests faulted); deltalake's go straight to the server: what deltalake does
with a lost answer to its own requests is deltalake's behaviour, not the table protocol's. A third run has four
of our writers, which commit together (group commit) beside both kinds of deltalake writers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from logstore import open_log_store
from table import write_table
from tests.support.fault_harness import (
    ROOT,
    CommitRecord,
    audit,
    child_env,
    judge,
    marker,
    marker_rows,
    parse_records,
    worker_command,
)
from tests.support.fault_proxy import mixed

pytestmark = pytest.mark.slow

DELTALAKE_WRITER = os.path.join(ROOT, "tests", "support", "deltalake_writer.py")
TIMEOUT_SECONDS = 500


def _peer_python() -> str:
    path = os.environ.get("DYNACOMMIT_PEER_PYTHON")
    if not path:
        pytest.fail("DYNACOMMIT_PEER_PYTHON is not set: run `make peer` (make test does), which builds the "
                    "deltalake 1.6.0 interpreter this race needs", pytrace=False)
    return path


@pytest.mark.parametrize("rate, commits, seed, our_count", [
    pytest.param(0.0, 12, 300, 2, id="fault-free"),
    pytest.param(0.10, 12, 310, 2, id="ours-10pct"),
    # Four of ours meet contention enough to commit together (group commit: moto answers transactions)
    # beside both kinds of deltalake writers; at least one version must hold more than one of our commits.
    pytest.param(0.0, 8, 320, 4, id="group-commit"),
])
def test_dynacommit_and_deltalake_with_and_without_dynamodb_lose_and_double_nothing(
        local_stack, storage_options, make_fault_proxy, tmp_path, rate, commits, seed, our_count):
    uri = f"s3://{local_stack.bucket}/mixed/{uuid.uuid4().hex[:12]}"
    ours = [f"d{n}" for n in range(our_count)]
    proxy = make_fault_proxy(seed=seed, labels=ours, slow_seconds=0.1)
    write_table(uri, marker_rows("init", 0), storage_options=storage_options)
    proxy.set_faults(mixed(rate))
    plain = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    dynamo = {**storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
              "AWS_ENDPOINT_URL_DYNAMODB": storage_options["AWS_ENDPOINT_URL"]}
    commands = {w: worker_command("writer", {"uri": uri, "options": proxy.storage_options(storage_options, w),
                                             "writer": w, "commits": commits, "reuse_table": w == "d0"})
                for w in ours}
    commands["c0"] = [sys.executable, DELTALAKE_WRITER, json.dumps({"uri": uri, "options": plain, "writer": "c0",
                                                                     "commits": commits})]
    commands["c1"] = [sys.executable, DELTALAKE_WRITER, json.dumps({"uri": uri, "options": plain, "writer": "c1",
                                                                     "commits": commits})]
    commands["r0"] = [_peer_python(), DELTALAKE_WRITER, json.dumps({"uri": uri, "options": dynamo, "writer": "r0",
                                                                     "commits": commits})]
    records, exits = _run(commands, tmp_path)
    proxy.clear_faults()

    # deltalake 1.6.0 leaves the entry of a version it lost to a conditional-PUT writer incomplete (its
    # copy-if-absent fails); only the newest entry and the one before each of our commits are finished by the
    # writers, so the rest is `dynacommit recover`'s, as on any table delta-rs 1.6.0 writes.
    store = open_log_store(uri, storage_options=storage_options)
    recovered = Counter(store.recover(v).value for v in range(store.latest_version() + 1))
    found = audit(uri, storage_options)
    versions = found.marker_versions()
    verdict = judge([r for r in records if r.writer in ours], found,
                    expected_elsewhere=[marker("init", 0), *(r.marker for r in records if r.writer not in ours)])
    theirs = [r for r in records if r.writer not in ours]
    report = {"rate": rate, "commits_each": commits, **verdict.summary(), "latest_version": found.latest,
              "deltalake_acknowledged": sum(1 for r in theirs if r.ok),
              "deltalake_failed": sorted({r.error_type for r in theirs if r.ok is False}),
              "recovered": dict(recovered),
              "ours_lost_to_bypass": sum(1 for r in records if r.writer in ours and r.ok is False
                                         and "other bytes" in r.error["message"])}
    print(f"\nMIXED-WRITERS {json.dumps(report)}")

    problems = [f"writer {w} exited with {code}: {_tail(tmp_path, w)}" for w, code in exits.items() if code]
    problems += [f"writer {r.writer} never finished commit {r.marker}" for r in records if r.ok is None]
    problems += verdict.failures
    problems += found.problems()
    problems += [f"deltalake acknowledged {r.marker} ({r.writer}), not in the table" for r in theirs
                 if r.ok and not versions.get(r.marker)]
    if not rate:
        problems += [f"{r.marker}: {r.error_type}: {r.error['message'][:200]}" for r in records
                     if r.writer in ours and r.ok is False]
    if our_count > 2:
        together = [v for v, m in found.version_markers.items() if sum(1 for n in m if n.split("-")[0] in ours) > 1]
        report["grouped_versions"] = len(together)
        problems += [] if together else ["no version holds more than one of our commits: nothing was grouped"]
    assert not problems, "\n".join(problems) + f"\n{json.dumps(report, indent=1)}"
    assert sum(1 for r in theirs if r.ok) > 0 and verdict.acknowledged > 0  # both kinds committed


def _run(commands: dict[str, list[str]], tmp_path: Path) -> tuple[list[CommitRecord], dict[str, int]]:
    processes = {}
    for writer, command in commands.items():
        out, err = open(tmp_path / f"{writer}.out", "w"), open(tmp_path / f"{writer}.err", "w")
        env = child_env({"RUST_LOG": "error"})
        processes[writer] = (subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True),
                             out, err)
    exits = {}
    try:
        for writer, (process, _, _) in processes.items():
            try:
                exits[writer] = process.wait(timeout=TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                exits[writer] = process.wait()
    finally:
        for process, out, err in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            out.close()
            err.close()
    records = []
    for writer in commands:
        records += parse_records((tmp_path / f"{writer}.out").read_text())[0]
    return records, exits


def _tail(tmp_path: Path, writer: str, lines: int = 15) -> str:
    return "\n".join((tmp_path / f"{writer}.err").read_text().splitlines()[-lines:])
