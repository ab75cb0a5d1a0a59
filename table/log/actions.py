"""Delta Lake log actions: one frozen pydantic model per action, and the JSON lines of a commit.

A commit file ``_delta_log/{v:020d}.json`` holds one action per line, each line a JSON object with
exactly one key naming the action (PROTOCOL.md, "Delta Log Entries" and "Actions"):

    {"protocol":{"minReaderVersion":1,"minWriterVersion":2}}
    {"metaData":{"id":"...","format":{"provider":"parquet","options":{}},"schemaString":"...",...}}
    {"add":{"path":"p=1/part-0.parquet","partitionValues":{"p":"1"},"size":10,...}}

That key is the discriminator of the :data:`Action` union: :data:`ACTION_MODELS` maps it to the model.
Python attributes are snake_case; JSON names are Delta's camelCase (``min_reader_version`` ↔
``minReaderVersion``), and models accept either name when built from Python.

Fields Delta added after these models were written (or a writer's private fields) are kept, not
dropped: the models use ``extra="allow"``, so ``parse_commit(serialize_commit(xs)) == xs`` and a
rewrite of an action (a checkpoint, a ``remove`` derived from an ``add``) does not lose them.
PROTOCOL.md asks readers to ignore unknown fields and not fail on them; keeping them is the stricter
form of that.

Validation is strict (a ``size`` of ``"10"`` or a ``dataChange`` of ``1`` is corruption, not something
to coerce), except in ``commitInfo``, which PROTOCOL.md leaves free-form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer
from pydantic.alias_generators import to_camel

from logstore.errors import CorruptLogError

__all__ = [
    "ACTION_MODELS",
    "UNMODELED_ACTION_KEYS",
    "Action",
    "AddFile",
    "Cdc",
    "CheckpointMetadata",
    "CommitInfo",
    "DeletionVectorDescriptor",
    "DomainMetadata",
    "Format",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "Sidecar",
    "Txn",
    "UnknownAction",
    "action_from_dict",
    "action_to_dict",
    "parse_commit",
    "serialize_commit",
]


class _DeltaModel(BaseModel):
    """Base of every Delta JSON struct: camelCase aliases, frozen, unknown fields kept.

    Serialization omits declared fields that are None (Delta writers leave absent optional fields out)
    but keeps unknown fields exactly as read, nulls included, so a round trip is lossless.
    """

    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, extra="allow", strict=True
    )

    @model_serializer(mode="wrap")
    def _omit_unset_optionals(self, handler, info) -> dict[str, Any]:
        data = handler(self)
        for name, field in type(self).model_fields.items():
            key = (field.alias or name) if info.by_alias else name
            if key in data and data[key] is None:
                del data[key]
        return data


class Protocol(_DeltaModel):
    """``protocol``: the reader/writer versions (and, for 3/7, the table features) a client must implement."""

    action_key: ClassVar[str] = "protocol"

    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None


class Format(_DeltaModel):
    """``metaData.format``: the data file encoding; always parquet for tables Delta writers create."""

    provider: str = "parquet"
    options: dict[str, str] = Field(default_factory=dict)


class Metadata(_DeltaModel):
    """``metaData``: table id, schema (a Spark struct JSON *string*), partition columns and properties.

    ``format``, ``partition_columns`` and ``configuration`` are required by PROTOCOL.md; they have defaults
    here only so that writers can build a Metadata briefly. They are always serialized.
    """

    action_key: ClassVar[str] = "metaData"

    id: str
    name: str | None = None
    description: str | None = None
    format: Format = Field(default_factory=Format)
    schema_string: str
    partition_columns: list[str] = Field(default_factory=list)
    configuration: dict[str, str | None] = Field(default_factory=dict)
    created_time: int | None = None

    def schema_json(self) -> dict[str, Any]:
        """The table schema as parsed JSON (``{"type":"struct","fields":[...]}``)."""
        return json.loads(self.schema_string)


class DeletionVectorDescriptor(_DeltaModel):
    """``add.deletionVector`` / ``remove.deletionVector``. Parsed so that such logs are readable at all;
    replay refuses tables that use them (see ``table.log.state``)."""

    storage_type: str
    path_or_inline_dv: str
    offset: int | None = None
    size_in_bytes: int
    cardinality: int

    @property
    def unique_id(self) -> str:
        """PROTOCOL.md's derived ``uniqueId``: ``<storageType><pathOrInlineDv>[@<offset>]``."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"


class AddFile(_DeltaModel):
    """``add``: a data file (``path`` relative to the table root, URI-encoded) is part of the table.

    ``partition_values`` maps every partition column to its serialized value (None or "" = null, see
    ``table.log.schema.parse_partition_value``). ``stats`` is a JSON *string* (see ``table.data.stats``).
    """

    action_key: ClassVar[str] = "add"

    path: str
    partition_values: dict[str, str | None]
    size: int
    modification_time: int
    data_change: bool
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    @property
    def logical_key(self) -> tuple[str, str | None]:
        """The logical file's identity in replay: ``(path, deletionVector.uniqueId or None)``."""
        return self.path, None if self.deletion_vector is None else self.deletion_vector.unique_id

    def remove(self, *, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        """The ``remove`` that takes this file out of the table, carrying its metadata as Spark does
        (``extendedFileMetadata=true`` with partition values and size, so readers of the remove need not
        look the add up again)."""
        return RemoveFile(
            path=self.path,
            data_change=data_change,
            deletion_timestamp=deletion_timestamp,
            extended_file_metadata=True,
            partition_values=dict(self.partition_values),
            size=self.size,
            stats=self.stats,
            tags=None if self.tags is None else dict(self.tags),
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


class RemoveFile(_DeltaModel):
    """``remove``: a data file is no longer part of the table; kept as a tombstone for VACUUM."""

    action_key: ClassVar[str] = "remove"

    path: str
    data_change: bool
    deletion_timestamp: int | None = None
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    @property
    def logical_key(self) -> tuple[str, str | None]:
        """See :attr:`AddFile.logical_key`."""
        return self.path, None if self.deletion_vector is None else self.deletion_vector.unique_id


class Txn(_DeltaModel):
    """``txn``: the latest ``version`` an application (``app_id``) committed; makes retried jobs idempotent."""

    action_key: ClassVar[str] = "txn"

    app_id: str
    version: int
    last_updated: int | None = None


class CommitInfo(_DeltaModel):
    """``commitInfo``: free-form provenance. Every key is kept; the conventional ones are typed.

    Validation is lax here (unlike other actions) because any writer may put anything in it and a
    surprising commitInfo must not make a table unreadable.
    """

    model_config = ConfigDict(strict=False)

    action_key: ClassVar[str] = "commitInfo"

    timestamp: int | None = None
    in_commit_timestamp: int | None = None
    operation: str | None = None
    operation_parameters: dict[str, Any] | None = None
    is_blind_append: bool | None = None
    operation_metrics: dict[str, Any] | None = None
    client_version: str | None = None
    engine_info: str | None = None
    user_metadata: Any = None  # a string by convention; any JSON value another writer put there is kept


class Cdc(_DeltaModel):
    """``cdc``: a change-data file. Parsed and carried through; this project never writes one."""

    action_key: ClassVar[str] = "cdc"

    path: str
    partition_values: dict[str, str | None]
    size: int
    data_change: bool
    tags: dict[str, str | None] | None = None


class DomainMetadata(_DeltaModel):
    """``domainMetadata``: configuration of a named metadata domain (``removed=true`` is a tombstone)."""

    action_key: ClassVar[str] = "domainMetadata"

    domain: str
    configuration: str
    removed: bool


class CheckpointMetadata(_DeltaModel):
    """``checkpointMetadata``: the one action that makes a checkpoint a V2 checkpoint (PROTOCOL.md,
    "Checkpoint Metadata"); only in checkpoints, never replayed."""

    action_key: ClassVar[str] = "checkpointMetadata"

    version: int
    tags: dict[str, str | None] | None = None


class Sidecar(_DeltaModel):
    """``sidecar``: a V2 checkpoint's reference to a file of its ``add``/``remove`` actions under
    ``_delta_log/_sidecars/`` (``path`` is URI-encoded, relative to that directory, or absolute)."""

    action_key: ClassVar[str] = "sidecar"

    path: str
    size_in_bytes: int
    modification_time: int
    tags: dict[str, str | None] | None = None


class UnknownAction(BaseModel):
    """An action we do not model: kept verbatim so that it survives a rewrite, never interpreted. No key
    parses into one today (see :data:`UNMODELED_ACTION_KEYS`); tools may still build them."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: dict[str, Any]


Action = Union[Protocol, Metadata, AddFile, RemoveFile, Txn, CommitInfo, Cdc, DomainMetadata, CheckpointMetadata,
               Sidecar, UnknownAction]
"""One line of a commit. The JSON key of the line (``add``, ``metaData`` ...) selects the model."""

ACTION_MODELS: Mapping[str, type[_DeltaModel]] = {
    model.action_key: model
    for model in (Protocol, Metadata, AddFile, RemoveFile, Txn, CommitInfo, Cdc, DomainMetadata, CheckpointMetadata,
                  Sidecar)
}

UNMODELED_ACTION_KEYS: frozenset[str] = frozenset()
"""Action keys PROTOCOL.md defines that are parsed into :class:`UnknownAction`: none since the V2
checkpoint actions are modeled.

Any key that is neither is rejected as corruption: every action that changes how a table must be read comes
with a protocol upgrade, which ``table.log.state.check_readable`` refuses first, so an unknown key on a
table we accept is far more likely a broken writer than a feature.
"""


def action_from_dict(obj: Any) -> Action:
    """Build the action of one decoded log line (or one checkpoint row turned into a dict).

    Raises ``ValueError`` saying what is wrong: not an object, not exactly one key, an unknown action
    key, or fields that do not fit the action (missing, wrong type).
    """
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    if len(obj) != 1:
        keys = ", ".join(sorted(obj)) or "none"
        raise ValueError(f"expected exactly one action key, found {len(obj)} ({keys})")
    ((key, value),) = obj.items()
    model = ACTION_MODELS.get(key)
    if model is None and key not in UNMODELED_ACTION_KEYS:
        known = ", ".join(sorted([*ACTION_MODELS, *UNMODELED_ACTION_KEYS]))
        raise ValueError(f"unknown action {key!r} (Delta actions are: {known})")
    if not isinstance(value, dict):
        raise ValueError(f"action {key!r} must be a JSON object, found {_json_type(value)}")
    if model is None:
        return UnknownAction(key=key, value=value)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or key}: {err['msg']}" for err in exc.errors()
        )
        raise ValueError(f"malformed {key!r} action: {problems}") from None


def action_to_dict(action: Action) -> dict[str, Any]:
    """The one-key JSON object of ``action``, with Delta's field names and absent optionals left out."""
    if isinstance(action, UnknownAction):
        return {action.key: action.value}
    return {action.action_key: action.model_dump(by_alias=True)}


def parse_commit(body: bytes, *, version: int | None = None, where: str | None = None) -> list[Action]:
    """Parse the newline-delimited JSON of one commit into its actions, in file order.

    Blank lines are skipped. ``version`` and ``where`` (a path or URI) only make error messages precise.
    Raises ``CorruptLogError`` naming the entry and the 1-based line number when a line is not UTF-8,
    not JSON (as a commit cut short by a failed upload would be), or not a valid action.
    """
    actions: list[Action] = []
    lines = body.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptLogError(f"{_describe(version, where)}, line {number}: not UTF-8 ({exc.reason})") from None
        try:
            obj = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            truncated = " (the entry looks truncated)" if number == len(lines) else ""
            raise CorruptLogError(
                f"{_describe(version, where)}, line {number}: not valid JSON{truncated}: {exc}"
            ) from None
        try:
            actions.append(action_from_dict(obj))
        except ValueError as exc:
            raise CorruptLogError(f"{_describe(version, where)}, line {number}: {exc}") from None
    if not actions:
        raise CorruptLogError(
            f"{_describe(version, where)} holds no action ({len(body)} bytes): a commit has at least one; the file "
            f"was cut short or written by a broken writer. Restore it from a backup or an S3 object version")
    return actions


def serialize_commit(actions: Iterable[Action]) -> bytes:
    """The bytes of a commit file: one compact JSON object per action, each ending in ``\\n``, UTF-8.

    Field names are Delta's; ``stats`` and ``schemaString`` stay JSON strings inside the JSON.
    """
    return b"".join(
        json.dumps(action_to_dict(a), separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        for a in actions
    )


def _describe(version: int | None, where: str | None) -> str:
    if where and version is not None:
        return f"log entry {where} (version {version})"
    if where:
        return f"log entry {where}"
    if version is not None:
        return f"log entry for version {version}"
    return "log entry"


def _reject_constant(name: str) -> Any:
    """``json.loads`` accepts NaN and Infinity, which are not JSON; a Delta writer never produces them."""
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "an array", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )
