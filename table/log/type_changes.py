"""Which type changes Delta's type widening allows (PROTOCOL.md, "Type Widening"), and the record of a
schema's changes in ``delta.typeChanges``: pure rules over Delta types, no table state. When a table may
widen and how a writer checks an explicit change is ``table.log.type_widening``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from table.log.schema_arrow import TYPE_CHANGES, DeltaType, changes_of, decimal_of, type_changes_within

__all__ = ["evolution_widens", "record_type_changes", "type_change_problems", "widening_allowed"]


_WIDER_INTEGERS = ("byte", "short", "integer", "long")


def widening_allowed(from_type: str, to_type: str) -> bool:
    """Whether PROTOCOL.md's type widening allows ``from_type`` → ``to_type`` (primitive Delta types):
    integers to a wider integer, ``float`` → ``double``, ``byte``/``short``/``integer`` → ``double``,
    ``date`` → ``timestamp_ntz``, ``decimal(p, s)`` → ``decimal(p + k1, s + k2)`` with ``k1 >= k2 >= 0``,
    and integers to a decimal with room for their digits (``decimal(10 + k1, k2)`` for up to ``integer``,
    ``decimal(20 + k1, k2)`` for ``long``)."""
    if from_type in _WIDER_INTEGERS and to_type in _WIDER_INTEGERS:
        return _WIDER_INTEGERS.index(from_type) < _WIDER_INTEGERS.index(to_type)
    if (from_type, to_type) in {("float", "double"), ("date", "timestamp_ntz")}:
        return True
    if from_type in ("byte", "short", "integer") and to_type == "double":
        return True
    target = decimal_of(to_type)
    if target is None:
        return False
    if from_type in _WIDER_INTEGERS:
        digits = 20 if from_type == "long" else 10
        source = (digits, 0)
    else:
        source = decimal_of(from_type)
        if source is None:
            return False
    k1, k2 = target[0] - source[0], target[1] - source[1]
    return k1 >= k2 >= 0


def evolution_widens(from_type: str, to_type: str) -> bool:
    """Whether schema evolution (``schema_mode="merge"``, MERGE's schema evolution) widens a column of
    ``from_type`` to ``to_type`` on its own when type widening is enabled: the changes Delta applies
    automatically, within one family (integers to a wider integer, ``float`` -> ``double``, a decimal to a
    wider decimal, ``date`` -> ``timestamp_ntz``). Integers to ``double`` or to a decimal take an explicit
    ``alter.change_column_type``, as in delta-spark."""
    if not widening_allowed(from_type, to_type):
        return False
    if from_type in _WIDER_INTEGERS:
        return to_type in _WIDER_INTEGERS
    return True


def _textual(delta_type: object) -> bool:
    return isinstance(delta_type, str) and (delta_type == "string" or re.fullmatch(r"(var)?char\(\d+\)",
                                                                                    delta_type) is not None)


def record_type_changes(old_schema: Mapping[str, Any] | str, new_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``new_schema`` with every primitive type that differs from ``old_schema``'s (fields matched by name)
    recorded in ``delta.typeChanges`` of its nearest ancestor struct field, after the changes already there
    (PROTOCOL.md, "Type Change Metadata"): ``fromType``, ``toType`` and, for an array element or a map key
    or value, ``fieldPath`` (``element``, ``key``, ``value``, dotted when nested)."""
    old = json.loads(old_schema) if isinstance(old_schema, str) else old_schema
    return {**new_schema, "fields": _record_fields(old.get("fields") or [], new_schema["fields"])}


def _record_fields(old_fields: Sequence[Mapping[str, Any]], new_fields: Sequence[Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    before = {f["name"]: f for f in old_fields}
    out = []
    for field in new_fields:
        previous = before.get(field["name"])
        if previous is None:
            out.append(dict(field))
            continue
        changes: list[dict[str, str]] = []
        new_type = _record_type(previous["type"], field["type"], "", changes)
        updated = {**field, "type": new_type}
        if changes:
            metadata = dict(field.get("metadata") or {})
            metadata[TYPE_CHANGES] = [*changes_of(field), *changes]
            updated["metadata"] = metadata
        out.append(updated)
    return out


def _record_type(old: DeltaType, new: DeltaType, path: str, changes: list[dict[str, str]]) -> DeltaType:
    if isinstance(old, str) and isinstance(new, str):
        if old != new:
            changes.append({"fromType": old, "toType": new, **({"fieldPath": path} if path else {})})
        return new
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or old.get("type") != new.get("type"):
        return new
    kind = new.get("type")
    if kind == "struct":
        return {**new, "fields": _record_fields(old["fields"], new["fields"])}
    joined = (path + ".") if path else ""
    if kind == "array":
        return {**new, "elementType": _record_type(old["elementType"], new["elementType"], joined + "element",
                                                   changes)}
    if kind == "map":
        return {**new, "keyType": _record_type(old["keyType"], new["keyType"], joined + "key", changes),
                "valueType": _record_type(old["valueType"], new["valueType"], joined + "value", changes)}
    return new


def type_change_problems(delta_schema: Mapping[str, Any] | str) -> list[str]:
    """The recorded type changes (``delta.typeChanges``) of a schema that PROTOCOL.md's type widening does
    not allow, in words; empty when every change is one a reader converts exactly."""
    parsed = json.loads(delta_schema) if isinstance(delta_schema, str) else delta_schema
    problems = []
    for field in parsed.get("fields") or []:
        for change in type_changes_within(field):
            if not isinstance(change, Mapping):
                problems.append(f"column {field.get('name')!r} has a malformed type change {change!r}")
                continue
            source, target = change.get("fromType"), change.get("toType")
            where = f"{field.get('name')}" + (f".{change['fieldPath']}" if change.get("fieldPath") else "")
            if _textual(source) and _textual(target):
                continue  # char/varchar/string: the same Parquet values; Delta's readers let them pass too
            if not (isinstance(source, str) and isinstance(target, str) and widening_allowed(source, target)):
                problems.append(f"column {where!r} changed from {source!r} to {target!r}, which is not a type "
                                f"widening Delta defines")
    return problems
