"""A predicate over one table (DELETE's and UPDATE's ``predicate``), bound by DataFusion to the table's
columns: what it reads, which files it can select, and whether partition values alone decide it.

:func:`bind_predicate` checks the SQL against the snapshot's schema (InvalidArgumentError naming it
otherwise) and asks DataFusion's optimizer what the predicate says about the table: the columns it
references, the conjuncts it pushes onto the table's scan (turned into the pyarrow filter that prunes
files, :func:`~table.engine.to_arrow_filter`), and whether it can be true at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from table.log.actions import AddFile
from table.log.commit import FileMatcher
from table.log.snapshot import Snapshot
from table.operations import scan
from table.log.constraints import Generated, rules_of
from table.engine import INTERNAL_PREFIX, Engine, check_user_columns, facts_of, quote, to_arrow_filter
from table.operations.generated_pruning import derived_filter

__all__ = ["TARGET", "Predicate", "bind_predicate", "bind_schema"]

TARGET = INTERNAL_PREFIX + "target"
"""The name the table's rows are registered under while a predicate over them is evaluated."""


@dataclasses.dataclass(frozen=True)
class Predicate:
    """A predicate bound to a snapshot's columns (see the module docstring)."""

    sql: str                      # the user's text, checked to be one expression, ready for parentheses
    columns: frozenset[str]       # the table's columns it references
    filter: pc.Expression | None  # what every selected row satisfies, for pruning files (None: nothing known)
    never: bool                   # DataFusion proved it selects no row
    partitions_only: bool         # partition values decide it (it references no other column)

    @property
    def table_name(self) -> str:
        return TARGET

    def candidates(self, snapshot: Snapshot) -> scan.Candidates:
        """The snapshot's files that may hold a row the predicate selects."""
        return scan.candidates(snapshot, self.filter, sorted(self.columns))

    def where(self) -> str:
        """The SQL condition selecting exactly the rows where the predicate is TRUE (not NULL)."""
        return f"coalesce(({self.sql}), false)"

    def files_selected_by_partition(self, engine: Engine, snapshot: Snapshot, files: Sequence[AddFile]
                                    ) -> list[AddFile]:
        """For a predicate over partition columns only: the files whose partition values it selects."""
        if not files:
            return []
        engine.register(TARGET, scan.partition_values_table(snapshot, files))
        chosen = engine.query(f"SELECT {quote(scan.FILE)} FROM {quote(TARGET)} WHERE {self.where()}",
                              what="the predicate")
        return [files[i] for i in sorted(chosen.column(scan.FILE).to_pylist())]

    def matcher(self, snapshot: Snapshot) -> FileMatcher:
        """Whether a file another writer adds may hold rows this predicate selects: exactly, by its
        partition values, for a predicate over partition columns only; else by pruning."""
        if not self.partitions_only:
            return scan.file_matcher(snapshot, self.filter, sorted(self.columns))
        engine = Engine()
        return lambda add: bool(self.files_selected_by_partition(engine, snapshot, [add]))


def bind_predicate(engine: Engine, snapshot: Snapshot, predicate: str, *, what: str) -> Predicate:
    """Bind ``predicate`` (SQL) to the columns of ``snapshot``; see the module docstring."""
    return bind_schema(engine, snapshot.schema, snapshot.partition_columns, predicate, what=what,
                       generated=rules_of(snapshot.protocol, snapshot.metadata).generated)


def bind_schema(engine: Engine, schema: pa.Schema, partition_columns: Sequence[str], predicate: str, *,
                what: str, generated: Sequence[Generated] = ()) -> Predicate:
    """:func:`bind_predicate` to a table's columns (``schema``) and partition columns, without its snapshot.
    ``generated``: the table's generated columns; a partition column generated from a column the predicate
    bounds gets the bound too (:mod:`table.operations.generated_pruning`)."""
    check_user_columns(schema.names, "the table")
    engine.register(TARGET, _empty(schema))
    sql = engine.check_expression(predicate, f"SELECT * FROM {quote(TARGET)}", what=what)
    facts = facts_of(engine.plan_of(f"SELECT 1 FROM {quote(TARGET)} WHERE ({sql})", what=what), TARGET)
    partitions = set(partition_columns)
    partitions_only = facts.columns <= partitions and (bool(facts.columns) or not facts.filters)
    filter = to_arrow_filter(facts.filters, schema)
    derived = derived_filter(facts.filters, generated, partition_columns, schema)
    if derived is not None:
        filter = derived if filter is None else filter & derived
    return Predicate(sql=sql, columns=facts.columns, filter=filter, never=facts.empty, partitions_only=partitions_only)


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
