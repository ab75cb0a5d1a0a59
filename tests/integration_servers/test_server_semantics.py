"""What the log store and the staging path need from S3 and DynamoDB, asked of SeaweedFS and dynalite.

The S3 checks go both through our ObjectStore and through boto3 directly, so a failure shows the
server's own answer (status and error code) rather than our translation of it.
"""

from __future__ import annotations

import threading
import uuid

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from logstore import (
    Part,
    StorageError,
    VersionExistsError,
    open_log_store,
    open_object_store,
)
from logstore import dynamodb
from logstore.admin import Severity, doctor
from logstore.external import CommitEntry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIB = 1024 * 1024


@pytest.fixture
def objects(servers):
    return open_object_store(f"s3://{servers.bucket}/semantics", storage_options=servers.storage_options())


@pytest.fixture
def prefix() -> str:
    return f"semantics/{uuid.uuid4().hex[:12]}/"


def raw_s3(servers):
    options = servers.options()
    return boto3.client("s3", endpoint_url=options.endpoint_url, region_name=options.region,
                        aws_access_key_id=options.access_key_id, aws_secret_access_key=options.secret_access_key,
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def raw_dynamodb(servers):
    options = servers.options()
    return boto3.client("dynamodb", endpoint_url=options.dynamodb_endpoint_url, region_name=options.region,
                        aws_access_key_id=options.access_key_id, aws_secret_access_key=options.secret_access_key,
                        config=Config(retries={"max_attempts": 1}))


# ---------------------------------------------------------------------------------------- S3 (SeaweedFS)

def test_put_if_none_match_on_an_existing_key_is_refused_with_412(servers, prefix):
    s3, key = raw_s3(servers), prefix + "00000000000000000000.json"
    s3.put_object(Bucket=servers.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as info:
        s3.put_object(Bucket=servers.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.get_object(Bucket=servers.bucket, Key=key)["Body"].read() == b"first"


def test_object_store_put_if_absent_reports_whether_it_wrote(objects, prefix):
    key = prefix + "k.json"
    assert objects.put(key, b"one", if_absent=True) is True
    assert objects.put(key, b"two", if_absent=True) is False
    assert objects.get(key) == b"one"


def test_conditional_puts_racing_in_eight_threads_have_exactly_one_winner(objects, prefix):
    for round_ in range(3):
        key = prefix + f"{round_:020d}.json"
        barrier, won, errors = threading.Barrier(8), [], []

        def put(n: int) -> None:
            barrier.wait()
            try:
                if objects.put(key, f"writer {n}".encode(), if_absent=True):
                    won.append(n)
            except Exception as exc:  # collected and asserted empty below
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(won) == 1
        assert objects.get(key) == f"writer {won[0]}".encode()


def _upload(objects, key: str, sizes: list[int]) -> tuple[str, list[Part], bytes]:
    upload_id = objects.create_upload(key).upload_id
    parts, data = [], b""
    for number, size in enumerate(sizes, start=1):
        chunk = bytes([number]) * size
        parts.append(Part(number, objects.upload_part(key, upload_id, number, chunk)))
        data += chunk
    return upload_id, parts, data


def test_multipart_upload_is_invisible_until_completed(objects, prefix):
    key = prefix + "part-00000-job-c000.snappy.parquet"
    upload_id, parts, data = _upload(objects, key, [5 * MIB, 1234])
    assert objects.head(key) is None
    assert [o.key for o in objects.list(prefix)] == []
    assert [(u.key, u.upload_id) for u in objects.list_uploads(prefix)] == [(key, upload_id)]
    objects.complete_upload(key, upload_id, parts)
    assert objects.head(key).size == len(data)
    assert objects.get(key) == data
    assert objects.list_uploads(prefix) == []


def test_aborted_upload_leaves_neither_object_nor_upload(objects, prefix):
    kept, dropped = prefix + "kept.parquet", prefix + "dropped.parquet"
    kept_id, _, _ = _upload(objects, kept, [1000])
    dropped_id, _, _ = _upload(objects, dropped, [1000])
    assert sorted(u.upload_id for u in objects.list_uploads(prefix)) == sorted([kept_id, dropped_id])
    objects.abort_upload(dropped, dropped_id)
    assert [u.upload_id for u in objects.list_uploads(prefix)] == [kept_id]
    assert objects.head(dropped) is None
    objects.abort_upload(dropped, dropped_id)  # a second abort is harmless
    objects.abort_upload(kept, kept_id)
    assert objects.list_uploads(prefix) == []


def test_completing_with_a_wrong_part_etag_is_refused(objects, prefix):
    key = prefix + "bad-etag.parquet"
    upload_id, parts, _ = _upload(objects, key, [5 * MIB, 10])
    wrong = [parts[0], Part(2, '"00000000000000000000000000000000"')]
    with pytest.raises(StorageError) as info:
        objects.complete_upload(key, upload_id, wrong)
    assert info.value.code == "InvalidPart"
    assert objects.head(key) is None
    objects.abort_upload(key, upload_id)


# ----------------------------------------------------------------------------------- DynamoDB (dynalite)

def test_dynalite_answers_every_call_the_log_store_makes(servers):
    ddb, table = raw_dynamodb(servers), servers.ddb_table
    path = f"s3://{servers.bucket}/raw/{uuid.uuid4().hex[:12]}"

    def key(v: int) -> dict:
        return {"tablePath": {"S": path}, "fileName": {"S": f"{v:020d}.json"}}

    def put(v: int, temp: str) -> None:
        ddb.put_item(TableName=table, Item={**key(v), "tempPath": {"S": temp}, "complete": {"S": "false"}},
                     ConditionExpression="attribute_not_exists(fileName)")

    def complete(v: int) -> None:
        ddb.update_item(TableName=table, Key=key(v), UpdateExpression="SET complete = :t, expireTime = :e",
                        ConditionExpression="complete = :f",
                        ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"}, ":e": {"N": "99"}})

    for v in range(3):
        put(v, f"t{v}")
    with pytest.raises(botocore.exceptions.ClientError) as taken:
        put(1, "other")
    assert taken.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    complete(1)
    with pytest.raises(botocore.exceptions.ClientError) as again:
        complete(1)
    assert again.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    item = ddb.get_item(TableName=table, Key=key(1), ConsistentRead=True)["Item"]
    assert item["tempPath"] == {"S": "t1"} and item["complete"] == {"S": "true"} and item["expireTime"] == {"N": "99"}
    newest = ddb.query(TableName=table, KeyConditionExpression="tablePath = :tp",
                       ExpressionAttributeValues={":tp": {"S": path}}, ScanIndexForward=False, Limit=1,
                       ConsistentRead=True)["Items"]
    assert [i["fileName"]["S"] for i in newest] == [f"{2:020d}.json"]


def test_setup_on_dynalite_works_without_ttl_and_doctor_warns(servers):
    """dynalite has no UpdateTimeToLive and reports TTL as DISABLED: set-up must go on and say so."""
    report = servers.setup
    assert report.created
    assert not report.ttl_enabled
    assert any("UnknownOperationException" in note and "expireTime" in note for note in report.notes)
    findings = {f.check: f for f in doctor(servers.options())}
    assert findings["key schema"].severity is Severity.OK
    assert findings["ttl"].severity is Severity.WARNING


def test_commit_entries_survive_a_dynalite_restart(servers, tmp_path):
    """dynalite keeps its tables on disk: an entry won before a restart still decides the version after."""
    from infra.servers import Dynalite
    from logstore.admin import create_ddb_table
    from logstore.options import StorageOptions

    dynamodb = Dynalite(tmp_path / "dynalite").start()
    try:
        options = dict(servers.storage_options(), AWS_ENDPOINT_URL_DYNAMODB=dynamodb.endpoint)
        create_ddb_table(StorageOptions.resolve(options))
        uri = f"s3://{servers.bucket}/restart/{uuid.uuid4().hex[:12]}"
        store = open_log_store(uri, storage_options=options)
        store.write(0, b'{"n":0}\n')
        store.write(1, b'{"n":1}\n')
        # version 2 won but unfinished: only the DynamoDB entry says where its content is
        temp = ".tmp/00000000000000000002.json.before-restart"
        store._put_temp(temp, b'{"n":2}\n')
        store._put_entry(CommitEntry(store.table_path, 2, temp, complete=False))
        dynamodb.stop()
        assert any((tmp_path / "dynalite" / "db").iterdir())
        dynamodb.start()
        after = open_log_store(uri, storage_options=options)
        with pytest.raises(VersionExistsError):
            after.write(1, b'{"n":"again"}\n')
        assert after.latest_version() == 2
        assert after.read(2) == b'{"n":2}\n'
        assert after._get_entry(2).complete
    finally:
        dynamodb.stop()


def test_dynalite_returns_no_item_with_a_refused_put_and_a_lost_race_reads_it_once(servers, caplog):
    """dynalite ignores ReturnValuesOnConditionCheckFailure=ALL_OLD: the refusal comes without the item. The
    loser then reads the winning entry with one GetItem, which carries its commitSummary, and the process
    says so once."""
    ddb, table = raw_dynamodb(servers), servers.ddb_table
    path = f"s3://{servers.bucket}/raw/{uuid.uuid4().hex[:12]}"
    key = {"tablePath": {"S": path}, "fileName": {"S": f"{0:020d}.json"}}
    ddb.put_item(TableName=table, Item={**key, "tempPath": {"S": ".tmp/t0"}, "complete": {"S": "false"},
                                        "commitSummary": {"S": '{"k":"a"}'}})
    with pytest.raises(botocore.exceptions.ClientError) as taken:
        ddb.put_item(TableName=table, Item={**key, "tempPath": {"S": "t1"}, "complete": {"S": "false"}},
                     ConditionExpression="attribute_not_exists(fileName)", ReturnValuesOnConditionCheckFailure="ALL_OLD")
    assert "Item" not in taken.value.response  # what the fallback is for

    store = open_log_store(path, storage_options=servers.storage_options())
    store.objects.put(store.temp_key(".tmp/t0"), b'{"commitInfo":{"winner":true}}\n')  # the winner is alive
    caplog.set_level("INFO", logger="logstore.dynamodb")
    for attempt in range(2):
        with pytest.raises(VersionExistsError) as lost:
            store.write(0, b'{"commitInfo":{}}\n')
        assert lost.value.winner.temp_path == ".tmp/t0" and lost.value.winner.summary == '{"k":"a"}'
    said = [r for r in caplog.records if "ReturnValuesOnConditionCheckFailure" in r.getMessage()]
    assert len(said) <= 1  # once per process (an earlier test may have said it already)
    assert servers.storage_options()["AWS_ENDPOINT_URL_DYNAMODB"] in dynamodb._NO_ITEM_WARNED


def test_on_dynalite_a_kept_lost_race_reads_the_winner_once_after_the_finishing_wait(servers, monkeypatch):
    """With no item in dynalite's refusal, a write that keeps its temp file waits out the finishing time
    before it reads the winner back, so it finds the winner complete and its next version's check reads
    nothing: one GetItem for the loss. Before, it read the winner at once (still incomplete), waited, and
    read it again. The wait is this process's measured finishing time (fixed here), and the winner finishes
    during it (a sleep that completes it instead of passing time)."""
    from logstore import deadline
    from logstore.steps import PUBLISHED
    from logstore.writer import FINISHING_WAIT_MAX

    ddb, table = raw_dynamodb(servers), servers.ddb_table
    path = f"s3://{servers.bucket}/raw/{uuid.uuid4().hex[:12]}"
    store = open_log_store(path, storage_options=servers.storage_options())
    store.write(0, b'{"n":0}\n')
    store.wait_finished(30)
    winner = b'{"commitInfo":{"winner":true}}\n'
    store.objects.put(store.temp_key(".tmp/w1"), winner)
    key = {"tablePath": {"S": store.table_path}, "fileName": {"S": f"{1:020d}.json"}}
    ddb.put_item(TableName=table, Item={**key, "tempPath": {"S": ".tmp/w1"}, "complete": {"S": "false"}})

    events: list = []
    get_entry = store._get_entry

    def counted_get(version):
        events.append(("get", version))
        return get_entry(version)

    def winner_finishes(seconds):
        events.append(("wait",))
        if store.objects.head(store.commit_key(1)) is None:
            store.objects.put(store.commit_key(1), winner)
            ddb.update_item(TableName=table, Key=key, UpdateExpression="SET complete = :t",
                            ExpressionAttributeValues={":t": {"S": "true"}})

    monkeypatch.setattr(store, "_get_entry", counted_get)
    monkeypatch.setattr(deadline, "sleep", winner_finishes)
    monkeypatch.setattr(PUBLISHED, "finishing_seconds", lambda scope: FINISHING_WAIT_MAX)
    ours = b'{"commitInfo":{"ours":true}}\n'
    with pytest.raises(VersionExistsError) as lost:
        store.write(1, ours, keep_temp=True)
    assert lost.value.winner.temp_path == ".tmp/w1" and lost.value.kept.lost_to.complete
    store.write(2, ours, temp=lost.value.kept)
    assert events == [("wait",), ("get", 1)]  # before: a read, the wait, the same read again
    store.wait_finished(30)
    assert (store.read(1), store.read(2)) == (winner, ours)


def test_on_dynalite_a_deadline_during_the_wait_before_the_read_back_leaves_no_temp_file(servers, monkeypatch):
    """The wait before a kept lost race reads the winner back is bounded by the operation's deadline: when
    the deadline passes in it (a sleep that raises as ``deadline.sleep`` does then), the write fails with
    DeadlineExceededError, its refused put committed nothing, and its temp file is deleted, not left to the
    sweep."""
    from logstore import deadline
    from logstore.errors import DeadlineExceededError
    from logstore.steps import PUBLISHED
    from logstore.writer import FINISHING_WAIT_MAX

    ddb, table = raw_dynamodb(servers), servers.ddb_table
    path = f"s3://{servers.bucket}/raw/{uuid.uuid4().hex[:12]}"
    store = open_log_store(path, storage_options=servers.storage_options())
    store.write(0, b'{"n":0}\n')
    store.wait_finished(30)
    store.objects.put(store.temp_key(".tmp/w1"), b'{"commitInfo":{"winner":true}}\n')
    key = {"tablePath": {"S": store.table_path}, "fileName": {"S": f"{1:020d}.json"}}
    ddb.put_item(TableName=table, Item={**key, "tempPath": {"S": ".tmp/w1"}, "complete": {"S": "false"}})

    def deadline_passes(seconds):
        raise DeadlineExceededError("write", 1.0, "the deadline passed during the wait")

    monkeypatch.setattr(deadline, "sleep", deadline_passes)
    monkeypatch.setattr(PUBLISHED, "finishing_seconds", lambda scope: FINISHING_WAIT_MAX)
    with pytest.raises(DeadlineExceededError):
        store.write(1, b'{"commitInfo":{"ours":true}}\n', keep_temp=True)
    temps = [o.key for o in store.objects.list(store.temp_key(".tmp/"))]
    assert temps == [store.temp_key(".tmp/w1")]  # ours is gone; before, it was left behind
    assert store._get_entry(1).temp_path == ".tmp/w1"


def test_dynalite_answers_no_transaction_so_appends_race_as_before_said_once(servers, caplog):
    """dynalite has no TransactWriteItems: the one probe finds that out, the process says so once, and
    contended appends race for a version each (group commit, logstore/group.py, stays off)."""
    ddb = raw_dynamodb(servers)
    with pytest.raises(botocore.exceptions.ClientError):  # what the probe meets
        ddb.transact_write_items(TransactItems=[{"ConditionCheck": {
            "TableName": servers.ddb_table, "Key": {"tablePath": {"S": "x"}, "fileName": {"S": "y"}},
            "ConditionExpression": "attribute_not_exists(fileName)"}}])
    import pyarrow as pa

    from table import Table, write_table

    dynamodb._TRANSACTIONS.clear()
    caplog.set_level("INFO", logger="logstore.dynamodb")
    options = servers.storage_options()
    path = f"s3://{servers.bucket}/raw/{uuid.uuid4().hex[:12]}"
    write_table(path, pa.table({"w": ["creator"]}), storage_options=options)
    store = open_log_store(path, storage_options=options)
    assert store.group_commit_available() is False
    assert store.group_commit_available() is False
    said = [r for r in caplog.records if "does not answer TransactWriteItems" in r.getMessage()]
    assert len(said) == 1 and "group commit is off" in said[0].getMessage()
    # a lost race on dynalite: the loser goes to the next version of its own (no queue, no group)
    from logstore import failpoints

    fired: list = []

    def rival(name):
        if name == "logstore.write.before_put_entry" and not fired:
            fired.append(None)
            fired[0] = write_table(Table(path, storage_options=options), pa.table({"w": ["a"]}))
    failpoints.set_hook(rival)
    try:
        b = write_table(Table(path, storage_options=options), pa.table({"w": ["b"]}))
    finally:
        failpoints.set_hook(None)
    assert (fired[0].version, b.version) == (1, 2)
    assert b"groupCommit" not in store.read(2)
