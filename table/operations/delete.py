"""DELETE: remove the rows a SQL predicate selects, as Delta's DeleteCommand does.

Three cases, as in delta-spark:

1. **No predicate**: every file is removed; nothing is read.
2. **A predicate over partition columns only** (``day < '2024-01-01'``): it is evaluated, exactly, on
   the files' partition values; the files it selects are removed whole, none is opened.
3. **Any other predicate**: the files whose partition values and statistics do not rule it out are read
   (:mod:`table.operations.scan`), the predicate is evaluated on their rows by DataFusion, and each file
   holding a selected row is written again without those rows (copy-on-write); files without one are
   left alone. Rows where the predicate is NULL are kept (SQL's WHERE).

A delete that selects nothing commits nothing. Metrics are Delta's (``numDeletedRows``, ``numCopiedRows``,
``numRemovedFiles``, ``numAddedFiles``, ...; in case 1 and 2 ``numDeletedRows`` comes from the files'
statistics, and is left out when a file has none, as Delta leaves it out). With the change data feed,
case 3 writes the deleted rows as ``delete`` change data; cases 1 and 2 write none (readers derive them
from the ``remove`` actions).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import ArgumentTypeError
from table.data.writespec import CommitResult
from table.log.actions import AddFile
from table.log.snapshot import Snapshot
from table.operations import scan
from table.engine import Engine, quote
from table.operations.predicate import Predicate, bind_predicate
from table.operations.rewrite import ClauseKind, Rewriter, Staged, abort_on_error, execute, removes_of
from table.transaction import Opens, TableView, Transaction


__all__ = ["CLAUSES", "DeletePlan", "delete", "delete_metrics", "partition_metrics", "plan_delete", "stage"]


CLAUSES = (ClauseKind("matched", "delete"),)
"""A DELETE as a rewrite task runs it: one matched delete."""


@dataclasses.dataclass(frozen=True)
class DeletePlan:
    """What a delete would do on one snapshot: files removed whole (case 1 and 2), files holding selected
    rows with how many (case 3), and the rows deleted in all (None when statistics cannot tell)."""

    version: int
    predicate: str | None
    removed_whole: tuple[AddFile, ...]
    touched: tuple[tuple[AddFile, int], ...]
    candidates: scan.Candidates | None
    bound: Predicate | None = None

    @property
    def deleted_rows(self) -> int | None:
        whole = scan.record_count(self.removed_whole)
        return None if whole is None else whole + sum(n for _, n in self.touched)

    @property
    def files(self) -> list[AddFile]:
        return [*self.removed_whole, *(f for f, _ in self.touched)]


def delete(table: Transaction | Opens, predicate: str | None = None) -> CommitResult:
    """Delete the rows of ``table`` for which ``predicate`` (a SQL expression) is true; all rows without one.
    See the module docstring. Raises InvalidArgumentError for a predicate that is not valid SQL over the
    table's columns, CommitConflictError when re-planning could not commit before the deadline."""
    if predicate is not None and not isinstance(predicate, str):
        raise ArgumentTypeError(f"predicate must be a SQL expression string (or None), got {type(predicate).__name__}")
    return execute(table, "DELETE", lambda txn, job_id: stage(txn, predicate, job_id))


def plan_delete(table: TableView, snapshot: Snapshot, predicate: str | None) -> DeletePlan:
    """What ``delete`` would remove from ``snapshot``, without writing anything (a dry run reads the
    candidate files to count the selected rows)."""
    return _find(table, snapshot, predicate)


FileHandler = Callable[[AddFile, pa.Table, pa.Array], None]
"""Called for each file holding selected rows, while its window is in memory: the file, its rows (with
:data:`~table.operations.scan.FILE` and :data:`~table.operations.scan.ROW`), the row numbers selected."""


def _find(table: TableView, snapshot: Snapshot, predicate: str | None, on_file: FileHandler | None = None,
          txn: Transaction | None = None) -> DeletePlan:
    """The plan of a delete; ``on_file`` sees each touched file's rows as they are read; ``txn`` (an
    attempt's, not a dry run's) records what is read as it is chosen."""
    if predicate is None:
        if txn is not None:
            txn.read_whole_table()
        return DeletePlan(snapshot.version, None, tuple(snapshot.files), (), None)
    engine = Engine()
    bound = bind_predicate(engine, snapshot, predicate, what="the delete predicate")
    if bound.never:
        if txn is not None:
            txn.read_predicate((), bound.matcher(snapshot), predicate)
        return DeletePlan(snapshot.version, predicate, (), (), None, bound)
    if bound.partitions_only:
        removed = bound.files_selected_by_partition(engine, snapshot, snapshot.files)
        if txn is not None:
            txn.read_predicate(removed, bound.matcher(snapshot), predicate)
        return DeletePlan(snapshot.version, predicate, tuple(removed), (), None, bound)
    found = bound.candidates(snapshot)
    if txn is not None:
        txn.read_predicate(found.files, bound.matcher(snapshot), predicate)
    touched: list[tuple[AddFile, int]] = []
    for start, end in scan.windows(found.files):
        rows = scan.read_window(table, snapshot, found.files, start, end)
        engine.register(bound.table_name, rows)
        selected = engine.query(f"SELECT {quote(scan.FILE)}, {quote(scan.ROW)} FROM {quote(bound.table_name)} "
                                f"WHERE {bound.where()}", what="the delete predicate")
        by_file = scan.file_rows(rows) if on_file is not None and selected.num_rows else {}
        for index, hits in scan.split_by_file(selected):
            touched.append((found.files[index], hits.num_rows))
            if on_file is not None:
                on_file(found.files[index], by_file[index], hits[scan.ROW].combine_chunks())
    return DeletePlan(snapshot.version, predicate, (), tuple(touched), found, bound)


def stage(txn: Transaction, predicate: str | None, job_id: str) -> Staged:
    """One attempt of a delete in ``txn``: what it reads recorded there, its files written (job ``job_id``), its
    commit described. A replaceWhere overwrite (:mod:`table.operations.replace_where`) stages its DELETE part
    with it."""
    table, snapshot = txn, txn.snapshot
    started = time.monotonic()
    parameters = {"predicate": json.dumps([] if predicate is None else [predicate])}
    rewriter = Rewriter(table, snapshot, job_id)
    copied = 0
    rewriting = 0.0

    def rewrite(add: AddFile, rows: pa.Table, selected: pa.Array) -> None:
        nonlocal copied, rewriting
        began = time.monotonic()
        gone = pc.is_in(rows[scan.ROW], value_set=selected)
        rewriter.replace(add, rows, gone)
        rewriter.change(rows.filter(gone), "delete")
        if not rewriter.deletion_vectors:
            copied += rows.num_rows - len(selected)
        rewriting += time.monotonic() - began

    def run() -> Staged:
        plan = _find(table, snapshot, predicate, rewrite, txn)
        if not plan.touched:
            rewriter.abort()
            return _whole_files(snapshot, plan, parameters, time.monotonic() - started)
        metrics = delete_metrics(snapshot, plan.candidates, [f for f, _ in plan.touched],
                                 deleted=sum(n for _, n in plan.touched), copied=copied,
                                 scan_seconds=time.monotonic() - started - rewriting, rewrite_seconds=rewriting)
        pendingsets = tuple(rewriter.finish())
        return Staged("DELETE", tuple(rewriter.removes), pendingsets, None, parameters, metrics,
                      stray_uploads_possible=rewriter.stray_uploads_possible, vector_adds=tuple(rewriter.vector_adds),
                      rewriter=rewriter)

    return abort_on_error(rewriter, run)


def _whole_files(snapshot: Snapshot, plan: DeletePlan, parameters: dict[str, str], scanned: float) -> Staged:
    """Cases 1 and 2 (and case 3 selecting nothing): whole files removed, nothing written."""
    removed = plan.removed_whole
    metrics = delete_metrics(snapshot, plan.candidates, removed, deleted=plan.deleted_rows, copied=0,
                             scan_seconds=scanned, rewrite_seconds=0.0)
    return Staged("DELETE", removes_of(removed), (), None, parameters, metrics)


def delete_metrics(snapshot: Snapshot, found: scan.Candidates | None, files: Sequence[AddFile], *,
                   deleted: int | None, copied: int, scan_seconds: float, rewrite_seconds: float) -> dict[str, str]:
    """Delta's DELETE metrics, whichever executor ran it: ``files`` are those removed or rewritten, ``deleted``
    the rows deleted (None: not known without reading, for files removed whole), ``copied`` the rows written
    again; ``found`` the candidates the scan chose (None: none were read). The file counts come from the
    commit (``rewrite._file_metrics``); a delete that changes nothing says so here."""
    metrics = {"scanTimeMs": str(int(scan_seconds * 1000)), "rewriteTimeMs": str(int(rewrite_seconds * 1000)),
               "numCopiedRows": str(copied), **partition_metrics(snapshot, files),
               **(found.metrics() if found is not None else {})}
    if deleted is not None:
        metrics["numDeletedRows"] = str(deleted)
    if not files:
        metrics.update(numDeletedRows="0", numRemovedFiles="0", numAddedFiles="0", numAddedChangeFiles="0")
    return metrics


def partition_metrics(snapshot: Snapshot, removed: Sequence[AddFile]) -> dict[str, str]:
    """Delta's ``numPartitionsRemovedFrom`` of a partitioned table: the partitions of the files removed."""
    if not snapshot.partition_columns:
        return {}
    partitions = {tuple(sorted(f.partition_values.items(), key=lambda kv: kv[0])) for f in removed}
    return {"numPartitionsRemovedFrom": str(len(partitions))}

