"""Delta table properties (``metaData.configuration``): the ones dynacommit honours, their defaults, and
what a writer may set when it creates a table.

Reading is lenient, writing strict. A table written by someone else may carry any value; a property we
read falls back to its default when its value does not parse (a reader must not fail on another
writer's typo). A table we create gets only values that parse, and only ``delta.*`` properties we
honour: setting one we ignore (``delta.constraints.*``, ``delta.columnMapping.mode`` ...) would claim a
guarantee nobody enforces, so it is refused, naming the property. Properties outside ``delta.*`` are the
user's and are kept as given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.compression import codec

__all__ = [
    "APPEND_ONLY",
    "CHANGE_DATA_FEED",
    "CHECKPOINT_INTERVAL",
    "DELETION_VECTORS",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_LOG_RETENTION_MS",
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_TOMBSTONE_RETENTION_MS",
    "EXPIRED_LOG_CLEANUP",
    "ISOLATION_LEVEL",
    "LOG_RETENTION",
    "NUM_INDEXED_COLS",
    "STATS_COLUMNS",
    "PARQUET_CODEC",
    "TARGET_FILE_SIZE",
    "TOMBSTONE_RETENTION",
    "append_only",
    "boolean_property",
    "change_data_feed",
    "check_consistent",
    "checkpoint_policy",
    "in_commit_timestamps",
    "row_tracking",
    "row_tracking_suspended",
    "format_column_list",
    "parse_column_list",
    "stats_columns",
    "deletion_vectors",
    "checkpoint_interval",
    "expired_log_cleanup",
    "log_retention_ms",
    "num_indexed_cols",
    "parquet_codec",
    "parse_size",
    "target_file_size",
    "parse_interval_ms",
    "tombstone_retention_ms",
    "type_widening",
    "validate_for_create",
]

APPEND_ONLY = "delta.appendOnly"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
ISOLATION_LEVEL = "delta.isolationLevel"
TOMBSTONE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
CHECKPOINT_POLICY = "delta.checkpointPolicy"
ROW_TRACKING_SUSPENDED = "delta.rowTrackingSuspended"
IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ROW_TRACKING = "delta.enableRowTracking"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
DELETION_VECTORS = "delta.enableDeletionVectors"
TARGET_FILE_SIZE = "delta.targetFileSize"
PARQUET_CODEC = "delta.parquet.compression.codec"
TYPE_WIDENING = "delta.enableTypeWidening"

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


def parse_column_list(text: str) -> tuple[tuple[str, ...], ...]:
    """The columns of ``delta.dataSkippingStatsColumns``: comma-separated column names, a nested field as
    ``a.b``, a name holding a dot, a comma or a backtick quoted in backticks (a backtick in a quoted name
    doubled), as Spark parses them. Raises InvalidArgumentError naming the problem."""
    columns: list[tuple[str, ...]] = []
    parts: list[str] = []
    current: list[str] = []
    quoted = was_quoted = False
    i = 0

    def end_part() -> None:
        name = "".join(current)
        if not was_quoted:
            name = name.strip()
        if not name:
            raise InvalidArgumentError(f"{text!r} holds an empty column name; write column names separated by "
                                       f"commas, nested fields as a.b, names with dots or commas in backticks")
        parts.append(name)
        current.clear()

    while i < len(text):
        char = text[i]
        if quoted:
            if char == "`" and text[i + 1:i + 2] == "`":
                current.append("`")
                i += 1
            elif char == "`":
                quoted = False
            else:
                current.append(char)
        elif char == "`":
            if "".join(current).strip():
                raise InvalidArgumentError(f"{text!r}: a backtick in the middle of a column name; quote the whole name")
            current.clear()
            quoted = was_quoted = True
        elif char in ".,":
            end_part()
            was_quoted = False
            if char == ",":
                columns.append(tuple(parts))
                parts = []
        elif was_quoted:
            if not char.isspace():
                raise InvalidArgumentError(f"{text!r}: text after a quoted column name; separate columns with commas")
        else:
            current.append(char)
        i += 1
    if quoted:
        raise InvalidArgumentError(f"{text!r} has an unclosed backtick")
    if text.strip() or columns:
        end_part()
        columns.append(tuple(parts))
    if not columns:
        raise InvalidArgumentError(f"{text!r} names no column")
    lowered = [tuple(p.lower() for p in c) for c in columns]
    if len(set(lowered)) != len(lowered):
        raise InvalidArgumentError(f"{text!r} names a column twice (column names are case-insensitive in Delta)")
    return tuple(columns)


def format_column_list(columns: Sequence[Sequence[str]]) -> str:
    """``columns`` written as :func:`parse_column_list` reads them: names that are not plain identifiers in
    backticks."""
    def quoted(name: str) -> str:
        return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"

    return ",".join(".".join(quoted(part) for part in column) for column in columns)


_SIZE = re.compile(r"(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?")
_SIZE_UNITS = {None: 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes of a size property: a positive integer of bytes, or one with a unit (``128mb``, ``1g``; units
    of 1024 as Spark's byte strings). Raises InvalidArgumentError naming the value."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or int(match.group(1)) < 1:
        raise InvalidArgumentError(f"{text!r} is not a size in bytes; write e.g. '134217728' or '128mb'")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def _codec_name(text: str) -> str:
    return codec(text).name


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
    STATS_COLUMNS: parse_column_list,
    "delta.checkpoint.writeStatsAsJson": lambda text: _boolean(text) or _refuse_false(text),
    EXPIRED_LOG_CLEANUP: _boolean,
    CHANGE_DATA_FEED: _boolean,
    DELETION_VECTORS: _boolean,
    "delta.columnMapping.mode": lambda text: _choice(text, ("none", "name", "id")),
    IN_COMMIT_TIMESTAMPS: _boolean,
    ROW_TRACKING: _boolean,
    ROW_TRACKING_SUSPENDED: _boolean,
    CHECKPOINT_POLICY: lambda text: _choice(text, ("classic", "v2")),
    TARGET_FILE_SIZE: parse_size,
    PARQUET_CODEC: _codec_name,
    TYPE_WIDENING: _boolean,
    "delta.enableIcebergCompatV1": _boolean,
    "delta.enableIcebergCompatV2": _boolean,
}


def _choice(text: str, allowed: tuple[str, ...]) -> str:
    if text.strip().lower() not in allowed:
        raise InvalidArgumentError(f"{text!r} is not one of {', '.join(allowed)}")
    return text


def _refuse_false(text: str) -> bool:
    raise InvalidArgumentError(f"{text!r}: dynacommit always writes stats as JSON in checkpoints")


def canonical_name(key: str) -> str:
    """``key`` spelled as Delta spells the table property it names, matched without regard to case (Spark
    hands a data source its options lower-cased); a key naming no property this project honours is returned
    as given, for :func:`validate_for_create` to refuse by name."""
    found = {name.lower(): name for name in _HONOURED}.get(key.lower())
    return key if found is None else found


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
        if key.startswith("delta.constraints."):
            raise InvalidArgumentError(
                f"table property {key!r} is a CHECK constraint: add it with "
                f"Table.alter.add_constraint({{{key.removeprefix('delta.constraints.')!r}: {value!r}}}), which checks the "
                f"rows the table holds first and upgrades the protocol (DynacommitTable.addConstraint on Spark)")
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
    check_consistent(checked)
    return checked


def check_consistent(configuration: Mapping[str, str | None]) -> None:
    """Refuse properties that contradict each other (InvalidArgumentError naming them)."""
    if row_tracking(configuration) and row_tracking_suspended(configuration):
        raise InvalidArgumentError(f"{ROW_TRACKING}=true and {ROW_TRACKING_SUSPENDED}=true contradict each other: "
                                   f"row tracking cannot be turned on while it is suspended; drop one of them")


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


def change_data_feed(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableChangeDataFeed``: row-level operations write change data files (``_change_data/``)."""
    return bool(_lenient(configuration, CHANGE_DATA_FEED, _boolean, False))


def deletion_vectors(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableDeletionVectors``: row-level changes mark deleted rows in deletion vectors instead of
    writing the rest of each file again."""
    return bool(_lenient(configuration, DELETION_VECTORS, _boolean, False))


def log_retention_ms(configuration: Mapping[str, str | None]) -> int:
    """``delta.logRetentionDuration`` in milliseconds (default 30 days)."""
    return int(_lenient(configuration, LOG_RETENTION, parse_interval_ms, DEFAULT_LOG_RETENTION_MS))


def expired_log_cleanup(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableExpiredLogCleanup`` (default true, as in Delta)."""
    return bool(_lenient(configuration, EXPIRED_LOG_CLEANUP, _boolean, True))


def num_indexed_cols(configuration: Mapping[str, str | None]) -> int:
    """``delta.dataSkippingNumIndexedCols`` (default 32; -1: every column)."""
    return int(_lenient(configuration, NUM_INDEXED_COLS, _indexed_cols, DEFAULT_NUM_INDEXED_COLS))


def stats_columns(configuration: Mapping[str, str | None]) -> tuple[tuple[str, ...], ...] | None:
    """``delta.dataSkippingStatsColumns`` as logical column paths (None: not set, or not parseable:
    ``delta.dataSkippingNumIndexedCols`` decides). When set, it replaces ``dataSkippingNumIndexedCols``."""
    return _lenient(configuration, STATS_COLUMNS, parse_column_list, None)


def checkpoint_policy(configuration: Mapping[str, str | None]) -> str:
    """``delta.checkpointPolicy`` (delta-spark's property): ``classic`` (default) or ``v2``. Any other value
    reads as ``classic``, the kind every reader understands."""
    raw = (configuration.get(CHECKPOINT_POLICY) or "").strip().lower()
    return "v2" if raw == "v2" else "classic"


def row_tracking_suspended(configuration: Mapping[str, str | None]) -> bool:
    """``delta.rowTrackingSuspended``: writers stop assigning row ids and commit versions."""
    return bool(_lenient(configuration, ROW_TRACKING_SUSPENDED, _boolean, False))


def in_commit_timestamps(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableInCommitTimestamps``: every commit's commitInfo carries ``inCommitTimestamp``."""
    return bool(_lenient(configuration, IN_COMMIT_TIMESTAMPS, _boolean, False))


def row_tracking(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableRowTracking``: rows have stable row ids and commit versions."""
    return bool(_lenient(configuration, ROW_TRACKING, _boolean, False))


def type_widening(configuration: Mapping[str, str | None]) -> bool:
    """``delta.enableTypeWidening``: a column's type may be widened (``alter.change_column_type``, and schema
    evolution's automatic widening)."""
    return bool(_lenient(configuration, TYPE_WIDENING, _boolean, False))


def boolean_property(configuration: Mapping[str, str | None], key: str) -> bool:
    """A boolean table property read leniently: ``true`` (any case) is true, anything else false."""
    return bool(_lenient(configuration, key, _boolean, False))


def target_file_size(configuration: Mapping[str, str | None]) -> int | None:
    """``delta.targetFileSize`` in bytes: the size writers cut data files at and OPTIMIZE compacts to
    (None: not set, the writer's default applies)."""
    return _lenient(configuration, TARGET_FILE_SIZE, parse_size, None)


def parquet_codec(configuration: Mapping[str, str | None]) -> str | None:
    """``delta.parquet.compression.codec``: the Parquet codec of the table's data files (None: not set;
    a write's own ``compression`` option comes first, snappy last)."""
    return _lenient(configuration, PARQUET_CODEC, _codec_name, None)
