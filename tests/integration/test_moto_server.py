"""The local stack's moto server (infra/moto_server.py) answers DynamoDB as stock moto does.

The server adjusts moto's costs at start: a Query on a table's own key walks one partition, a transaction
keeps the items at the keys it names for a cancellation to restore, not a copy of each table, a request
is routed without listing moto's package directory (every request here goes through that routing), and an
answer's attribute values are serialized from the members they hold (every answer carrying items here).
The independent expectation is stock moto: a moto server in this process (whose backend the tests never
adjust) gets the same requests, one at a time, and every answer (items, counts, paging keys, consumed
capacity, errors and their cancellation reasons) and the tables' whole state after each step (every item,
the item count, the stream records) must be the same.
"""

from __future__ import annotations

import logging
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError

FILES = {"a": 12, "b": 5, "c": 3}  # items per partition of the log table: others' items are always present


@pytest.fixture(scope="module")
def stock_endpoint():
    from moto.dynamodb.models.table import Table
    from moto.server import ThreadedMotoServer

    assert not hasattr(Table.query, "__wrapped__"), "this process's moto must be stock moto"
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _sets_sorted(value):
    """``value`` with the members of each string, number and binary set in order: moto keeps a set's members
    in a Python set, whose order depends on the process's string hashing, so two servers list them in
    different orders (DynamoDB promises no order either)."""
    if isinstance(value, dict):
        return {k: sorted(v) if k in ("SS", "NS", "BS") and isinstance(v, list) else _sets_sorted(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sets_sorted(v) for v in value]
    return value


class Both:
    """The same requests to the local stack's moto and to stock moto, answers compared."""

    def __init__(self, adjusted_endpoint: str, stock_endpoint: str) -> None:
        def clients(endpoint: str, service: str):
            return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                                aws_access_key_id="testing", aws_secret_access_key="testing")

        self.ddb = [clients(adjusted_endpoint, "dynamodb"), clients(stock_endpoint, "dynamodb")]
        self.streams = [clients(adjusted_endpoint, "dynamodbstreams"), clients(stock_endpoint, "dynamodbstreams")]
        suffix = uuid.uuid4().hex[:8]
        self.log, self.num, self.flat = f"log-{suffix}", f"num-{suffix}", f"flat-{suffix}"
        for client in self.ddb:
            client.create_table(
                TableName=self.log, BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "tablePath", "AttributeType": "S"},
                                      {"AttributeName": "fileName", "AttributeType": "S"},
                                      {"AttributeName": "state", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "tablePath", "KeyType": "HASH"},
                           {"AttributeName": "fileName", "KeyType": "RANGE"}],
                GlobalSecondaryIndexes=[{"IndexName": "byState", "Projection": {"ProjectionType": "ALL"},
                                         "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"},
                                                       {"AttributeName": "fileName", "KeyType": "RANGE"}]}],
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
            client.create_table(
                TableName=self.num, BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                      {"AttributeName": "n", "AttributeType": "N"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "n", "KeyType": "RANGE"}])
            client.create_table(
                TableName=self.flat, BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])

    def call(self, operation: str, **params) -> dict:
        answers = []
        for client in self.ddb:
            try:
                answer = getattr(client, operation)(**params)
            except ClientError as e:
                answer = {"error": e.response["Error"],
                          "CancellationReasons": e.response.get("CancellationReasons")}
            answer.pop("ResponseMetadata", None)
            answers.append(answer)
        assert _sets_sorted(answers[0]) == _sets_sorted(answers[1]), (operation, params)
        return answers[0]

    def pages(self, **params) -> list[dict]:
        """Every page of a Query, each page's answer compared, the next asked with the key both returned."""
        pages = []
        while True:
            page = self.call("query", **params)
            pages.append(page)
            if "LastEvaluatedKey" not in page or len(pages) > 40:
                return pages
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def state(self) -> dict:
        states = []
        for client, streams in zip(self.ddb, self.streams):
            tables = {}
            for name in (self.log, self.num, self.flat):
                items = client.scan(TableName=name, ConsistentRead=True)["Items"]
                count = client.describe_table(TableName=name)["Table"]["ItemCount"]
                tables[name] = (sorted((_sets_sorted(i) for i in items), key=repr), count)
            arn = client.describe_table(TableName=self.log)["Table"]["LatestStreamArn"]
            shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
            iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                                  ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            records = streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]
            tables["stream"] = [(r["eventName"], r["dynamodb"]["SequenceNumber"], r["dynamodb"]["Keys"],
                                 _sets_sorted(r["dynamodb"].get("OldImage")),
                                 _sets_sorted(r["dynamodb"].get("NewImage"))) for r in records]
            states.append(tables)
        assert states[0] == states[1]
        return states[0]


@pytest.fixture
def both(local_stack, stock_endpoint) -> Both:
    return Both(local_stack.storage_options()["AWS_ENDPOINT_URL"], stock_endpoint)


def _fill(both: Both) -> None:
    for path, count in FILES.items():
        for n in range(count):
            both.call("put_item", TableName=both.log, Item={
                "tablePath": {"S": path}, "fileName": {"S": f"{n:020d}.json"}, "sz": {"N": str(n % 4)},
                "state": {"S": "done" if n % 3 else "waiting"}, "body": {"S": f"{path}-{n}" * 3}})
    for n in (-3, 0, 2, 10, 11, 100, 2.5):
        for pk in ("p", "q"):
            both.call("put_item", TableName=both.num, Item={"pk": {"S": pk}, "n": {"N": str(n)}, "v": {"N": "1"}})
    for pk in ("x", "y"):
        both.call("put_item", TableName=both.flat, Item={"pk": {"S": pk}, "v": {"N": "1"}})


def test_queries_answer_as_stock_moto(both):
    _fill(both)
    both.state()
    log, values = both.log, lambda path, **more: {":p": {"S": path}, **more}
    for path in ("a", "b", "z"):
        for forward in (True, False):
            base = {"TableName": log, "ConsistentRead": True, "ScanIndexForward": forward,
                    "ReturnConsumedCapacity": "TOTAL"}
            pages = both.pages(**base, KeyConditionExpression="tablePath = :p", ExpressionAttributeValues=values(path))
            assert len(pages) == 1 and pages[0]["Count"] == FILES.get(path, 0)
            pages = both.pages(**base, KeyConditionExpression="tablePath = :p", Limit=5,
                               ExpressionAttributeValues=values(path))
            assert sum(p["Count"] for p in pages) == FILES.get(path, 0)
            assert len(pages) == max(1, -(-FILES.get(path, 0) // 5))  # moto: no next key after a last full page
            # a range condition, a filter (applied after Limit), paging, projections, COUNT
            both.pages(**base, Limit=3, KeyConditionExpression="tablePath = :p AND fileName BETWEEN :lo AND :hi",
                       FilterExpression="#s = :w OR sz > :one", ExpressionAttributeNames={"#s": "state"},
                       ExpressionAttributeValues=values(path, **{
                           ":lo": {"S": f"{2:020d}.json"}, ":hi": {"S": f"{10:020d}.json"},
                           ":w": {"S": "waiting"}, ":one": {"N": "1"}}))
            both.pages(**base, Limit=4, KeyConditionExpression="tablePath = :p AND begins_with(fileName, :pre)",
                       ProjectionExpression="fileName, body",
                       ExpressionAttributeValues=values(path, **{":pre": {"S": "0000000000000000000"}}))
            both.pages(**base, KeyConditionExpression="tablePath = :p AND fileName > :f", Select="COUNT",
                       ExpressionAttributeValues=values(path, **{":f": {"S": f"{3:020d}.json"}}))
            both.pages(**base, Limit=2, KeyConditionExpression="tablePath = :p AND fileName <= :f",
                       ExpressionAttributeValues=values(path, **{":f": {"S": f"{7:020d}.json"}}))
            both.pages(**base, Limit=2, KeyConditions={"tablePath": {"ComparisonOperator": "EQ",
                                                                     "AttributeValueList": [{"S": path}]}},
                       QueryFilter={"sz": {"ComparisonOperator": "GE", "AttributeValueList": [{"N": "2"}]}})
            # a start key of an item that is not there: the page starts after where it would be
            both.pages(**base, KeyConditionExpression="tablePath = :p", Limit=4, ExpressionAttributeValues=values(path),
                       ExclusiveStartKey={"tablePath": {"S": path}, "fileName": {"S": f"{4:020d}.jsonx"}})
    both.pages(TableName=log, IndexName="byState", KeyConditionExpression="#s = :s", Limit=3,
               ExpressionAttributeNames={"#s": "state"}, ExpressionAttributeValues={":s": {"S": "waiting"}})
    for forward in (True, False):  # numbers in numeric order, not as text
        both.pages(TableName=both.num, KeyConditionExpression="pk = :p AND n >= :n", ScanIndexForward=forward,
                   Limit=2, ExpressionAttributeValues={":p": {"S": "p"}, ":n": {"N": "0"}})
    for pk in ("x", "w"):  # a table without a range key
        both.pages(TableName=both.flat, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": pk}})
    with_errors = both.call("query", TableName=log, KeyConditionExpression="tablePath = :p AND sz > :n",
                            ExpressionAttributeValues={":p": {"S": "a"}, ":n": {"N": "1"}})
    assert "error" in with_errors
    for value in ({"L": [{"S": "a"}]}, {"N": "1"}):  # not the key's type
        both.call("query", TableName=log, KeyConditionExpression="tablePath = :p", ExpressionAttributeValues={":p": value})
    both.state()


def _key(path: str, n: int | str) -> dict:
    return {"tablePath": {"S": path}, "fileName": {"S": n if isinstance(n, str) else f"{n:020d}.json"}}


def test_transactions_apply_and_cancel_as_stock_moto(both):
    _fill(both)
    log = both.log

    def put(path, n, body, *, absent=True, all_old=False):
        op = {"TableName": log, "Item": {**_key(path, n), "body": {"S": body}, "state": {"S": "waiting"}}}
        if absent:
            op["ConditionExpression"] = "attribute_not_exists(fileName)"
        if all_old:
            op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {"Put": op}

    def update(path, n, *, expect="waiting", all_old=False):
        op = {"TableName": log, "Key": _key(path, n), "UpdateExpression": "SET #s = :d, sz = sz + :one",
              "ConditionExpression": "#s = :w", "ExpressionAttributeNames": {"#s": "state"},
              "ExpressionAttributeValues": {":d": {"S": "done"}, ":one": {"N": "1"}, ":w": {"S": expect}}}
        if all_old:
            op["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {"Update": op}

    def delete(path, n, *, condition="attribute_exists(fileName)"):
        return {"Delete": {"TableName": log, "Key": _key(path, n), "ConditionExpression": condition}}

    def check(path, n, condition="attribute_exists(fileName)", all_old=True):
        return {"ConditionCheck": {"TableName": log, "Key": _key(path, n), "ConditionExpression": condition,
                                   **({"ReturnValuesOnConditionCheckFailure": "ALL_OLD"} if all_old else {})}}

    def flat(pk, v, condition=None):
        return {"Put": {"TableName": both.flat, "Item": {"pk": {"S": pk}, "v": {"N": str(v)}},
                        **({"ConditionExpression": condition} if condition else {})}}

    upsert = {"Update": {"TableName": log, "Key": _key("new", 0), "UpdateExpression": "SET sz = :one",
                         "ExpressionAttributeValues": {":one": {"N": "1"}}}}
    steps = [
        # applied: a mix over two partitions, a new item, a new partition, a second table
        [put("a", 100, "new"), update("a", 0), delete("a", 1), check("b", 0), put("new", 5, "n5"), flat("z", 1)],
        # cancelled by the last, the first and a middle item's condition, with and without ALL_OLD
        [put("a", 101, "x"), update("a", 3), upsert, delete("b", 1), put("a", 2, "again", all_old=True)],
        [update("a", 6, expect="done", all_old=True), put("c", 50, "x"), delete("c", 0), put("fresh", 1, "f")],
        [put("b", 60, "x"), delete("b", 2), check("zz", 0, all_old=False), upsert, update("b", 3)],
        [delete("a", 4), update("a", 100, expect="nope", all_old=True), put("other", 0, "o"), flat("y", 9)],
        [put("a", 7, "x", absent=False), flat("x", 2, "attribute_not_exists(pk)"), delete("a", 8)],
        [delete("a", 9, condition="attribute_not_exists(fileName)"), delete("c", 1)],
        # applied again, then a second change of the same items cancelled
        [update("a", 9), upsert, delete("c", 2), put("a", 102, "y")],
        [update("a", 9, expect="done"), upsert, put("a", 102, "z", all_old=True)],
        # moto's own refusals: one key named twice, an update it cannot parse, an item without its range key
        [put("b", 70, "x"), update("b", 4), delete("b", 4)],
        [put("b", 71, "x"), {"Update": {"TableName": log, "Key": _key("b", 1), "UpdateExpression": "SET = ="}}],
        [put("b", 72, "x"), {"Put": {"TableName": log, "Item": {"tablePath": {"S": "b"}, "body": {"S": "no key"}}}}],
        # an item of two operations: moto refuses it after applying the items before it, and restores nothing
        [put("b", 73, "x"), {"Put": put("b", 74, "y")["Put"], "Delete": delete("b", 0)["Delete"]}],
    ]
    for items in steps:
        both.call("transact_write_items", TransactItems=items)
        both.state()
    final = both.state()
    assert final["stream"] and any(item["fileName"]["S"] == f"{102:020d}.json" for item in final[log][0])


def _every_type(n: int) -> dict:
    """An item holding every kind of DynamoDB attribute value, nested ones and empty ones included."""
    return {
        **_key("types", n), "s": {"S": f"é{n}\u2603"}, "n": {"N": str(-n / 4)}, "b": {"B": bytes([0, 255, n, 128])},
        "ss": {"SS": ["x", "y\u00fc"]}, "ns": {"NS": ["1", "2.5", "-3"]}, "bs": {"BS": [b"\x00\x01", b"\xfe"]},
        "null": {"NULL": True}, "t": {"BOOL": True}, "f": {"BOOL": False}, "empty_s": {"S": ""},
        "l": {"L": [{"S": "a"}, {"N": "1"}, {"B": b"\xff"}, {"L": []}, {"M": {}}, {"NULL": True}, {"BOOL": False}]},
        "m": {"M": {"inner": {"M": {"deep": {"SS": ["q"]}, "bin": {"BS": [b"\x80"]}}}, "list": {"L": [{"M": {
            "x": {"N": "7"}}}]}, "e": {"M": {}}}},
    }


def test_every_kind_of_attribute_value_is_answered_as_stock_moto(both):
    """Items holding every kind of attribute value, through each answer that carries items: the item
    writes' returned values, GetItem, BatchGetItem, TransactGetItems, Query, Scan (projections of nested
    paths too), the cancellation reasons and condition failures with ALL_OLD, and the stream's images."""
    log = both.log
    for n in range(4):
        both.call("put_item", TableName=log, Item=_every_type(n), ReturnValues="ALL_OLD")
    both.call("put_item", TableName=log, Item={**_every_type(0), "extra": {"S": "x"}}, ReturnValues="ALL_OLD")
    both.call("put_item", TableName=log, Item=_every_type(1), ConditionExpression="attribute_not_exists(fileName)",
              ReturnValuesOnConditionCheckFailure="ALL_OLD")
    for returned in ("ALL_NEW", "UPDATED_NEW", "ALL_OLD", "UPDATED_OLD"):
        both.call("update_item", TableName=log, Key=_key("types", 2), ReturnValues=returned,
                  UpdateExpression="SET m.inner.deep = :ss, l[1] = :b, extra = :m REMOVE #n",
                  ExpressionAttributeNames={"#n": "null"},
                  ExpressionAttributeValues={":ss": {"SS": ["r", "s"]}, ":b": {"B": b"\x01\x02"},
                                             ":m": {"M": {"k": {"BS": [b"\x03"]}}}})
    both.call("update_item", TableName=log, Key=_key("types", 3), UpdateExpression="SET t = :f",
              ConditionExpression="f = :t", ExpressionAttributeValues={":f": {"BOOL": False}, ":t": {"BOOL": True}},
              ReturnValuesOnConditionCheckFailure="ALL_OLD")
    for n in range(4):
        both.call("get_item", TableName=log, Key=_key("types", n), ConsistentRead=True)
    both.call("get_item", TableName=log, Key=_key("types", 0),
              ProjectionExpression="m.inner.deep, l[2], l[3], bs, #n", ExpressionAttributeNames={"#n": "null"})
    both.call("batch_get_item", RequestItems={log: {"Keys": [_key("types", n) for n in range(5)]}})
    both.call("transact_get_items", TransactItems=[{"Get": {"TableName": log, "Key": _key("types", n)}}
                                                   for n in range(4)])
    pages = both.pages(TableName=log, KeyConditionExpression="tablePath = :p", Limit=3,
                       ExpressionAttributeValues={":p": {"S": "types"}})
    assert sum(p["Count"] for p in pages) == 4 and pages[0]["Items"][0]["b"]["B"] == bytes([0, 255, 0, 128])
    both.pages(TableName=log, KeyConditionExpression="tablePath = :p", ProjectionExpression="m.list[0].x, ns, b",
               FilterExpression="contains(ss, :y)", ExpressionAttributeValues={":p": {"S": "types"},
                                                                             ":y": {"S": "y\u00fc"}})
    both.call("scan", TableName=log, ConsistentRead=True, FilterExpression="attribute_exists(bs)")
    both.call("transact_write_items", TransactItems=[
        {"Put": {"TableName": log, "Item": _every_type(9)}},
        {"Delete": {"TableName": log, "Key": _key("types", 0), "ConditionExpression": "attribute_not_exists(m)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}])
    both.call("delete_item", TableName=log, Key=_key("types", 1), ReturnValues="ALL_OLD")
    both.state()


def test_connections_stay_open_between_requests(local_stack, stock_endpoint):
    """The local stack's server answers several requests on one connection (keep-alive, as S3 and DynamoDB
    do); moto's own server closes the connection after each answer."""
    import http.client
    from urllib.parse import urlparse

    def answers(endpoint: str) -> tuple[list, int]:
        """Each answer's status and Connection header, and how many connections the client opened for them."""
        url = urlparse(endpoint)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        found, sockets = [], set()
        try:
            for _ in range(3):
                connection.request("GET", "/moto-api/")
                sockets.add(connection.sock.getsockname()[1])  # the client side's port: one per connection
                response = connection.getresponse()
                response.read()
                found.append((response.status, (response.getheader("Connection") or "").lower()))
        finally:
            connection.close()
        return found, len(sockets)

    assert answers(local_stack.endpoint) == ([(200, "")] * 3, 1)
    assert answers(stock_endpoint) == ([(200, "close")] * 3, 3)


def test_s3_user_metadata_names_are_kept_as_stock_moto_keeps_them(local_stack, stock_endpoint):
    """Metadata keys with an underscore or in mixed case round-trip as through stock moto (and S3): the names
    reach moto as sent and come back as moto stores them."""
    metadata = {"my_key": "1", "Mixed-Case": "2", "plain": "3", "under_and-dash": "4"}
    answers = []
    for endpoint in (local_stack.endpoint, stock_endpoint):
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        bucket = f"meta-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 10, Metadata=metadata)
        s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "k"})
        answers.append([(s3.head_object(Bucket=bucket, Key=key)["Metadata"],
                         s3.get_object(Bucket=bucket, Key=key)["Metadata"]) for key in ("k", "copied")])
    assert answers[0] == answers[1]
    assert set(answers[0][0][0]) == {k.lower() for k in metadata}
