"""The rules a table's metadata sets on the rows written to it: CHECK constraints, column invariants,
generated columns and identity columns, read from the protocol and the metadata (PROTOCOL.md).

Pure functions, no I/O. :func:`rules_of` reads them once into a :class:`TableRules` (frozen and picklable:
Spark tasks get it with their plan); the data path enforces it (:mod:`table.data.rules`) and every writer
goes through that one place. A rule binds writers only when the protocol has its feature (listed, or
implied by the legacy writer version), as PROTOCOL.md says:

- **CHECK constraints** (``checkConstraints``, writer 3): table property ``delta.constraints.<name>`` holds a
  SQL expression every row must make TRUE (FALSE or NULL is a violation, as delta-spark decides);
- **invariants** (``invariants``, writer 2): field metadata ``delta.invariants`` holds
  ``{"expression": {"expression": "<sql>"}}``, checked like a constraint;
- **generated columns** (``generatedColumns``, writer 4): field metadata ``delta.generationExpression``;
  the value is computed when the data omits the column, and must equal the expression (NULL-safe) when
  the data gives it;
- **identity columns** (``identityColumns``, writer 6): ``delta.identity.start``, ``.step``,
  ``.highWaterMark`` (the last value handed out, absent before the first) and ``.allowExplicitInsert``;
- **column defaults** (``allowColumnDefaults``, writer 7 only): field metadata ``CURRENT_DEFAULT`` holds a SQL
  expression; a row written without the column (an append that lacks it, a MERGE insert that does not
  assign it) gets its value. An explicit NULL is a value, as PROTOCOL.md says.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.errors import UnsupportedFeatureError
from table.log.actions import Metadata, Protocol

__all__ = [
    "CONSTRAINT_PREFIX",
    "CURRENT_DEFAULT",
    "Check",
    "Default",
    "Generated",
    "Identity",
    "TableRules",
    "constraints_of",
    "identity_only_change",
    "rules_of",
    "with_constraint",
    "with_default",
    "with_high_water_marks",
    "without_constraint",
]

CONSTRAINT_PREFIX = "delta.constraints."
INVARIANTS = "delta.invariants"
GENERATION_EXPRESSION = "delta.generationExpression"
IDENTITY_START = "delta.identity.start"
IDENTITY_STEP = "delta.identity.step"
IDENTITY_HIGH_WATER_MARK = "delta.identity.highWaterMark"
IDENTITY_ALLOW_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"
CURRENT_DEFAULT = "CURRENT_DEFAULT"

_LEGACY = {"invariants": 2, "checkConstraints": 3, "generatedColumns": 4, "identityColumns": 6}


@dataclasses.dataclass(frozen=True)
class Check:
    """A condition every row must make TRUE: a CHECK constraint, or a column's invariant."""

    name: str        # the constraint's name, or the column an invariant is on
    expression: str  # SQL
    kind: str        # "CHECK constraint" or "invariant"


@dataclasses.dataclass(frozen=True)
class Generated:
    """A generated column and its generation expression (SQL over the other columns)."""

    column: str
    expression: str


@dataclasses.dataclass(frozen=True)
class Identity:
    """An identity column: values ``start``, ``start + step``, ... handed out above ``high_water_mark``."""

    column: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit_insert: bool

    def first_free(self) -> int:
        """The first value not handed out yet: ``start``, or one step beyond the high-water mark."""
        return self.start if self.high_water_mark is None else self.high_water_mark + self.step


@dataclasses.dataclass(frozen=True)
class Default:
    """A column with a default: rows written without the column get the value of ``expression`` (SQL)."""

    column: str
    expression: str


@dataclasses.dataclass(frozen=True)
class TableRules:
    """Every rule a table sets on its rows (module docstring); empty for most tables."""

    checks: tuple[Check, ...] = ()
    generated: tuple[Generated, ...] = ()
    identity: tuple[Identity, ...] = ()
    defaults: tuple[Default, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.checks or self.generated or self.identity or self.defaults)

    @property
    def computed_columns(self) -> frozenset[str]:
        """Columns the writer fills in when the data omits them."""
        return frozenset([g.column for g in self.generated] + [i.column for i in self.identity]
                         + [d.column for d in self.defaults])

    def defaults_left_out(self, assigned: Iterable[str]) -> list[Default]:
        """The defaults of the columns an insert does not assign: the values it writes there."""
        given = set(assigned)
        return [d for d in self.defaults if d.column not in given]

    def check_assigned(self, columns: Iterable[str], *, update: bool, table: str, what: str) -> None:
        """Refuse an operation that assigns values to identity ``columns``, as delta-spark does: an update of
        an identity column always (``update``: UPDATE, a MERGE's update clause), an insert (a MERGE's insert
        clause) unless ``delta.identity.allowExplicitInsert`` is true. ``what`` names the clause."""
        assigned = set(columns)
        for identity in self.identity:
            if identity.column not in assigned:
                continue
            if update:
                raise InvalidArgumentError(
                    f"{what} sets identity column {identity.column!r} of table {table}, and the values of an identity "
                    f"column cannot be updated (Delta refuses it too); nothing was written. Leave the column out of "
                    f"the update")
            if not identity.allow_explicit_insert:
                raise InvalidArgumentError(
                    f"{what} gives values to identity column {identity.column!r} of table {table} (GENERATED ALWAYS "
                    f"AS IDENTITY: delta.identity.allowExplicitInsert is false), and an insert may not; nothing was "
                    f"written. Leave the column out of the insert (for an insert of every column, drop it from the "
                    f"source or name it in except_cols) and its values are generated")


def _features(protocol: Protocol | None) -> set[str]:
    if protocol is None:
        return set()
    if protocol.min_writer_version >= 7:
        return set(protocol.writer_features or [])
    return {f for f, v in _LEGACY.items() if v <= protocol.min_writer_version}


def constraints_of(configuration: Mapping[str, str | None]) -> dict[str, str]:
    """The CHECK constraints the properties name: ``{name: expression}``, in name order."""
    return {k[len(CONSTRAINT_PREFIX):]: v for k, v in sorted(configuration.items())
            if k.startswith(CONSTRAINT_PREFIX) and v is not None}


def rules_of(protocol: Protocol | None, metadata: Metadata | None) -> TableRules:
    """The rules that bind writers of a table with ``protocol`` and ``metadata`` (module docstring)."""
    if metadata is None:
        return TableRules()
    features = _features(protocol)
    checks: list[Check] = []
    if "checkConstraints" in features:
        checks += [Check(name, expression, "CHECK constraint")
                   for name, expression in constraints_of(metadata.configuration).items()]
    generated: list[Generated] = []
    identity: list[Identity] = []
    defaults: list[Default] = []
    for path, meta in _fields(json.loads(metadata.schema_string), ()):
        column = ".".join(path)
        if "invariants" in features and INVARIANTS in meta:
            checks.append(Check(column, _invariant(meta[INVARIANTS], column), "invariant"))
        if "generatedColumns" in features and GENERATION_EXPRESSION in meta:
            _top_level(path, "generated column", meta)
            generated.append(Generated(column, str(meta[GENERATION_EXPRESSION])))
        if "identityColumns" in features and IDENTITY_START in meta:
            _top_level(path, "identity column", meta)
            identity.append(_identity(column, meta))
        if "allowColumnDefaults" in features and CURRENT_DEFAULT in meta:
            _top_level(path, "column default", meta)
            defaults.append(Default(column, _default(meta[CURRENT_DEFAULT], column)))
    return TableRules(tuple(checks), tuple(generated), tuple(identity), tuple(defaults))


def _fields(struct: Mapping[str, Any], prefix: tuple[str, ...]):
    for field in struct.get("fields", []):
        path = (*prefix, field["name"])
        yield path, field.get("metadata") or {}
        if isinstance(field["type"], dict) and field["type"].get("type") == "struct":
            yield from _fields(field["type"], path)


_COPY = ("Copy the table without the field's metadata: write_table(new_uri, Table(uri).to_pyarrow_table()) "
         "writes its rows under a schema without it")
_NESTED = {
    "generated column": (
        "generatedColumns", GENERATION_EXPRESSION,
        "Delta's generated columns are top-level columns: delta-spark computes and checks the generation "
        "expressions of top-level fields only (its DDL and DeltaTableBuilder cannot declare one inside a struct), "
        "so no Delta writer keeps this one",
        _COPY + "; on the copy a CHECK constraint keeps the rule: "
        "alter.add_constraint({{'name': '{column} <=> ({expression})'}})"),
    "identity column": (
        "identityColumns", IDENTITY_START,
        "Delta's identity columns are top-level columns: delta-spark refuses a nested one (\"IDENTITY column "
        "cannot be a nested column\") and hands out values for top-level fields only",
        _COPY),
    "column default": (
        "allowColumnDefaults", CURRENT_DEFAULT,
        "Delta's column defaults are top-level columns: Spark resolves DEFAULT for top-level columns only",
        _COPY),
}
"""Per rule Delta defines on top-level columns only: its feature, metadata key, why, and what to do."""


def _top_level(path: tuple[str, ...], what: str, meta: Mapping[str, Any]) -> None:
    if len(path) == 1:
        return
    feature, key, why, todo = _NESTED[what]
    column = ".".join(path)
    raise UnsupportedFeatureError(
        f"field {column} of the table's schema is a {what} nested in a struct ({key}={meta.get(key)!r}). {why}. "
        f"dynacommit refuses to write this table rather than leave the rule unenforced; nothing was written. "
        + todo.format(column=column, expression=meta.get(key)), feature=feature)


def _default(raw: Any, column: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise UnsupportedFeatureError(f"column {column!r} has a {CURRENT_DEFAULT} entry that is not a SQL expression "
                                      f"({raw!r}); dynacommit cannot apply it", feature="allowColumnDefaults")
    return raw


def _invariant(raw: Any, column: str) -> str:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        expression = parsed["expression"]["expression"]
    except (ValueError, KeyError, TypeError):
        expression = None
    if not isinstance(expression, str) or not expression.strip():
        raise UnsupportedFeatureError(f"column {column!r} has a delta.invariants entry that is not "
                                      f"{{\"expression\": {{\"expression\": \"<sql>\"}}}} ({raw!r}); dynacommit cannot "
                                      f"enforce it", feature="invariants")
    return expression


def _identity(column: str, meta: Mapping[str, Any]) -> Identity:
    def integer(key: str, default: int | None) -> int | None:
        value = meta.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise UnsupportedFeatureError(f"identity column {column!r} has {key}={value!r}, not an integer",
                                          feature="identityColumns")
        try:
            return int(value)
        except ValueError:
            raise UnsupportedFeatureError(f"identity column {column!r} has {key}={value!r}, not an integer",
                                          feature="identityColumns") from None

    step = integer(IDENTITY_STEP, 1)
    if not step:
        raise UnsupportedFeatureError(f"identity column {column!r} has step 0", feature="identityColumns")
    allow = meta.get(IDENTITY_ALLOW_EXPLICIT_INSERT, False)
    return Identity(column, integer(IDENTITY_START, 1), step, integer(IDENTITY_HIGH_WATER_MARK, None),  # type: ignore[arg-type]
                    allow is True or str(allow).lower() == "true")


# --- changing them -------------------------------------------------------------------------------------


def check_constraint_name(name: object) -> str:
    """A constraint name as Delta accepts it: a non-empty string, stored lower-cased."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"a constraint name must be a string, got {type(name).__name__} {name!r}")
    if not name.strip() or any(c in name for c in "`\n"):
        raise InvalidArgumentError(f"constraint name {name!r} is empty or holds a backtick or a newline; pick "
                                   f"another name")
    return name.lower()


def with_constraint(metadata: Metadata, name: str, expression: str, *, table: str) -> Metadata:
    """``metadata`` with CHECK constraint ``name`` added; refused when one of that name exists."""
    key = CONSTRAINT_PREFIX + check_constraint_name(name)
    if key in metadata.configuration:
        raise InvalidArgumentError(f"table {table} already has a constraint {name.lower()!r} "
                                   f"({metadata.configuration[key]}); drop it first")
    return metadata.model_copy(update={"configuration": {**metadata.configuration, key: expression}})


def without_constraint(metadata: Metadata, name: str) -> Metadata | None:
    """``metadata`` without CHECK constraint ``name``, or None when it has none of that name."""
    key = CONSTRAINT_PREFIX + check_constraint_name(name)
    if key not in metadata.configuration:
        return None
    return metadata.model_copy(update={"configuration": {k: v for k, v in metadata.configuration.items()
                                                         if k != key}})


def with_default(metadata: Metadata, column: str, expression: str | None) -> Metadata:
    """``metadata`` with top-level ``column``'s default set to ``expression`` (SQL), or removed (None)."""
    schema = json.loads(metadata.schema_string)
    for field in schema["fields"]:
        if field["name"] == column:
            rest = {k: v for k, v in (field.get("metadata") or {}).items() if k != CURRENT_DEFAULT}
            field["metadata"] = rest if expression is None else {**rest, CURRENT_DEFAULT: expression}
    return metadata.model_copy(update={"schema_string": json.dumps(schema, separators=(",", ":"))})


def with_high_water_marks(metadata: Metadata, marks: Mapping[str, int]) -> Metadata:
    """``metadata`` with the identity columns' ``delta.identity.highWaterMark`` set to ``marks``."""
    schema = json.loads(metadata.schema_string)
    for field in schema["fields"]:
        if field["name"] in marks:
            field["metadata"] = {**(field.get("metadata") or {}), IDENTITY_HIGH_WATER_MARK: marks[field["name"]]}
    return metadata.model_copy(update={"schema_string": json.dumps(schema, separators=(",", ":"))})


def _without_marks(metadata: Metadata) -> tuple[Any, ...]:
    schema = json.loads(metadata.schema_string)
    for field in schema.get("fields", []):
        (field.get("metadata") or {}).pop(IDENTITY_HIGH_WATER_MARK, None)
    return (schema, dict(metadata.configuration), list(metadata.partition_columns), metadata.id)


def identity_only_change(before: Metadata | None, after: Metadata) -> bool:
    """Whether ``after`` differs from ``before`` only in identity high-water marks (an append that handed out
    identity values): such a change does not alter what another append is built on."""
    return before is not None and _without_marks(before) == _without_marks(after)
