"""What a write asks for, checked once: the one place for the rules of modes, partitioning, table
properties and idempotent jobs, shared by ``write_table``, Spark's ``write_dataframe`` and the Spark data
source.

Three steps, each before the first byte of data is uploaded:

1. :meth:`WriteSpec.of` checks the arguments alone (types and values), raising ``ArgumentTypeError`` or
   ``InvalidArgumentError`` naming the argument;
2. :meth:`WriteSpec.plan` checks them against the table as it is (``mode="error"`` on an existing table,
   partition columns, schema, properties, a job already committed) and returns a :class:`WritePlan`:
   the schema and partition columns the tasks write with, or the result of a write with nothing to do;
3. after the tasks staged their files, :meth:`WriteSpec.commit_for` builds the
   :class:`~table.log.commit.Commit` (actions, read scope, what to do if the table was created
   concurrently) that the job commit hands to the transaction.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.stats import check_stats_columns
from table.errors import (
    SchemaMismatchError,
    TableExistsError,
    UnsupportedTypeError,
)
from table.log import clustering, properties, type_widening
from table.log.actions import Action, AddFile, DomainMetadata, Metadata, Protocol, RemoveFile
from table.log.column_mapping import MAX_ID, MODE, Layout, assign, layout_of, max_column_id
from table.log.schema_arrow import cast_settled, null_array
from table.log.commit import Commit, OnExisting, ReadScope
from table.log.constraints import TableRules, rules_of
from table.log.metrics import metrics_for
from table.log.outcome import SnapshotAfter
from table.log.protocol import (
    column_mapping_supported,
    feature_properties,
    minimal_protocol,
    supports,
    upgraded_protocol,
    with_features,
)
from table.log.schema import (
    arrow_to_delta,
    arrow_type_to_delta,
    check_column_names,
    delta_to_arrow,
    evolve_schema,
    partition_key,
    schema_diff,
    schema_string,
)
from table.log.transaction import txn_version
from table.log.writable import check_not_time_travel, check_operation
from table.transaction import TableView

if TYPE_CHECKING:
    from table.log.snapshot import Snapshot

__all__ = ["MODES", "SCHEMA_MODES", "CommitResult", "StreamingUpdate", "WritePlan", "WriteSpec", "schema_merge_plan"]

MODES = ("append", "overwrite", "error", "ignore")
PARTITION_OVERWRITE_MODES = ("static", "dynamic")
SCHEMA_MODES = ("merge", "overwrite")
_SPARK_MODE = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists", "ignore": "Ignore"}
_ON_EXISTING = {"append": OnExisting.APPEND, "overwrite": OnExisting.CONFLICT, "error": OnExisting.FAIL,
                "ignore": OnExisting.SKIP}


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """What an operation committed: the table version holding it, its typed metrics and the table after it.

    ``metrics``: an :class:`~table.log.metrics.OperationMetrics` of the operation's kind (a write's
    :class:`~table.log.metrics.WriteMetrics`, a DELETE's ``DeleteMetrics`` ...): a frozen dataclass with
    deltalake's field names and typed values that also reads as the mapping of Delta's names and string values
    the commit's ``operationMetrics`` holds, plus what is known only afterwards (``commitSeconds``,
    ``numAttempts``; ``skipped="true"`` when nothing was written: mode ``ignore`` on an existing table, or the
    application's txn already committed, then ``version`` is the version holding it).

    ``snapshot``: the table at ``version`` as the commit left it (for a skipped write: as the write found it,
    which may be newer than ``version``). It is the snapshot the commit path computed from the one it
    committed on and its own actions, so it costs no read of the log; only after a commit that went on top of
    winners judged by their DynamoDB entries alone are those winners read, lazily, on first access (the
    :class:`~table.table.Table` that ran the operation reads them then too, once for both). A result
    unpickled in another process has no snapshot (None)."""

    version: int
    metrics: Mapping[str, str]
    after: SnapshotAfter | None = dataclasses.field(default=None, compare=False, repr=False)
    """How the snapshot is had (:class:`~table.log.outcome.SnapshotAfter`); read :attr:`snapshot`."""

    @classmethod
    def of(cls, version: int, metrics: Mapping[str, str], *, operation: str,
           snapshot: Snapshot | SnapshotAfter | None) -> CommitResult:
        """The result of ``operation`` (Delta's name: ``WRITE``, ``DELETE`` ...) with its metrics typed as that
        operation's (:func:`~table.log.metrics.metrics_for`)."""
        after = snapshot if snapshot is None or isinstance(snapshot, SnapshotAfter) else SnapshotAfter(snapshot)
        return cls(version=version, metrics=metrics_for(operation, metrics), after=after)

    @property
    def snapshot(self) -> Snapshot | None:
        """The table after the commit (class docstring); computed on first access when the commit path did not
        know it (then it reads the log, and raises what that read raises)."""
        return None if self.after is None else self.after()

    @property
    def skipped(self) -> bool:
        return self.metrics.get("skipped") == "true"

    def __reduce__(self) -> tuple[Any, ...]:
        return CommitResult, (self.version, self.metrics)  # a snapshot stays in the process that read it


@dataclasses.dataclass(frozen=True)
class WritePlan:
    """What the tasks write with (``schema`` in Delta's Arrow types, partition columns included, and
    ``partition_by``), whether the write creates the table, or ``done``: nothing to write. ``metadata``
    (and ``protocol``): the table's new ones when the write changes its schema (``schema_mode``)."""

    schema: pa.Schema
    partition_by: tuple[str, ...]
    creating: bool
    done: CommitResult | None = None
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    fill_missing: bool = False  # schema_mode="merge": the data may lack columns or have narrower types
    layout: Layout | None = None  # the column mapping files are written with (None: the table has none)
    domains: tuple[DomainMetadata, ...] = ()  # metadata domains a creating write commits (delta.clustering)
    #: The table's properties once written (its writer settings come from them: :mod:`table.data.writer_settings`).
    configuration: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    #: The rules the table sets on its rows (constraints, generated and identity columns), which the writers
    #: enforce (:mod:`table.data.rules`); columns they compute may be absent from the data.
    rules: TableRules = dataclasses.field(default_factory=TableRules)

    @property
    def physical_partition_by(self) -> tuple[str, ...]:
        """The partition columns as staged files and ``add`` actions name them."""
        return self.partition_by if self.layout is None else tuple(self.layout.physical_columns(self.partition_by))

    def conform(self, data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        """Rows ready for the tasks' writers: with a merged schema, the table's columns the data lacks
        added as nulls and narrower types cast to the table's (Delta's schema evolution); otherwise as
        given (the writer checks them against ``schema``)."""
        if not self.fill_missing or data.schema.equals(self.schema):
            return data
        columns, names = [], []
        computed = self.rules.computed_columns
        for field in self.schema:
            if field.name in data.schema.names:
                column = data.column(field.name)
                columns.append(column if column.type == field.type else cast_settled(column, field.type))
            elif field.name in computed:
                continue  # the writer computes it (table.data.rules)
            else:
                columns.append(null_array(data.num_rows, field.type))
            names.append(field.name)
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(columns, names=names)
        return pa.Table.from_arrays(columns, names=names)


@dataclasses.dataclass(frozen=True)
class StreamingUpdate:
    """The micro-batch a write commits, for a streaming sink: recorded as Delta's ``STREAMING UPDATE``
    operation (``outputMode``, ``queryId``, ``epochId``) instead of ``WRITE``."""

    query_id: str
    epoch_id: int
    output_mode: str  # "Append" or "Complete"


@dataclasses.dataclass(frozen=True)
class WriteSpec:
    """A write's arguments, checked (build with :meth:`of`)."""

    mode: str = "append"
    partition_by: tuple[str, ...] | None = None
    partition_overwrite: str = "static"
    app_id: str | None = None
    app_version: int | None = None
    configuration: Mapping[str, str] | None = None
    user_metadata: str | None = None
    streaming: StreamingUpdate | None = None
    schema_mode: str | None = None
    cluster_by: tuple[str, ...] = ()
    #: Features ``delta.feature.<name>=supported`` properties add to a new table's protocol (Delta's way).
    features: tuple[str, ...] = ()

    @classmethod
    def of(cls, *, mode: str = "append", partition_by: Sequence[str] | None = None,
           partition_overwrite: str = "static", app_id: str | None = None, app_version: int | None = None,
           configuration: Mapping[str, str] | None = None, user_metadata: str | None = None,
           schema_mode: str | None = None, cluster_by: Sequence[str] | None = None) -> WriteSpec:
        """Check the arguments alone; raises ArgumentTypeError / InvalidArgumentError naming the argument."""
        _choice("mode", mode, MODES)
        _choice("partition_overwrite", partition_overwrite, PARTITION_OVERWRITE_MODES)
        if schema_mode is not None:
            _choice("schema_mode", schema_mode, SCHEMA_MODES)
            if schema_mode == "overwrite" and (mode != "overwrite" or partition_overwrite == "dynamic"):
                raise InvalidArgumentError(
                    "schema_mode='overwrite' replaces the table's schema and needs mode='overwrite' with a static "
                    "(whole-table) overwrite; use schema_mode='merge' to add columns while appending")
        if partition_by is not None:
            if isinstance(partition_by, (str, bytes)):
                raise ArgumentTypeError(f"partition_by must be a list of column names, got the string "
                                        f"{partition_by!r}; write partition_by=[{partition_by!r}]")
            if not isinstance(partition_by, Sequence):
                raise ArgumentTypeError(f"partition_by must be a list of column names, got "
                                        f"{type(partition_by).__name__}")
            for column in partition_by:
                if not isinstance(column, str) or not column:
                    raise ArgumentTypeError(f"partition_by must hold non-empty column names, got {column!r}")
            lowered = [c.lower() for c in partition_by]
            if len(set(lowered)) != len(lowered):
                raise InvalidArgumentError(f"partition_by {list(partition_by)} names a column twice (column names are "
                                           f"case-insensitive in Delta)")
            partition_by = tuple(partition_by)
        if (app_id is None) != (app_version is None):
            raise InvalidArgumentError("app_id and app_version must be given together (or neither)")
        if app_id is not None and not isinstance(app_id, str):
            raise ArgumentTypeError(f"app_id must be a string, got {type(app_id).__name__} {app_id!r}")
        if app_id is not None and not app_id.strip():
            raise InvalidArgumentError(f"app_id must not be empty, got {app_id!r}: it names the job across its runs")
        if app_version is not None and (not isinstance(app_version, int) or isinstance(app_version, bool)):
            raise ArgumentTypeError(f"app_version must be an int, got {type(app_version).__name__} {app_version!r}")
        if app_version is not None and app_version < 0:
            raise InvalidArgumentError(f"app_version must be >= 0, got {app_version}")
        if user_metadata is not None and not isinstance(user_metadata, str):
            raise ArgumentTypeError(f"user_metadata must be a string, got {type(user_metadata).__name__}")
        features: list[str] = []
        if configuration is not None:
            configuration, features = feature_properties(configuration)
        checked = properties.validate_for_create(configuration) if configuration is not None else None
        clustering_columns = clustering.names(cluster_by, argument="cluster_by")
        if clustering_columns and partition_by:
            raise InvalidArgumentError("cluster_by and partition_by cannot both be given: Delta does not allow a "
                                       "table to be both partitioned and clustered")
        return cls(mode=mode, partition_by=partition_by, partition_overwrite=partition_overwrite, app_id=app_id,
                   app_version=app_version, configuration=checked, user_metadata=user_metadata,
                   schema_mode=schema_mode, cluster_by=clustering_columns, features=tuple(features))

    # --- 2. against the table ---------------------------------------------------------------------

    def plan(self, table: TableView, data_schema: pa.Schema) -> WritePlan:
        """Check the write against ``table`` as loaded; see the module docstring. Raises TableExistsError
        (mode ``error``), ReadOnlySnapshotError, InvalidArgumentError, SchemaMismatchError,
        UnsupportedTypeError, and every refusal of :func:`table.log.writable.check_operation`
        (UnsupportedFeatureError for a protocol or feature we cannot write, AppendOnlyError for an overwrite
        of an append-only table): all before the first byte of data is uploaded."""
        if not isinstance(data_schema, pa.Schema):
            raise ArgumentTypeError(f"expected a pyarrow schema, got {type(data_schema).__name__}")
        plan = self._plan(table, data_schema)
        if plan.done is None:
            check_operation(table.snapshot, self.operation, table=table.uri.table_path,
                            removes_data=self.mode == "overwrite" and not plan.creating,
                            protocol=plan.protocol, metadata=plan.metadata)
        configuration = plan.metadata.configuration if plan.metadata is not None else \
            table.snapshot.configuration if table.snapshot is not None else {}
        snapshot = table.snapshot
        rules = rules_of(plan.protocol or (snapshot.protocol if snapshot is not None else None),
                         plan.metadata or (snapshot.metadata if snapshot is not None else None))
        return dataclasses.replace(plan, configuration=dict(configuration or {}), rules=rules)

    @property
    def operation(self) -> str:
        """The write as refusals name it."""
        if self.streaming is not None:
            return f"the streaming write (output mode {self.streaming.output_mode})"
        return "the overwrite" if self.mode == "overwrite" else "the write"

    def _plan(self, table: TableView, data_schema: pa.Schema) -> WritePlan:
        snapshot = table.snapshot
        if snapshot is None:
            return self._plan_create(table, data_schema)
        check_not_time_travel(snapshot, table=table.uri.table_path, operation=self.operation)
        if self.mode == "error":
            raise TableExistsError(f"a table already exists at {table.uri.table_path} (version {snapshot.version}); "
                                   f"nothing was written. Use mode='append' or 'overwrite'")
        existing = tuple(snapshot.partition_columns)
        if self.mode == "ignore":
            done = CommitResult.of(snapshot.version, {"skipped": "true"}, operation="WRITE", snapshot=snapshot)
            return WritePlan(snapshot.schema, existing, False, done, layout=snapshot.layout)
        if self.app_id is not None:
            held = snapshot.state.app_version(self.app_id)
            if held is not None and held >= self.app_version:  # type: ignore[operator]
                version = txn_version(table.log_store, snapshot, self.app_id)
                done = CommitResult.of(version, {"skipped": "true", "appVersionHeld": str(held)}, operation="WRITE",
                                       snapshot=snapshot)
                return WritePlan(snapshot.schema, existing, False, done, layout=snapshot.layout)
        if self.schema_mode == "overwrite":
            return self._plan_replace(table, data_schema)
        if self.partition_by is not None and self.partition_by != existing:
            raise InvalidArgumentError(
                f"table {table.uri.table_path} is partitioned by {list(existing)}, not {list(self.partition_by)}; "
                f"pass partition_by={list(existing)!r} or leave it out")
        held = clustering.columns_of(snapshot.state, snapshot.layout)
        if self.cluster_by and tuple(self.cluster_by) != held:
            now = f"is clustered by {list(held)}" if held else "is not clustered"
            raise InvalidArgumentError(
                f"table {table.uri.table_path} {now}, not by {list(self.cluster_by)}; leave cluster_by out (it "
                f"applies when a write creates the table), or change the clustering with "
                f"t.alter.cluster_by({list(self.cluster_by)!r})")
        lacking = [f for f in self.features if not supports(snapshot.protocol, f)]
        if lacking:
            raise InvalidArgumentError(
                f"table {table.uri.table_path} does not support feature(s) {lacking}; table properties are set when "
                f"the table is created: add them with t.alter.add_feature({lacking!r}, "
                f"allow_protocol_versions_increase=True)")
        changed = {k: v for k, v in (self.configuration or {}).items() if snapshot.configuration.get(k) != v}
        if changed:
            raise InvalidArgumentError(
                f"configuration {changed} differs from table {table.uri.table_path}'s; table properties are set "
                f"when the table is created")
        if self.schema_mode == "merge":
            return self._plan_merge(table, data_schema)
        # Nullable data columns the data lacks are written as nulls, as Delta does; a missing partition
        # column or NOT NULL column is a difference.
        computed = rules_of(snapshot.protocol, snapshot.metadata).computed_columns
        absent = [f for f in snapshot.schema if f.name not in data_schema.names
                  and ((f.nullable and f.name not in existing) or f.name in computed)]
        relaxed = pa.schema([f.with_nullable(True) for f in snapshot.schema if f not in absent])
        differences = schema_diff(relaxed, data_schema)
        if differences:
            raise SchemaMismatchError(differences, table=table.uri.table_path)
        return WritePlan(snapshot.schema, existing, False, layout=snapshot.layout, fill_missing=bool(absent))

    def _plan_merge(self, table: TableView, data_schema: pa.Schema) -> WritePlan:
        assert table.snapshot is not None
        return schema_merge_plan(table.snapshot, data_schema)

    def _plan_replace(self, table: TableView, data_schema: pa.Schema) -> WritePlan:
        """``schema_mode="overwrite"`` with ``mode="overwrite"``: the data's schema (and ``partition_by``, or
        the table's partition columns) replace the table's (Delta's ``overwriteSchema``)."""
        snapshot = table.snapshot
        assert snapshot is not None
        where = table.uri.table_path
        check_column_names(data_schema, table=where)
        partitions = self.partition_by if self.partition_by is not None else tuple(snapshot.partition_columns)
        missing = [c for c in partitions if c not in data_schema.names]
        if missing:
            raise SchemaMismatchError([f"partition column {c!r} is missing from the data; pass partition_by= to "
                                       f"change the partitioning" for c in missing], table=where)
        schema = delta_to_arrow(arrow_to_delta(data_schema))
        metadata = _with_schema(snapshot.metadata.model_copy(update={"partition_columns": list(partitions)}),
                                arrow_to_delta(schema), mapped=snapshot.layout.mapped)
        return WritePlan(schema, tuple(partitions), False, metadata=metadata, layout=_layout(snapshot.protocol, metadata),
                         protocol=upgraded_protocol(snapshot.protocol, metadata.schema_string, metadata.configuration))

    def _plan_create(self, table: TableView, data_schema: pa.Schema) -> WritePlan:
        where = table.uri.table_path
        check_column_names(data_schema, table=where)
        partitions = self.partition_by or ()
        missing = [c for c in partitions if c not in data_schema.names]
        if missing:
            raise SchemaMismatchError([f"partition column {c!r} is missing from the data" for c in missing], table=where)
        if len(partitions) == len(data_schema.names):
            raise InvalidArgumentError(f"cannot partition table {where} by every column {list(partitions)}: Delta "
                                       f"tables need at least one column that is not a partition column")
        schema = delta_to_arrow(arrow_to_delta(data_schema))
        for column in partitions:
            field = schema.field(column)
            if pa.types.is_nested(field.type):
                raise UnsupportedTypeError(column, field.type, cast_to="a primitive type (partition columns cannot "
                                                                       "be nested)")
        table.location.check_not_nested()
        columns = properties.stats_columns(self.configuration or {})
        if columns is not None:
            check_stats_columns(columns, schema, partitions, table=where)
        protocol, metadata = _create_actions(schema, partitions, self.configuration,
                                             field_metadata=rule_metadata(data_schema))
        if self.features:
            protocol = with_features(protocol, list(self.features), allow_versions_increase=True,
                                     table=where) or protocol
        domains: tuple[DomainMetadata, ...] = ()
        if self.cluster_by:
            clustering.check_columns(self.cluster_by, schema, partitions, table=where,
                                     num_indexed_cols=properties.num_indexed_cols(self.configuration or {}),
                                     stats_columns=columns)
            protocol = clustering.with_clustering(protocol)
            domains = (clustering.domain_for(self.cluster_by, _layout(protocol, metadata)),)
        return WritePlan(schema, tuple(partitions), True, metadata=metadata, protocol=protocol,
                         layout=_layout(protocol, metadata), domains=domains)

    # --- 3. the commit ----------------------------------------------------------------------------

    def commit_for(self, table: TableView, plan: WritePlan, adds: Sequence[AddFile], *,
                   operation_metrics: Mapping[str, str], engine_info: str) -> Commit:
        """The commit of the staged files ``adds``; ``operation_metrics`` gain ``numRemovedFiles`` and
        ``numRemovedBytes``."""
        snapshot = table.snapshot
        removes: list[RemoveFile] = []
        if plan.creating or snapshot is None:
            created = (plan.protocol, plan.metadata) if plan.metadata is not None and plan.protocol is not None \
                else _create_actions(plan.schema, plan.partition_by, self.configuration)
            actions: list[Action] = [*created, *plan.domains, *adds]
            scope = ReadScope.blind_append() if self.mode == "append" else ReadScope.whole_table()
        elif self.mode != "overwrite":
            actions, scope = list(adds), ReadScope.blind_append()
        else:
            now = int(time.time() * 1000)
            if self.partition_overwrite == "dynamic" and snapshot.partition_columns:
                types = {snapshot.layout.physical_name(c): arrow_type_to_delta(snapshot.schema.field(c).type, column=c)
                         for c in snapshot.partition_columns}
                touched = {partition_key(a.partition_values, types) for a in adds}
                removes = [f.remove(deletion_timestamp=now) for f in snapshot.files
                           if partition_key(f.partition_values, types) in touched]
                scope = ReadScope.of_partitions([{c: a.partition_values.get(c) for c in types} for a in adds])
            else:
                removes = [f.remove(deletion_timestamp=now) for f in snapshot.files]
                scope = ReadScope.whole_table()
            actions = [*removes, *adds]
        if plan.metadata is not None and not plan.creating and snapshot is not None:
            changes: list[Action] = [*([plan.protocol] if plan.protocol is not None else []), plan.metadata]
            actions = [*changes, *actions]
            if self.schema_mode == "overwrite":
                scope = ReadScope.whole_table()
        parameters = {"mode": _SPARK_MODE[self.mode], "partitionBy": json.dumps(list(plan.partition_by))}
        if plan.domains:
            parameters["clusterBy"] = json.dumps(list(self.cluster_by))
        if self.schema_mode == "merge":
            parameters["canMergeSchema"] = "true"
        elif self.schema_mode == "overwrite":
            parameters["canOverwriteSchema"] = "true"
        if self.mode == "overwrite" and self.partition_overwrite == "dynamic":
            parameters["partitionOverwriteMode"] = "DYNAMIC"
        metrics = {**operation_metrics, "numRemovedFiles": str(len(removes)),
                   "numRemovedBytes": str(sum(r.size or 0 for r in removes))}
        operation = "WRITE"  # Delta writers name every batch write WRITE, the one creating the table included
        if self.streaming is not None:
            operation = "STREAMING UPDATE"
            parameters = {"outputMode": self.streaming.output_mode, "queryId": self.streaming.query_id,
                          "epochId": str(self.streaming.epoch_id)}
        return Commit(actions=tuple(actions), operation=operation, read_scope=scope, operation_parameters=parameters,
                      operation_metrics=metrics, app_id=self.app_id, app_version=self.app_version,
                      engine_info=engine_info, user_metadata=self.user_metadata, on_existing=_ON_EXISTING[self.mode])


def _choice(name: str, value: object, allowed: Sequence[str]) -> None:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a string, one of {', '.join(allowed)}; got {type(value).__name__}")
    if value not in allowed:
        raise InvalidArgumentError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _create_actions(schema: pa.Schema, partition_by: Sequence[str], configuration: Mapping[str, str] | None, *,
                    field_metadata: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[Protocol, Metadata]:
    """``protocol`` (reader 1 / writer 2, or 3/7 with the features the schema needs, plus ``appendOnly``
    when it is set) and ``metaData`` of a new table (with column mapping: every field's id and physical
    name, and ``delta.columnMapping.maxColumnId``). ``field_metadata``: Delta column metadata per top-level
    column (generation expressions, identity, invariants: :func:`rule_metadata`)."""
    config = dict(configuration or {})
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=schema_string(schema), partition_columns=list(partition_by),
                        configuration=config, created_time=int(time.time() * 1000))
    delta = arrow_to_delta(schema)
    for field in delta["fields"]:
        field["metadata"] = {**field.get("metadata", {}), **(field_metadata or {}).get(field["name"], {})}
    metadata = _with_schema(metadata, delta, mapped=(config.get(MODE) or "none") in ("name", "id"))
    return minimal_protocol(metadata.schema_string, metadata.configuration), metadata


_RULE_KEYS = ("delta.generationExpression", "delta.identity.", "delta.invariants")


def rule_metadata(schema: pa.Schema) -> dict[str, dict[str, Any]]:
    """The Delta column metadata that sets rules on rows (``delta.generationExpression``, ``delta.identity.*``,
    ``delta.invariants``) found in the Arrow field metadata of ``schema``, per top-level column: how a table
    is created with generated or identity columns, as deltalake's ``DeltaTable.create`` takes them. Identity
    numbers and flags are stored as JSON numbers and booleans, as Delta writes them."""
    found: dict[str, dict[str, Any]] = {}
    for field in schema:
        for raw_key, raw_value in (field.metadata or {}).items():
            key, value = raw_key.decode(), raw_value.decode()
            if not key.startswith(_RULE_KEYS):
                continue
            typed: Any = value
            if key.startswith("delta.identity."):
                typed = value.lower() == "true" if value.lower() in ("true", "false") else int(value)
            found.setdefault(field.name, {})[key] = typed
    return found


def schema_merge_plan(snapshot: Snapshot, data_schema: pa.Schema) -> WritePlan:
    """How rows with ``data_schema`` are written to the table with its schema evolved to hold them (Delta's
    ``mergeSchema``: new columns nullable at the end, nested struct fields too, ``byte``/``short``/``integer``
    widened, and with ``delta.enableTypeWidening`` the widenings Delta applies automatically, recorded in
    ``delta.typeChanges``; with column mapping, new columns get ids and physical names; the protocol raised as the new
    schema needs). The rule of ``schema_mode="merge"`` writes and of MERGE's ``merge_schema``."""
    check_column_names(data_schema, table=snapshot.table_path)
    merged, changes = evolve_schema(snapshot.metadata.schema_string, data_schema, table=snapshot.table_path,
                                    type_widening=properties.type_widening(snapshot.metadata.configuration))
    if not changes:
        return WritePlan(snapshot.schema, tuple(snapshot.partition_columns), False, fill_missing=True,
                         layout=snapshot.layout)
    merged = type_widening.recorded(snapshot.protocol, snapshot.metadata.schema_string, merged)
    metadata = _with_schema(snapshot.metadata, merged, mapped=snapshot.layout.mapped)
    return WritePlan(delta_to_arrow(metadata.schema_string), tuple(snapshot.partition_columns), False,
                     metadata=metadata, fill_missing=True, layout=_layout(snapshot.protocol, metadata),
                     protocol=upgraded_protocol(snapshot.protocol, metadata.schema_string, metadata.configuration))


def _with_schema(metadata: Metadata, schema: Mapping[str, Any], *, mapped: bool) -> Metadata:
    """``metadata`` with ``schema`` (a Delta struct); on a table with column mapping, new fields get their
    ids and physical names and ``delta.columnMapping.maxColumnId`` follows."""
    configuration = dict(metadata.configuration)
    if mapped:
        schema, top = assign(schema, max_column_id(configuration))
        configuration[MAX_ID] = str(top)
    return metadata.model_copy(update={"schema_string": json.dumps(schema, separators=(",", ":")),
                                       "configuration": configuration})


def _layout(protocol: Protocol, metadata: Metadata) -> Layout:
    return layout_of(metadata.schema_string, metadata.configuration, supported=column_mapping_supported(protocol)
                     or (metadata.configuration.get(MODE) or "none") in ("name", "id"))
