"""No credential in a real botocore DEBUG log: requests to the moto stack signed with a session token, and
an STS response carrying a secret key, through the ``dynacommit --debug`` command and through
:func:`logstore.redaction.install_redaction` as a library user installs it."""

from __future__ import annotations

import io
import logging
import secrets
import string
from urllib.parse import quote

import boto3
import pyarrow as pa
import pytest

from logstore.redaction import install_redaction, remove_redaction
from table import write_table
from table.cli import main


def session_credentials() -> dict[str, str]:
    """Fresh credentials shaped like STS's (moto accepts any)."""
    upper = string.ascii_uppercase + string.digits
    return {
        "AWS_ACCESS_KEY_ID": "ASIA" + "".join(secrets.choice(upper) for _ in range(16)),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30)[:40],
        "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2Vj" + secrets.token_urlsafe(200).replace("-", "+").replace("_", "/"),
    }


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


@pytest.mark.parametrize("client", ["botocore", "lean"])
def test_debug_log_of_the_command_shows_no_key_secret_token_or_signature(s3_uri, storage_options, capsys, client,
                                                                         monkeypatch):
    """Through boto3 (``DYNACOMMIT_AWS_CLIENT=botocore``, and the requests it still sends by default) and
    through the lean client, which logs a line per request and never its headers."""
    monkeypatch.setenv("DYNACOMMIT_AWS_CLIENT", client)  # fresh credentials: new clients are built
    write_table(s3_uri, pa.table({"x": [1]}), storage_options=storage_options)
    credentials = session_credentials()
    options = {**storage_options, **credentials}
    assert main(["history", s3_uri, "--debug", *flags(options)]) == 0
    err = capsys.readouterr().err
    if client == "botocore":
        # the requests were logged, signed with the session token ...
        assert "botocore.endpoint" in err and "x-amz-security-token:***" in err.lower()
        assert "'X-Amz-Security-Token': b'***'" in err and "Credential=***" in err and "Signature:\n***" in err
    else:
        assert "logstore.lean" in err and "_delta_log/00000000000000000000.json (attempt 1): 200" in err
    # ... and no credential shows, raw or URL-encoded
    for value in credentials.values():
        assert value not in err and quote(value, safe="") not in err


def test_install_redaction_keeps_sts_credentials_out_of_a_library_users_log(local_stack):
    raw, redacted = io.StringIO(), io.StringIO()
    unfiltered, filtered = logging.StreamHandler(raw), logging.StreamHandler(redacted)
    root = logging.getLogger()
    saved_level = root.level
    # The unfiltered handler comes first: it writes each record before the filter of the second changes it.
    root.addHandler(unfiltered)
    root.addHandler(filtered)
    root.setLevel(logging.DEBUG)
    redacting = install_redaction(handlers=[filtered])
    try:
        sts = boto3.client("sts", endpoint_url=local_stack.endpoint, region_name="us-east-1",
                           aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="example-secret-key-0123")
        issued = sts.get_session_token()["Credentials"]
        s3 = boto3.client("s3", endpoint_url=local_stack.endpoint, region_name="us-east-1",
                          aws_access_key_id=issued["AccessKeyId"], aws_secret_access_key=issued["SecretAccessKey"],
                          aws_session_token=issued["SessionToken"])
        s3.list_objects_v2(Bucket=local_stack.bucket, MaxKeys=1)
        url = s3.generate_presigned_url("get_object", Params={"Bucket": local_stack.bucket, "Key": "k"})
        logging.getLogger("table.test").debug("handing out %s", url)
    finally:
        remove_redaction(redacting, handlers=[filtered])
        root.removeHandler(unfiltered)
        root.removeHandler(filtered)
        root.setLevel(saved_level)
    secret, token, key_id = issued["SecretAccessKey"], issued["SessionToken"], issued["AccessKeyId"]
    assert secret in raw.getvalue() and token in raw.getvalue()  # botocore did log them
    for value in (secret, token, key_id, quote(token, safe=""), "AKIAIOSFODNN7EXAMPLE"):
        assert value not in redacted.getvalue()
    assert "<SecretAccessKey>***</SecretAccessKey>" in redacted.getvalue()
    assert "Signature=***" in redacted.getvalue() and "x-amz-security-token=***" in redacted.getvalue()
