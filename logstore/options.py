"""Storage options and table URIs.

Options use the key names delta-rs uses, so one dict configures both. Each key falls back to the
environment variable of the same name; ``AWS_ENDPOINT_URL_DYNAMODB`` falls back to ``AWS_ENDPOINT_URL``.
The resulting :class:`StorageOptions` is plain, frozen, picklable data: it travels to Spark executors,
which build their own clients from it.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from logstore.errors import ConfigurationError

DEFAULT_DDB_TABLE = "delta_log"
DEFAULT_REGION = "us-east-1"
DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_STUCK_ENTRY_GRACE_SECONDS = 60.0

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
)
SECRET_KEYS = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


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

    def __repr__(self) -> str:
        shown = {k: v for k, v in asdict(self).items() if k not in ("secret_access_key", "session_token")}
        hidden = [k for k in ("secret_access_key", "session_token") if getattr(self, k)]
        return f"StorageOptions({shown}, secrets set: {hidden or 'none'})"

    __str__ = __repr__

    @classmethod
    def resolve(cls, options: dict[str, str] | StorageOptions | None = None) -> StorageOptions:
        """Build from a delta-rs style dict, falling back to the environment key by key.

        Raises ConfigurationError naming an unknown key, a non-string value or an http endpoint without
        ``AWS_ALLOW_HTTP=true``.
        """
        if isinstance(options, StorageOptions):
            return options
        given = dict(options or {})
        for key, value in given.items():
            if key not in KNOWN_KEYS:
                raise ConfigurationError(
                    f"unknown storage option {key!r}; known options are: {', '.join(KNOWN_KEYS)}"
                )
            if not isinstance(value, str):
                raise ConfigurationError(
                    f"storage option {key} must be a string, got {type(value).__name__}; "
                    f"write it as a string (e.g. 'true')"
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
        return out


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
        if not isinstance(uri, str) or not uri:
            raise ConfigurationError(f"table URI must be a non-empty string like 's3://bucket/path', got {uri!r}")
        scheme, sep, rest = uri.partition("://")
        if not sep:
            raise ConfigurationError(f"table URI {uri!r} has no scheme; write it as 's3://bucket/path'")
        if scheme not in ("s3", "s3a", "memory"):
            raise ConfigurationError(
                f"table URI {uri!r} has scheme {scheme!r}; dynacommit tables live on S3: use "
                f"'s3://bucket/path' or 's3a://bucket/path'"
            )
        bucket, _, path = rest.partition("/")
        if not bucket:
            raise ConfigurationError(f"table URI {uri!r} has no bucket; write it as '{scheme}://bucket/path'")
        if "@" in bucket or ":" in bucket:
            raise ConfigurationError(
                f"table URI {uri!r} carries credentials or a port in its host; pass credentials as "
                f"storage options and endpoints as AWS_ENDPOINT_URL"
            )
        if "?" in path or "#" in path:
            raise ConfigurationError(f"table URI {uri!r} has a query or fragment; remove it")
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ConfigurationError(f"table URI {uri!r} contains '.' or '..' segments; write the path plainly")
        return cls(scheme=scheme, bucket=bucket, prefix="/".join(parts))

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
