"""Storage options and table URIs.

Options use the key names delta-rs uses, so one dict configures both. Each key falls back to the
environment variable of the same name; ``AWS_ENDPOINT_URL_DYNAMODB`` falls back to ``AWS_ENDPOINT_URL``.
The resulting :class:`StorageOptions` is plain, frozen, picklable data: it travels to Spark executors,
which build their own clients from it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from logstore.deadline import DEFAULT_TIMEOUT_SECONDS
from logstore.errors import ArgumentTypeError, ConfigurationError
from logstore.schemes import BUILT_IN, registered

DEFAULT_DDB_TABLE = "delta_log"
DEFAULT_REGION = "us-east-1"
DEFAULT_STUCK_ENTRY_GRACE_SECONDS = 60.0
COMMIT_ACKS = ("published", "durable")
"""When ``write`` returns (``DYNACOMMIT_COMMIT_ACK``, logstore/external.py): once ``N.json`` holds the commit
(``published``, the default), or once its DynamoDB entry has won the version (``durable``), ``N.json`` then
written in the background as recovery writes it."""

KNOWN_KEYS = (
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "DELTA_DYNAMO_TABLE_NAME",
    "AWS_ALLOW_HTTP",
    # Accepted so the same dict can be handed to delta-rs <= 1.6.0; only "dynamodb" makes sense here.
    "AWS_S3_LOCKING_PROVIDER",
    # dynacommit's own: the deadline of each log store operation, and how long an entry found stuck
    # (its content lost) stays marked before it is abandoned (logstore/external.py).
    "DYNACOMMIT_TIMEOUT_SECONDS",
    "DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS",
    # When a commit is acknowledged: "published" (N.json written) or "durable" (DynamoDB entry won).
    "DYNACOMMIT_COMMIT_ACK",
    # Group commit of contended blind appends through DynamoDB transactions: "on" (the default) or "off".
    "DYNACOMMIT_GROUP_COMMIT",
)
SECRET_KEYS = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}
_ON = {"on", "true", "1", "yes"}
_OFF = {"off", "false", "0", "no"}


@dataclass(frozen=True)
class StorageOptions:
    """Resolved connection settings for S3 and DynamoDB. ``repr`` never shows secrets."""

    region: str = DEFAULT_REGION
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    ddb_table_name: str = DEFAULT_DDB_TABLE
    allow_http: bool = False
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    stuck_entry_grace_seconds: float = DEFAULT_STUCK_ENTRY_GRACE_SECONDS
    commit_ack: str = "published"
    group_commit: bool = True
    """Whether contended blind appends commit together (``DYNACOMMIT_GROUP_COMMIT``, logstore/group.py)."""

    def __post_init__(self) -> None:
        if self.commit_ack not in COMMIT_ACKS:
            raise ConfigurationError(_bad_commit_ack(self.commit_ack))

    def __repr__(self) -> str:
        shown = {k: v for k, v in asdict(self).items() if k not in ("secret_access_key", "session_token")}
        hidden = [k for k in ("secret_access_key", "session_token") if getattr(self, k)]
        return f"StorageOptions({shown}, secrets set: {hidden or 'none'})"

    __str__ = __repr__

    @classmethod
    def resolve(cls, options: dict[str, str] | StorageOptions | None = None) -> StorageOptions:
        """Build from a delta-rs style dict, falling back to the environment key by key.

        Raises ArgumentTypeError when ``options`` is not a dict of strings, ConfigurationError naming an
        unknown key, a bad value or an http endpoint without ``AWS_ALLOW_HTTP=true``.
        """
        if isinstance(options, StorageOptions):
            return options
        if options is not None and not isinstance(options, Mapping):
            raise ArgumentTypeError(
                f"storage_options must be a dict of option names to strings (e.g. {{'AWS_REGION': "
                f"'eu-west-1'}}), got {type(options).__name__}"
            )
        given = dict(options or {})
        for key, value in given.items():
            if not isinstance(key, str):
                raise ArgumentTypeError(f"storage option names must be strings, got {key!r}")
            if key not in KNOWN_KEYS:
                raise ConfigurationError(
                    f"unknown storage option {key!r}; known options are: {', '.join(KNOWN_KEYS)}"
                )
            if not isinstance(value, str):
                shown = "a value" if key in SECRET_KEYS else repr(value)
                raise ArgumentTypeError(
                    f"storage option {key} must be a string, got {type(value).__name__} ({shown}); "
                    f"write it as a string (e.g. 'true', '30')"
                )

        def get(key: str) -> str | None:
            value = given.get(key)
            if value is None:
                value = os.environ.get(key)
            return value if value not in (None, "") else None

        locking = get("AWS_S3_LOCKING_PROVIDER")
        if locking is not None and locking != "dynamodb":
            raise ConfigurationError(
                f"AWS_S3_LOCKING_PROVIDER={locking!r} is not supported: dynacommit always coordinates "
                f"commits through DynamoDB; remove the option or set it to 'dynamodb'"
            )
        allow_http_raw = (get("AWS_ALLOW_HTTP") or "false").lower()
        if allow_http_raw not in _TRUE | _FALSE:
            raise ConfigurationError(f"AWS_ALLOW_HTTP must be 'true' or 'false', got {allow_http_raw!r}")
        endpoint = get("AWS_ENDPOINT_URL")
        timeout = _seconds("DYNACOMMIT_TIMEOUT_SECONDS", get("DYNACOMMIT_TIMEOUT_SECONDS"),
                           DEFAULT_TIMEOUT_SECONDS, allow_zero=False)
        grace = _seconds("DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS", get("DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS"),
                         DEFAULT_STUCK_ENTRY_GRACE_SECONDS, allow_zero=True)
        commit_ack = (get("DYNACOMMIT_COMMIT_ACK") or "published").strip().lower()
        if commit_ack not in COMMIT_ACKS:
            raise ConfigurationError(_bad_commit_ack(get("DYNACOMMIT_COMMIT_ACK")))
        group_raw = (get("DYNACOMMIT_GROUP_COMMIT") or "on").strip().lower()
        if group_raw not in _ON | _OFF:
            raise ConfigurationError(
                f"DYNACOMMIT_GROUP_COMMIT={get('DYNACOMMIT_GROUP_COMMIT')!r} is not a switch: give 'on' (the "
                f"default: contended blind appends commit together in one version, where the DynamoDB table "
                f"answers TransactWriteItems) or 'off' (every append races for a version of its own)")
        resolved = cls(
            region=get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            endpoint_url=endpoint,
            dynamodb_endpoint_url=get("AWS_ENDPOINT_URL_DYNAMODB") or endpoint,
            access_key_id=get("AWS_ACCESS_KEY_ID"),
            secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
            session_token=get("AWS_SESSION_TOKEN"),
            ddb_table_name=get("DELTA_DYNAMO_TABLE_NAME") or DEFAULT_DDB_TABLE,
            allow_http=allow_http_raw in _TRUE,
            timeout_seconds=timeout,
            stuck_entry_grace_seconds=grace,
            commit_ack=commit_ack,
            group_commit=group_raw in _ON,
        )
        _check_credentials(resolved)
        for key, url in (("AWS_ENDPOINT_URL", resolved.endpoint_url),
                         ("AWS_ENDPOINT_URL_DYNAMODB", resolved.dynamodb_endpoint_url)):
            if url is None:
                continue
            scheme = urlsplit(url).scheme
            if scheme not in ("http", "https"):
                raise ConfigurationError(f"{key}={url!r} is not an http(s) URL")
            if scheme == "http" and not resolved.allow_http:
                raise ConfigurationError(
                    f"{key}={url!r} uses plain http; set AWS_ALLOW_HTTP='true' to allow it "
                    f"(only for local or test endpoints)"
                )
        return resolved

    def to_dict(self) -> dict[str, str]:
        """The delta-rs style dict these options came from (secrets included: it is for trusted code)."""
        out = {
            "AWS_REGION": self.region,
            "DELTA_DYNAMO_TABLE_NAME": self.ddb_table_name,
            "AWS_ALLOW_HTTP": "true" if self.allow_http else "false",
        }
        for key, value in (
            ("AWS_ENDPOINT_URL", self.endpoint_url),
            ("AWS_ENDPOINT_URL_DYNAMODB", self.dynamodb_endpoint_url),
            ("AWS_ACCESS_KEY_ID", self.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", self.secret_access_key),
            ("AWS_SESSION_TOKEN", self.session_token),
        ):
            if value is not None:
                out[key] = value
        if self.timeout_seconds != DEFAULT_TIMEOUT_SECONDS:
            out["DYNACOMMIT_TIMEOUT_SECONDS"] = repr(self.timeout_seconds)
        if self.stuck_entry_grace_seconds != DEFAULT_STUCK_ENTRY_GRACE_SECONDS:
            out["DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS"] = repr(self.stuck_entry_grace_seconds)
        if self.commit_ack != "published":
            out["DYNACOMMIT_COMMIT_ACK"] = self.commit_ack
        if not self.group_commit:
            out["DYNACOMMIT_GROUP_COMMIT"] = "off"
        return out


def _bad_commit_ack(raw: object) -> str:
    return (f"DYNACOMMIT_COMMIT_ACK={raw!r} is not a commit acknowledgement: give 'published' (the default: a "
            f"write returns once _delta_log/N.json holds the commit, so every reader sees it) or 'durable' (a "
            f"write returns once its DynamoDB entry has won the version, N.json is written in the background; "
            f"readers without DynamoDB may see the commit later, see docs/protocol.md)")


def _seconds(key: str, raw: str | None, default: float, *, allow_zero: bool) -> float:
    """A duration option: a finite number of seconds, positive (or >= 0 with ``allow_zero``)."""
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{key}={raw!r} is not a duration: give a finite number of seconds {bound} (e.g. '{default:g}', the "
            f"default)"
        )
    return value


def _check_credentials(options: StorageOptions) -> None:
    """Explicit credentials come as a pair (plus an optional session token), or not at all: anything
    else makes botocore fail with a TypeError deep inside the first request."""
    key, secret = options.access_key_id is not None, options.secret_access_key is not None
    if key != secret:
        given, missing = (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if key
                          else ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"))
        raise ConfigurationError(
            f"{given} is set but {missing} is not: give both (storage options or environment), or neither "
            f"to use boto3's credential chain (instance role, profile)"
        )
    if options.session_token is not None and not key:
        raise ConfigurationError(
            "AWS_SESSION_TOKEN is set without AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: a session token "
            "only works together with the temporary key pair it was issued with; set all three, or none"
        )


S3_MAX_KEY_BYTES = 1024
_BUCKET = re.compile(r"^[A-Za-z0-9._-]+$")
"""What any S3 bucket name is made of (older buckets may still have uppercase letters and underscores)."""
#: The longest key the log store writes under a table: its prefix, "/", and this name under the table root.
_LONGEST_LOG_NAME = "_delta_log/.tmp/00000000000000000000.json.00000000-0000-0000-0000-000000000000"
MAX_PREFIX_BYTES = S3_MAX_KEY_BYTES - 1 - len(_LONGEST_LOG_NAME)


def redact_uri(uri: str) -> str:
    """``uri`` for messages: credentials before the host (``user:secret@``) and any query or fragment
    replaced by ``***``."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "", uri
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    for mark in ("?", "#"):
        if mark in path:
            path = path.split(mark, 1)[0] + mark + "***"
    return f"{scheme}{sep}{authority}{slash}{path}"


@dataclass(frozen=True)
class TableUri:
    """A table location: ``scheme://bucket/prefix``.

    ``table_path`` is the DynamoDB ``tablePath`` key: the URI as the user wrote it, scheme kept, no
    trailing slash, not percent-encoded (what delta-spark writes). Writers coordinate only if they spell
    the URI the same way: ``s3://b/t`` and ``s3a://b/t`` are different keys.
    """

    scheme: str
    bucket: str
    prefix: str  # key prefix of the table root, no leading or trailing slash; "" for a bucket root

    @classmethod
    def parse(cls, uri: str) -> TableUri:
        """Parse ``scheme://bucket/path``. Messages never repeat credentials or a query the URI carries.

        Raises ArgumentTypeError for a non-string, ConfigurationError for anything malformed (no scheme or
        bucket, credentials or a query in it, a bucket name S3 never allows, a control character, a path
        too long for S3's keys, a path inside a ``_delta_log``).
        """
        if not isinstance(uri, str):
            raise ArgumentTypeError(f"table URI must be a string like 's3://bucket/path', got {type(uri).__name__}")
        if not uri:
            raise ConfigurationError("table URI must be a non-empty string like 's3://bucket/path', got ''")
        shown = redact_uri(uri)
        scheme, sep, rest = uri.partition("://")
        if not sep:
            raise ConfigurationError(f"table URI {shown!r} has no scheme; write it as 's3://bucket/path'")
        if scheme not in BUILT_IN and registered(scheme) is None:
            raise ConfigurationError(
                f"table URI {shown!r} has scheme {scheme!r}; dynacommit tables live on S3: use "
                f"'s3://bucket/path' or 's3a://bucket/path'"
            )
        bucket, _, path = rest.partition("/")
        if not bucket:
            raise ConfigurationError(f"table URI {shown!r} has no bucket; write it as '{scheme}://bucket/path'")
        if "@" in bucket or ":" in bucket:
            raise ConfigurationError(
                f"table URI {shown!r} carries credentials or a port in its host; pass credentials as "
                f"storage options and endpoints as AWS_ENDPOINT_URL"
            )
        if not _BUCKET.match(bucket):
            raise ConfigurationError(
                f"table URI {shown!r} has bucket {bucket!r}, which no S3 bucket can be named: bucket names hold "
                f"letters, digits, '.', '-' and '_' only (today's rules: lowercase, 3 to 63 characters)")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
            raise ConfigurationError(f"table URI {shown!r} has a control character in its path; remove it")
        if "?" in path or "#" in path:
            raise ConfigurationError(f"table URI {shown!r} has a query or fragment; remove it")
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ConfigurationError(f"table URI {shown!r} contains '.' or '..' segments; write the path plainly")
        if "_delta_log" in parts:
            root = "/".join(parts[:parts.index("_delta_log")])
            raise ConfigurationError(
                f"table URI {shown!r} points inside a _delta_log directory: a table cannot live inside another "
                f"table's _delta_log; use the table's root ('{scheme}://{bucket}/{root}')"
            )
        prefix = "/".join(parts)
        size = len(prefix.encode("utf-8"))
        if size > MAX_PREFIX_BYTES:
            raise ConfigurationError(
                f"table URI {shown[:80]!r}... is too long: its path has {size} bytes, S3 keys at most {S3_MAX_KEY_BYTES} "
                f"bytes and the log adds up to {S3_MAX_KEY_BYTES - MAX_PREFIX_BYTES} under it "
                f"('/_delta_log/.tmp/<version>.json.<uuid>'), so a table path may have at most "
                f"{MAX_PREFIX_BYTES} bytes; choose a shorter path"
            )
        return cls(scheme=scheme, bucket=bucket, prefix=prefix)

    @property
    def table_path(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def key(self, relative: str) -> str:
        """S3 key of a path relative to the table root."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def relative(self, key: str) -> str:
        """Path relative to the table root of an S3 key under it."""
        if not self.prefix:
            return key
        if not key.startswith(self.prefix + "/"):
            raise ValueError(f"key {key!r} is not under table {self.table_path}")
        return key[len(self.prefix) + 1:]

    def __str__(self) -> str:
        return self.table_path
