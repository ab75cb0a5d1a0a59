"""Row-level changes from several processes at once on one S3 table (moto), fault-free and through the fault
proxy: the final table is what some serial order of the operations that reported success leaves (computed
by DuckDB over the same inputs), and under faults no acknowledged change is lost or applied twice.

Each process is a ``tests/support/dml_worker.py`` running its operations; all start at the same moment.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import uuid

import pyarrow as pa
import pytest

from table import Table, write_table
from tests.support.dml_reference import ClauseSpec, MergeSpec, duckdb_delete, duckdb_merge, duckdb_update, rows_of
from tests.support.fault_harness import ROOT, child_env, log_problems
from tests.support.fault_proxy import mixed

pytestmark = pytest.mark.slow

WORKER = f"{ROOT}/tests/support/dml_worker.py"
SCHEMA = [("id", "int64"), ("p", "string"), ("v", "float64"), ("tags", "string")]
ARROW = pa.schema([(n, getattr(pa, t)()) for n, t in SCHEMA])


def rows(ids, p, v=0.0, tags=""):
    return [{"id": i, "p": p, "v": v + i, "tags": tags} for i in ids]


def seed(uri, options, configuration=None) -> pa.Table:
    first, second = rows(range(0, 6), "a"), rows(range(10, 14), "b")
    write_table(uri, pa.Table.from_pylist(first, schema=ARROW), partition_by=["p"], configuration=configuration,
                storage_options=options)
    write_table(uri, pa.Table.from_pylist(second, schema=ARROW), storage_options=options)
    return pa.Table.from_pylist(first + second, schema=ARROW)


def race(uri: str, options_per_process: list[dict[str, str]], ops_per_process: list[list[dict]],
         timeout: float = 240) -> list[list[dict]]:
    """Run one worker per list of ops, all starting together; what each was told about each op."""
    start_at = time.time() + 4.0  # the workers' imports take about a second
    processes = [subprocess.Popen([sys.executable, WORKER, json.dumps(
        {"uri": uri, "options": options, "schema": SCHEMA, "start_at": start_at, "ops": ops})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True)
        for options, ops in zip(options_per_process, ops_per_process)]
    reports = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err[-3000:]
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert lines and lines[-1] == {"done": True}, err[-3000:]
        reports.append(lines[:-1])
    return reports


def apply(rows_before: pa.Table, op: dict) -> pa.Table:
    """One operation on the rows, as DuckDB computes it."""
    kind = op["kind"]
    if kind == "append":
        return pa.concat_tables([rows_before, pa.Table.from_pylist(op["rows"], schema=ARROW)])
    if kind == "delete":
        return duckdb_delete(rows_before, op.get("predicate"))
    if kind == "update":
        return duckdb_update(rows_before, op["updates"], op.get("predicate"))
    if kind == "merge":
        clauses = []
        if op.get("updates"):
            clauses.append(ClauseSpec("matched", "update", None, tuple(op["updates"].items())))
        if op.get("update_all"):
            clauses.append(ClauseSpec("matched", "update"))
        if op.get("insert_all"):
            clauses.append(ClauseSpec("not_matched", "insert"))
        return duckdb_merge(rows_before, pa.Table.from_pylist(op["rows"], schema=ARROW),
                            MergeSpec(op["predicate"], tuple(clauses)))
    return rows_before  # optimize changes no row


def assert_some_serial_order(uri, options, initial: pa.Table, ops: list[dict], reports: list[list[dict]]) -> None:
    flat_ops = [op for process in ops for op in process]
    outcomes = [r for process in reports for r in process]
    assert all(r["ok"] for r in outcomes), [r["error"] for r in outcomes if not r["ok"]]
    final = rows_of(Table(uri, storage_options=options).to_pyarrow_table().select(ARROW.names).cast(ARROW))
    orders = []
    for order in itertools.permutations(range(len(flat_ops))):
        state = initial
        for index in order:
            state = apply(state, flat_ops[index])
        if rows_of(state) == final:
            return
        orders.append(order)
    pytest.fail(f"the final table matches none of the {len(orders)} serial orders of {flat_ops}:\n{final}")


@pytest.mark.parametrize("isolation", ["WriteSerializable", "Serializable"])
def test_deletes_and_appends_racing_on_the_same_and_other_partitions(s3_uri, storage_options, isolation):
    initial = seed(s3_uri, storage_options, {"delta.isolationLevel": isolation})
    ops = [[{"kind": "delete", "predicate": "p = 'a' AND id < 50"}],
           [{"kind": "append", "rows": rows([20, 21], "a")}],
           [{"kind": "append", "rows": rows([30], "b")}],
           [{"kind": "delete", "predicate": "v >= 12"}]]
    reports = race(s3_uri, [storage_options] * len(ops), ops)
    assert_some_serial_order(s3_uri, storage_options, initial, ops, reports)


def test_two_merges_on_one_partition_and_a_compaction(s3_uri, storage_options):
    initial = seed(s3_uri, storage_options)
    write_table(s3_uri, pa.Table.from_pylist(rows([6, 7], "a"), schema=ARROW), storage_options=storage_options)
    initial = pa.concat_tables([initial, pa.Table.from_pylist(rows([6, 7], "a"), schema=ARROW)])
    ops = [[{"kind": "merge", "predicate": "target.id = source.id", "rows": rows([1, 2, 100], "a", v=1000.0),
             "update_all": True, "insert_all": True}],
           [{"kind": "merge", "predicate": "target.id = source.id", "rows": rows([2, 3, 100], "a", v=2000.0),
             "updates": {"v": "target.v + source.v"}, "insert_all": True}],
           [{"kind": "optimize", "target_size": 5 * 1024 * 1024}]]
    reports = race(s3_uri, [storage_options] * len(ops), ops)
    assert_some_serial_order(s3_uri, storage_options, initial, ops, reports)
    assert [r["id"] for r in Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist()
            ].count(100) == 1  # the key both merges insert is there once


def test_concurrent_read_modify_write_updates_lose_none(s3_uri, storage_options):
    seed(s3_uri, storage_options)
    bump = {"kind": "update", "updates": {"v": "v + 1"}, "predicate": "id = 1"}
    reports = race(s3_uri, [storage_options] * 4, [[bump] * 3] * 4)
    acknowledged = sum(r["ok"] for process in reports for r in process)
    assert acknowledged == 12, [r for process in reports for r in process if not r["ok"]]
    (row,) = [r for r in Table(s3_uri, storage_options=storage_options).to_pyarrow_table().to_pylist()
              if r["id"] == 1]
    assert row["v"] == 1.0 + acknowledged


def test_updates_through_the_fault_proxy_are_applied_once_each_or_not_at_all(
        local_stack, storage_options, make_fault_proxy):
    """Each update appends its own token to one row's ``tags``; appends add marker rows. At 10% of requests
    faulted: an acknowledged token is in ``tags`` exactly once, a failed one (a definite error) never, an
    uncertain one (CommitStateUnknownError) at most once; so are the appended rows."""
    uri = f"s3://{local_stack.bucket}/dml-faults/{uuid.uuid4().hex[:12]}"
    writers = [f"w{n}" for n in range(3)]
    proxy = make_fault_proxy(seed=316, labels=writers, slow_seconds=0.05)
    seed(uri, storage_options)
    proxy.set_faults(mixed(0.10))
    ops = [[{"kind": "update", "updates": {"tags": f"tags || '{w}-{i};'"}, "predicate": "id = 1"} for i in range(6)]
           for w in writers[:2]]
    ops.append([{"kind": "append", "rows": rows([1000 + i], "c", tags=f"m{i}")} for i in range(6)])
    try:
        reports = race(uri, [proxy.storage_options(storage_options, w) for w in writers], ops, timeout=500)
    finally:
        proxy.clear_faults()
    assert proxy.stats().total_faults > 0, "the proxy injected no fault: the run proves nothing"
    table = Table(uri, storage_options=storage_options)
    final = table.to_pyarrow_table().to_pylist()
    (target,) = [r for r in final if r["id"] == 1]
    tokens = [t for t in target["tags"].split(";") if t]
    appended = [r["tags"] for r in final if r["p"] == "c"]
    problems = []
    for writer, process_ops, outcomes in zip(writers, ops, reports):
        for op, outcome in zip(process_ops, outcomes):
            mark = op["updates"]["tags"].split("'")[1].rstrip(";") if op["kind"] == "update" else op["rows"][0]["tags"]
            seen = (tokens if op["kind"] == "update" else appended).count(mark)
            uncertain = not outcome["ok"] and outcome["error"]["type"] == "CommitStateUnknownError"
            if outcome["ok"] and seen != 1:
                problems.append(f"{mark}: acknowledged, found {seen} times")
            elif not outcome["ok"] and not uncertain and seen:
                problems.append(f"{mark}: failed with {outcome['error']['type']}, found {seen} times")
            elif uncertain and seen > 1:
                problems.append(f"{mark}: uncertain, found {seen} times")
            if not outcome["ok"] and not outcome["error"]["dynacommit"]:
                problems.append(f"{mark}: untyped error {outcome['error']}")
    problems += log_problems(uri, storage_options)
    assert problems == []
    print(f"\nDML-FAULTS {json.dumps({'acknowledged': sum(o['ok'] for r in reports for o in r), 'attempted': 18})}")
