"""The credential-redacting log filter on the shapes credentials take in logs (the real botocore DEBUG
log of requests to the moto stack is in tests/integration/test_log_redaction.py)."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from logstore.redaction import (
    MASK,
    RedactingFilter,
    install_redaction,
    redact,
    remove_redaction,
)

KEY_ID = "ASIAQWERTYUIOPASDFGH"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc/def=="
SIGNATURE = "5f8502302bc4183eaf2bdf8c50f5167547ba8af0e02f00c9aabfc9dddf49a522"


@pytest.mark.parametrize("line", [
    # botocore.endpoint: the prepared request's headers
    f"headers={{'X-Amz-Date': b'20261123T103755Z', 'X-Amz-Security-Token': b'{TOKEN}', "
    f"'Authorization': b'AWS4-HMAC-SHA256 Credential={KEY_ID}/20261123/us-east-1/s3/aws4_request, "
    f"SignedHeaders=host;x-amz-date;x-amz-security-token, Signature={SIGNATURE}'}}",
    # botocore.auth: canonical request and signature
    f"CanonicalRequest:\nGET\n/bucket\n\nhost:127.0.0.1\nx-amz-security-token:{TOKEN}\n\nhost;x-amz-security-token",
    f"Signature:\n{SIGNATURE}",
    # presigned URLs, SigV4 and SigV2
    f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={KEY_ID}%2F20261123%2F"
    f"us-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=IQoJ%2B%2Fabc%3D&X-Amz-Signature={SIGNATURE}",
    f"http://127.0.0.1/b/k?AWSAccessKeyId={KEY_ID}&Signature=I5CK%2Bt3YWdu%3D&x-amz-security-token=IQoJ%2Bz",
    # STS / IMDS responses, config files, reprs
    f"b'<Credentials><AccessKeyId>{KEY_ID}</AccessKeyId><SecretAccessKey>{SECRET}</SecretAccessKey>"
    f"<SessionToken>{TOKEN}</SessionToken></Credentials>'",
    f'{{"AccessKeyId": "{KEY_ID}", "SecretAccessKey": "{SECRET}", "Token": "{TOKEN}"}}',
    f"aws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\naws_session_token = {TOKEN}",
    f"{{'aws_secret_access_key': '{SECRET}', 'aws_session_token': '{TOKEN}'}}",
    f"using access key {KEY_ID} from the environment",
])
def test_credentials_in_every_shape_are_masked(line):
    redacted = redact(line)
    for secret in (KEY_ID, SECRET, TOKEN, SIGNATURE, "IQoJ%2B", "I5CK%2B"):
        assert secret not in redacted
    assert MASK in redacted


def test_the_names_and_the_rest_of_the_line_stay():
    line = (f"'Authorization': b'AWS4-HMAC-SHA256 Credential={KEY_ID}/20261123/us-east-1/s3/aws4_request, "
            f"SignedHeaders=host;x-amz-date, Signature={SIGNATURE}'")
    assert redact(line) == ("'Authorization': b'AWS4-HMAC-SHA256 Credential=***, SignedHeaders=host;x-amz-date, "
                            "Signature=***'")
    assert redact(f"x-amz-security-token:{TOKEN}\n\nhost;x-amz-security-token\ne3b0c442") == (
        "x-amz-security-token:***\n\nhost;x-amz-security-token\ne3b0c442")


@pytest.mark.parametrize("harmless", [
    "Found credentials in environment variables.",
    "Calculating signature using v4 auth.",
    "ListObjectsV2 ContinuationToken=1ueGcxLPRx1Tr NextToken=abc",
    "SignedHeaders=host;x-amz-content-sha256;x-amz-date",
    "s3:PutObject on s3://bucket/table/_delta_log/00000000000000000001.json failed: SlowDown",
])
def test_ordinary_lines_are_left_alone(harmless):
    assert redact(harmless) == harmless


def test_exact_secrets_are_masked_anywhere_but_short_ones_are_not():
    assert redact(f"odd place: {SECRET}!", [SECRET]) == "odd place: ***!"
    assert redact("testing the table", ["testing"]) == "testing the table"


def record(msg, args=(), exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("botocore.endpoint", logging.DEBUG, __file__, 1, msg, args, exc_info)


def test_the_filter_redacts_message_arguments_and_tracebacks_and_keeps_every_record():
    given = record("Sending http request: %s", ({"X-Amz-Security-Token": TOKEN.encode()},))
    assert RedactingFilter().filter(given) is True
    assert TOKEN not in given.getMessage() and "X-Amz-Security-Token': b'***'" in given.getMessage()
    try:
        raise RuntimeError(f"presigned https://h/k?X-Amz-Signature={SIGNATURE}")
    except RuntimeError:
        failed = record("request failed", exc_info=sys.exc_info())
    RedactingFilter().filter(failed)
    text = logging.Formatter().format(failed)
    assert SIGNATURE not in text and "X-Amz-Signature=***" in text and "RuntimeError" in text


def test_a_record_without_credentials_keeps_its_arguments():
    plain = record("read %d files of %s", (3, "s3://b/t"))
    RedactingFilter().filter(plain)
    assert plain.args == (3, "s3://b/t")


def test_a_malformed_record_passes_to_the_handler_which_reports_it():
    broken = record("two %s %s", ("one",))
    assert RedactingFilter().filter(broken) is True


def test_install_on_the_root_handlers_is_idempotent_and_removable():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        first = install_redaction(secrets=[SECRET])
        second = install_redaction(secrets=["another-long-secret"])
        assert [f for f in handler.filters if isinstance(f, RedactingFilter)] == [first]
        logging.getLogger("logstore.test").warning("secret %s and %s", SECRET, "another-long-secret")
        assert stream.getvalue() == "secret *** and ***\n"
        remove_redaction(first)
        remove_redaction(second)
        assert handler.filters == []
    finally:
        root.removeHandler(handler)


def test_redacting_twice_changes_nothing_more():
    line = (f"'X-Amz-Security-Token': b'{TOKEN}', 'Authorization': b'AWS4-HMAC-SHA256 Credential={KEY_ID}/"
            f"20261123/us-east-1/s3/aws4_request, Signature={SIGNATURE}' <SecretAccessKey>{SECRET}</SecretAccessKey>")
    once = redact(line, [SECRET, TOKEN, KEY_ID])
    assert redact(once, [SECRET, TOKEN, KEY_ID]) == once
    assert "'X-Amz-Security-Token': b'***'" in once and "<SecretAccessKey>***</SecretAccessKey>" in once
