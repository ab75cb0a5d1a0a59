"""The fault proxy itself: it forwards faithfully, and each fault kind does to a real boto3 client what the
real services and networks do. The fault suites' verdicts rest on these."""

from __future__ import annotations

import http.client
import io
import time
import uuid

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from tests.support.fault_proxy import KINDS, FaultProxy, FaultRule, mixed, operation_of

CREDENTIALS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
NO_RETRIES = Config(retries={"total_max_attempts": 1}, s3={"addressing_style": "path"}, connect_timeout=5,
                    read_timeout=30)


_clients: list = []


def client(service: str, endpoint: str, config: Config = NO_RETRIES):
    """A boto3 client without retries (unless ``config`` says otherwise), closed after the test."""
    made = boto3.client(service, endpoint_url=endpoint, config=config, **CREDENTIALS)
    _clients.append(made)
    return made


def s3(endpoint: str):
    return client("s3", endpoint)


def ddb(endpoint: str):
    return client("dynamodb", endpoint)


@pytest.fixture(autouse=True)
def close_clients():
    yield
    while _clients:
        _clients.pop().close()


@pytest.fixture
def bucket(local_stack) -> str:
    return local_stack.bucket


@pytest.fixture
def key() -> str:
    return f"proxy-test/{uuid.uuid4().hex}"


def entry_key(name: str) -> dict:
    return {"tablePath": {"S": f"s3://proxy-test/{name}"}, "fileName": {"S": "00000000000000000000.json"}}


def object_exists(local_stack, bucket: str, key: str) -> bool:
    try:
        s3(local_stack.endpoint).head_object(Bucket=bucket, Key=key)
        return True
    except botocore.exceptions.ClientError as exc:
        assert exc.response["Error"]["Code"] in ("404", "NoSuchKey")
        return False


def item_exists(local_stack, name: str) -> bool:
    return "Item" in ddb(local_stack.endpoint).get_item(TableName=local_stack.ddb_table, Key=entry_key(name),
                                                       ConsistentRead=True)


def put_item(client, local_stack, name: str) -> None:
    client.put_item(TableName=local_stack.ddb_table, Item={**entry_key(name), "tempPath": {"S": ".tmp/x"},
                                                           "complete": {"S": "false"}},
                    ConditionExpression="attribute_not_exists(fileName)")


# --- faithful forwarding ----------------------------------------------------------------------------


def test_without_faults_every_s3_and_dynamodb_operation_passes_through_and_is_counted(
        fault_proxy, local_stack, bucket, key):
    objects = s3(fault_proxy.endpoint())
    objects.put_object(Bucket=bucket, Key=key, Body=b"hello")
    assert objects.get_object(Bucket=bucket, Key=key)["Body"].read() == b"hello"
    assert objects.head_object(Bucket=bucket, Key=key)["ContentLength"] == 5
    upload = objects.create_multipart_upload(Bucket=bucket, Key=key + ".mp")
    part = b"p" * (5 * 1024 * 1024 + 7)  # a body big enough for botocore's Expect: 100-continue
    etag = objects.upload_part(Bucket=bucket, Key=key + ".mp", UploadId=upload["UploadId"], PartNumber=1,
                               Body=io.BytesIO(part))["ETag"]
    objects.complete_multipart_upload(Bucket=bucket, Key=key + ".mp", UploadId=upload["UploadId"],
                                      MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": 1}]})
    listed = objects.list_objects_v2(Bucket=bucket, Prefix=key)
    assert sorted(o["Key"] for o in listed["Contents"]) == [key, key + ".mp"]
    assert s3(local_stack.endpoint).get_object(Bucket=bucket, Key=key + ".mp")["Body"].read() == part
    objects.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}]})
    assert not object_exists(local_stack, bucket, key)

    table = ddb(fault_proxy.endpoint())
    put_item(table, local_stack, key)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        put_item(table, local_stack, key)
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert table.get_item(TableName=local_stack.ddb_table, Key=entry_key(key))["Item"]["tempPath"] == {"S": ".tmp/x"}

    stats = fault_proxy.stats()
    assert stats.total_faults == 0 and stats.upstream_errors == 0
    for operation in ("PutObject", "GetObject", "HeadObject", "CreateMultipartUpload", "UploadPart",
                      "CompleteMultipartUpload", "ListObjectsV2", "DeleteObjects"):
        assert stats.requests[("s3", operation)] >= 1, operation
    assert stats.requests[("dynamodb", "PutItem")] == 2
    assert stats.requests[("dynamodb", "GetItem")] == 1
    assert stats.forwarded == stats.total_requests
    # keep-alive: botocore reuses its pooled connections, so far fewer connections than requests
    assert stats.connections < stats.total_requests


def test_chunked_request_bodies_and_keep_alive_are_forwarded(fault_proxy, local_stack, bucket, key):
    host, port = fault_proxy.endpoint().removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    chunks = [b"first chunk|", b"second|", b"x" * 70000]
    signed = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, "
                               "SignedHeaders=host, Signature=0", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    conn.putrequest("PUT", f"/{bucket}/{key}")
    conn.putheader("Transfer-Encoding", "chunked")
    for name, value in signed.items():
        conn.putheader(name, value)
    conn.endheaders()
    for chunk in chunks:
        conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    conn.send(b"0\r\n\r\n")
    put = conn.getresponse()
    put.read()
    assert put.status == 200
    conn.request("HEAD", f"/{bucket}/{key}", headers=signed)  # the same connection, kept alive
    head = conn.getresponse()
    head.read()
    assert head.status == 200 and int(head.getheader("Content-Length")) == sum(map(len, chunks))
    conn.close()
    assert s3(local_stack.endpoint).get_object(Bucket=bucket, Key=key)["Body"].read() == b"".join(chunks)
    assert fault_proxy.stats().connections == 1


def test_operations_are_told_apart():
    assert operation_of("POST", "/", {"X-Amz-Target": "DynamoDB_20120810.PutItem"}) == ("dynamodb", "PutItem")
    assert operation_of("PUT", "/b/k?partNumber=1&uploadId=u", {}) == ("s3", "UploadPart")
    assert operation_of("POST", "/b/k?uploads", {}) == ("s3", "CreateMultipartUpload")
    assert operation_of("POST", "/b/k?uploadId=u", {}) == ("s3", "CompleteMultipartUpload")
    assert operation_of("DELETE", "/b/k?uploadId=u", {}) == ("s3", "AbortMultipartUpload")
    assert operation_of("GET", "/b?list-type=2&prefix=t/", {}) == ("s3", "ListObjectsV2")
    assert operation_of("GET", "/b?uploads&prefix=t/", {}) == ("s3", "ListMultipartUploads")
    assert operation_of("POST", "/b?delete", {}) == ("s3", "DeleteObjects")
    assert operation_of("PUT", "/b/k", {"x-amz-copy-source": "/b/j"}) == ("s3", "CopyObject")
    assert operation_of("HEAD", "/b/a/b/c", {}) == ("s3", "HeadObject")
    assert operation_of("GET", "/b/a/b/c", {}) == ("s3", "GetObject")


# --- each fault kind --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,status,code", [
    ("500", 500, "InternalError"),
    ("503", 503, "ServiceUnavailable"),
    ("throttle", 503, "SlowDown"),
    ("denied", 403, "AccessDenied"),
])
def test_s3_error_answers_are_what_s3_sends_and_nothing_is_written(fault_proxy, local_stack, bucket, key, kind,
                                                                   status, code):
    fault_proxy.set_faults([FaultRule(kind, 1.0, service="s3")])
    with pytest.raises(botocore.exceptions.ClientError) as failed:
        s3(fault_proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"x")
    assert failed.value.response["Error"]["Code"] == code
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert not object_exists(local_stack, bucket, key)
    assert fault_proxy.stats().faults_by_operation[(kind, "s3", "PutObject")] == 1


@pytest.mark.parametrize("kind,status,codes", [
    ("500", 500, {"InternalServerError"}),
    ("503", 503, {"ServiceUnavailable"}),
    ("throttle", 400, {"ProvisionedThroughputExceededException", "ThrottlingException"}),
    ("denied", 400, {"AccessDeniedException"}),
])
def test_dynamodb_error_answers_are_what_dynamodb_sends_and_nothing_is_written(fault_proxy, local_stack, kind,
                                                                               status, codes):
    fault_proxy.set_faults([FaultRule(kind, 1.0, service="dynamodb", operation="PutItem")])
    seen = set()
    for attempt in range(12):  # throttling alternates between the two answers DynamoDB gives
        name = f"{kind}-{uuid.uuid4().hex}"
        with pytest.raises(botocore.exceptions.ClientError) as failed:
            put_item(ddb(fault_proxy.endpoint()), local_stack, name)
        assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        seen.add(failed.value.response["Error"]["Code"])
        assert not item_exists(local_stack, name)
    assert seen == codes
    assert fault_proxy.stats().faults[kind] == 12


def test_drop_before_closes_the_connection_and_forwards_nothing(fault_proxy, local_stack, bucket, key):
    fault_proxy.set_faults([FaultRule("drop_before", 1.0)])
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        s3(fault_proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"x")
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        put_item(ddb(fault_proxy.endpoint()), local_stack, key)
    assert not object_exists(local_stack, bucket, key)
    assert not item_exists(local_stack, key)
    assert fault_proxy.stats().forwarded == 0


def test_drop_after_applies_the_request_and_loses_its_answer(fault_proxy, local_stack, bucket, key):
    """A lost response: PutObject wrote the object and PutItem wrote the item, while the client saw an error."""
    fault_proxy.set_faults([FaultRule("drop_after", 1.0)])
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        s3(fault_proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"written")
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        put_item(ddb(fault_proxy.endpoint()), local_stack, key)
    assert s3(local_stack.endpoint).get_object(Bucket=bucket, Key=key)["Body"].read() == b"written"
    assert item_exists(local_stack, key)
    assert fault_proxy.stats().forwarded == 2


def test_drop_after_on_a_retrying_client_turns_into_a_failed_condition(fault_proxy, local_stack, key):
    """What a log store sees after a lost PutItem answer: the SDK's retry finds its own item."""
    fault_proxy.set_faults([FaultRule("drop_after", 1.0, operation="PutItem", limit=1)])
    retrying = client("dynamodb", fault_proxy.endpoint(), Config(retries={"mode": "standard", "total_max_attempts": 2}))
    with pytest.raises(botocore.exceptions.ClientError) as failed:
        put_item(retrying, local_stack, key)
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert item_exists(local_stack, key)
    assert fault_proxy.stats().faults == {"drop_after": 1}


def test_cut_applies_the_request_and_breaks_its_answer_off_half_way(fault_proxy, local_stack, bucket, key):
    """A response cut short: the client is promised the whole body and gets half of it, then the
    connection closes. A GET reads fewer bytes than announced (botocore notices and raises); a PUT, whose
    answer has no body, loses its answer as with ``drop_after``."""
    body = bytes(range(256)) * 64
    s3(local_stack.endpoint).put_object(Bucket=bucket, Key=key, Body=body)
    fault_proxy.set_faults([FaultRule("cut", 1.0, service="s3", operation="GetObject")])
    with pytest.raises(botocore.exceptions.BotoCoreError):
        s3(fault_proxy.endpoint()).get_object(Bucket=bucket, Key=key)["Body"].read()
    url = s3(fault_proxy.endpoint()).generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
    raw = http.client.HTTPConnection(*fault_proxy.endpoint().removeprefix("http://").split(":"), timeout=10)
    raw.request("GET", url.split(fault_proxy.endpoint(), 1)[1])
    answer = raw.getresponse()
    assert answer.status == 200 and int(answer.getheader("Content-Length")) == len(body)
    with pytest.raises(http.client.IncompleteRead) as cut:
        answer.read()
    assert cut.value.partial == body[: len(body) // 2]
    raw.close()
    fault_proxy.set_faults([FaultRule("cut", 1.0, service="s3", operation="PutObject")])
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        s3(fault_proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"replaced")
    assert s3(local_stack.endpoint).get_object(Bucket=bucket, Key=key)["Body"].read() == b"replaced"


def test_slow_delays_and_then_forwards(local_stack, make_fault_proxy, bucket, key):
    proxy = make_fault_proxy(seed=1, slow_seconds=0.3)
    proxy.set_faults([FaultRule("slow", 1.0)])
    started = time.monotonic()
    s3(proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"late")
    assert time.monotonic() - started >= 0.3  # the injected sleep is a lower bound, not a measurement
    assert s3(local_stack.endpoint).get_object(Bucket=bucket, Key=key)["Body"].read() == b"late"
    assert proxy.stats().faults == {"slow": 1}


# --- plans, determinism, runtime changes, labels ----------------------------------------------------


def test_a_rule_restricted_to_one_operation_spares_the_others(fault_proxy, local_stack, bucket, key):
    fault_proxy.set_faults([FaultRule("500", 1.0, service="dynamodb", operation="PutItem")])
    s3(fault_proxy.endpoint()).put_object(Bucket=bucket, Key=key, Body=b"x")
    ddb(fault_proxy.endpoint()).get_item(TableName=local_stack.ddb_table, Key=entry_key(key))
    with pytest.raises(botocore.exceptions.ClientError):
        put_item(ddb(fault_proxy.endpoint()), local_stack, key)
    assert fault_proxy.stats().faults_by_operation == {("500", "dynamodb", "PutItem"): 1}


def faulted_sequence(local_stack, make_fault_proxy, seed: int, rules, n: int = 60) -> list[bool]:
    proxy = make_fault_proxy(seed=seed)
    proxy.set_faults(rules)
    table = ddb(proxy.endpoint())
    outcomes = []
    for _ in range(n):
        try:
            table.get_item(TableName=local_stack.ddb_table, Key=entry_key("none"))
            outcomes.append(False)
        except (botocore.exceptions.ClientError, botocore.exceptions.ConnectionClosedError):
            outcomes.append(True)
    return outcomes


def test_the_same_seed_injects_the_same_faults_into_the_same_requests(local_stack, make_fault_proxy):
    rules = [FaultRule("500", 0.2), FaultRule("drop_before", 0.2)]
    first = faulted_sequence(local_stack, make_fault_proxy, 11, rules)
    again = faulted_sequence(local_stack, make_fault_proxy, 11, rules)
    other = faulted_sequence(local_stack, make_fault_proxy, 12, rules)
    assert first == again
    assert first != other
    assert 10 <= sum(first) <= 40  # 40% of 60, from a fixed seed


def test_mixed_rates_reach_every_kind_in_proportion_and_can_change_at_runtime(local_stack, make_fault_proxy):
    proxy = make_fault_proxy(seed=3, slow_seconds=0.0)
    proxy.set_faults(mixed(0.6))
    table = ddb(proxy.endpoint())
    for _ in range(240):
        try:
            table.get_item(TableName=local_stack.ddb_table, Key=entry_key("none"))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
            pass
    stats = proxy.stats()
    assert set(stats.faults) == set(KINDS)
    assert 0.45 <= stats.total_faults / stats.total_requests <= 0.75
    proxy.clear_faults()
    before = stats.total_faults
    for _ in range(20):
        table.get_item(TableName=local_stack.ddb_table, Key=entry_key("none"))
    assert proxy.stats().total_faults == before


def test_labelled_listeners_share_the_plan_and_count_apart(local_stack, make_fault_proxy, bucket):
    proxy = make_fault_proxy(seed=5, labels=("w0", "w1"))
    assert proxy.endpoint("w0") != proxy.endpoint("w1")
    proxy.set_faults([FaultRule("500", 1.0, operation="HeadBucket")])
    for label, n in (("w0", 2), ("w1", 3)):
        for _ in range(n):
            with pytest.raises(botocore.exceptions.ClientError):
                s3(proxy.endpoint(label)).head_bucket(Bucket=bucket)
    assert proxy.stats().requests_by_label == {"w0": 2, "w1": 3}
    assert [e.label for e in proxy.events()] == ["w0", "w0", "w1", "w1", "w1"]
    assert all(e.kind == "500" and e.operation == "HeadBucket" for e in proxy.events())


def test_stop_closes_the_listeners(local_stack):
    proxy = FaultProxy(local_stack.endpoint, seed=0).start()
    endpoint = proxy.endpoint()
    s3(endpoint).list_buckets()
    proxy.stop()
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        s3(endpoint).list_buckets()


def test_bad_rules_are_refused():
    with pytest.raises(ValueError, match="kind"):
        FaultRule("teapot", 0.1)
    with pytest.raises(ValueError, match="rate"):
        FaultRule("500", 1.5)
    with pytest.raises(ValueError, match="service"):
        FaultRule("500", 0.1, service="sqs")


# --- what our clients make of a cut answer ----------------------------------------------------------


def test_a_dynamodb_answer_cut_short_is_never_taken_for_an_empty_one(fault_proxy, storage_options, s3_uri):
    """botocore's standard retry mode retries a DynamoDB answer whose CRC32 does not match, but once it
    retries no more (its attempts, here all 7 cut short, or the client's retry quota spent) it parses what
    came, and JSON cut short parses as an empty answer: a GetItem said "no such item", a Query "no items".
    The 35% fault suite met it as an entry left incomplete for good (its next writer took it for absent and
    did not finish it). The CRC32 is checked on the answer botocore returns: a mismatch is a failed
    request (AmbiguousError), tried again where that is safe."""
    from logstore import open_log_store
    from logstore.aws import call, dynamodb_client
    from logstore.errors import AmbiguousError

    every_sdk_attempt = 7  # the first and the 6 retries the client allows
    open_log_store(s3_uri, storage_options=storage_options).write(0, b'{"commitInfo":{"n":0}}\n')
    reader = open_log_store(s3_uri, storage_options=fault_proxy.storage_options(storage_options))
    fault_proxy.set_faults([FaultRule("cut", 1.0, service="dynamodb", operation="GetItem", limit=every_sdk_attempt)])
    assert reader._get_entry(0) is not None
    fault_proxy.set_faults([FaultRule("cut", 1.0, service="dynamodb", operation="Query", limit=every_sdk_attempt)])
    assert reader._latest_entry() is not None
    fault_proxy.set_faults([FaultRule("cut", 1.0, service="dynamodb", operation="GetItem", limit=every_sdk_attempt)])
    with pytest.raises(AmbiguousError):
        call("dynamodb:GetItem", dynamodb_client(reader.options).get_item, TableName=reader.ddb_table,
             Key=reader._key(0), ConsistentRead=True)
    assert fault_proxy.stats().faults == {"cut": 3 * every_sdk_attempt}
