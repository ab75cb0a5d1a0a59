"""Type widening as a writer does it (PROTOCOL.md, "Type Widening"): which tables may widen a column, the
one check of an explicit change, and the record every schema change leaves in ``delta.typeChanges``.

Invariant: on a table whose protocol lists ``typeWidening`` (or ``typeWidening-preview``), every commit
that changes a column's type records the change in the schema, so readers know that older files hold the
older type. Readers cast those files to the current type (``table.data.read``); the allowed changes are
:func:`table.log.type_changes.widening_allowed`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from logstore.errors import InvalidArgumentError
from table.errors import UnsupportedFeatureError
from table.log import properties
from table.log.actions import Metadata, Protocol
from table.log.schema import (
    DeltaType,
    arrow_type_to_delta,
    delta_type_to_arrow,
    record_type_changes,
    widening_allowed,
)

__all__ = ["FEATURES", "check_change", "delta_type_of", "recorded", "supported"]

FEATURES = ("typeWidening", "typeWidening-preview")
"""The feature's name, and the one Delta 3.2 and 3.3 wrote; either makes a table record its type changes."""


def supported(protocol: Protocol | None) -> bool:
    """Whether ``protocol`` lists the type widening feature (for writers: type changes must be recorded)."""
    return protocol is not None and protocol.min_writer_version == 7 and any(
        f in (protocol.writer_features or []) for f in FEATURES)


def recorded(protocol: Protocol | None, old_schema: Mapping[str, Any] | str, new_schema: Mapping[str, Any]
             ) -> dict[str, Any]:
    """``new_schema`` with its type changes from ``old_schema`` recorded when ``protocol`` supports type
    widening (PROTOCOL.md asks writers to); as given otherwise."""
    return record_type_changes(old_schema, new_schema) if supported(protocol) else dict(new_schema)


def delta_type_of(new_type: object, *, column: str) -> str:
    """The primitive Delta type a user names: a pyarrow type (``pa.int64()``), a Delta type name
    (``"long"``, ``"decimal(12,2)"``) or Spark's SQL name (``"bigint"``, ``"int"``, ``"smallint"``,
    ``"tinyint"``). Raises InvalidArgumentError for anything else."""
    if isinstance(new_type, pa.DataType):
        delta = arrow_type_to_delta(new_type, column=column)
    elif isinstance(new_type, str):
        text = new_type.strip().lower().replace(" ", "")
        delta = _SQL_NAMES.get(text, text)
    else:
        delta = _spark_type(new_type) if hasattr(new_type, "simpleString") else None
    if not isinstance(delta, str) or not _known(delta):
        raise InvalidArgumentError(f"{new_type!r} is not a primitive type a column can be widened to; give a pyarrow "
                                   f"type (pa.int64()) or a Delta type name (long, double, decimal(12,2), "
                                   f"timestamp_ntz)")
    return delta


_SQL_NAMES = {"bigint": "long", "int": "integer", "smallint": "short", "tinyint": "byte", "real": "float",
              "float64": "double", "int64": "long", "int32": "integer", "int16": "short", "int8": "byte",
              "float32": "float", "timestampntz": "timestamp_ntz"}


def _spark_type(spark_type: object) -> str | None:
    """A pyspark DataType's Delta name (``LongType()`` -> ``long``, ``DecimalType(12, 2)`` -> ``decimal(12,2)``)."""
    text = spark_type.simpleString()  # type: ignore[attr-defined]
    return _SQL_NAMES.get(text, text)


def _known(delta_type: str) -> bool:
    try:
        delta_type_to_arrow(delta_type)
    except (UnsupportedFeatureError, ValueError):
        return False
    return delta_type not in ("void", "variant")


def check_change(metadata: Metadata, path: list[str], current: DeltaType, to_type: str, *, table: str) -> None:
    """Check an explicit change of the column at ``path`` from ``current`` to ``to_type`` (delta-spark's
    ``ALTER TABLE ... ALTER COLUMN ... TYPE``): the table has ``delta.enableTypeWidening=true``, the column
    is primitive, and the change is one PROTOCOL.md allows. Raises InvalidArgumentError saying what to do."""
    name = ".".join(path)
    if not properties.type_widening(metadata.configuration):
        raise InvalidArgumentError(
            f"changing the type of column {name!r} of {table} needs type widening: set the table property "
            f"delta.enableTypeWidening=true first (t.alter.set_table_properties); readers then need "
            f"typeWidening support (delta-spark 4.0+, Databricks Runtime 15.4+)")
    if not isinstance(current, str):
        raise InvalidArgumentError(f"column {name!r} of {table} is {json.dumps(current)}; only a primitive column "
                                   f"or field can change its type (name the field inside it, e.g. {name}.x)")
    if not widening_allowed(current, to_type):
        raise InvalidArgumentError(
            f"column {name!r} of {table} is {current}; changing it to {to_type} is not a type widening Delta "
            f"allows (integers to a wider integer, to double or to decimal(10+k1,k2) / decimal(20+k1,k2) for long, "
            f"float to double, date to timestamp_ntz, decimal(p,s) to decimal(p+k1,s+k2) with k1 >= k2 >= 0)")
