"""Keeping AWS credentials out of logs: a :class:`logging.Filter` that redacts them.

botocore's DEBUG logs show what it signs and sends: the ``x-amz-security-token`` header (in the canonical
request and in the prepared request's headers), ``Authorization: AWS4-HMAC-SHA256 Credential=AKIA.../...,
Signature=...``, the signature itself, response bodies that carry credentials (STS ``<SecretAccessKey>``,
``<SessionToken>``), and presigned URLs with ``X-Amz-Signature``/``X-Amz-Security-Token``/``AWSAccessKeyId``
query parameters. :class:`RedactingFilter` replaces, in a record's message, its arguments and its
traceback:

- the value after any of those names (header, query parameter, XML element, JSON or ``repr`` key,
  ``aws_secret_access_key = ...`` in a config file) with ``***``;
- anything shaped like an AWS access key id (``AKIA``/``ASIA``... and 16 more characters);
- the exact secret values it was given (the CLI gives it the configured key, secret and token), when
  they are at least 8 characters long: shorter ones would match ordinary words and are not real AWS
  credentials.

A filter acts only where it is installed. A filter on a *logger* sees only records logged to that very
logger, not those of its children (``botocore.auth``), so the filter goes on the *handlers*, which see
every record that reaches them. A library user who logs at DEBUG adds it once, after configuring the
handlers::

    logging.basicConfig(level=logging.DEBUG)
    logstore.redaction.install_redaction()           # every handler of the root logger
    install_redaction(handlers=[my_file_handler])    # or the handlers named

The ``dynacommit`` command installs it on its own handlers and on any the root logger already has.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = ["MASK", "RedactingFilter", "install_redaction", "redact", "remove_redaction"]

MASK = "***"

_MIN_SECRET_LENGTH = 8

# The names whose value is a credential or a signature, as they appear in botocore's logs, in URLs, in
# STS/IMDS responses and in config files.
_NAMES = (
    "x-amz-security-token", "x-amz-signature", "x-amz-credential", "awsaccesskeyid",
    "aws_secret_access_key", "aws_session_token", "aws_security_token", "aws_access_key_id",
    "secret_access_key", "session_token", "access_key_id",
    "secretaccesskey", "sessiontoken", "accesskeyid", "secretkey",
    "signature", "credential", "token",
)
_NAMED_VALUE = re.compile(
    r"(?P<name>(?<![\w-])(?:" + "|".join(re.escape(n) for n in _NAMES) + r")(?![\w-]))"
    # separator: `: `, `=`, `': b'`, `": "`, or the `>` closing an XML start tag; may span a newline
    # (botocore logs "Signature:\n<hex>").
    r"(?P<sep>[\"']?\s*[:=]\s*(?:b?[\"'])?|>)"
    # value: not one already masked (the filter may see a record twice), never the b of a b'...' literal
    r"(?P<value>(?!\*\*\*)(?!b[\"'])[^\s\"'&,;<>{}()\[\]]+)",
    re.IGNORECASE,
)
# An AWS access key id: a four-letter kind prefix, then 16 upper-case letters or digits.
_ACCESS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AIDA|AROA|AIPA|ANPA|ANVA|AGPA|ABIA|ACCA|APKA)[A-Z0-9]{16}"
                            r"(?![A-Z0-9])")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential it shows replaced by ``***`` (see the module docstring)."""
    text = _NAMED_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{MASK}", text)
    for secret in sorted({s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _ACCESS_KEY_ID.sub(MASK, text)


class RedactingFilter(logging.Filter):
    """Redacts credentials in every record that passes (never drops a record).

    The record is changed in place: when its formatted message shows a credential, ``msg`` becomes the
    redacted message and ``args`` is emptied; a traceback is formatted and redacted into ``exc_text``,
    which :class:`logging.Formatter` prints instead of formatting ``exc_info`` again.
    """

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self._secrets = frozenset(secrets)
        self._formatter = logging.Formatter()

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Also redact these exact values from now on."""
        self._secrets = self._secrets | frozenset(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it through handleError, unredacted args never print
            return True
        redacted = redact(message, self._secrets)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self._secrets)
        return True


def install_redaction(*, handlers: Iterable[logging.Handler] | None = None, secrets: Iterable[str] = ()
                      ) -> RedactingFilter:
    """Add one :class:`RedactingFilter` to each of ``handlers`` (default: every handler of the root logger)
    that has none yet, and return it. Handlers that already redact get ``secrets`` added to their filter."""
    chosen = list(logging.getLogger().handlers if handlers is None else handlers)
    installed = RedactingFilter(secrets)
    for handler in chosen:
        existing = next((f for f in handler.filters if isinstance(f, RedactingFilter)), None)
        if existing is None:
            handler.addFilter(installed)
        else:
            existing.add_secrets(secrets)
    return installed


def remove_redaction(redacting: RedactingFilter, *, handlers: Iterable[logging.Handler] | None = None) -> None:
    """Take ``redacting`` off ``handlers`` (default: every handler of the root logger)."""
    for handler in list(logging.getLogger().handlers if handlers is None else handlers):
        handler.removeFilter(redacting)
