"""Typed metrics of an operation: what ``write_table`` / ``Table.delete`` / ``update`` /
``merge(...).execute()`` / ``restore`` / ``optimize`` / ``clone`` / ``create_table`` (and their Spark
equivalents: ``write_dataframe``, ``df.write.format("dynacommit")``, the streaming sink's micro-batches,
``DynacommitTable``) return in ``CommitResult.metrics``.

Each is a frozen dataclass whose fields carry deltalake's names (delta-spark's in snake case where deltalake
has none) and typed values (counts are integers, ``*_seconds`` floats, ``skipped`` a bool;
``metrics.num_deleted_rows``; ``to_dict()`` gives them as deltalake's Python returns them), built from the
one set of counts the operation's plan made: Delta's ``operationMetrics`` of the commit (camelCase names,
string values) plus what the commit path knows afterwards (``numAttempts``, ``numReplans``, ...). A field
is None when the operation did not record it (a DELETE that removes whole files does not read their rows).

They are also read-only dicts of those Delta metrics, as before: ``metrics["numDeletedRows"] == "3"``,
``dict(metrics)``, ``metrics == {...}`` and ``json.dumps(metrics)`` see Delta's names and strings, exactly
what the commit's ``commitInfo.operationMetrics`` holds (plus the commit path's extras). A field's own name
is accepted by ``metrics[...]`` and ``get`` too (``metrics["num_deleted_rows"] == 3``), so code written for
deltalake's dictionaries reads them unchanged; ``in``, iteration, ``keys()`` and ``len`` see the Delta names
only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = ["CloneMetrics", "DeleteMetrics", "MergeMetrics", "OperationMetrics", "OptimizeMetrics", "RestoreMetrics",
           "UpdateMetrics", "WriteMetrics", "metrics_for"]


def _typed(kind: str, value: str | None) -> int | float | bool | str | None:
    """``value`` (a string of Delta's metrics) as a field of type ``kind`` (its annotation) holds it."""
    if value is None:
        return None
    if kind.startswith("float"):
        return float(value)
    if kind.startswith("bool"):
        if value not in ("true", "false"):
            raise ValueError(f"invalid boolean {value!r} (Delta writes true or false)")
        return value == "true"
    if kind.startswith("str"):
        return value
    return int(value)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class OperationMetrics(dict):  # type: ignore[type-arg] - a read-only dict of Delta's names and strings
    """The metrics of an operation without typed metrics of its own (ALTER, CLUSTER BY, CREATE TABLE ...), and
    the base of the others (module docstring). As a dict (read-only) it holds Delta's metrics, names and
    strings as in the log: it compares equal to that dict and is written to JSON as it."""

    num_attempts: int | None = None
    num_replans: int | None = None
    num_retries: int | None = None
    execution_time_ms: int | None = None
    skipped: bool | None = None
    """True when nothing was committed (mode ``ignore`` on an existing table, the application's txn already
    committed); None otherwise."""

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {"num_attempts": "numAttempts", "num_replans": "numReplans",
                                                "num_retries": "numRetries", "execution_time_ms": "executionTimeMs",
                                                "skipped": "skipped"}
    """Each field's Delta name."""

    @classmethod
    def of(cls, delta: Mapping[str, str]) -> OperationMetrics:
        """The typed metrics of Delta's ``delta``; each field holds the count under its Delta name."""
        kept = {str(k): str(v) for k, v in delta.items()}
        kinds = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        try:
            made = cls(**{name: _typed(kinds[name], kept.get(key)) for name, key in cls._names().items()})
        except ValueError as error:
            raise ValueError(f"{cls.__name__}: a metric does not have its type ({error}); the metrics were "
                             f"{kept}") from None
        dict.update(made, kept)
        return made

    @classmethod
    def _names(cls) -> dict[str, str]:
        names: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            names.update(vars(klass).get("DELTA_NAMES", {}))
        return names

    @property
    def delta(self) -> dict[str, str]:
        """Delta's metrics (a plain copy): what ``commitInfo.operationMetrics`` holds, and the commit path's
        extras (``numAttempts``, ``numReplans``, ``numRetries``)."""
        return dict(self)

    def to_dict(self) -> dict[str, int | float | bool | str]:
        """The recorded fields under deltalake's names, as deltalake's Python returns its metrics."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def __repr__(self) -> str:
        recorded = ", ".join(f"{name}={value!r}" for name, value in self.to_dict().items())
        return f"{type(self).__name__}({recorded})"

    def __missing__(self, key: str) -> int | float | bool | str:
        """A field's own name reads its typed value (when recorded); a Delta name reads its string."""
        value = getattr(self, key, None) if key in self._names() else None
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{type(self).__name__} is read-only: copy it with dict(metrics) to change it")

    # every way to change a dict in place is refused
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only  # type: ignore

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), dict(self))


def _rebuild(cls: type[OperationMetrics], delta: dict[str, str]) -> OperationMetrics:
    return cls.of(delta)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class DeleteMetrics(OperationMetrics):
    """A DELETE's metrics (deltalake's ``DeleteMetrics`` names; delta-spark's in the mapping)."""

    num_deleted_rows: int | None = None
    num_copied_rows: int | None = None
    num_added_files: int | None = None
    num_removed_files: int | None = None
    num_added_change_files: int | None = None
    num_deletion_vectors_added: int | None = None
    num_deletion_vectors_removed: int | None = None
    num_deletion_vectors_updated: int | None = None
    scan_time_ms: int | None = None
    rewrite_time_ms: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_deleted_rows": "numDeletedRows", "num_copied_rows": "numCopiedRows",
        "num_added_files": "numAddedFiles", "num_removed_files": "numRemovedFiles",
        "num_added_change_files": "numAddedChangeFiles", "num_deletion_vectors_added": "numDeletionVectorsAdded",
        "num_deletion_vectors_removed": "numDeletionVectorsRemoved",
        "num_deletion_vectors_updated": "numDeletionVectorsUpdated", "scan_time_ms": "scanTimeMs",
        "rewrite_time_ms": "rewriteTimeMs"}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class UpdateMetrics(OperationMetrics):
    """An UPDATE's metrics (deltalake's ``UpdateMetrics`` names; delta-spark's in the mapping)."""

    num_updated_rows: int | None = None
    num_copied_rows: int | None = None
    num_added_files: int | None = None
    num_removed_files: int | None = None
    num_added_change_files: int | None = None
    num_deletion_vectors_added: int | None = None
    num_deletion_vectors_removed: int | None = None
    num_deletion_vectors_updated: int | None = None
    scan_time_ms: int | None = None
    rewrite_time_ms: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_updated_rows": "numUpdatedRows", "num_copied_rows": "numCopiedRows",
        "num_added_files": "numAddedFiles", "num_removed_files": "numRemovedFiles",
        "num_added_change_files": "numAddedChangeFiles", "num_deletion_vectors_added": "numDeletionVectorsAdded",
        "num_deletion_vectors_removed": "numDeletionVectorsRemoved",
        "num_deletion_vectors_updated": "numDeletionVectorsUpdated", "scan_time_ms": "scanTimeMs",
        "rewrite_time_ms": "rewriteTimeMs"}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class MergeMetrics(OperationMetrics):
    """A MERGE's metrics (deltalake's ``MergeMetrics`` names; delta-spark's in the mapping)."""

    num_source_rows: int | None = None
    num_target_rows_inserted: int | None = None
    num_target_rows_updated: int | None = None
    num_target_rows_deleted: int | None = None
    num_target_rows_copied: int | None = None
    num_output_rows: int | None = None
    num_target_files_added: int | None = None
    num_target_files_removed: int | None = None
    num_target_change_files_added: int | None = None
    num_target_files_before_skipping: int | None = None
    num_target_files_after_skipping: int | None = None
    scan_time_ms: int | None = None
    rewrite_time_ms: int | None = None
    materialize_source_time_ms: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_source_rows": "numSourceRows", "num_target_rows_inserted": "numTargetRowsInserted",
        "num_target_rows_updated": "numTargetRowsUpdated", "num_target_rows_deleted": "numTargetRowsDeleted",
        "num_target_rows_copied": "numTargetRowsCopied", "num_output_rows": "numOutputRows",
        "num_target_files_added": "numTargetFilesAdded", "num_target_files_removed": "numTargetFilesRemoved",
        "num_target_change_files_added": "numTargetChangeFilesAdded",
        "num_target_files_before_skipping": "numFilesBeforeSkipping",
        "num_target_files_after_skipping": "numFilesAfterSkipping", "scan_time_ms": "scanTimeMs",
        "rewrite_time_ms": "rewriteTimeMs", "materialize_source_time_ms": "materializeSourceTimeMs"}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class RestoreMetrics(OperationMetrics):
    """A RESTORE's metrics (delta-spark's names in snake case; deltalake's ``num_restored_file`` /
    ``num_removed_file`` are the first two)."""

    num_restored_files: int | None = None
    num_removed_files: int | None = None
    num_of_files_after_restore: int | None = None
    table_size_after_restore: int | None = None
    restored_files_size: int | None = None
    removed_files_size: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_restored_files": "numRestoredFiles", "num_removed_files": "numRemovedFiles",
        "num_of_files_after_restore": "numOfFilesAfterRestore", "table_size_after_restore": "tableSizeAfterRestore",
        "restored_files_size": "restoredFilesSize", "removed_files_size": "removedFilesSize"}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class OptimizeMetrics(OperationMetrics):
    """An OPTIMIZE commit's metrics (deltalake's ``num_files_added`` / ``num_files_removed`` under delta-spark's
    ``numAddedFiles`` / ``numRemovedFiles``)."""

    num_added_files: int | None = None
    num_removed_files: int | None = None
    num_added_bytes: int | None = None
    num_removed_bytes: int | None = None
    num_deletion_vectors_removed: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_added_files": "numAddedFiles", "num_removed_files": "numRemovedFiles",
        "num_added_bytes": "numAddedBytes", "num_removed_bytes": "numRemovedBytes",
        "num_deletion_vectors_removed": "numDeletionVectorsRemoved"}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class WriteMetrics(OperationMetrics):
    """A write's metrics: ``write_table``, Spark's ``write_dataframe`` / ``df.write.format("dynacommit")`` and
    each micro-batch of the streaming sink (operations ``WRITE`` and ``STREAMING UPDATE``), counted once by
    the job commit from the files the tasks staged, so every writer reports the same values for the same
    rows. delta-spark's names for a WRITE (``numFiles``, ``numOutputRows``, ``numOutputBytes``; an overwrite's
    ``numRemovedFiles`` / ``numRemovedBytes``; a ``replaceWhere``'s ``numDeletedRows`` / ``numCopiedRows``),
    and the job commit's own (``numParts``, ``numTasks``, ``jobId``, the seconds each stage took).
    ``num_added_files`` / ``num_added_rows`` read ``num_files`` / ``num_output_rows`` under deltalake's
    names for a write."""

    num_files: int | None = None
    num_output_rows: int | None = None
    num_output_bytes: int | None = None
    num_removed_files: int | None = None
    num_removed_bytes: int | None = None
    num_deleted_rows: int | None = None
    num_copied_rows: int | None = None
    num_added_change_files: int | None = None
    num_parts: int | None = None
    num_tasks: int | None = None
    job_id: str | None = None
    upload_seconds: float | None = None
    complete_seconds: float | None = None
    commit_seconds: float | None = None
    app_version_held: int | None = None
    """A skipped write's application txn: the version of it the table holds."""

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "num_files": "numFiles", "num_output_rows": "numOutputRows", "num_output_bytes": "numOutputBytes",
        "num_removed_files": "numRemovedFiles", "num_removed_bytes": "numRemovedBytes",
        "num_deleted_rows": "numDeletedRows", "num_copied_rows": "numCopiedRows",
        "num_added_change_files": "numAddedChangeFiles", "num_parts": "numParts", "num_tasks": "numTasks",
        "job_id": "jobId", "upload_seconds": "uploadSeconds", "complete_seconds": "completeSeconds",
        "commit_seconds": "commitSeconds", "app_version_held": "appVersionHeld"}

    @property
    def num_added_files(self) -> int | None:
        """deltalake's name of :attr:`num_files`."""
        return self.num_files

    @property
    def num_added_rows(self) -> int | None:
        """deltalake's name of :attr:`num_output_rows`."""
        return self.num_output_rows


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CloneMetrics(OperationMetrics):
    """A shallow CLONE's metrics (delta-spark's names in snake case)."""

    source_table_size: int | None = None
    source_num_of_files: int | None = None
    num_removed_files: int | None = None
    removed_files_size: int | None = None
    num_copied_files: int | None = None
    copied_files_size: int | None = None

    DELTA_NAMES: ClassVar[Mapping[str, str]] = {
        "source_table_size": "sourceTableSize", "source_num_of_files": "sourceNumOfFiles",
        "num_removed_files": "numRemovedFiles", "removed_files_size": "removedFilesSize",
        "num_copied_files": "numCopiedFiles", "copied_files_size": "copiedFilesSize"}


_BY_OPERATION: dict[str, type[OperationMetrics]] = {"DELETE": DeleteMetrics, "UPDATE": UpdateMetrics,
                                                     "MERGE": MergeMetrics, "RESTORE": RestoreMetrics,
                                                     "OPTIMIZE": OptimizeMetrics, "WRITE": WriteMetrics,
                                                     "STREAMING UPDATE": WriteMetrics, "CLONE": CloneMetrics}


def metrics_for(operation: str, delta: Mapping[str, str]) -> OperationMetrics:
    """The typed metrics of ``operation`` (Delta's operation name) from its Delta metrics ``delta``."""
    return _BY_OPERATION.get(operation, OperationMetrics).of(delta)
