"""Row-level changes computed another way: DuckDB's own DELETE, UPDATE and MERGE INTO over the same rows.

The tests compare what our operations leave in a table with what DuckDB's SQL statements leave in a table
holding the same rows: an engine and an implementation we did not write. A MERGE is described once as
:class:`MergeSpec` and applied both to our builder (:meth:`MergeSpec.apply`) and to DuckDB's ``MERGE INTO``
(:func:`duckdb_merge`); ``*_all`` clauses are spelled out column by column for DuckDB.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import duckdb
import pyarrow as pa

__all__ = ["ClauseSpec", "MergeSpec", "duckdb_count", "duckdb_delete", "duckdb_merge", "duckdb_update", "rows_of"]


def _connection(target: pa.Table) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("target_rows", target)
    con.execute("CREATE TABLE t AS SELECT * FROM target_rows")
    return con


def _result(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> pa.Table:
    return con.sql("SELECT * FROM t").to_arrow_table().cast(schema)


def duckdb_delete(target: pa.Table, predicate: str | None) -> pa.Table:
    con = _connection(target)
    con.execute("DELETE FROM t" + ("" if predicate is None else f" WHERE {predicate}"))
    return _result(con, target.schema)


def duckdb_count(target: pa.Table, predicate: str | None) -> int:
    """How many rows ``predicate`` selects (all of them for None)."""
    con = _connection(target)
    return con.execute("SELECT count(*) FROM t" + ("" if predicate is None else f" WHERE {predicate}")).fetchone()[0]


def duckdb_update(target: pa.Table, updates: Mapping[str, str], predicate: str | None) -> pa.Table:
    con = _connection(target)
    assignments = ", ".join(f'"{c}" = {sql}' for c, sql in updates.items())
    con.execute(f"UPDATE t SET {assignments}" + ("" if predicate is None else f" WHERE {predicate}"))
    return _result(con, target.schema)


@dataclasses.dataclass(frozen=True)
class ClauseSpec:
    kind: str                     # matched | not_matched | not_matched_by_source
    action: str                   # update | delete | insert
    condition: str | None = None
    assignments: tuple[tuple[str, str], ...] | None = None  # None: *_all

    def sql(self, columns: Sequence[str]) -> str:
        head = {"matched": "WHEN MATCHED", "not_matched": "WHEN NOT MATCHED",
                "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE"}[self.kind]
        if self.condition is not None:
            head += f" AND {self.condition}"
        pairs = self.assignments if self.assignments is not None else tuple((c, f'source."{c}"') for c in columns)
        if self.action == "delete":
            return f"{head} THEN DELETE"
        if self.action == "update":
            return f"{head} THEN UPDATE SET " + ", ".join(f'"{c}" = {v}' for c, v in pairs)
        names = ", ".join(f'"{c}"' for c, _ in pairs)
        return f"{head} THEN INSERT ({names}) VALUES ({', '.join(v for _, v in pairs)})"


@dataclasses.dataclass(frozen=True)
class MergeSpec:
    predicate: str
    clauses: tuple[ClauseSpec, ...]

    def apply(self, builder):
        """Add the clauses to one of our MergeBuilders (or deltalake's TableMerger: same names)."""
        for clause in self.clauses:
            updates = None if clause.assignments is None else dict(clause.assignments)
            if clause.kind == "matched" and clause.action == "update":
                builder = (builder.when_matched_update_all(predicate=clause.condition) if updates is None
                           else builder.when_matched_update(updates, predicate=clause.condition))
            elif clause.kind == "matched":
                builder = builder.when_matched_delete(predicate=clause.condition)
            elif clause.kind == "not_matched":
                builder = (builder.when_not_matched_insert_all(predicate=clause.condition) if updates is None
                           else builder.when_not_matched_insert(updates, predicate=clause.condition))
            elif clause.action == "update":
                builder = builder.when_not_matched_by_source_update(updates, predicate=clause.condition)
            else:
                builder = builder.when_not_matched_by_source_delete(predicate=clause.condition)
        return builder


def duckdb_merge(target: pa.Table, source: pa.Table, spec: MergeSpec) -> pa.Table:
    con = _connection(target)
    con.register("source_rows", source)
    clauses = " ".join(c.sql(target.column_names) for c in spec.clauses)
    con.execute(f"MERGE INTO t AS target USING source_rows AS source ON {spec.predicate} {clauses}")
    return _result(con, target.schema)


def rows_of(table: pa.Table) -> list[tuple]:
    """The rows as sorted tuples (None sorts first): tables compared as multisets of rows."""
    names = table.column_names
    return sorted((tuple(r[n] for n in names) for r in table.to_pylist()),
                  key=lambda row: tuple((v is not None, v) for v in row))
