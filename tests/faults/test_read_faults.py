"""Reads survive transient faults and never cry corruption for a network error (issue 18, item 6).

A table of small files (fetched whole) and of files above the whole-file size (read by pyarrow) is read
again and again through the fault proxy, each read by a process that has never seen the table (its
snapshot load meets the faults too). Every read that returns must hold exactly the rows written, once
each; at 10% of requests faulted every read must succeed, at 35% at least 95% of them, and no read may
report a data file corrupt or missing: every file is intact and in place, read straight from the stack
at the end. Run with ``-s`` to see the figures (``READ-FAULTS {...}``).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pyarrow as pa
import pytest

from table import Table, write_table
from table.data import fetching
from table.table import forget_snapshots
from tests.support.fault_harness import describe_error, marker_counts, marker_rows
from tests.support.fault_proxy import mixed

pytestmark = pytest.mark.slow

SMALL_COMMITS = 24
BIG_COMMITS = 2
BIG_ROWS = 3000


def big_rows(writer: str, seq: int) -> pa.Table:
    rows = marker_rows(writer, seq)
    repeat = BIG_ROWS // rows.num_rows
    return pa.concat_tables([rows] * repeat)


@pytest.fixture(scope="module")
def written(local_stack):
    """The table, written fault-free: 24 one-file commits of 3 rows, and 2 of 3,000 rows."""
    uri = f"s3://{local_stack.bucket}/read-faults/{uuid.uuid4().hex[:12]}"
    options = local_stack.storage_options()
    expected: Counter = Counter()
    for seq in range(SMALL_COMMITS):
        write_table(uri, marker_rows("small", seq), storage_options=options)
        expected.update(marker_counts(marker_rows("small", seq)))
    for seq in range(BIG_COMMITS):
        write_table(uri, big_rows("big", seq), storage_options=options)
        expected.update(marker_counts(big_rows("big", seq)))
    return uri, expected


@pytest.mark.parametrize("rate,reads,seed,least", [
    pytest.param(0.10, 12, 210, 1.0, id="10pct"),
    pytest.param(0.35, 12, 235, 0.95, id="35pct"),
])
def test_reads_through_transient_faults_succeed_and_never_report_corruption(written, storage_options,
                                                                          make_fault_proxy, monkeypatch, rate,
                                                                          reads, seed, least):
    uri, expected = written
    sizes = sorted(a.size for a in Table(uri, storage_options=storage_options).add_actions())
    monkeypatch.setattr(fetching, "WHOLE_FILE", sizes[-BIG_COMMITS - 1])  # the 3,000-row files go to pyarrow
    proxy = make_fault_proxy(seed=seed)
    options = proxy.storage_options(storage_options)
    proxy.set_faults(mixed(rate))
    outcomes: Counter = Counter()
    wrong, samples = [], {}
    for _ in range(reads):
        forget_snapshots()  # as a new process would: the load meets the faults too
        try:
            rows = Table(uri, storage_options=options).to_pyarrow_table(columns=["marker"])
        except Exception as exc:  # noqa: BLE001 - every error is judged below
            error = describe_error(exc)
            outcomes[error["type"] if error["dynacommit"] else f"untyped {error['type']}"] += 1
            samples.setdefault(error["type"], error["message"][:300])
            continue
        outcomes["ok"] += 1
        if marker_counts(rows) != expected:
            wrong.append(dict(marker_counts(rows) - expected) or dict(expected - marker_counts(rows)))
    proxy.clear_faults()
    stats = proxy.stats()
    print("\nREAD-FAULTS " + json.dumps({"rate": rate, "reads": reads, "seed": seed, "outcomes": dict(outcomes),
                                         "requests": stats.total_requests, "faults": dict(stats.faults),
                                         "samples": samples}))
    assert stats.total_faults > 0
    assert not wrong, f"reads returned other rows than written: {wrong[:3]}"
    assert not any(k.startswith("untyped") for k in outcomes), outcomes
    assert outcomes["CorruptDataError"] == 0 and outcomes["DataFileMissingError"] == 0, samples
    assert outcomes["ok"] >= least * reads, (outcomes, samples)
    intact = Table(uri, storage_options=storage_options).to_pyarrow_table(columns=["marker"])
    assert marker_counts(intact) == expected
