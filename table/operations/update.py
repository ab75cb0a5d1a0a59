"""UPDATE: set columns to SQL expressions on the rows a predicate selects, as Delta's UpdateCommand does.

``updates`` maps column names to SQL expressions over the row's current values (``{"price": "price *
1.1", "status": "'late'"}``); the predicate (all rows without one) selects the rows. The files whose
partition values and statistics do not rule the predicate out are read, DataFusion evaluates the
predicate and the expressions on their rows, and each file holding a selected row is written again with
the new values (copy-on-write; its other rows copied). Each new value is cast to its column's type; a
value that does not fit (an overflow, text that is not a number) is an error naming the column, and
nothing is committed. Partition columns may be updated: rows move to their new partition.

An update that selects nothing commits nothing. Metrics are Delta's (``numUpdatedRows``,
``numCopiedRows``, ``numAddedFiles``, ``numRemovedFiles`` ...). With the change data feed, each updated
row is written twice to the change data, as ``update_preimage`` and ``update_postimage``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.writespec import CommitResult
from table.log.constraints import rules_of
from table.operations import scan
from table.engine import INTERNAL_PREFIX, Engine, mapping_items, quote
from table.operations.predicate import TARGET, bind_predicate
from table.operations.rewrite import ClauseKind, Rewriter, Staged, abort_on_error, execute
from table.transaction import Opens, Transaction


__all__ = ["CLAUSES", "cast_column", "resolve_columns", "scatter", "update", "update_metrics"]


CLAUSES = (ClauseKind("matched", "update"),)
"""An UPDATE as a rewrite task runs it: one matched update."""

def update(table: Transaction | Opens, updates: Mapping[str, str], predicate: str | None = None) -> CommitResult:
    """Set ``updates`` (column -> SQL expression) on the rows where ``predicate`` is true (all rows without
    one); see the module docstring."""
    items = mapping_items(updates, "updates")
    if predicate is not None and not isinstance(predicate, str):
        raise ArgumentTypeError(f"predicate must be a SQL expression string (or None), got {type(predicate).__name__}")
    return execute(table, "UPDATE", lambda txn, job_id: _stage(txn, items, predicate, job_id))


def resolve_columns(names: Sequence[str], schema: pa.Schema, what: str) -> None:
    """Every name is a column of ``schema``; else InvalidArgumentError (saying so when only the case differs)."""
    for name in names:
        if name in schema.names:
            continue
        twins = [c for c in schema.names if c.lower() == name.lower()]
        hint = f"; did you mean {twins[0]!r}? (column names are matched exactly)" if twins else ""
        raise InvalidArgumentError(f"{what} names column {name!r}, which the table does not have (its columns: "
                                   f"{schema.names}){hint}")


def _stage(txn: Transaction, items: list[tuple[str, str]], predicate: str | None, job_id: str) -> Staged:
    """One attempt of the update, in ``txn``: the files it reads are recorded there as they are chosen."""
    table, snapshot = txn, txn.snapshot
    started = time.monotonic()
    schema = snapshot.schema
    resolve_columns([c for c, _ in items], schema, "updates")
    rules_of(snapshot.protocol, snapshot.metadata).check_assigned([c for c, _ in items], update=True,
                                                                  table=snapshot.table_path, what="the update")
    engine = Engine()
    bound = None
    if predicate is not None:
        bound = bind_predicate(engine, snapshot, predicate, what="the update predicate")
    else:
        engine.register(TARGET, schema.empty_table())
    expressions = [engine.check_expression(sql, f"SELECT * FROM {quote(TARGET)}", what=f"the update of {column!r}")
                   for column, sql in items]
    parameters = {"predicate": json.dumps([] if predicate is None else [predicate])}
    if bound is not None and bound.never:
        return _nothing(parameters, None, started)
    matcher = bound.matcher(snapshot) if bound is not None else scan.file_matcher(snapshot, None)
    if bound is not None and bound.partitions_only:
        chosen = bound.files_selected_by_partition(engine, snapshot, snapshot.files)
        found = scan.Candidates(tuple(sorted(chosen, key=lambda f: f.path)), None, len(snapshot.files),
                                sum(f.size for f in snapshot.files))
    else:
        found = scan.candidates(snapshot, None) if bound is None else bound.candidates(snapshot)
    txn.read_predicate(found.files, matcher, predicate)
    where = "TRUE" if bound is None else bound.where()
    values = [f"({sql}) AS {quote(_value(i))}" for i, sql in enumerate(expressions)]
    query = (f"SELECT {quote(scan.FILE)}, {quote(scan.ROW)}, {', '.join(values)} FROM {quote(TARGET)} "
             f"WHERE {where}")
    rewriter = Rewriter(table, snapshot, job_id)

    def rewrite() -> Staged:
        updated = copied = 0
        touched = []
        scanning = 0.0
        for start, end in scan.windows(found.files):
            began = time.monotonic()
            rows = scan.read_window(table, snapshot, found.files, start, end)
            engine.register(TARGET, rows)
            selected = engine.query(query, what="the update")
            scanning += time.monotonic() - began
            by_file = scan.file_rows(rows) if selected.num_rows else {}
            for index, hits in scan.split_by_file(selected):
                before = by_file[index]
                after = before
                for i, (column, _) in enumerate(items):
                    new = cast_column(hits[_value(i)], schema.field(column).type, column, items[i][1])
                    after = after.set_column(schema.get_field_index(column), column,
                                             scatter(before[column], before[scan.ROW], hits[scan.ROW], new))
                mask = pc.is_in(before[scan.ROW], value_set=hits[scan.ROW].combine_chunks())
                changed = after.drop_columns([scan.FILE, scan.ROW]).filter(mask)
                rewriter.replace(found.files[index], before, mask)
                changed = rewriter.write(changed)
                rewriter.change(before.filter(mask), "update_preimage")
                rewriter.change(changed, "update_postimage")
                updated += hits.num_rows
                copied += 0 if rewriter.deletion_vectors else before.num_rows - hits.num_rows
                touched.append(found.files[index])
        if not touched:
            return _nothing(parameters, found, started)
        metrics = update_metrics(found, updated=updated, copied=copied, touched=len(touched), scan_seconds=scanning,
                                 rewrite_seconds=time.monotonic() - started - scanning)
        pendingsets = tuple(rewriter.finish())
        return Staged("UPDATE", tuple(rewriter.removes), pendingsets, None, parameters, metrics,
                      stray_uploads_possible=rewriter.stray_uploads_possible, vector_adds=tuple(rewriter.vector_adds),
                      rewriter=rewriter)

    staged = abort_on_error(rewriter, rewrite)
    if staged.empty:
        rewriter.abort()
    return staged


def _nothing(parameters: dict[str, str], found: scan.Candidates | None, started: float) -> Staged:
    metrics = update_metrics(found, updated=0, copied=0, touched=0, scan_seconds=time.monotonic() - started,
                             rewrite_seconds=0.0)
    return Staged("UPDATE", (), (), None, parameters, metrics)  # nothing to commit


def update_metrics(found: scan.Candidates | None, *, updated: int, copied: int, touched: int, scan_seconds: float,
                   rewrite_seconds: float) -> dict[str, str]:
    """Delta's UPDATE metrics, whichever executor ran it: rows updated and copied, ``touched`` files rewritten
    (or given a deletion vector), the candidates the scan chose (``found``, None: none). The file counts
    come from the commit (``rewrite._file_metrics``); an update that changes nothing says so here."""
    metrics = {"numUpdatedRows": str(updated), "numCopiedRows": str(copied), "scanTimeMs": str(int(scan_seconds * 1000)),
               "rewriteTimeMs": str(int(rewrite_seconds * 1000)), **(found.metrics() if found is not None else {})}
    if not touched:
        metrics.update(numAddedFiles="0", numRemovedFiles="0", numAddedChangeFiles="0")
    return metrics


def _value(i: int) -> str:
    return f"{INTERNAL_PREFIX}value{i}"


def cast_column(values: pa.ChunkedArray | pa.Array, arrow_type: pa.DataType, column: str, sql: str) -> pa.Array:
    """``values`` (computed by DataFusion) as the column's type; InvalidArgumentError when they do not fit."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if values.type == arrow_type:
        return values
    try:
        return pc.cast(values, arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidArgumentError(f"the new value of column {column!r} ({sql.strip()!r}, of type {values.type}) "
                                   f"does not fit the column's type {arrow_type}: {exc}; cast it in the "
                                   f"expression") from None


def scatter(old: pa.ChunkedArray | pa.Array, rows: pa.ChunkedArray | pa.Array, at: pa.ChunkedArray | pa.Array,
            new: pa.Array) -> pa.Array:
    """``old`` (the values of a file's rows, numbered by ``rows``) with the rows numbered ``at`` replaced by
    ``new`` (one value per entry of ``at``, in the same order)."""
    old = old.combine_chunks() if isinstance(old, pa.ChunkedArray) else old
    rows = rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows
    at = at.combine_chunks() if isinstance(at, pa.ChunkedArray) else at
    position = pc.index_in(rows, value_set=at)  # where each row's new value is in ``new`` (null: unchanged)
    mask = pc.is_valid(position)
    taken = new.take(pc.fill_null(position, 0)) if len(new) else pa.nulls(len(old), old.type)
    return pc.if_else(mask, taken, old)
