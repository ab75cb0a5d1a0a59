"""The options of the ``dynacommit`` data source, read back from Spark's lower-cased option map.

Spark hands a Python data source its options in a ``CaseInsensitiveDict`` whose keys are lower-cased
(``.option("AWS_REGION", ...)`` arrives as ``aws_region``). Each use of the source (batch write, batch
read, streaming read, streaming write) accepts its own set of names, matched case-insensitively and
mapped back to their canonical spelling: the storage options under the names delta-rs uses
(``AWS_REGION``, ``AWS_ENDPOINT_URL`` ...), the rest under Delta Lake's option names where Delta has one
(``partitionOverwriteMode``, ``txnAppId``, ``txnVersion``, ``userMetadata``, ``mergeSchema``,
``overwriteSchema``, ``versionAsOf``, ``timestampAsOf``, ``readChangeFeed``, ``startingVersion``,
``endingVersion``, ``startingTimestamp``, ``endingTimestamp``, ``maxFilesPerTrigger``,
``skipChangeCommits``), Spark's Parquet ``compression`` for writes, and the ``delta.*`` table properties of
a table a batch write creates (``.option("delta.enableChangeDataFeed", "true")``, spelled as Delta spells
them whatever the case Spark hands them in). Anything else is refused by name.

Timestamps are what :func:`~table.log.timestamps.as_epoch_ms` reads (ISO-8601, and Spark's
``2026-11-25 10:00:00[.SSS]``); one without an offset is UTC. Delta reads it in the session time zone
(``spark.sql.session.timeZone``), which a Python data source is not given: write the offset
(``2026-11-25 10:00:00+01:00``) for another zone.

Storage options not given fall back to the environment of the process that plans the job (the Spark
driver; with Spark Connect, the Connect server, not the client): the resolved
:class:`~logstore.options.StorageOptions` then travel to the executors inside the plan.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from logstore import StorageOptions
from logstore.errors import InvalidArgumentError
from logstore.options import KNOWN_KEYS
from table.compression import codec
from table.log.properties import canonical_name
from table.log.timestamps import as_epoch_ms

__all__ = [
    "DELTA_STREAM_DEFAULT_MAX_FILES",
    "ChangeFeedOptions",
    "REFUSED",
    "ReadOptions",
    "SinkOptions",
    "StreamReadOptions",
    "Use",
    "WriteOptions",
    "parse_read",
    "parse_schema_options",
    "parse_sink",
    "parse_stream_read",
    "parse_write",
]

DELTA_STREAM_DEFAULT_MAX_FILES = 1000
"""Delta's default ``maxFilesPerTrigger``."""


class Use(enum.Enum):
    WRITE = "batch write"
    READ = "batch read"
    STREAM_READ = "streaming read"
    STREAM_WRITE = "streaming write"


_STORAGE = {key.lower(): key for key in KNOWN_KEYS}
CONFIGURATION = "configuration"
"""Where a batch write's ``delta.*`` options (table properties of the table it creates) are kept."""
_OWN: dict[Use, tuple[str, ...]] = {
    Use.WRITE: ("partitionBy", "partitionOverwriteMode", "txnAppId", "txnVersion", "userMetadata", "targetFileSize",
                "mergeSchema", "overwriteSchema", "compression", "replaceWhere", "clusterBy", "replaceOn",
                "replaceUsing", "targetAlias", "sourceAlias"),
    Use.READ: ("versionAsOf", "timestampAsOf", "readChangeFeed", "startingVersion", "endingVersion",
               "startingTimestamp", "endingTimestamp", "minPartitions"),
    Use.STREAM_READ: ("startingVersion", "startingTimestamp", "readChangeFeed", "maxFilesPerTrigger",
                      "skipChangeCommits", "minPartitions"),
    Use.STREAM_WRITE: ("checkpointLocation", "partitionBy", "userMetadata", "targetFileSize", "compression"),
}
REFUSED: dict[str, tuple[str, str]] = {
    "mergeSchema": ("streaming write", "schema evolution is an option of batch writes (df.write.format('dynacommit')); "
                    "a stream must write the table's schema"),
    "overwriteSchema": ("streaming write", "replacing the schema is an option of batch overwrites "
                        "(df.write.format('dynacommit').mode('overwrite'))"),
    "ignoreDeletes": ("streaming read", "use skipChangeCommits"),
    "ignoreChanges": ("streaming read", "use skipChangeCommits"),
    "maxBytesPerTrigger": ("streaming read", "use maxFilesPerTrigger"),
}
"""Delta option names we do not implement: the use they belong to, and what to use instead (the error's
advice, whichever use they are given to; the user guide lists them)."""
_NOT_SUPPORTED = {name.lower(): advice for name, (_, advice) in REFUSED.items()}
_MISPLACED = {
    "txnappid": "a streaming query's application id is its query id (see the README); remove txnAppId",
    "txnversion": "a streaming query's txn version is its batch id (see the README); remove txnVersion",
    "versionasof": "time travel does not apply to streams: use startingVersion",
    "timestampasof": "time travel does not apply to streams: use startingTimestamp",
    "endingversion": "a stream has no end; read a range of changes with a batch read (spark.read) instead",
    "endingtimestamp": "a stream has no end; read a range of changes with a batch read (spark.read) instead",
}
_CHANGE_FEED_RANGE = ("startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp")


def _canonical(options: Mapping[str, str], use: Use, *, also: tuple[Use, ...] = ()) -> tuple[str, dict, dict]:
    """``(uri, storage, own)`` from Spark's options: the table URI (Spark's ``path``), the storage options
    under their canonical names, and this use's own options under theirs. Raises InvalidArgumentError
    naming the first option this use does not accept."""
    names = {n.lower(): n for u in (use, *also) for n in _OWN[u]}
    storage: dict[str, str] = {}
    own: dict[str, str] = {}
    uri: str | None = None
    for key, value in options.items():
        lower = key.lower()
        if lower == "path":
            uri = value
        elif lower.startswith("delta.") and use is Use.WRITE:
            own.setdefault(CONFIGURATION, {})[canonical_name(key)] = value
        elif lower in _STORAGE:
            storage[_STORAGE[lower]] = value
        elif lower in names:
            own[names[lower]] = value
        else:
            known = ", ".join(sorted({*names.values(), *KNOWN_KEYS}, key=str.lower))
            misplaced = _MISPLACED.get(lower) if use in (Use.STREAM_READ, Use.STREAM_WRITE) else None
            reason = misplaced or _NOT_SUPPORTED.get(lower)
            hint = f"; {reason}" if reason else ""
            raise InvalidArgumentError(
                f"unknown option {key!r} for a dynacommit {use.value}{hint}. Options of a {use.value}: {known}")
    if not uri:
        raise InvalidArgumentError(
            f"no table URI: give it to load()/save()/start(), e.g. .save('s3://bucket/table') (a dynacommit "
            f"{use.value})")
    return uri, storage, own


def _int(own: dict[str, str], name: str, *, minimum: int) -> int | None:
    raw = own.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be at least {minimum}, got {value}")
    return value


def _bool(own: dict[str, str], name: str) -> bool:
    raw = (own.get(name) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be 'true' or 'false', got {own.get(name)!r}")
    return raw == "true"


def _columns(own: dict[str, str], name: str = "partitionBy") -> tuple[str, ...] | None:
    raw = own.get(name)
    if raw is None:
        return None
    columns = tuple(c.strip() for c in raw.split(",") if c.strip())
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"option {name} names a column twice: {raw!r}")
    return columns


def _text(own: dict[str, str], name: str) -> str | None:
    raw = own.get(name)
    if raw is not None and not raw.strip():
        raise InvalidArgumentError(f"option {name} is empty; leave it out or give it a value")
    return raw


@dataclass(frozen=True)
class WriteOptions:
    """``df.write.format("dynacommit")``: where, how, and the Delta write options."""

    uri: str
    storage: StorageOptions
    partition_by: tuple[str, ...] | None
    partition_overwrite: str
    app_id: str | None
    app_version: int | None
    user_metadata: str | None
    target_file_size: int | None
    schema_mode: str | None = None  # "merge" (mergeSchema) or "overwrite" (overwriteSchema), as write_table's
    compression: str | None = None  # the data files' Parquet codec, Spark's name (None: the table's, else snappy)
    configuration: Mapping[str, str] | None = None  # delta.* options: the properties of a table the write creates
    replace_where: str | None = None  # replaceWhere: an overwrite of the rows this SQL predicate selects
    cluster_by: tuple[str, ...] | None = None  # clusterBy ("a,b"): the clustering columns of a table it creates
    replace_on: str | None = None  # replaceOn: an overwrite of the rows matching a row of the data by this condition
    replace_using: str | None = None  # replaceUsing ("a, b"): ... matching a row of the data on these columns
    target_alias: str | None = None  # targetAlias (Delta's): the table's name in replaceOn (default "target")
    source_alias: str | None = None  # sourceAlias: the data's name in replaceOn (default "source"; df.alias() in Delta)


@dataclass(frozen=True)
class ChangeFeedOptions:
    """``readChangeFeed=true`` of a batch read: the range, by version or by timestamp (as given: the
    library resolves it, as ``Table.load_cdf`` does)."""

    starting_version: int | None
    ending_version: int | None
    starting_timestamp: str | None
    ending_timestamp: str | None


@dataclass(frozen=True)
class ReadOptions:
    uri: str
    storage: StorageOptions
    version: int | None
    min_partitions: int
    timestamp: str | None = None  # timestampAsOf, as given (checked to be a timestamp)
    change_feed: ChangeFeedOptions | None = None  # readChangeFeed=true: the changes of a range, not the rows


@dataclass(frozen=True)
class StreamReadOptions:
    uri: str
    storage: StorageOptions
    starting_version: int | str | None  # an int, "latest", or None: the snapshot, then every commit after it
    max_files_per_trigger: int
    skip_change_commits: bool
    min_partitions: int
    starting_timestamp: str | None = None  # from the first version committed at or after it
    change_feed: bool = False  # readChangeFeed=true: every change as a row (_change_type ...), not added files


@dataclass(frozen=True)
class SinkOptions:
    uri: str
    storage: StorageOptions
    partition_by: tuple[str, ...] | None
    user_metadata: str | None
    target_file_size: int | None
    checkpoint_location: str | None
    compression: str | None = None


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    uri, storage, own = _canonical(options, Use.WRITE)
    mode = (own.get("partitionOverwriteMode") or "static").strip().lower()
    if mode not in ("static", "dynamic"):
        raise InvalidArgumentError(f"option partitionOverwriteMode must be 'static' or 'dynamic', got "
                                   f"{own['partitionOverwriteMode']!r}")
    app_id = _text(own, "txnAppId")
    app_version = _int(own, "txnVersion", minimum=0)
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("options txnAppId and txnVersion go together: give both (an idempotent job) "
                                   "or neither")
    schema_mode = "overwrite" if _bool(own, "overwriteSchema") else "merge" if _bool(own, "mergeSchema") else None
    return WriteOptions(uri=uri, storage=StorageOptions.resolve(storage), partition_by=_columns(own),
                        partition_overwrite=mode, app_id=app_id, app_version=app_version,
                        user_metadata=_text(own, "userMetadata"),
                        target_file_size=_int(own, "targetFileSize", minimum=1), schema_mode=schema_mode,
                        compression=_compression(own), configuration=own.get(CONFIGURATION),
                        replace_where=_text(own, "replaceWhere"), cluster_by=_columns(own, "clusterBy"),
                        replace_on=_text(own, "replaceOn"), replace_using=_text(own, "replaceUsing"),
                        target_alias=_text(own, "targetAlias"), source_alias=_text(own, "sourceAlias"))


def _compression(own: dict[str, str]) -> str | None:
    """Option ``compression``: Spark's Parquet codec names (None when not given: the table's
    ``delta.parquet.compression.codec``, else snappy); the error names the option and the accepted values."""
    raw = own.get("compression")
    if raw is None:
        return None
    try:
        return codec(raw).name
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"option compression: {exc}") from None


def _timestamp(own: dict[str, str], name: str) -> str | None:
    """The timestamp option ``name`` as given, once it is known to be one (the error names the option)."""
    raw = _text(own, name)
    if raw is None:
        return None
    try:
        as_epoch_ms(raw)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"option {name} must be a timestamp like '2026-11-25 10:00:00' (UTC: a Python data source is not "
            f"given Spark's session time zone), '2026-11-25T10:00:00+01:00' or '2026-11-25', got {raw!r}") from None
    return raw.strip()


def _as_of(own: dict[str, str]) -> tuple[int | None, str | None]:
    """``versionAsOf`` and ``timestampAsOf``: at most one of them."""
    version, timestamp = _int(own, "versionAsOf", minimum=0), _timestamp(own, "timestampAsOf")
    if version is not None and timestamp is not None:
        raise InvalidArgumentError("options versionAsOf and timestampAsOf both pick the version to read: give one")
    return version, timestamp


def _read_options(uri: str, storage: dict[str, str], own: dict[str, str]) -> ReadOptions:
    version, timestamp = _as_of(own)
    change_feed = None
    if _bool(own, "readChangeFeed"):
        if version is not None or timestamp is not None:
            raise InvalidArgumentError(
                "options versionAsOf and timestampAsOf do not apply to a change feed read (readChangeFeed=true): "
                "give its range with startingVersion/startingTimestamp and endingVersion/endingTimestamp")
        change_feed = ChangeFeedOptions(
            starting_version=_int(own, "startingVersion", minimum=0),
            ending_version=_int(own, "endingVersion", minimum=0),
            starting_timestamp=_timestamp(own, "startingTimestamp"),
            ending_timestamp=_timestamp(own, "endingTimestamp"))
        for start, end in (("startingVersion", "startingTimestamp"), ("endingVersion", "endingTimestamp")):
            if own.get(start) is not None and own.get(end) is not None:
                raise InvalidArgumentError(f"options {start} and {end} both give one end of the change feed's "
                                           f"range: give one")
        if change_feed.starting_version is None and change_feed.starting_timestamp is None:
            raise InvalidArgumentError(
                "a change feed read (readChangeFeed=true) needs where to start: give startingVersion or "
                "startingTimestamp (`dynacommit history URI` lists the versions and their times)")
    else:
        given = [name for name in _CHANGE_FEED_RANGE if own.get(name) is not None]
        if given:
            raise InvalidArgumentError(
                f"option {given[0]} is a change feed option: add readChangeFeed=true to read the changes of a range "
                f"of versions, or use versionAsOf/timestampAsOf to read the table as of one")
    return ReadOptions(uri=uri, storage=StorageOptions.resolve(storage), version=version,
                       min_partitions=_int(own, "minPartitions", minimum=1) or 1, timestamp=timestamp,
                       change_feed=change_feed)


def parse_schema_options(options: Mapping[str, str]) -> ReadOptions:
    """What ``DataSource.schema()`` needs; it runs for batch and streaming reads alike, so it accepts the
    options of both (each reader checks its own afterwards). ``change_feed`` is set for a change feed read
    of either kind (a stream's range has no end: its ``ending_*`` are None)."""
    uri, storage, own = _canonical(options, Use.READ, also=(Use.STREAM_READ,))
    change_feed = None
    if _bool(own, "readChangeFeed"):
        change_feed = ChangeFeedOptions(starting_version=None, ending_version=_int(own, "endingVersion", minimum=0),
                                        starting_timestamp=None, ending_timestamp=_timestamp(own, "endingTimestamp"))
    version, timestamp = _as_of(own)
    return ReadOptions(uri=uri, storage=StorageOptions.resolve(storage), version=version,
                       min_partitions=_int(own, "minPartitions", minimum=1) or 1, timestamp=timestamp,
                       change_feed=change_feed)


def parse_read(options: Mapping[str, str]) -> ReadOptions:
    uri, storage, own = _canonical(options, Use.READ)
    return _read_options(uri, storage, own)


def parse_stream_read(options: Mapping[str, str]) -> StreamReadOptions:
    uri, storage, own = _canonical(options, Use.STREAM_READ)
    raw = own.get("startingVersion")
    starting: int | str | None
    if raw is None:
        starting = None
    elif raw.strip().lower() == "latest":
        starting = "latest"
    else:
        starting = _int(own, "startingVersion", minimum=0)
    starting_timestamp = _timestamp(own, "startingTimestamp")
    if starting is not None and starting_timestamp is not None:
        raise InvalidArgumentError("options startingVersion and startingTimestamp both say where the stream starts: "
                                   "give one")
    change_feed = _bool(own, "readChangeFeed")
    if change_feed and _bool(own, "skipChangeCommits"):
        raise InvalidArgumentError("option skipChangeCommits does not apply to a change feed stream "
                                   "(readChangeFeed=true), which delivers deletes and updates as rows: remove it")
    return StreamReadOptions(
        uri=uri, storage=StorageOptions.resolve(storage), starting_version=starting,
        max_files_per_trigger=_int(own, "maxFilesPerTrigger", minimum=1) or DELTA_STREAM_DEFAULT_MAX_FILES,
        skip_change_commits=_bool(own, "skipChangeCommits"),
        min_partitions=_int(own, "minPartitions", minimum=1) or 1, starting_timestamp=starting_timestamp,
        change_feed=change_feed)


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    uri, storage, own = _canonical(options, Use.STREAM_WRITE)
    return SinkOptions(uri=uri, storage=StorageOptions.resolve(storage), partition_by=_columns(own),
                       user_metadata=_text(own, "userMetadata"),
                       target_file_size=_int(own, "targetFileSize", minimum=1),
                       checkpoint_location=own.get("checkpointLocation"), compression=_compression(own))
