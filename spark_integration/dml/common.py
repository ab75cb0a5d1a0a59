"""Small pieces every Spark row-level operation uses: conditions and values as Spark Columns, column
references by exact name, Delta's metrics of skipping and partitions, and the source DataFrame's alias."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from logstore.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["as_column", "backticked", "check_condition", "describe", "functions_of",
           "setting_items", "source_alias"]


def functions_of(spark: SparkSession) -> ModuleType:
    """pyspark's functions for ``spark``'s kind of session. Columns built for a classic session cannot go
    into a Spark Connect plan, nor the reverse, and ``pyspark.sql.functions`` picks the kind from the
    process's environment, not from the session (a process may hold both, as the test suite does)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions

        return functions
    from pyspark.sql import functions

    return functions


def check_condition(condition: Any, what: str) -> None:
    """A condition or value must be Spark SQL text (not blank) or a Column; TypeError / ValueError (ours)."""
    if isinstance(condition, str):
        if not condition.strip():
            raise InvalidArgumentError(f"{what} is empty; give a Spark SQL expression such as \"id = 5\"")
        return
    if not isinstance(condition, Column):
        raise ArgumentTypeError(f"{what} must be a Spark SQL expression string or a pyspark Column, got "
                                f"{type(condition).__name__} {condition!r}")


def as_column(condition: Any, what: str, functions: ModuleType) -> Column:
    """A condition or value (Spark SQL text, or a Column) as a Column of ``functions``' kind of session."""
    check_condition(condition, what)
    return functions.expr(condition) if isinstance(condition, str) else condition


def describe(condition: Any) -> str:
    """A condition as the log records it (``operationParameters``): its text, or a Column's own rendering."""
    if isinstance(condition, str):
        return condition
    text = str(condition)
    if text.startswith("Column<'") and text.endswith("'>"):
        return text[len("Column<'"):-2]
    return text


def backticked(name: str) -> str:
    """A column name as a Spark identifier (any character allowed)."""
    return "`" + name.replace("`", "``") + "`"


def setting_items(mapping: Any, what: str) -> list[tuple[str, Any]]:
    """The ``column -> value`` pairs of a ``set`` / ``values`` argument (values: SQL text or Columns)."""
    if mapping is None:
        raise InvalidArgumentError(f"{what} is required: a dict of column name to Spark SQL expression or Column")
    if not isinstance(mapping, Mapping):
        raise ArgumentTypeError(f"{what} must be a dict of column name to Spark SQL expression or Column, got "
                                f"{type(mapping).__name__}")
    if not mapping:
        raise InvalidArgumentError(f"{what} is empty; name at least one column and its new value")
    items = []
    for key, value in mapping.items():
        if not isinstance(key, str) or not key:
            raise ArgumentTypeError(f"{what} keys must be column names, got {key!r}")
        if not isinstance(value, (str, Column)):
            raise ArgumentTypeError(f"{what}[{key!r}] must be a Spark SQL expression string or a Column, got "
                                    f"{type(value).__name__} {value!r}; write it as SQL, e.g. \"'{value}'\"")
        items.append((key, value))
    return items


def predicate_parameter(condition: Any) -> dict[str, str]:
    """Delta's ``operationParameters.predicate`` of a DELETE or UPDATE: a JSON list of the condition."""
    return {"predicate": json.dumps([] if condition is None else [describe(condition)])}


_KEEPS_ALIAS = frozenset({"Filter", "Sort", "Limit", "Offset", "Tail", "Sample", "Repartition",
                          "RepartitionByExpression", "Hint", "Deduplicate", "WithWatermark", "Drop",
                          "WithColumns", "Project"})
"""Spark Connect plan steps whose output keeps their input's columns under the input's alias (a step's
new columns have none; Spark cannot resolve ``s.new`` then, and the MERGE fails in Spark, never wrongly)."""


def source_alias(df: DataFrame) -> str | None:
    """The alias under which Spark resolves ``df``'s columns in a condition (``s`` in ``s.id``), given with
    ``.alias(name)`` and kept through later filters, projections, sorts ...; None when it cannot be told
    or the columns have more than one (a join of two aliased DataFrames). Used only to prune files by the
    target's part of a MERGE condition: None prunes less, never wrongly. pyspark has no public accessor
    for it: a classic DataFrame's analyzed plan qualifies each output column with it, the Spark Connect
    client keeps it in its plan, below the steps that keep it."""
    plan = getattr(df, "_plan", None)
    if plan is not None:
        while type(plan).__name__ in _KEEPS_ALIAS:
            plan = getattr(plan, "_child", None)
        if type(plan).__name__ == "SubqueryAlias":
            alias = getattr(plan, "_alias", None)
            return alias if isinstance(alias, str) else None
        return None
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        output = jdf.queryExecution().analyzed().output()
        qualifiers = set()
        for i in range(output.size()):
            qualifier = output.apply(i).qualifier()
            if qualifier.size():
                qualifiers.add(str(qualifier.last()))
    except Exception:  # noqa: BLE001 - py4j raises its own errors; no alias known then
        return None
    return qualifiers.pop() if len(qualifiers) == 1 else None
