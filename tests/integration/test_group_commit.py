"""Group commit on moto's DynamoDB, whose ``TransactWriteItems`` is the real request (issue 23, item 2).

* Writer processes appending to one table at once: fewer versions than appends (they commit together),
  every acknowledged append's rows in the table exactly once, read back by ``deltalake`` (an independent
  reader); the table's own ``tablePath`` partition holds only Delta's version items, and the queue's
  items are gone once their writers know their outcome.
* The races of tests/unit/table/test_group_commit.py, made deterministic with failpoint hooks, through the
  DynamoDB store: a queued append taken by a rival's group, an application id never twice.
* The probe: moto answers transactions; the off switch turns group commit off.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter

import boto3
import deltalake
import pyarrow as pa
import pytest

from logstore import failpoints, open_log_store
from logstore.group import queue_key
from table import Table, write_table
from tests.support.fault_harness import ROOT, child_env

WRITERS = 6
APPENDS = 5

_WRITER = """
import json, sys
import pyarrow as pa
from table import Table, write_table
uri, options, name, count = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
table = Table(uri, storage_options=options)
for seq in range(count):
    app = {"app_id": f"{name}-app", "app_version": seq} if seq % 2 else {}
    result = write_table(table, pa.table({"writer": [name] * 2, "seq": [seq] * 2}), **app)
    print(json.dumps({"writer": name, "seq": seq, "version": result.version}), flush=True)
"""


def _items(options: dict, table_path: str) -> list[dict]:
    client = boto3.client("dynamodb", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options["AWS_REGION"],
                          aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"])
    return client.query(TableName=options["DELTA_DYNAMO_TABLE_NAME"], KeyConditionExpression="tablePath = :t",
                        ExpressionAttributeValues={":t": {"S": table_path}}, ConsistentRead=True)["Items"]


@pytest.mark.slow
def test_contended_appends_commit_together_and_each_lands_once(local_stack, storage_options, s3_uri):
    write_table(s3_uri, pa.table({"writer": ["creator"], "seq": [0]}), storage_options=storage_options)
    children = [subprocess.Popen([sys.executable, "-c", _WRITER, s3_uri, json.dumps(storage_options), f"w{n}",
                                  str(APPENDS)], env=child_env(), cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in range(WRITERS)]
    acknowledged = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        acknowledged += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(acknowledged) == WRITERS * APPENDS
    table = Table(s3_uri, storage_options=storage_options)
    versions = table.version  # version 0 created the table
    assert versions < WRITERS * APPENDS, f"{versions} versions for {WRITERS * APPENDS} appends: nothing was grouped"
    # every acknowledged append is in the version it was told, exactly once, by an independent reader
    peer = deltalake.DeltaTable(s3_uri, storage_options={k: v for k, v in storage_options.items()})
    counts = Counter(zip(*peer.to_pyarrow_table(columns=["writer", "seq"]).to_pydict().values()))
    for ack in acknowledged:
        assert counts[(ack["writer"], ack["seq"])] == 2, ack
    assert sum(counts.values()) == 2 * WRITERS * APPENDS + 1
    by_version = Counter(ack["version"] for ack in acknowledged)
    grouped = {v: n for v, n in by_version.items() if n > 1}
    assert grouped, "no version holds more than one append"
    for version, n in grouped.items():
        info = json.loads(table.log_store.read(version).splitlines()[0])["commitInfo"]
        assert len(info["groupCommit"]["members"]) == n - 1 and info["operation"] == "WRITE"
    apps = table.snapshot.state.app_txns
    assert {a: t.version for a, t in apps.items()} == {f"w{n}-app": APPENDS - 2 for n in range(WRITERS)}
    # Delta's partition holds version items only; the queue partition is another key, emptied by its writers
    assert all(i["fileName"]["S"].endswith(".json") and len(i["fileName"]["S"]) == 25
               for i in _items(storage_options, table.log_store.table_path))
    table.log_store.wait_finished(10)
    left = [i for i in _items(storage_options, queue_key(table.log_store.table_path))
            if i["groupState"]["S"] == "waiting"]
    assert left == []


def rows(writer: str) -> pa.Table:
    return pa.table({"writer": [writer] * 2, "seq": [0, 1]})


@pytest.fixture
def hooked():
    yield failpoints.set_hook
    failpoints.set_hook(None)


def _rivals(**at):
    at = {k.replace("__", "."): v for k, v in at.items()}
    results = {}

    def hook(name):
        run = at.pop(name, None)
        if run is not None:
            results[name] = run()
    return hook, results


def test_a_queued_append_is_taken_by_a_rivals_group_through_dynamodb(storage_options, s3_uri, hooked):
    write_table(s3_uri, rows("creator"), storage_options=storage_options)
    hook, results = _rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                              rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                                rows("c")))
    hooked(hook)
    b = write_table(Table(s3_uri, storage_options=storage_options), rows("b"))
    assert b.version == results["logstore.group.before_transaction"].version == 2
    counts = Counter(deltalake.DeltaTable(s3_uri, storage_options=storage_options)
                     .to_pyarrow_table(columns=["writer"]).column("writer").to_pylist())
    assert counts == {"creator": 2, "a": 2, "b": 2, "c": 2}


def test_a_claimed_item_holds_the_claim_and_none_of_the_appends_body(storage_options, s3_uri, hooked):
    """The group's transaction replaces each waiting item it claims with its claimed form (a conditional Put):
    what the member then reads of its item, and the queue's Query returns until the member deletes it, is the
    claim, not the append's actions. Read raw with boto3 when B learns it was claimed (its failpoint): B's
    waiting item held its add action; the claimed one holds version 2 (C's group) and an empty body."""
    write_table(s3_uri, rows("creator"), storage_options=storage_options)
    queue = queue_key(Table(s3_uri, storage_options=storage_options).log_store.table_path)
    seen: dict[str, list[dict]] = {}

    def waiting():
        seen["waiting"] = _items(storage_options, queue)
        return write_table(Table(s3_uri, storage_options=storage_options), rows("c"))

    hook, results = _rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                              rows("a")),
        logstore__group__before_transaction=waiting,
        table__group__after_claimed=lambda: seen.setdefault("claimed", _items(storage_options, queue)))
    hooked(hook)
    b = write_table(Table(s3_uri, storage_options=storage_options), rows("b"))
    assert b.version == results["logstore.group.before_transaction"].version == 2
    [before], [after] = seen["waiting"], seen["claimed"]
    assert before["groupState"] == {"S": "waiting"} and '"add"' in before["groupBody"]["S"]
    assert after["fileName"] == before["fileName"]
    assert after["groupState"] == {"S": "claimed"} and after["claimedBy"] == {"N": "2"}
    assert after["groupBody"] == {"S": ""} and after["groupInfo"] == {"S": ""}
    assert int(after["expireTime"]["N"]) > time.time()


def test_an_application_id_replayed_inside_a_group_lands_once(storage_options, s3_uri, hooked):
    write_table(s3_uri, rows("creator"), storage_options=storage_options)
    hook, _ = _rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                              rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                                rows("c"), app_id="job", app_version=3))
    hooked(hook)
    b = write_table(Table(s3_uri, storage_options=storage_options), rows("b"), app_id="job", app_version=3)
    assert b.skipped and b.version == 2
    counts = Counter(deltalake.DeltaTable(s3_uri, storage_options=storage_options)
                     .to_pyarrow_table(columns=["writer"]).column("writer").to_pylist())
    assert counts["b"] + counts["c"] == 2, counts


def test_moto_answers_transactions_and_the_off_switch_turns_group_commit_off(storage_options, s3_uri):
    write_table(s3_uri, rows("creator"), storage_options=storage_options)
    assert open_log_store(s3_uri, storage_options=storage_options).group_commit_available() is True
    off = {**storage_options, "DYNACOMMIT_GROUP_COMMIT": "off"}
    assert open_log_store(s3_uri, storage_options=off).group_commit_available() is False


def test_a_transaction_on_the_local_stack_applies_all_its_items_or_none(storage_options):
    """The local stack's moto keeps the items a transaction names for a cancellation to restore
    (infra/moto_server.py ``undo_only_named_items``; moto itself copies the whole table once per item): a
    transaction of several items whose last condition fails leaves every item of the table as it was, one
    that passes applies them all, and items it does not name are never touched. Every answer and state
    against stock moto: tests/integration/test_moto_server.py."""
    client = boto3.client("dynamodb", endpoint_url=storage_options["AWS_ENDPOINT_URL"],
                          region_name=storage_options["AWS_REGION"],
                          aws_access_key_id=storage_options["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=storage_options["AWS_SECRET_ACCESS_KEY"])
    name, path = storage_options["DELTA_DYNAMO_TABLE_NAME"], f"tx-{uuid.uuid4().hex[:8]}"

    def key(n: int) -> dict:
        return {"tablePath": {"S": path}, "fileName": {"S": f"{n:020d}.json"}}

    def put(n: int, value: str, *, absent: bool = True) -> dict:
        put = {"TableName": name, "Item": {**key(n), "tempPath": {"S": value}, "complete": {"S": "false"}}}
        return {"Put": {**put, **({"ConditionExpression": "attribute_not_exists(fileName)"} if absent else {})}}

    def table() -> dict:
        items = client.query(TableName=name, KeyConditionExpression="tablePath = :t", ConsistentRead=True,
                             ExpressionAttributeValues={":t": {"S": path}})["Items"]
        return {i["fileName"]["S"]: (i["tempPath"]["S"], i["complete"]["S"]) for i in items}

    client.transact_write_items(TransactItems=[put(n, f"first-{n}") for n in range(3)])
    before = table()
    assert before == {f"{n:020d}.json": (f"first-{n}", "false") for n in range(3)}
    update = {"Update": {"TableName": name, "Key": key(0), "UpdateExpression": "SET complete = :t",
                         "ExpressionAttributeValues": {":t": {"S": "true"}}}}
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(TransactItems=[update, put(3, "new-3"), put(4, "new-4"), put(1, "again-1")])
    assert table() == before  # nothing of the cancelled transaction stayed, nothing else was undone
    client.transact_write_items(TransactItems=[update, put(3, "new-3"), put(4, "new-4"),
                                               put(1, "again-1", absent=False)])
    assert table() == {**before, f"{0:020d}.json": ("first-0", "true"), f"{1:020d}.json": ("again-1", "false"),
                       f"{3:020d}.json": ("new-3", "false"), f"{4:020d}.json": ("new-4", "false")}
