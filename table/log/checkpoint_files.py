"""Which checkpoints a table has: their file names, the ``_last_checkpoint`` hint, and what a listing shows.

PROTOCOL.md names three kinds of checkpoint of a version ``v`` (all in ``_delta_log/``, ``v`` padded to 20
digits):

- *classic*: ``v.checkpoint.parquet``, one file (V1 spec, or V2 spec when it holds a ``checkpointMetadata``);
- *multi-part*: ``v.checkpoint.o.p.parquet`` for ``o`` in ``1..p``, usable only when every part is listed
  (they cannot be written atomically); never on tables with V2 checkpoints;
- *UUID-named*: ``v.checkpoint.<uuid>.json`` or ``.parquet``, always V2 spec: a ``checkpointMetadata``
  action, the non-file actions, and the file actions either inline or in sidecar files under
  ``_delta_log/_sidecars/``.

Several checkpoints of one version may exist (two writers raced, in different kinds); any is correct. The
``_last_checkpoint`` hint names a version (and, for a V2 checkpoint, its file in ``v2Checkpoint.path``); a
hint naming a file that is gone is only a stale hint. Log compaction files (``x.y.compacted.json``) and
checksum files (``v.crc``) are neither commits nor checkpoints: they are never needed, and never used.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from logstore.base import LogStore

__all__ = [
    "LAST_CHECKPOINT",
    "CheckpointRef",
    "LastCheckpoint",
    "LastCheckpointV2",
    "checkpoint_names",
    "listed_checkpoints",
    "read_last_checkpoint",
    "uuid_checkpoint_name",
]

log = logging.getLogger(__name__)

LAST_CHECKPOINT = "_last_checkpoint"


class _HintModel(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, alias_generator=to_camel, extra="allow",
                              strict=True)


class LastCheckpointV2(_HintModel):
    """``_last_checkpoint.v2Checkpoint``: the file of the V2 checkpoint the hint names (delta-spark also puts
    its non-file actions and sidecars here; they are kept, not used)."""

    path: str
    size_in_bytes: int | None = None
    modification_time: int | None = None


class LastCheckpoint(_HintModel):
    """The ``_last_checkpoint`` hint: which checkpoint is newest and how many actions it holds."""

    version: int
    size: int
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    v2_checkpoint: LastCheckpointV2 | None = None

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")

    @property
    def checkpoint(self) -> CheckpointRef:
        """The checkpoint the hint names (its files may be gone: the hint is only a hint)."""
        if self.v2_checkpoint is not None:
            return CheckpointRef(self.version, (self.v2_checkpoint.path,))
        return CheckpointRef(self.version, tuple(checkpoint_names(self.version, self.parts)))


@dataclasses.dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of ``version``: the names (in ``_delta_log/``) of its files, one, or each part of a
    multi-part checkpoint in part order."""

    version: int
    names: tuple[str, ...]

    @property
    def parts(self) -> int | None:
        """The number of parts of a multi-part checkpoint, None for a single file."""
        return len(self.names) if len(self.names) > 1 else None

    @property
    def uuid_named(self) -> bool:
        return len(self.names) == 1 and _UUID_NAME.match(self.names[0]) is not None

    @property
    def is_json(self) -> bool:
        return self.names[0].endswith(".json")


def checkpoint_names(version: int, parts: int | None = None) -> list[str]:
    """The file names (in ``_delta_log/``) of the classic checkpoint of ``version``: one file, or ``parts``
    part files."""
    if parts is None:
        return [f"{version:020d}.checkpoint.parquet"]
    return [f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet" for part in range(1, parts + 1)]


def uuid_checkpoint_name(version: int, uuid: str, *, fmt: str = "parquet") -> str:
    """The name of a UUID-named (V2) checkpoint of ``version``."""
    return f"{version:020d}.checkpoint.{uuid}.{fmt}"


_CLASSIC_NAME = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_UUID_NAME = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"\.(json|parquet)$")


def listed_checkpoints(names: Sequence[str]) -> list[CheckpointRef]:
    """The complete checkpoints among file names of ``_delta_log/``, newest version first; within a version,
    UUID-named ones first, then the classic one, then a multi-part one (all equally correct; the order only
    decides which is tried first). A multi-part checkpoint counts only when all its parts are listed."""
    found: list[tuple[int, int, str, CheckpointRef]] = []
    multi: dict[tuple[int, int], set[int]] = {}
    for name in names:
        uuid_match = _UUID_NAME.match(name)
        if uuid_match is not None:
            version = int(uuid_match.group(1))
            found.append((version, 0, name, CheckpointRef(version, (name,))))
            continue
        match = _CLASSIC_NAME.match(name)
        if match is None:
            continue
        version = int(match.group(1))
        if match.group(2) is None:
            found.append((version, 1, name, CheckpointRef(version, (name,))))
        else:
            multi.setdefault((version, int(match.group(3))), set()).add(int(match.group(2)))
    for (version, parts), seen in multi.items():
        if seen == set(range(1, parts + 1)):
            names_ = tuple(checkpoint_names(version, parts))
            found.append((version, 2, names_[0], CheckpointRef(version, names_)))
    found.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [ref for *_, ref in found]


def read_last_checkpoint(log_store: LogStore) -> LastCheckpoint | None:
    """The ``_last_checkpoint`` hint, or None when it is absent or unusable.

    An unusable hint (not JSON, no ``version`` or ``size``) is logged and treated as absent, as
    delta-spark and delta-kernel do: it is only a hint, and the log can be listed instead.
    """
    body = log_store.read_file(LAST_CHECKPOINT)
    if body is None:
        return None
    try:
        return LastCheckpoint.model_validate_json(body)
    except ValidationError as exc:
        log.warning("ignoring unusable %s of table %s (%s); listing the log instead", LAST_CHECKPOINT,
                    log_store.table_path, exc.errors()[0]["msg"])
        return None
