"""Checking the rows a table holds against new CHECK constraints, before ADD CONSTRAINT commits them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from table.data.read import to_pyarrow_reader
from table.data.rules import RowRules, engine_sql
from table.errors import ConstraintViolationError
from table.log.constraints import Check, TableRules
from table.log.snapshot import Snapshot
from table.engine import Engine, quote
from table.operations.predicate import TARGET
from table.transaction import TableView, Transaction

__all__ = ["verify_rows"]


def verify_rows(table: TableView, snapshot: Snapshot, checks: Sequence[Check]) -> None:
    """Raise InvalidArgumentError if an expression of ``checks`` does not bind to the table's columns, and
    ConstraintViolationError naming the first row of ``snapshot`` that does not make one TRUE. Reads the
    table once, batch by batch (Delta reads every row too)."""
    engine = Engine()
    engine.register(TARGET, snapshot.schema.empty_table())
    for check in checks:
        what = f"constraint {check.name!r}"
        engine.check_expression(engine_sql(check.expression, what=what), f"SELECT * FROM {quote(TARGET)}", what=what)
    if not snapshot.files:
        return
    rules = RowRules(TableRules(checks=tuple(checks)), snapshot.schema, table=snapshot.table_path)
    for batch in to_pyarrow_reader(Transaction(table.location, snapshot)):
        try:
            rules.check(pa.Table.from_batches([batch]))
        except ConstraintViolationError as exc:
            message = str(exc).split(" (table ")[0]
            raise ConstraintViolationError(
                f"{message}: table {snapshot.table_path} holds rows that break it, so it was not added and nothing "
                f"was committed. Fix or delete those rows first", name=exc.name, expression=exc.expression) from None
