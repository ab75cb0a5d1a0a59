"""Where every Spark write meets the table's job commit: one module, two calls.

Every Spark write path (``write_dataframe``, ``df.write.format("dynacommit")``, the streaming sink) says
what it wants as a :class:`JobSpec` and goes through exactly two functions here:

1. :func:`plan_job`, on the driver before any task stages a byte: the rules of
   :mod:`table.data.jobcommit` that must be known before staging (is the job already in the table, by
   its application's ``txn``? does ``mode="error"``/``"ignore"`` stop it? which partition columns do the
   tasks write?), using that module's own functions (``already_applied``, ``TableExistsError``);
2. :func:`commit_job`, the only call of :func:`table.data.jobcommit.commit_staged` in this package:
   validate, complete, commit one log entry, clean up.

The job commit's signature is about to take a validated write spec; switching to it changes this
module only. ``userMetadata`` cannot be recorded by today's job commit: a spec carrying it is refused
by :func:`plan_job` before anything runs, rather than written without it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import pyarrow as pa

from logstore.errors import InvalidArgumentError
from table.data.jobcommit import CommitResult, TableExistsError, already_applied, commit_staged
from table.data.jobcommit import engine_info as table_engine_info
from table.data.pendingset import PendingSet
from table.table import Table

__all__ = ["JobPlan", "JobSpec", "commit_job", "engine_info", "plan_job"]

log = logging.getLogger(__name__)

MODES = ("append", "overwrite", "error", "ignore")


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a Spark write asks for. ``partition_by`` None: the table's partitioning (none for a new
    table); ``app_id`` + ``app_version``: the job's ``txn`` (a job whose version the table already holds
    writes nothing)."""

    mode: str
    partition_by: tuple[str, ...] | None = None
    partition_overwrite: str = "static"
    app_id: str | None = None
    app_version: int | None = None
    configuration: Mapping[str, str] | None = None
    user_metadata: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.partition_overwrite not in ("static", "dynamic"):
            raise InvalidArgumentError(f"partition_overwrite must be 'static' or 'dynamic', got "
                                       f"{self.partition_overwrite!r}")
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidArgumentError("app_id and app_version go together: give both or neither")


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """The outcome of :func:`plan_job`: ``skipped`` (the job has nothing to do: its result) or the
    partition columns the tasks write, in table order."""

    partition_by: tuple[str, ...]
    skipped: CommitResult | None = None


def plan_job(table: Table, spec: JobSpec, *, columns: Sequence[str]) -> JobPlan:
    """Before staging: whether the job runs at all, and with which partition columns.

    ``columns`` are the names of the data's columns. Raises TableExistsError (``mode="error"`` on an
    existing table), InvalidArgumentError (partition columns that are not the table's or not in the
    data; ``userMetadata``, which today's job commit cannot record).
    """
    if spec.user_metadata is not None:
        raise InvalidArgumentError(
            "userMetadata cannot be recorded by this version's job commit; nothing was written. Remove the "
            "option (the commit's operationMetrics carry the job id and host)")
    partition_by = spec.partition_by
    if table.exists:
        if spec.mode == "error":
            raise TableExistsError(f"a table already exists at {table.uri.table_path} (version {table.version}); "
                                   f"nothing was written. Use mode 'append' or 'overwrite'")
        if spec.mode == "ignore":
            log.info("table %s exists and mode is 'ignore': nothing written", table.uri.table_path)
            return JobPlan(partition_by=tuple(table.partition_columns),
                           skipped=CommitResult(version=table.version, metrics={"skipped": "true"}))
        done = already_applied(table, spec.app_id, spec.app_version)
        if done is not None:
            log.info("table %s already holds %s at version %s: nothing to do", table.uri.table_path, spec.app_id,
                     done.version)
            return JobPlan(partition_by=tuple(table.partition_columns), skipped=done)
        if partition_by is None:
            partition_by = tuple(table.partition_columns)
        elif list(partition_by) != table.partition_columns:
            raise InvalidArgumentError(
                f"table {table.uri.table_path} is partitioned by {table.partition_columns}, not "
                f"{list(partition_by)}; write with partitionBy={','.join(table.partition_columns)!r} or leave it out")
    partition_by = tuple(partition_by or ())
    missing = [c for c in partition_by if c not in columns]
    if missing:
        raise InvalidArgumentError(f"partition columns {missing} are not columns of the data {list(columns)}")
    return JobPlan(partition_by=partition_by)


def commit_job(table: Table, pendingsets: Sequence[PendingSet], spec: JobSpec, *, schema: pa.Schema,
               partition_by: Sequence[str], job_id: str, upload_seconds: float | None = None,
               sweep_strays: bool = True) -> CommitResult:
    """The job commit of :func:`table.data.jobcommit.commit_staged` for ``spec`` (see there for what it
    raises and cleans up). ``schema`` and ``partition_by`` are what the tasks wrote with."""
    return commit_staged(
        table, pendingsets, mode=spec.mode, partition_overwrite=spec.partition_overwrite, app_id=spec.app_id,
        app_version=spec.app_version, schema=schema, partition_by=list(partition_by),
        configuration=spec.configuration, engine_info=engine_info(), job_id=job_id, upload_seconds=upload_seconds,
        sweep_strays=sweep_strays,
    )


def engine_info() -> str:
    """``commitInfo.engineInfo`` of a Spark job: the table layer's, plus the pyspark version."""
    import pyspark

    return f"{table_engine_info()} / pyspark {pyspark.__version__}"
