"""Bad input gets a typed error that names the problem and what to do; nothing committed changes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from logstore import (
    ConfigurationError,
    CorruptLogError,
    StorageOptions,
    TableUri,
    open_log_store,
)
from logstore.admin import create_ddb_table, doctor
from logstore.aws import call, dynamodb_client


@pytest.mark.parametrize("uri,fragment", [
    ("", "non-empty"),
    ("bucket/path", "no scheme"),
    ("gs://bucket/t", "scheme 'gs'"),
    ("s3:///t", "no bucket"),
    ("s3://key:secret@bucket/t", "credentials"),
    ("s3://bucket/a/../b", "'..'"),
    ("s3://bucket/t?x=1", "query"),
])
def test_malformed_uris_are_refused_by_name(uri, fragment):
    with pytest.raises(ConfigurationError, match="URI") as info:
        open_log_store(uri)
    assert fragment in str(info.value)


def test_table_path_is_the_uri_as_written_without_trailing_slash():
    assert TableUri.parse("s3a://b/x//y/").table_path == "s3a://b/x/y"
    assert TableUri.parse("s3://b/x/y").table_path == "s3://b/x/y"
    assert TableUri.parse("s3://b/dir with space/é").table_path == "s3://b/dir with space/é"
    assert TableUri.parse("s3://b/x/y").key("_delta_log/") == "x/y/_delta_log/"


def test_unknown_storage_option_is_named():
    with pytest.raises(ConfigurationError, match="AWS_REGON"):
        StorageOptions.resolve({"AWS_REGON": "us-east-1"})


def test_non_string_option_and_plain_http_are_refused():
    with pytest.raises(TypeError, match="must be a string"):
        StorageOptions.resolve({"AWS_ALLOW_HTTP": True})
    with pytest.raises(ConfigurationError, match="AWS_ALLOW_HTTP"):
        StorageOptions.resolve({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    with pytest.raises(ConfigurationError, match="AWS_S3_LOCKING_PROVIDER"):
        StorageOptions.resolve({"AWS_S3_LOCKING_PROVIDER": "none"})


def test_options_fall_back_to_environment_and_dynamodb_endpoint_to_s3_endpoint(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.test")
    monkeypatch.setenv("DELTA_DYNAMO_TABLE_NAME", "from_env")
    resolved = StorageOptions.resolve({"AWS_REGION": "eu-west-1"})
    assert resolved.endpoint_url == "https://s3.example.test"
    assert resolved.dynamodb_endpoint_url == "https://s3.example.test"
    assert resolved.ddb_table_name == "from_env"
    assert resolved.region == "eu-west-1"


def test_options_repr_hides_secrets():
    resolved = StorageOptions.resolve({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"})
    assert "s3cr3t-value" not in repr(resolved) and "s3cr3t-value" not in str(resolved)


def test_missing_dynamodb_table_says_how_to_create_it(local_stack):
    options = dict(local_stack.storage_options(), DELTA_DYNAMO_TABLE_NAME="no_such_table")
    store = open_log_store(f"s3://{local_stack.bucket}/t/{uuid.uuid4().hex}", storage_options=options)
    with pytest.raises(ConfigurationError, match="create-ddb-table"):
        store.write(0, b"{}\n")


def test_missing_bucket_is_named(local_stack):
    store = open_log_store("s3://no-such-bucket-dc/t", storage_options=local_stack.storage_options())
    with pytest.raises(ConfigurationError, match="bucket"):
        store.write(0, b"{}\n")


def _make_table(local_stack, name, key_schema, attrs):
    client = dynamodb_client(local_stack.options())
    call("dynamodb:CreateTable", client.create_table, TableName=name, KeySchema=key_schema,
         AttributeDefinitions=attrs, BillingMode="PAY_PER_REQUEST")
    return dict(local_stack.storage_options(), DELTA_DYNAMO_TABLE_NAME=name)


def test_wrong_key_schema_is_reported_by_write_doctor_and_create(local_stack):
    name = f"legacy_{uuid.uuid4().hex[:6]}"
    options = _make_table(local_stack, name, [{"AttributeName": "key", "KeyType": "HASH"}],
                          [{"AttributeName": "key", "AttributeType": "S"}])
    store = open_log_store(f"s3://{local_stack.bucket}/t/{uuid.uuid4().hex}", storage_options=options)
    with pytest.raises(ConfigurationError, match="key schema|tablePath"):
        store.write(0, b"{}\n")
    findings = [str(f) for f in doctor(StorageOptions.resolve(options))]
    assert any("[error] key schema" in f and "tablePath" in f for f in findings)
    with pytest.raises(ConfigurationError, match="wrong keys"):
        create_ddb_table(StorageOptions.resolve(options))


def test_create_ddb_table_is_idempotent_and_enables_ttl(local_stack):
    options = StorageOptions.resolve(dict(local_stack.storage_options(),
                                          DELTA_DYNAMO_TABLE_NAME=f"fresh_{uuid.uuid4().hex[:6]}"))
    first = create_ddb_table(options)
    second = create_ddb_table(options)
    assert first.created and not second.created
    assert first.ttl_enabled and second.ttl_enabled
    checks = {f.check: f.severity.value for f in doctor(options)}
    assert checks == {"key schema": "ok", "billing": "ok", "ttl": "ok"}


def test_doctor_warns_about_provisioned_billing_missing_ttl_and_other_uri_spellings(local_stack):
    name = f"prov_{uuid.uuid4().hex[:6]}"
    client = dynamodb_client(local_stack.options())
    call("dynamodb:CreateTable", client.create_table, TableName=name,
         KeySchema=[{"AttributeName": "tablePath", "KeyType": "HASH"}, {"AttributeName": "fileName", "KeyType": "RANGE"}],
         AttributeDefinitions=[{"AttributeName": "tablePath", "AttributeType": "S"},
                               {"AttributeName": "fileName", "AttributeType": "S"}],
         ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5})
    options = dict(local_stack.storage_options(), DELTA_DYNAMO_TABLE_NAME=name)
    path = f"{local_stack.bucket}/t/{uuid.uuid4().hex}"
    open_log_store(f"s3a://{path}", storage_options=options).write(0, b"{}\n")
    findings = doctor(StorageOptions.resolve(options), TableUri.parse(f"s3://{path}"))
    by_check = {}
    for f in findings:
        by_check.setdefault(f.check, []).append(f)
    assert by_check["billing"][0].severity.value == "warning"
    assert by_check["ttl"][0].severity.value == "warning"
    assert any(f"s3a://{path}" in f.message for f in by_check["uri spelling"])


def test_item_with_a_malformed_file_name_is_a_corrupt_log_error(local_stack):
    uri = f"s3://{local_stack.bucket}/t/{uuid.uuid4().hex}"
    store = open_log_store(uri, storage_options=local_stack.storage_options())
    store.write(0, b"{}\n")
    client = dynamodb_client(local_stack.options())
    call("dynamodb:PutItem", client.put_item, TableName="delta_log", Item={
        "tablePath": {"S": uri}, "fileName": {"S": "9.json"}, "tempPath": {"S": ".tmp/x"}, "complete": {"S": "true"}})
    with pytest.raises(CorruptLogError) as info:
        store.latest_version()
    assert "'9.json'" in str(info.value) and uri in str(info.value)
    assert store.read(0) == b"{}\n"


def test_import_logstore_needs_neither_pyarrow_nor_pyspark():
    code = (
        "import sys\n"
        "sys.modules['pyarrow'] = None\n"
        "sys.modules['pyspark'] = None\n"
        "import logstore\n"
        "import tests.support.memory\n"  # the in-process memory:// scheme (test machinery)
        "s = logstore.open_log_store('memory://b/t')\n"
        "s.write(0, b'{}\\n')\n"
        "assert s.latest_version() == 0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])
