"""Where every Spark write meets the table's job commit.

Every Spark write path (``write_dataframe``, ``df.write.format("dynacommit")``, the streaming sink) says
what it wants as a :class:`~table.data.writespec.WriteSpec` (the table layer's one place for the rules of
modes, partitioning, idempotent jobs and table properties), checks it on the driver before any task stages
a byte with ``spec.plan(table, data_schema)``, and commits through :func:`commit_job`: the only call of
:func:`table.data.jobcommit.commit_staged` in this package (validate, complete, commit one log entry, clean
up), with this engine's ``commitInfo.engineInfo``.
"""

from __future__ import annotations

from collections.abc import Sequence

from table.data.jobcommit import commit_staged
from table.data.jobcommit import engine_info as table_engine_info
from table.data.pendingset import PendingSet
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.table import Table

__all__ = ["commit_job", "engine_info"]


def commit_job(table: Table, pendingsets: Sequence[PendingSet], spec: WriteSpec, plan: WritePlan, *, job_id: str,
               upload_seconds: float | None = None, sweep_strays: bool = True) -> CommitResult:
    """The job commit of ``spec`` as ``spec.plan`` planned it (see ``commit_staged`` for what it raises and
    cleans up)."""
    return commit_staged(table, pendingsets, spec, plan, job_id=job_id, engine_info=engine_info(),
                         upload_seconds=upload_seconds, sweep_strays=sweep_strays)


def engine_info() -> str:
    """``commitInfo.engineInfo`` of a Spark job: the table layer's, plus the pyspark version."""
    import pyspark

    return f"{table_engine_info()} / pyspark {pyspark.__version__}"
