"""Changing a table's schema and properties without rewriting data (``t.alter``): RENAME COLUMN and DROP
COLUMNS on tables with column mapping in ``name`` mode, ADD COLUMNS, and SET TBLPROPERTIES (which also turns
column mapping, the change data feed or deletion vectors on, upgrading the protocol as Delta does), and ADD /
DROP CONSTRAINT (CHECK constraints, enforced by every writer: ``table.data.rules``).

Each is one commit of a new ``metaData`` (and ``protocol`` when a feature is turned on) through the same
plan/commit/re-plan loop as every operation (``table.operations.rewrite.execute``); a metadata change
conflicts with every concurrent commit (Delta's rule: everything else was built on the old schema), so
a concurrent change makes it plan again on the newest version.

- **rename_column(old, new)**: only the logical name changes; files keep the physical name, so nothing is
  rewritten, and readers of older versions still see the old name (Delta's semantics). ``old`` may be a
  nested field (``"address.city"``). Partition columns may be renamed too.
- **drop_columns(names)**: the columns leave the schema; their data stays in the files, unread, until a
  rewrite. Partition columns cannot be dropped, nor every data column.
- **add_columns(fields)**: new nullable columns at the end (pyarrow fields), ids and physical names given
  on tables with column mapping.
- **change_column_type(column, new_type)**: widens a column or nested field (``"a.b"``, an array's
  ``"a.element"``, a map's ``"m.key"`` / ``"m.value"``) as delta-spark's ``ALTER TABLE ... ALTER COLUMN ...
  TYPE`` does: only on a table with ``delta.enableTypeWidening=true``, only the changes PROTOCOL.md allows,
  recorded in ``delta.typeChanges``; files keep their older type and are cast when read.
- **cluster_by(columns)**: changes a table's liquid clustering columns (delta-spark's ``ALTER TABLE ...
  CLUSTER BY``; ``None`` or ``[]``: ``CLUSTER BY NONE``), in the ``delta.clustering`` domain; an unpartitioned
  table that was not clustered gets the ``clustering`` feature. Files keep their clustering until an
  ``optimize()`` (``full=True`` reclusters the ones clustered by the old columns).
- **set_column_default(column, expression)** / **drop_column_default(column)**: delta-spark's ``ALTER COLUMN
  ... SET DEFAULT`` / ``DROP DEFAULT``: ``CURRENT_DEFAULT`` in the column's metadata, the writer feature
  ``allowColumnDefaults`` added; every writer then fills the column in when rows lack it (``table.data.rules``).
- **add_feature(feature, allow_protocol_versions_increase=False)**: deltalake's; a table feature (Delta name or
  deltalake's ``TableFeatures``) added to the protocol, versions raised only when allowed
  (:func:`table.log.protocol.with_features`); ``delta.feature.<name>=supported`` in set_table_properties too.
- **set_table_properties(properties)**: any property ``write_table(configuration=...)`` accepts.
  ``delta.columnMapping.mode=name`` on a table without mapping keeps every column's current name as its
  physical name (the files already use it) and gives each an id; going back to ``none`` is refused (the
  files would then need rewriting).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.rules import engine_sql
from table.data.stats import check_stats_columns
from table.data.writespec import CommitResult
from table.log import clustering, iceberg_compat, properties, type_widening
from table.log.actions import Metadata
from table.log.collations import COLLATIONS
from table.log.column_mapping import MAX_ID, MODE, assign, keep_names, max_column_id
from table.log.constraints import (
    CONSTRAINT_PREFIX,
    CURRENT_DEFAULT,
    Check,
    check_constraint_name,
    constraints_of,
    rules_of,
    with_constraint,
    with_default,
    without_constraint,
)
from table.log.protocol import FEATURE_PREFIX, feature_name, feature_properties, upgraded_protocol, with_features
from table.log.schema import arrow_to_delta, check_column_names, delta_to_arrow, record_type_changes
from table.engine import Engine
from table.log.snapshot import Snapshot
from table.operations.rewrite import Staged, execute
from table.operations.verify import verify_rows
from table.transaction import Opens, Transaction


__all__ = ["TableAlterer"]


class TableAlterer:
    """``Table.alter``: the schema and property changes of the module docstring, each one commit."""

    def __init__(self, table: Transaction | Opens):
        self._table = table

    def rename_column(self, old: str, new: str) -> CommitResult:
        """Rename column (or nested field, ``"a.b"``) ``old`` to ``new``; needs column mapping in ``name`` mode."""
        _name("old", old)
        _name("new", new)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            _need_name_mode(snapshot, "rename a column")
            schema = json.loads(snapshot.metadata.schema_string)
            path = old.split(".")
            siblings, field = _find(schema, path, snapshot.table_path)
            if any(f["name"].lower() == new.lower() and f is not field for f in siblings):
                raise InvalidArgumentError(f"table {snapshot.table_path} already has a column {new!r} next to {old!r} "
                                           f"(names are case-insensitive); pick another name")
            _rename_collations(field, new)
            field["name"] = new
            partitions = list(snapshot.partition_columns)
            if len(path) == 1 and old in partitions:
                partitions[partitions.index(old)] = new
            check_column_names(delta_to_arrow(schema), table=snapshot.table_path, mapped=True)
            configuration = _stats_columns_after(snapshot, path, new)
            metadata = snapshot.metadata.model_copy(update={"schema_string": _text(schema),
                                                            "partition_columns": partitions,
                                                            "configuration": configuration})
            return metadata, {"oldColumnPath": old, "newColumnPath": ".".join([*path[:-1], new])}

        return self._commit("RENAME COLUMN", change)

    def drop_columns(self, names: str | Sequence[str]) -> CommitResult:
        """Drop columns (or nested fields, ``"a.b"``); needs column mapping in ``name`` mode. The data stays in
        the files, unread."""
        columns = [names] if isinstance(names, str) else list(names)
        if not columns:
            raise InvalidArgumentError("drop_columns needs at least one column name")
        for column in columns:
            _name("a column to drop", column)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            _need_name_mode(snapshot, "drop a column")
            schema = json.loads(snapshot.metadata.schema_string)
            for column in columns:
                path = column.split(".")
                if len(path) == 1 and column in snapshot.partition_columns:
                    raise InvalidArgumentError(f"{column!r} is a partition column of {snapshot.table_path}; partition "
                                               f"columns cannot be dropped")
                siblings, field = _find(schema, path, snapshot.table_path)
                siblings.remove(field)
                if not siblings:
                    raise InvalidArgumentError(f"dropping {column!r} would leave a struct without fields; drop the "
                                               f"struct instead")
            data = [f for f in schema["fields"] if f["name"] not in snapshot.partition_columns]
            if not data:
                raise InvalidArgumentError(f"dropping {columns} would leave table {snapshot.table_path} without a "
                                           f"data column (Delta tables need one)")
            configuration = dict(snapshot.metadata.configuration)
            for column in columns:
                configuration = _stats_columns_after(snapshot, column.split("."), None, configuration)
            metadata = snapshot.metadata.model_copy(update={"schema_string": _text(schema),
                                                            "configuration": configuration})
            return metadata, {"columns": json.dumps(columns)}

        return self._commit("DROP COLUMNS", change)

    def add_columns(self, fields: pa.Field | Sequence[pa.Field]) -> CommitResult:
        """Add nullable columns at the end of the schema (with ids and physical names on mapped tables)."""
        added = [fields] if isinstance(fields, pa.Field) else list(fields)
        if not added or not all(isinstance(f, pa.Field) for f in added):
            raise ArgumentTypeError(f"add_columns needs pyarrow fields (pa.field('name', pa.int64())), got {fields!r}")

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            schema = json.loads(snapshot.metadata.schema_string)
            new = arrow_to_delta(pa.schema([f.with_nullable(True) for f in added]))["fields"]
            schema["fields"] = [*schema["fields"], *new]
            check_column_names(delta_to_arrow(schema), table=snapshot.table_path, mapped=snapshot.layout.mapped)
            configuration = dict(snapshot.metadata.configuration)
            if snapshot.layout.mapped:
                schema, top = assign(schema, max_column_id(configuration))
                configuration[MAX_ID] = str(top)
            metadata = snapshot.metadata.model_copy(update={"schema_string": _text(schema),
                                                            "configuration": configuration})
            return metadata, {"columns": json.dumps([{"column": f["name"]} for f in new])}

        return self._commit("ADD COLUMNS", change)

    def change_column_type(self, column: str, new_type: object) -> CommitResult:
        """Widen ``column`` (a dotted path; ``element``, ``key``, ``value`` step into arrays and maps) to
        ``new_type`` (a pyarrow type or a Delta type name such as ``"long"`` or ``"decimal(12,2)"``): the
        module docstring's rules; nothing is rewritten."""
        _name("the column", column)
        target = type_widening.delta_type_of(new_type, column=column)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            old_schema = json.loads(snapshot.metadata.schema_string)
            schema = json.loads(snapshot.metadata.schema_string)
            path = column.split(".")
            holder, key = _locate(schema, path, snapshot.table_path)
            current = holder[key]
            if current == target:
                raise InvalidArgumentError(f"column {column!r} of {snapshot.table_path} already is {target}")
            type_widening.check_change(snapshot.metadata, path, current, target, table=snapshot.table_path)
            _refuse_dependents(snapshot, path[0])
            holder[key] = target
            schema = record_type_changes(old_schema, schema)
            metadata = snapshot.metadata.model_copy(update={"schema_string": _text(schema)})
            field = next(f for f in schema["fields"] if f["name"] == path[0])
            return metadata, {"column": json.dumps(field, separators=(",", ":"))}

        return self._commit("CHANGE COLUMN", change)

    def cluster_by(self, columns: Sequence[str] | None) -> CommitResult:
        """Set the table's clustering columns (module docstring); ``None`` or ``[]`` stops clustering."""
        wanted = clustering.names(columns, argument="cluster_by")

        def stage(txn: Transaction, job_id: str) -> Staged:
            snapshot = txn.require("cluster by")
            clustering.check_columns(wanted, snapshot.schema, snapshot.partition_columns, table=snapshot.table_path,
                                     num_indexed_cols=properties.num_indexed_cols(snapshot.configuration),
                                     stats_columns=properties.stats_columns(snapshot.configuration))
            before = clustering.columns_of(snapshot.state, snapshot.layout)
            if not clustering.clustered(snapshot.protocol) and not wanted:
                raise InvalidArgumentError(f"table {snapshot.table_path} is not clustered; there is no clustering "
                                           f"to remove")
            protocol = clustering.with_clustering(snapshot.protocol)
            parameters = {"oldClusteringColumns": ",".join(before), "newClusteringColumns": ",".join(wanted)}
            txn.read_whole_table()  # the clustering applies to every file
            return Staged("CLUSTER BY", (), (), None, parameters, {},
                          protocol=None if protocol == snapshot.protocol else protocol,
                          domains=(clustering.domain_for(wanted, snapshot.layout),))

        return execute(self._table, "CLUSTER BY", stage, removes_data=False)

    def add_feature(self, feature: object, allow_protocol_versions_increase: bool = False) -> CommitResult:
        """Add table feature(s) to the protocol (deltalake's ``alter.add_feature``): Delta names
        (``"deletionVectors"``) or deltalake's ``TableFeatures`` members, one or a list. A feature that binds
        readers moves the table to reader 3 / writer 7, a writer feature to writer 7, which is refused unless
        ``allow_protocol_versions_increase`` (as deltalake does). A feature dynacommit cannot write is
        refused (UnsupportedFeatureError, with the reason). The feature is then supported, not turned on
        (its property, e.g. ``delta.enableDeletionVectors``, does that). Nothing to add: nothing is committed."""
        if not isinstance(allow_protocol_versions_increase, bool):
            raise ArgumentTypeError(f"allow_protocol_versions_increase must be a bool, got "
                                    f"{allow_protocol_versions_increase!r}")
        features = list(feature) if isinstance(feature, (list, tuple)) else [feature]
        if not features:
            raise InvalidArgumentError("add_feature needs at least one feature")
        names = list(dict.fromkeys(feature_name(f) for f in features))

        def stage(txn: Transaction, job_id: str) -> Staged:
            snapshot = txn.require("add feature")
            protocol = with_features(snapshot.protocol, names, allow_versions_increase=allow_protocol_versions_increase,
                                     table=snapshot.table_path)
            txn.read_whole_table()  # a protocol change applies to every file and every writer
            if protocol is None:
                return Staged("ADD FEATURE", (), (), None, {}, {"skipped": "true"})
            return Staged("ADD FEATURE", (), (), None, {"name": json.dumps(names)}, {}, protocol=protocol)

        return execute(self._table, "ADD FEATURE", stage, removes_data=False)

    def set_table_properties(self, properties_to_set: Mapping[str, str]) -> CommitResult:
        """Set table properties (module docstring); the protocol is upgraded when a property needs it.
        ``delta.feature.<name>: "supported"`` adds table feature ``<name>`` (Delta's way, versions raised as
        needed, as :meth:`add_feature` with ``allow_protocol_versions_increase=True``); it is not kept among
        the table's properties, as in Delta."""
        rest, features = feature_properties(properties_to_set)
        checked = properties.validate_for_create(rest)
        if not checked and not features:
            raise InvalidArgumentError("set_table_properties needs at least one property")
        if not checked:
            return self._commit("SET TBLPROPERTIES",
                                lambda snapshot: (snapshot.metadata, {"properties": json.dumps(
                                    {FEATURE_PREFIX + f: "supported" for f in features})}),
                                features=features)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            configuration = {**snapshot.metadata.configuration, **checked}
            properties.check_consistent(configuration)
            columns = properties.stats_columns(checked)
            if columns is not None:
                check_stats_columns(columns, snapshot.schema, snapshot.partition_columns, table=snapshot.table_path)
            turned_on = set(iceberg_compat.enabled_versions(configuration)) - set(
                iceberg_compat.enabled_versions(snapshot.metadata.configuration))
            if turned_on and snapshot.files:
                raise InvalidArgumentError(
                    f"table {snapshot.table_path} has {len(snapshot.files)} data file(s) written without what "
                    f"IcebergCompatV{max(turned_on)} requires of files (partition values inside them, nested field "
                    f"ids); turn it on when creating the table, or with delta-spark, which rewrites the files "
                    f"(REORG TABLE ... APPLY (UPGRADE UNIFORM ...))")
            schema = json.loads(snapshot.metadata.schema_string)
            before = (snapshot.metadata.configuration.get(MODE) or "none").lower()
            after = (configuration.get(MODE) or "none").lower()
            if before != after:
                if before != "none":
                    raise InvalidArgumentError(f"table {snapshot.table_path} has column mapping mode {before!r}; "
                                               f"changing it to {after!r} would need every file rewritten")
                if after == "id":
                    raise InvalidArgumentError("an existing table can be switched to column mapping mode 'name' "
                                               "only (its files carry no field ids)")
                schema, top = keep_names(schema, 0)
                configuration[MAX_ID] = str(top)
            metadata = snapshot.metadata.model_copy(update={"schema_string": _text(schema),
                                                            "configuration": configuration})
            shown = {**checked, **{FEATURE_PREFIX + f: "supported" for f in features}}
            return metadata, {"properties": json.dumps(shown)}

        return self._commit("SET TBLPROPERTIES", change, features=features)

    def add_constraint(self, constraints: Mapping[str, str]) -> CommitResult:
        """Add CHECK constraints (deltalake's ``alter.add_constraint``: ``{name: SQL expression}``), one commit.
        Every row the table holds must satisfy them (checked before the commit; a violation raises
        ConstraintViolationError naming the first such row), and from then on every write must; the
        protocol is upgraded to allow them (writer feature ``checkConstraints``). The commit reads the whole
        table: an append that lands meanwhile makes it check again on the newest version."""
        if not isinstance(constraints, Mapping) or not constraints:
            raise ArgumentTypeError(f"add_constraint needs a dict of constraint name to SQL expression, got "
                                    f"{constraints!r}")
        items = []
        for name, expression in constraints.items():
            check_constraint_name(name)
            if not isinstance(expression, str) or not expression.strip():
                raise ArgumentTypeError(f"constraint {name!r} needs a SQL expression string, got {expression!r}")
            items.append((name, expression))

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            metadata = snapshot.metadata
            for name, expression in items:
                metadata = with_constraint(metadata, name, expression, table=snapshot.table_path)
            checks = tuple(Check(name.lower(), expression, "CHECK constraint") for name, expression in items)
            verify_rows(self._table, snapshot, checks)
            name, expression = items[0] if len(items) == 1 else (",".join(n for n, _ in items),
                                                                   " AND ".join(f"({e})" for _, e in items))
            return metadata, {"name": name, "expr": expression}

        return self._commit("ADD CONSTRAINT", change)

    def drop_constraint(self, name: str, raise_if_not_exists: bool = True) -> CommitResult:
        """Drop CHECK constraint ``name`` (deltalake's ``alter.drop_constraint``), one commit. A table without
        it: InvalidArgumentError, or nothing at all with ``raise_if_not_exists=False``."""
        check_constraint_name(name)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]] | None:
            metadata = without_constraint(snapshot.metadata, name)
            if metadata is None:
                if raise_if_not_exists:
                    raise InvalidArgumentError(
                        f"table {snapshot.table_path} has no constraint {name.lower()!r} (its constraints: "
                        f"{sorted(constraints_of(snapshot.metadata.configuration))}); pass "
                        f"raise_if_not_exists=False to ignore it")
                return None
            expression = snapshot.metadata.configuration.get(CONSTRAINT_PREFIX + name.lower()) or ""
            return metadata, {"name": name.lower(), "expr": expression}

        return self._commit("DROP CONSTRAINT", change)

    def set_column_default(self, column: str, expression: str) -> CommitResult:
        """Give top-level ``column`` a default (delta-spark's ``ALTER TABLE ... ALTER COLUMN ... SET DEFAULT``):
        a SQL expression without column references, stored as Delta does (``CURRENT_DEFAULT`` in the
        column's metadata); rows written without the column then get its value. The table gets the writer
        feature ``allowColumnDefaults`` (writer version 7). Identity and generated columns take no default."""
        _name("the column", column)
        if not isinstance(expression, str) or not expression.strip():
            raise ArgumentTypeError(f"the default of column {column!r} must be a SQL expression string, got "
                                    f"{expression!r}")

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]]:
            field = _default_column(snapshot, column)
            rules = rules_of(snapshot.protocol, snapshot.metadata)
            if column in {g.column for g in rules.generated} | {i.column for i in rules.identity}:
                raise InvalidArgumentError(f"column {column!r} of {snapshot.table_path} is a generated or identity "
                                           f"column, whose values the writer computes: it takes no default")
            _check_default(snapshot, column, expression)
            return _with_default_field(snapshot, field, expression)

        return self._commit("CHANGE COLUMN", change)

    def drop_column_default(self, column: str) -> CommitResult:
        """Remove ``column``'s default (``ALTER TABLE ... ALTER COLUMN ... DROP DEFAULT``); nothing is
        committed when it has none. Rows written without the column are then NULL there."""
        _name("the column", column)

        def change(snapshot: Snapshot) -> tuple[Metadata, dict[str, str]] | None:
            field = _default_column(snapshot, column)
            if CURRENT_DEFAULT not in (field.get("metadata") or {}):
                return None
            return _with_default_field(snapshot, field, None)

        return self._commit("CHANGE COLUMN", change)

    def _commit(self, operation: str, change, *, features: Sequence[str] = ()) -> CommitResult:
        def stage(txn: Transaction, job_id: str) -> Staged:
            snapshot = txn.require(operation.lower())
            changed = change(snapshot)
            txn.read_whole_table()  # the new schema or properties apply to every file
            if changed is None:
                return Staged(operation, (), (), None, {}, {"skipped": "true"})
            metadata, parameters = changed
            protocol = upgraded_protocol(snapshot.protocol, metadata.schema_string, metadata.configuration)
            if features:
                protocol = with_features(protocol or snapshot.protocol, list(features), allow_versions_increase=True,
                                         table=snapshot.table_path) or protocol
            if metadata is snapshot.metadata:  # only features: the protocol alone changes
                return Staged(operation, (), (), None, parameters, {}, protocol=protocol)
            return Staged(operation, (), (), None, parameters, {}, metadata=metadata, protocol=protocol)

        return execute(self._table, operation, stage, removes_data=False)  # metadata only: no rows change


def _need_name_mode(snapshot: Snapshot, what: str) -> None:
    if snapshot.layout.mode != "name":
        raise InvalidArgumentError(
            f"to {what} of table {snapshot.table_path} without rewriting its files, the table needs column mapping "
            f"in 'name' mode; turn it on with t.alter.set_table_properties({{'{MODE}': 'name'}}) (readers must "
            f"support column mapping: delta-spark 1.2+, deltalake 0.16+)")


def _find(schema: dict[str, Any], path: Sequence[str], table: str) -> tuple[list, dict]:
    """The list of fields holding the field at ``path`` (struct fields only), and that field."""
    fields = schema["fields"]
    for depth, name in enumerate(path):
        field = next((f for f in fields if f["name"] == name), None)
        if field is None:
            where = ".".join(path[:depth]) or "the table"
            raise InvalidArgumentError(f"{where} of {table} has no column {name!r} (its columns: "
                                       f"{[f['name'] for f in fields]})")
        if depth == len(path) - 1:
            return fields, field
        if not isinstance(field["type"], dict) or field["type"].get("type") != "struct":
            raise InvalidArgumentError(f"{'.'.join(path[:depth + 1])!r} of {table} is not a struct")
        fields = field["type"]["fields"]
    raise InvalidArgumentError("an empty column path")


def _stats_columns_after(snapshot: Snapshot, path: Sequence[str], new: str | None,
                         configuration: Mapping[str, str] | None = None) -> dict[str, str]:
    """The table's properties once the column at ``path`` is renamed to ``new`` (None: dropped):
    ``delta.dataSkippingStatsColumns`` follows, as in Delta, naming the column (or its fields) by its new
    name, or no longer naming it."""
    configuration = dict(snapshot.metadata.configuration if configuration is None else configuration)
    listed = properties.stats_columns(configuration)
    if listed is None:
        return configuration
    folded = [p.lower() for p in path]
    kept = []
    for column in listed:
        if [p.lower() for p in column[:len(path)]] != folded:
            kept.append(column)
        elif new is not None:
            kept.append((*column[:len(path) - 1], new, *column[len(path):]))
    if kept:
        configuration[properties.STATS_COLUMNS] = properties.format_column_list(kept)
    else:
        configuration.pop(properties.STATS_COLUMNS)
    return configuration


def _locate(schema: dict[str, Any], path: Sequence[str], table: str) -> tuple[dict[str, Any], str]:
    """The dict holding the type at ``path`` and its key there: a struct field's ``type``, an array's
    ``elementType``, a map's ``keyType`` / ``valueType``."""
    holder: dict[str, Any] = {"type": schema}
    key = "type"
    for depth, step in enumerate(path):
        node = holder[key]
        kind = node.get("type") if isinstance(node, dict) else None
        where = ".".join(path[:depth]) or "the table"
        if kind == "struct":
            field = next((f for f in node["fields"] if f["name"] == step), None)
            if field is None:
                raise InvalidArgumentError(f"{where} of {table} has no column {step!r} (its columns: "
                                           f"{[f['name'] for f in node['fields']]})")
            holder, key = field, "type"
        elif kind == "array" and step == "element":
            holder, key = node, "elementType"
        elif kind == "map" and step in ("key", "value"):
            holder, key = node, f"{step}Type"
        else:
            raise InvalidArgumentError(f"{where!r} of {table} is {kind or node}: step into an array with 'element', "
                                       f"into a map with 'key' or 'value', into a struct by a field's name")
    return holder, key


def _refuse_dependents(snapshot: Snapshot, column: str) -> None:
    """Delta refuses to change the type of a column a CHECK constraint or a generation expression reads:
    the expression could change meaning."""
    words = re.compile(rf"(?<![\w`]){re.escape(column)}(?![\w`])|`{re.escape(column)}`", re.IGNORECASE)
    for key, value in snapshot.metadata.configuration.items():
        if key.startswith("delta.constraints.") and value and words.search(value):
            raise InvalidArgumentError(f"column {column!r} of {snapshot.table_path} is used by CHECK constraint "
                                       f"{key.removeprefix('delta.constraints.')!r} ({value}); drop the constraint, "
                                       f"change the type, and add it again")
    for field in json.loads(snapshot.metadata.schema_string)["fields"]:
        expression = (field.get("metadata") or {}).get("delta.generationExpression")
        if isinstance(expression, str) and (field["name"] == column or words.search(expression)):
            raise InvalidArgumentError(f"column {column!r} of {snapshot.table_path} is used by generated column "
                                       f"{field['name']!r} ({expression}); its type cannot change")


def _rename_collations(field: dict[str, Any], new: str) -> None:
    """The field's collation entries (``__COLLATIONS``, keyed by the field's name and the paths inside it) under
    its new name, as the collations feature asks writers to keep them."""
    metadata = field.get("metadata") or {}
    entries = metadata.get(COLLATIONS)
    if not isinstance(entries, Mapping):
        return
    old = field["name"]
    metadata[COLLATIONS] = {(new + key[len(old):] if key == old or key.startswith(old + ".") else key): value
                            for key, value in entries.items()}


def _default_column(snapshot: Snapshot, column: str) -> dict[str, Any]:
    """The schema field of top-level ``column`` (defaults are on top-level columns only, as in Delta)."""
    fields = json.loads(snapshot.metadata.schema_string)["fields"]
    field = next((f for f in fields if f["name"] == column), None)
    if field is None:
        hint = " (defaults are set on top-level columns only)" if "." in column else ""
        raise InvalidArgumentError(f"table {snapshot.table_path} has no column {column!r}{hint} (its columns: "
                                   f"{[f['name'] for f in fields]})")
    return field


def _check_default(snapshot: Snapshot, column: str, expression: str) -> None:
    """The default must evaluate, without a row, to a value of the column's type."""
    what = f"the default of column {column!r} ({expression})"
    value = Engine().query(f"SELECT ({engine_sql(expression, what=what, feature='allowColumnDefaults')}\n) AS v",
                           what=what).column(0)
    target = snapshot.schema.field(column).type
    try:
        value.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"{what} ({expression}) gives {value[0].as_py()!r} of type {value.type}, which does "
                                   f"not fit the column's type {target}: {exc}") from None


def _with_default_field(snapshot: Snapshot, field: dict[str, Any], expression: str | None
                        ) -> tuple[Metadata, dict[str, str]]:
    metadata = with_default(snapshot.metadata, field["name"], expression)
    changed = next(f for f in json.loads(metadata.schema_string)["fields"] if f["name"] == field["name"])
    return metadata, {"column": json.dumps(changed, separators=(",", ":"))}


def _name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ArgumentTypeError(f"{what} must be a non-empty column name, got {value!r}")


def _text(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))
