"""The lean request path (logstore/lean.py) against botocore, its independent expectation: the same
signatures, the same answers from moto, and through the fault proxy the same project errors with the same
``retried`` flags (so the ambiguity rules of logstore/aws.py hold unchanged)."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.session
import pytest

from logstore import aws, lean
from logstore.aws import ConditionFailed, ObjectNotFound, call
from logstore.errors import AccessDeniedError, AmbiguousError, ConfigurationError, provably_refused
from logstore.options import StorageOptions
from tests.support.fault_proxy import FaultRule

FIXED = dt.datetime(2026, 3, 4, 5, 6, 7)


def both(options: dict[str, str], service: str, monkeypatch) -> dict:
    """The lean client and the plain botocore client for ``options``."""
    resolved = StorageOptions.resolve(options)
    clients = {}
    for kind in ("lean", "botocore"):
        monkeypatch.setenv(lean.CLIENT_ENV, kind)
        clients[kind] = aws._new_client_unlocked(service, resolved)
    return clients


def entry_key(name: str) -> dict:
    return {"tablePath": {"S": f"s3://lean-test/{name}"}, "fileName": {"S": "00000000000000000000.json"}}


# --- signatures ---------------------------------------------------------------------------------------


# AWS's SigV4 test suite (aws-sig-v4-test-suite, as shipped with the AWS CRT): its credentials, scope, time
# and the published signatures of three requests.
SUITE_TIME = dt.datetime(2015, 8, 30, 12, 36, 0)
SUITE_KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


@pytest.mark.parametrize("name,method,url,signature", [
    ("get-vanilla", "GET", "https://example.amazonaws.com/",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-query-order-key-case", "GET", "https://example.amazonaws.com/?Param2=value2&Param1=value1",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("post-vanilla", "POST", "https://example.amazonaws.com/",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
])
def test_signatures_match_the_aws_sigv4_test_suite(name, method, url, signature, monkeypatch):
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: SUITE_TIME)
    creds = botocore.credentials.ReadOnlyCredentials(*SUITE_KEYS, None)
    sent = lean._Signer("service", "us-east-1", lambda: creds).sign(method, url, {}, b"")
    assert sent["X-Amz-Date"] == "20150830T123600Z"
    assert sent["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={signature}")


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLETOKEN"])
@pytest.mark.parametrize("service,method,url,headers,body,unsigned", [
    ("s3", "PUT", "https://b.s3.eu-west-1.amazonaws.com/t/_delta_log/00000000000000000001.json",
     {"if-none-match": "*", "content-length": "5", "x-amz-checksum-crc32": "NhCmhg=="}, b"hello",
     "x-amz-checksum-crc32"),
    ("s3", "PUT", "http://127.0.0.1:9000/bucket/t/_delta_log/00000000000000000001.json",
     {"if-none-match": "*", "content-length": "5", "x-amz-checksum-crc32": "NhCmhg=="}, b"hello", None),
    ("s3", "GET", "http://127.0.0.1:9000/bucket/a%20key/with%2Bplus%3D.parquet", {}, b"", None),
    ("s3", "GET", "http://127.0.0.1:9000/bucket?continuation-token=a%2Fb%3D&list-type=2&prefix=t%2F_delta_log%2F",
     {}, b"", None),
    ("dynamodb", "POST", "https://dynamodb.eu-west-1.amazonaws.com/",
     {"content-type": "application/x-amz-json-1.0", "x-amz-target": "DynamoDB_20120810.PutItem"}, b'{"a":1}', None),
])
def test_signatures_are_those_of_botocores_clients(service, method, url, headers, body, unsigned, token, monkeypatch):
    """What the lean path signs is what botocore's own S3 and DynamoDB clients sign for the same request:
    over TLS with a checksum header S3's payload is left unsigned, over plain HTTP it is hashed."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: FIXED)
    creds = botocore.credentials.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    mine = lean._Signer(service, "eu-west-1", creds.get_frozen_credentials).sign(
        method, url, dict(headers), body, unsigned_payload=unsigned)

    client = botocore.session.get_session().create_client(
        service, region_name="eu-west-1", aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key, aws_session_token=token)
    theirs = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    if unsigned:  # what botocore's S3 client tells its signer for PutObject (auth type v4-unsigned-body)
        theirs.context["checksum"] = {"request_algorithm": {"in": "header", "name": unsigned}}
        theirs.context["payload_signing_enabled"] = False
    client._request_signer.sign("PutObject" if service == "s3" else "PutItem", theirs)
    assert mine["Authorization"] == theirs.headers["Authorization"]
    assert mine.get("X-Amz-Security-Token") == theirs.headers.get("X-Amz-Security-Token")
    if service == "s3":
        expected = "UNSIGNED-PAYLOAD" if unsigned else hashlib.sha256(body).hexdigest()
        assert mine["X-Amz-Content-SHA256"] == theirs.headers["X-Amz-Content-SHA256"] == expected


@pytest.mark.parametrize("service,url", [
    ("s3", "http://127.0.0.1:9000/bucket/t/_delta_log/00000000000000000001.json"),
    ("s3", "https://b.s3.eu-west-1.amazonaws.com:443/t/k"),
    ("dynamodb", "https://dynamodb.eu-west-1.amazonaws.com/"),
])
def test_a_signer_kept_across_days_signs_each_day_as_botocore_does(service, url, monkeypatch):
    """The lean signer keeps the day's signing key and is handed the Host header it sends: across midnight
    (and back to an earlier day) each request still carries the signature of botocore's own signer, made
    fresh for that request."""
    creds = botocore.credentials.ReadOnlyCredentials(*SUITE_KEYS, None)
    signer = lean._Signer(service, "eu-west-1", lambda: creds)
    base = url.split("/", 3)
    host = lean.host_header("/".join(base[:3]))
    for moment in (FIXED, FIXED + dt.timedelta(hours=23), FIXED + dt.timedelta(days=1), FIXED):
        monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda moment=moment: moment)
        mine = signer.sign("PUT", url, {"content-length": "5"}, b"hello", host=host)
        kind = botocore.auth.S3SigV4Auth if service == "s3" else botocore.auth.SigV4Auth
        theirs = botocore.awsrequest.AWSRequest(method="PUT", url=url, data=b"hello", headers={"content-length": "5"})
        kind(creds, service, "eu-west-1").add_auth(theirs)
        assert mine["Authorization"] == theirs.headers["Authorization"]
        assert mine["host"] == botocore.auth._host_from_url(url)


def test_http_dates_read_as_the_standard_library_reads_them():
    """``Last-Modified`` read by position in its usual form, as ``email.utils`` reads it in every form."""
    from email.utils import format_datetime, parsedate_to_datetime
    import random

    rng = random.Random(23)
    texts = [format_datetime(dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
                             + dt.timedelta(seconds=rng.randrange(0, 6_000_000_000)), usegmt=True) for _ in range(2000)]
    texts += ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 +0100"]
    for text in texts:
        mine, theirs = lean._http_time(text), parsedate_to_datetime(text)
        assert (mine, mine.utcoffset()) == (theirs, theirs.utcoffset()), text
    with pytest.raises(ValueError):
        lean._http_time("Wed, 30 Feb 1994 08:49:37 GMT")


def test_addressing():
    def s3(endpoint):
        return lean.LeanS3Client(endpoint=endpoint, region="eu-west-1", credentials_source=lambda: None,
                                 fallback=None, before=lambda: None, total_attempts=1, read_timeout=1)

    assert s3(None)._where("my-bucket", "a b/c")[:2] == ("my-bucket.s3.eu-west-1.amazonaws.com", "/a%20b/c")
    assert s3(None)._where("my.bucket", "k")[:2] == ("s3.eu-west-1.amazonaws.com", "/my.bucket/k")
    assert s3("http://127.0.0.1:9000")._where("my-bucket", "k") == (
        "127.0.0.1:9000", "/my-bucket/k", "http://127.0.0.1:9000")


def test_the_client_switch(monkeypatch, storage_options):
    options = StorageOptions.resolve(storage_options)
    monkeypatch.setenv(lean.CLIENT_ENV, "botocore")
    assert not isinstance(aws._new_client_unlocked("s3", options), lean.LeanClient)
    monkeypatch.setenv(lean.CLIENT_ENV, "curl")
    with pytest.raises(ConfigurationError, match="DYNACOMMIT_AWS_CLIENT must be one of lean, botocore"):
        aws._new_client_unlocked("s3", options)


# --- the same answers ---------------------------------------------------------------------------------


def test_s3_answers_are_botocores(local_stack, storage_options, monkeypatch):
    clients = both(storage_options, "s3", monkeypatch)
    bucket = local_stack.bucket
    prefix = f"lean/{uuid.uuid4().hex}/"
    for i, (kind, client) in enumerate(clients.items()):
        key = f"{prefix}{kind} ü+=&?.bin"
        client.put_object(Bucket=bucket, Key=key, Body=b"x" * (i + 3))
        with pytest.raises(ConditionFailed) as refused:
            call("s3:PutObject", client.put_object, Bucket=bucket, Key=key, Body=b"y", IfNoneMatch="*")
        assert not refused.value.retried
    lean_client, boto = clients["lean"], clients["botocore"]
    for key in (f"{prefix}lean ü+=&?.bin", f"{prefix}botocore ü+=&?.bin"):
        mine, theirs = lean_client.get_object(Bucket=bucket, Key=key), boto.get_object(Bucket=bucket, Key=key)
        assert mine["Body"].read() == theirs["Body"].read() and mine["ETag"] == theirs["ETag"]
        mine, theirs = lean_client.head_object(Bucket=bucket, Key=key), boto.head_object(Bucket=bucket, Key=key)
        assert (mine["ContentLength"], mine["LastModified"]) == (theirs["ContentLength"], theirs["LastModified"])
        # the answer's headers, looked up by botocore's lower-case names
        headers = [answer["ResponseMetadata"]["HTTPHeaders"] for answer in (mine, theirs)]
        assert [(h["etag"], h["content-length"]) for h in headers] == [(theirs["ETag"], str(theirs["ContentLength"]))] * 2
        etag = theirs["ETag"]
        assert call("s3:PutObject", lean_client.put_object, Bucket=bucket, Key=key, Body=b"z", IfMatch=etag)
        with pytest.raises(ConditionFailed):
            call("s3:PutObject", lean_client.put_object, Bucket=bucket, Key=key, Body=b"w", IfMatch=etag)
    with pytest.raises(ObjectNotFound):
        call("s3:GetObject", lean_client.get_object, Bucket=bucket, Key=prefix + "missing")
    with pytest.raises(ObjectNotFound):
        call("s3:HeadObject", lean_client.head_object, Bucket=bucket, Key=prefix + "missing")

    def listing(client, **extra):
        pages, token = [], None
        while True:
            kwargs = {"ContinuationToken": token} if token else {}
            page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, **kwargs, **extra)
            pages.append([(o["Key"], o["Size"], o["LastModified"]) for o in page.get("Contents", [])])
            if not page["IsTruncated"]:
                return pages
            token = page["NextContinuationToken"]

    assert listing(lean_client) == listing(boto) and len(listing(lean_client)[0]) == 2
    assert listing(lean_client, MaxKeys=1) == listing(boto, MaxKeys=1)  # botocore's: an argument not built here
    first = sorted(k for k, _, _ in listing(boto)[0])[0]
    assert (lean_client.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=first)["Contents"][0]["Key"]
            == boto.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=first)["Contents"][0]["Key"])
    answer = lean_client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k, _, _ in listing(boto)[0]],
                                                                "Quiet": True})
    assert "Errors" not in answer and listing(boto) == [[]]


def test_dynamodb_answers_are_botocores(local_stack, storage_options, monkeypatch):
    clients = both(storage_options, "dynamodb", monkeypatch)
    table = local_stack.ddb_table
    name = uuid.uuid4().hex
    answers = {}
    for kind, client in clients.items():  # the same item, written and deleted by one client, then the other
        key = entry_key(name)
        item = {**key, "tempPath": {"S": ".tmp/x"}, "complete": {"S": "false"}}
        client.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(fileName)")
        with pytest.raises(ConditionFailed) as lost:
            call("dynamodb:PutItem", client.put_item, TableName=table, Item=item,
                 ConditionExpression="attribute_not_exists(fileName)", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        updated = client.update_item(TableName=table, Key=key, UpdateExpression="SET complete = :t",
                                     ConditionExpression="complete = :f", ReturnValues="ALL_OLD",
                                     ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"}})
        got = client.get_item(TableName=table, Key=key, ConsistentRead=True)
        queried = client.query(TableName=table, KeyConditionExpression="tablePath = :tp", ConsistentRead=True,
                               ExpressionAttributeValues={":tp": key["tablePath"]}, ScanIndexForward=False, Limit=1)
        client.delete_item(TableName=table, Key=key)
        gone = client.get_item(TableName=table, Key=key, ConsistentRead=True)
        answers[kind] = (lost.value.item, lost.value.retried, updated["Attributes"], got["Item"],
                         queried["Items"], queried.get("Count"), "Item" in gone)
    mine = answers["lean"]
    assert mine == answers["botocore"]
    assert mine[0]["tempPath"] == {"S": ".tmp/x"} and mine[1] is False and mine[-1] is False


# --- the same errors through the fault proxy ----------------------------------------------------------


def outcome(fn, operation: str, **kwargs):
    try:
        result = call(operation, fn, **kwargs)
    except Exception as exc:  # the project's error: its type and flags are the outcome
        return type(exc).__name__, exc.retried, provably_refused(exc)
    return "ok", int(result["ResponseMetadata"]["RetryAttempts"]) > 0, None


@pytest.mark.parametrize("kind", ["500", "503", "throttle", "drop_before", "drop_after", "cut", "denied"])
def test_a_fault_on_the_first_attempt_of_a_conditional_put_item(kind, fault_proxy, local_stack, monkeypatch):
    """drop_after and cut are the ambiguity rule's case: the lost first attempt landed, so the retry's refusal
    carries retried=True and is not a proof of refusal."""
    clients = both(fault_proxy.storage_options(local_stack.storage_options()), "dynamodb", monkeypatch)
    seen = {}
    for client_kind, client in clients.items():
        fault_proxy.set_faults([FaultRule(kind, 1.0, service="dynamodb", operation="PutItem", limit=1)])
        key = entry_key(uuid.uuid4().hex)
        seen[client_kind] = outcome(
            client.put_item, "dynamodb:PutItem", TableName=local_stack.ddb_table,
            Item={**key, "tempPath": {"S": ".tmp/x"}, "complete": {"S": "false"}},
            ConditionExpression="attribute_not_exists(fileName)", ReturnValuesOnConditionCheckFailure="ALL_OLD")
    assert seen["lean"] == seen["botocore"]
    expected = {"denied": (AccessDeniedError.__name__, False, True),
                "drop_after": (ConditionFailed.__name__, True, False), "cut": (ConditionFailed.__name__, True, False)}
    assert seen["lean"] == expected.get(kind, ("ok", True, None))


@pytest.mark.parametrize("kind", ["500", "throttle", "drop_after", "cut", "denied"])
def test_a_fault_on_the_first_attempt_of_s3_requests(kind, fault_proxy, local_stack, monkeypatch):
    clients = both(fault_proxy.storage_options(local_stack.storage_options()), "s3", monkeypatch)
    bucket = local_stack.bucket
    seen = {}
    for client_kind, client in clients.items():
        key = f"lean/{uuid.uuid4().hex}"
        fault_proxy.set_faults([FaultRule(kind, 1.0, service="s3", operation="PutObject", limit=1)])
        put = outcome(client.put_object, "s3:PutObject", Bucket=bucket, Key=key, Body=b"abc", IfNoneMatch="*")
        fault_proxy.set_faults([FaultRule(kind, 1.0, service="s3", operation="GetObject", limit=1)])

        def read(client=client, **kw):
            answer = client.get_object(**kw)
            assert answer["Body"].read() == b"abc"
            return answer

        seen[client_kind] = (put, outcome(read, "s3:GetObject", Bucket=bucket, Key=key))
    if kind == "cut":
        # botocore hands the body over unread and cannot retry a stream cut short; the lean client reads it
        # within the attempt, so a GET cut short is tried again like any failed read.
        assert seen["botocore"][1] == ("AmbiguousError", False, False)
        assert seen["lean"] == (seen["botocore"][0], ("ok", True, None))
    else:
        assert seen["lean"] == seen["botocore"]


def test_errors_after_every_attempt_failed_and_the_deadline(fault_proxy, local_stack, monkeypatch):
    clients = both(fault_proxy.storage_options(local_stack.storage_options()), "dynamodb", monkeypatch)
    lean_client = clients["lean"]
    fault_proxy.set_faults([FaultRule("500", 1.0, service="dynamodb")])
    fault_proxy.reset_counters()
    with pytest.raises(AmbiguousError) as failed:
        call("dynamodb:GetItem", lean_client.get_item, TableName=local_stack.ddb_table, Key=entry_key("x"))
    assert failed.value.retried and fault_proxy.stats().total_requests == lean_client.total_attempts == 7
    fault_proxy.set_faults([FaultRule("drop_before", 1.0, service="dynamodb")])
    with pytest.raises(AmbiguousError, match="got no usable answer"):
        call("dynamodb:GetItem", lean_client.get_item, TableName=local_stack.ddb_table, Key=entry_key("x"))


def test_no_credentials_is_a_refusal_before_anything_is_sent(fault_proxy, local_stack):
    client = lean.LeanDynamoDBClient(endpoint=fault_proxy.endpoint(), region="us-east-1",
                                     credentials_source=lambda: None, fallback=None, before=aws._before_send,
                                     total_attempts=3, read_timeout=5)
    fault_proxy.reset_counters()
    with pytest.raises(ConfigurationError, match="no usable AWS credentials") as info:
        call("dynamodb:GetItem", client.get_item, TableName=local_stack.ddb_table, Key=entry_key("x"))
    assert provably_refused(info.value) and fault_proxy.stats().total_requests == 0


def test_a_proxy_in_the_environment_leaves_the_client_to_botocore(monkeypatch, storage_options):
    options = StorageOptions.resolve(storage_options)
    monkeypatch.delenv(lean.CLIENT_ENV, raising=False)
    assert isinstance(aws._new_client_unlocked("s3", options), lean.LeanClient)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "")
    assert not isinstance(aws._new_client_unlocked("s3", options), lean.LeanClient)
