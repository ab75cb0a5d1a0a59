"""Where every Spark write meets the table's job commit: one module, two calls.

Every Spark write path (``write_dataframe``, ``df.write.format("dynacommit")``, the streaming sink) says
what it wants as a :class:`JobSpec` and goes through exactly two functions here:

1. :func:`plan_job`, on the driver before any task stages a byte: the write checked against the table
   as it is (``mode="error"``/``"ignore"``, partition columns, schema, a job whose ``txn`` the table
   already holds) with the rules of :mod:`table.data.jobcommit` and that module's own functions
   (``already_applied``, ``TableExistsError``); the result says what the tasks write with, or that
   the job has nothing to do;
2. :func:`commit_job`, the only call of :func:`table.data.jobcommit.commit_staged` in this package:
   validate, complete, commit one log entry, clean up.

The shapes (``JobSpec`` with the fields of the table layer's coming write spec; ``plan_job(table, spec,
data_schema) -> JobPlan(schema, partition_by, creating, done)``; ``commit_job(table, pendingsets, spec,
plan, ...)``) are those of that write spec and its job commit, so switching to them changes this module
only. ``userMetadata`` cannot be recorded by today's job commit: a spec carrying it is refused by
:func:`plan_job` before anything runs, rather than written without it.
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
from table.errors import SchemaMismatchError
from table.log.schema import arrow_to_delta, delta_to_arrow, schema_diff
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
    """What the tasks write with (``schema``: the table's, or for a new table the data's in Delta's Arrow
    types; ``partition_by`` in table order), whether the job creates the table, or ``done``: the
    result of a job with nothing to do (``ignore`` on an existing table, its txn already there)."""

    schema: pa.Schema
    partition_by: tuple[str, ...]
    creating: bool
    done: CommitResult | None = None


def plan_job(table: Table, spec: JobSpec, data_schema: pa.Schema) -> JobPlan:
    """Before staging: whether the job runs at all, and with what. ``data_schema`` is the data's Arrow
    schema (every column nullable: Spark's nullability is a property of a plan, not of the data).

    Raises TableExistsError (``mode="error"`` on an existing table), SchemaMismatchError (the data does
    not fit the table), InvalidArgumentError (partition columns that are not the table's or not in the
    data; ``userMetadata``, which today's job commit cannot record).
    """
    if spec.user_metadata is not None:
        raise InvalidArgumentError(
            "userMetadata cannot be recorded by this version's job commit; nothing was written. Remove the "
            "option (the commit's operationMetrics carry the job id and host)")
    where = table.uri.table_path
    if not table.exists:
        partition_by = tuple(spec.partition_by or ())
        missing = [c for c in partition_by if c not in data_schema.names]
        if missing:
            raise InvalidArgumentError(f"partition columns {missing} are not columns of the data "
                                       f"{data_schema.names}")
        return JobPlan(schema=delta_to_arrow(arrow_to_delta(data_schema)), partition_by=partition_by, creating=True)
    existing = tuple(table.partition_columns)
    if spec.mode == "error":
        raise TableExistsError(f"a table already exists at {where} (version {table.version}); nothing was "
                               f"written. Use mode 'append' or 'overwrite'")
    if spec.mode == "ignore":
        log.info("table %s exists and mode is 'ignore': nothing written", where)
        return JobPlan(table.schema, existing, False, CommitResult(version=table.version, metrics={"skipped": "true"}))
    done = already_applied(table, spec.app_id, spec.app_version)
    if done is not None:
        log.info("table %s already holds %s at version %s: nothing to do", where, spec.app_id, done.version)
        return JobPlan(table.schema, existing, False, done)
    if spec.partition_by is not None and tuple(spec.partition_by) != existing:
        raise InvalidArgumentError(
            f"table {where} is partitioned by {list(existing)}, not {list(spec.partition_by)}; write with "
            f"partitionBy={','.join(existing)!r} or leave it out")
    differences = schema_diff(pa.schema([f.with_nullable(True) for f in table.schema]), data_schema)
    if differences:
        raise SchemaMismatchError(differences, table=where)
    return JobPlan(table.schema, existing, False)


def commit_job(table: Table, pendingsets: Sequence[PendingSet], spec: JobSpec, plan: JobPlan, *, job_id: str,
               upload_seconds: float | None = None, sweep_strays: bool = True) -> CommitResult:
    """The job commit of :func:`table.data.jobcommit.commit_staged` for ``spec`` as ``plan`` planned it (see
    there for what it raises and cleans up)."""
    return commit_staged(
        table, pendingsets, mode=spec.mode, partition_overwrite=spec.partition_overwrite, app_id=spec.app_id,
        app_version=spec.app_version, schema=plan.schema, partition_by=list(plan.partition_by),
        configuration=spec.configuration, engine_info=engine_info(), job_id=job_id, upload_seconds=upload_seconds,
        sweep_strays=sweep_strays,
    )


def engine_info() -> str:
    """``commitInfo.engineInfo`` of a Spark job: the table layer's, plus the pyspark version."""
    import pyspark

    return f"{table_engine_info()} / pyspark {pyspark.__version__}"
