"""Delta table properties (``metaData.configuration``): the ones dynacommit honours, their defaults, and
what a writer may set when it creates a table.

Reading is lenient, writing strict. A table written by someone else may carry any value; a property we
read falls back to its default when its value does not parse (a reader must not fail on another
writer's typo). A table we create gets only values that parse, and only ``delta.*`` properties we
honour: setting one we ignore (``delta.enableChangeDataFeed``, ``delta.constraints.*`` ...) would claim a
guarantee nobody enforces, so it is refused, naming the property. Properties outside ``delta.*`` are the
user's and are kept as given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from logstore.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "APPEND_ONLY",
    "CHECKPOINT_INTERVAL",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_LOG_RETENTION_MS",
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_TOMBSTONE_RETENTION_MS",
    "EXPIRED_LOG_CLEANUP",
    "ISOLATION_LEVEL",
    "LOG_RETENTION",
    "NUM_INDEXED_COLS",
    "TOMBSTONE_RETENTION",
    "append_only",
    "checkpoint_interval",
    "expired_log_cleanup",
    "log_retention_ms",
    "num_indexed_cols",
    "parse_interval_ms",
    "tombstone_retention_ms",
    "validate_for_create",
]

APPEND_ONLY = "delta.appendOnly"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
ISOLATION_LEVEL = "delta.isolationLevel"
TOMBSTONE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_NUM_INDEXED_COLS = 32
DEFAULT_TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000
"""``delta.deletedFileRetentionDuration`` when the table does not set it: ``interval 1 week``."""
DEFAULT_LOG_RETENTION_MS = 30 * 24 * 3600 * 1000
"""``delta.logRetentionDuration`` when the table does not set it: ``interval 30 days``."""
EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"

_INTERVAL_UNITS_MS = {
    "nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1000, "minute": 60_000,
    "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000,
}
_INTERVAL_PART = re.compile(r"(\d+)\s*([a-z]+?)s?\b")


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta interval property such as ``interval 7 days`` or ``interval 1 week 12 hours``.

    Raises ``InvalidArgumentError`` naming the value when it is not an interval.
    """
    body = text.strip().lower()
    if body.startswith("interval"):
        body = body[len("interval"):]
    parts = _INTERVAL_PART.findall(body)
    leftover = _INTERVAL_PART.sub("", body).strip()
    if not parts or leftover or any(unit not in _INTERVAL_UNITS_MS for _, unit in parts):
        raise InvalidArgumentError(
            f"{text!r} is not a Delta interval; write it like 'interval 7 days' (units: "
            f"{', '.join(_INTERVAL_UNITS_MS)})"
        )
    return int(sum(int(n) * _INTERVAL_UNITS_MS[unit] for n, unit in parts))


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidArgumentError(f"{text!r} is not 'true' or 'false'")
    return lowered == "true"


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise InvalidArgumentError(f"{text!r} is not a positive integer")
    return int(text)


def _indexed_cols(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidArgumentError(f"{text!r} is not an integer") from None
    if value < -1:
        raise InvalidArgumentError(f"{text!r} must be -1 (every column) or >= 0")
    return value


def _isolation(text: str) -> str:
    if text.strip().lower() not in ("serializable", "writeserializable"):
        raise InvalidArgumentError(f"{text!r} is not 'Serializable' or 'WriteSerializable'")
    return text


_HONOURED: Mapping[str, Callable[[str], object]] = {
    APPEND_ONLY: _boolean,
    CHECKPOINT_INTERVAL: _positive_int,
    ISOLATION_LEVEL: _isolation,
    TOMBSTONE_RETENTION: parse_interval_ms,
    LOG_RETENTION: parse_interval_ms,
    NUM_INDEXED_COLS: _indexed_cols,
    "delta.checkpoint.writeStatsAsJson": lambda text: _boolean(text) or _refuse_false(text),
    EXPIRED_LOG_CLEANUP: _boolean,
}


def _refuse_false(text: str) -> bool:
    raise InvalidArgumentError(f"{text!r}: dynacommit always writes stats as JSON in checkpoints")


def validate_for_create(configuration: object) -> dict[str, str]:
    """The properties of a table to create, checked: a mapping of strings to strings, every ``delta.*``
    key one we honour with a value that parses. Raises ArgumentTypeError / InvalidArgumentError naming
    the property and what to write instead."""
    if configuration is None:
        return {}
    if not isinstance(configuration, Mapping):
        raise ArgumentTypeError(f"configuration must be a dict of table properties (str to str), got "
                                f"{type(configuration).__name__}")
    checked: dict[str, str] = {}
    for key, value in configuration.items():
        if not isinstance(key, str) or not key:
            raise ArgumentTypeError(f"configuration keys must be non-empty strings, got {key!r}")
        if not isinstance(value, str):
            hint = f"'{str(value).lower()}'" if isinstance(value, bool) else f"'{value}'"
            raise ArgumentTypeError(f"configuration value of {key!r} must be a string, got "
                                    f"{type(value).__name__} {value!r}; write {hint}")
        if key.startswith("delta."):
            parse = _HONOURED.get(key)
            if parse is None:
                honoured = ", ".join(sorted(_HONOURED))
                raise InvalidArgumentError(
                    f"table property {key!r} is not one dynacommit honours, so the table would promise what no "
                    f"writer here enforces; remove it (dynacommit honours: {honoured}; properties outside "
                    f"'delta.' are kept as given)")
            try:
                parse(value)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"table property {key}: {exc}") from None
        checked[key] = value
    return checked


def _lenient(configuration: Mapping[str, str | None], key: str, parse: Callable[[str], object], default):
    raw = configuration.get(key)
    if raw is None:
        return default
    try:
        return parse(raw)
    except InvalidArgumentError:
        return default


def append_only(configuration: Mapping[str, str | None]) -> bool:
    return bool(_lenient(configuration, APPEND_ONLY, _boolean, False))


def checkpoint_interval(configuration: Mapping[str, str | None]) -> int:
    """``delta.checkpointInterval`` (default 10): write a checkpoint every this many commits."""
    return int(_lenient(configuration, CHECKPOINT_INTERVAL, _positive_int, DEFAULT_CHECKPOINT_INTERVAL))


def tombstone_retention_ms(configuration: Mapping[str, str | None]) -> int:
    """``delta.deletedFileRetentionDuration`` in milliseconds (default one week)."""
    return int(_lenient(configuration, TOMBSTONE_RETENTION, parse_interval_ms, DEFAULT_TOMBSTONE_RETENTION_MS))


def log_retention_ms(configuration: Mapping[str, str | None]) -> int:
    """``delta.logRetentionDuration`` in milliseconds (default 30 days)."""
    return int(_lenient(configuration, LOG_RETENTION, parse_interval_ms, DEFAULT_LOG_RETENTION_MS))


def expired_log_cleanup(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableExpiredLogCleanup`` (default true, as in Delta)."""
    return bool(_lenient(configuration, EXPIRED_LOG_CLEANUP, _boolean, True))


def num_indexed_cols(configuration: Mapping[str, str | None]) -> int:
    """``delta.dataSkippingNumIndexedCols`` (default 32; -1: every column)."""
    return int(_lenient(configuration, NUM_INDEXED_COLS, _indexed_cols, DEFAULT_NUM_INDEXED_COLS))
