"""What one DynamoDB request costs moto's server against the number of items in its DynamoDB table.

    PYTHONPATH=. .venv/bin/python -m tests.benchmarks.moto_item_cost [--items 0,500,1500,3000] [--requests 40] [--queue 4]

moto's ``Table.query`` walks every item of the DynamoDB table (every ``tablePath``) before it keeps the
partition asked for, and its ``transact_write_items`` deep-copies every table it touches before it applies
(to undo a cancellation). DynamoDB has neither cost. This measures it on the embedded moto server
(``infra/moto_server.py``): the table is filled with commit entries of other tables (as a benchmark sweep
leaves them), then one client sends, one at a time, the requests of a group commit: a GetItem of a queued
append, a Query of a queue of four items (``--queue``), and TransactWriteItems of a version entry and two or eight claims. The
figure is the server process's CPU (user + system, from ``/proc``) per request, which the load of the
machine moves far less than the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from infra.local_stack import LocalStack
from logstore.aws import dynamodb_client

QUEUE = "dynacommit-group:s3://bucket/measured"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _entry(table_path: str, version: int) -> dict:
    return {"tablePath": {"S": table_path}, "fileName": {"S": f"{version:020d}.json"},
            "tempPath": {"S": f"_delta_log/.tmp/{version:020d}.json.0123456789abcdef"}, "complete": {"S": "true"},
            "expireTime": {"N": str(int(time.time()) + 86400)}}


def _queued(member: str) -> dict:
    return {"tablePath": {"S": QUEUE}, "fileName": {"S": member},
            "groupState": {"S": "waiting"}, "groupBody": {"S": '{"add":{"path":"part-0.parquet"}}\n' * 2},
            "groupInfo": {"S": "{}"}, "claimUntil": {"N": str(int(time.time()) + 3600)},
            "expireTime": {"N": str(int(time.time()) + 7200)}}


def _claimed(member: str, version: int) -> dict:
    """A queued append's item as the group's transaction rewrites it (``logstore.dynamodb``, ``_claim``)."""
    now = int(time.time())
    return {"tablePath": {"S": QUEUE}, "fileName": {"S": member}, "groupState": {"S": "claimed"},
            "claimedBy": {"N": str(version)}, "groupBody": {"S": ""}, "groupInfo": {"S": ""},
            "claimUntil": {"N": str(now)}, "expireTime": {"N": str(now + 3600)}, "claimedAt": {"N": str(now * 1000)}}


def measure(item_counts: list[int], requests: int, queue: int = 4) -> list[dict]:
    rows = []
    with LocalStack(bucket="moto-item-cost") as stack:
        client = dynamodb_client(stack.options())
        table = stack.ddb_table
        pid = stack.process.pid  # type: ignore[union-attr]
        filled = 0
        version = 0
        for count in item_counts:
            while filled < count:  # entries of other tables, ten versions each
                client.put_item(TableName=table, Item=_entry(f"s3://bucket/other-{filled // 10}", filled % 10))
                filled += 1
            row: dict = {"items_in_table": count}

            def timed(name: str, send) -> None:
                started = _cpu_seconds(pid)
                for i in range(requests):
                    send(i)
                row[name] = round((_cpu_seconds(pid) - started) / requests * 1000, 2)

            for m in range(queue):
                client.put_item(TableName=table, Item=_queued(f"q-{count}-{m}"))
            key = {"tablePath": {"S": QUEUE}, "fileName": {"S": f"q-{count}-0"}}
            timed("GetItem_ms", lambda i: client.get_item(TableName=table, Key=key, ConsistentRead=True))
            timed("Query_ms", lambda i: client.query(
                TableName=table, KeyConditionExpression="tablePath = :q", ConsistentRead=True,
                ExpressionAttributeValues={":q": {"S": QUEUE}}))

            def transacting(members: int):
                def transact(i: int) -> None:
                    nonlocal version
                    names = [f"t-{version}-{m}" for m in range(members)]
                    for name in names:
                        client.put_item(TableName=table, Item=_queued(name))
                    client.transact_write_items(TransactItems=[
                        {"Put": {"TableName": table, "Item": _entry("s3://bucket/measured", version),
                                 "ConditionExpression": "attribute_not_exists(fileName)"}},
                        *({"Put": {"TableName": table, "Item": _claimed(name, version),
                                   "ConditionExpression": "groupState = :w AND claimUntil > :now",
                                   "ExpressionAttributeValues": {":w": {"S": "waiting"}, ":now": {"N": "0"}}}}
                          for name in names)])
                    for name in names:
                        client.delete_item(TableName=table, Key={"tablePath": {"S": QUEUE}, "fileName": {"S": name}})
                    version += 1
                return transact

            # a transaction of a version entry and N claims, with the N PutItems that queue its members and the
            # N DeleteItems after it (moto deep-copies the whole table once per item of a transaction)
            timed("TransactWriteItems_2_claims_with_2_puts_2_deletes_ms", transacting(2))
            timed("TransactWriteItems_8_claims_with_8_puts_8_deletes_ms", transacting(8))
            timed("PutItem_ms", lambda i: client.put_item(TableName=table, Item=_entry("s3://bucket/puts", i)))
            for m in range(queue):
                client.delete_item(TableName=table, Key={
                    "tablePath": {"S": QUEUE}, "fileName": {"S": f"q-{count}-{m}"}})
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", default="0,500,1500,3000", help="item counts of the DynamoDB table, ascending")
    parser.add_argument("--requests", type=int, default=40, help="requests of each kind at each count")
    parser.add_argument("--queue", type=int, default=4, help="queued appends the measured Query returns")
    args = parser.parse_args()
    measure([int(n) for n in args.items.split(",")], args.requests, args.queue)


if __name__ == "__main__":
    main()
