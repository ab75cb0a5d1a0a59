"""The soak in CI, in its short form (1 minute): 8 writers and 2 readers through the fault proxy at 2% of
requests faulted, random ``kill -9``s of writers (``tests/faults/soak.py``). What must hold: nothing
lost, nothing duplicated, no untyped error, no error told to a reader, no DynamoDB item but the newest
left incomplete, stuck or without ``expireTime`` by the writers, and after the audit every item finished.
The long form (``make soak``) keeps the same invariants; its figures are in RELIABILITY.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.fault_harness import ROOT, child_env

pytestmark = pytest.mark.slow

MINUTES = 1


def test_the_short_soak_keeps_every_invariant(tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "faults", "soak.py"), "--minutes", str(MINUTES),
                           "--json-out", str(out)], env=child_env(), capture_output=True, text=True, timeout=540,
                          cwd=tmp_path)
    assert out.exists(), done.stderr[-3000:]
    totals = json.loads(out.read_text())
    print("\nSOAK " + json.dumps({k: v for k, v in totals.items() if k != "error_samples"}))
    assert totals["failures"] == [], totals["failures"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert totals["commits_acknowledged"] > 0 and totals["reads"] > 0 and totals["kills"] > 0
    assert totals["lost"] == totals["duplicated"] == totals["untyped_errors"] == 0
    assert totals["reader_errors_by_class"] == {} and totals["items_unfinished_before_the_audit"] == 0
