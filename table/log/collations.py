"""Collations (writer feature ``collations``, Delta's protocol RFC "collated string type"): what dynacommit
writes on a table whose string columns have collations, and what it refuses.

Pure functions, no I/O. A column's collation is in the ``__COLLATIONS`` entry of its (nearest struct field's)
metadata, e.g. ``{"name": "spark.UTF8_LCASE"}``; ``spark.UTF8_BINARY`` is the default byte order. The RFC asks
writers to keep those entries (every schema change here copies field metadata), allows UTF-8 binary
statistics for collated columns (ours are), and names no other writer duty. So appends, overwrites,
OPTIMIZE and RESTORE are written. What is refused is evaluating SQL over a collated column, which would
compare its strings byte for byte instead of by the collation that Spark applies: DELETE, UPDATE, MERGE
and replaceWhere on a table with a collated column (:func:`check_operation`), and a CHECK constraint or
generated column whose expression names one (:func:`check_rules`). Renaming a column moves its entries
to the new name (``table.operations.alter``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from table.errors import UnsupportedFeatureError
from table.log.actions import Metadata, Protocol

__all__ = ["COLLATIONS", "EVALUATING", "check_operation", "check_rules", "collated_columns"]

COLLATIONS = "__COLLATIONS"
BINARY = "spark.UTF8_BINARY"
EVALUATING = frozenset({"DELETE", "UPDATE", "MERGE", "replaceWhere"})
"""Operations that evaluate the user's SQL over the table's rows."""


def collated_columns(schema_string: str) -> dict[str, str]:
    """``{column path: collation}`` of every string with a collation other than UTF-8 binary."""
    found: dict[str, str] = {}
    _walk(json.loads(schema_string).get("fields") or [], "", found)
    return found


def _walk(fields: Iterable[Mapping[str, Any]], prefix: str, found: dict[str, str]) -> None:
    for field in fields:
        path = f"{prefix}{field['name']}"
        entries = (field.get("metadata") or {}).get(COLLATIONS) or {}
        for key, collation in (entries.items() if isinstance(entries, Mapping) else []):
            if isinstance(collation, str) and collation.upper() != BINARY.upper():
                found[f"{prefix}{key}"] = collation
        nested = [field["type"]]
        while nested:
            node = nested.pop()
            if not isinstance(node, Mapping):
                continue
            if node.get("type") == "struct":
                _walk(node.get("fields") or [], f"{path}.", found)
            elif node.get("type") == "array":
                nested.append(node.get("elementType"))
            elif node.get("type") == "map":
                nested.extend([node.get("keyType"), node.get("valueType")])


def _active(protocol: Protocol | None) -> bool:
    return protocol is not None and protocol.min_writer_version >= 7 and "collations" in (protocol.writer_features or [])


def check_operation(protocol: Protocol | None, metadata: Metadata | None, operation: str, *, table: str) -> None:
    """Refuse ``operation`` (one of :data:`EVALUATING`) on a table with collated columns."""
    if operation not in EVALUATING or metadata is None or not _active(protocol):
        return
    columns = collated_columns(metadata.schema_string)
    if columns:
        shown = ", ".join(f"{c} ({v})" for c, v in sorted(columns.items()))
        raise UnsupportedFeatureError(
            f"table {table} has collated string columns ({shown}); {operation} evaluates SQL over its rows, and "
            f"dynacommit would compare those strings byte for byte, not by their collation as Spark does, so it is "
            f"refused and nothing was written. Run it with delta-spark 4.0+; appends, overwrites, OPTIMIZE and "
            f"RESTORE of this table are written here", feature="collations")


def check_rules(protocol: Protocol | None, metadata: Metadata) -> None:
    """Refuse a table whose CHECK constraint or generation expression names a collated column."""
    if not _active(protocol):
        return
    columns = collated_columns(metadata.schema_string)
    if not columns:
        return
    expressions = [(f"CHECK constraint {k.removeprefix('delta.constraints.')}", v)
                   for k, v in metadata.configuration.items() if k.startswith("delta.constraints.") and v]
    for field in json.loads(metadata.schema_string).get("fields") or []:
        expression = (field.get("metadata") or {}).get("delta.generationExpression")
        if isinstance(expression, str):
            expressions.append((f"generated column {field['name']}", expression))
    for what, expression in expressions:
        for column in columns:
            top = column.split(".")[0]
            if re.search(rf"(?<![\w`]){re.escape(top)}(?![\w`])|`{re.escape(top)}`", expression, re.IGNORECASE):
                raise UnsupportedFeatureError(
                    f"the table's {what} ({expression}) reads collated column {column} ({columns[column]}), which "
                    f"dynacommit would compare byte for byte, not by its collation; write this table with "
                    f"delta-spark 4.0+", feature="collations")
