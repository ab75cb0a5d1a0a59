"""A table's schema: the one import for converting, checking and evolving it, and the features it needs.

The pieces live by concern: Arrow <-> Delta conversion (``table.log.schema_arrow``), the type changes
type widening allows (``table.log.type_changes``), comparing and merging schemas
(``table.log.schema_merge``), partition values (``table.log.partition_values``). Here: which table
features a schema requires of the protocol.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from table.log.partition_values import parse_partition_value, partition_key, partition_value_to_string, to_float32
from table.log.schema_arrow import (
    TYPE_CHANGES,
    VARIANT_ARROW_TYPE,
    DeltaType,
    SchemaLike,
    arrow_to_delta,
    arrow_type_to_delta,
    delta_to_arrow,
    delta_type_to_arrow,
    schema_problem,
    schema_string,
)
from table.log.schema_merge import check_column_names, check_schema, evolve_schema, schema_diff
from table.log.type_changes import evolution_widens, record_type_changes, type_change_problems, widening_allowed

__all__ = [
    "DeltaType",
    "SchemaLike",
    "arrow_to_delta",
    "arrow_type_to_delta",
    "check_column_names",
    "check_schema",
    "delta_to_arrow",
    "delta_type_to_arrow",
    "evolve_schema",
    "evolution_widens",
    "record_type_changes",
    "parse_partition_value",
    "partition_key",
    "partition_value_to_string",
    "required_features",
    "schema_diff",
    "schema_problem",
    "schema_string",
    "to_float32",
    "type_change_problems",
    "TYPE_CHANGES",
    "VARIANT_ARROW_TYPE",
    "widening_allowed",
]

_METADATA_FEATURES: tuple[tuple[str, str], ...] = (
    ("delta.invariants", "invariants"),
    ("delta.generationExpression", "generatedColumns"),
    ("delta.identity.", "identityColumns"),
    ("delta.columnMapping.", "columnMapping"),
    ("CURRENT_DEFAULT", "allowColumnDefaults"),
    ("delta.typeChanges", "typeWidening"),
)


def required_features(delta_schema: Mapping[str, Any] | str) -> set[str]:
    """Table features (PROTOCOL.md names) that a table with this schema must list in its protocol.

    ``timestampNtz`` for any ``timestamp_ntz`` column (it then needs reader 3 / writer 7), and the
    writer features implied by column metadata (``delta.invariants`` → ``invariants``, generated and
    identity columns, column mapping, defaults, type widening), so a writer that implements none of
    them can refuse such a schema rather than ignore its rules.
    """
    parsed = json.loads(delta_schema) if isinstance(delta_schema, str) else delta_schema
    features: set[str] = set()
    _collect_features(parsed, features)
    return features


def _collect_features(delta_type: DeltaType, out: set[str]) -> None:
    if isinstance(delta_type, str):
        if delta_type == "timestamp_ntz":
            out.add("timestampNtz")
        elif delta_type == "variant":
            out.add("variantType")
        return
    kind = delta_type.get("type")
    if kind == "variant":
        out.add("variantType")
    elif kind == "struct":
        for field in delta_type["fields"]:
            for key in field.get("metadata") or {}:
                out.update(feature for prefix, feature in _METADATA_FEATURES if key.startswith(prefix))
            _collect_features(field["type"], out)
    elif kind == "array":
        _collect_features(delta_type["elementType"], out)
    elif kind == "map":
        _collect_features(delta_type["keyType"], out)
        _collect_features(delta_type["valueType"], out)
