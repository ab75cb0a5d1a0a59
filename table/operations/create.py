"""Creating a table from a schema, with no data (deltalake's ``DeltaTable.create``): version 0 holds only
``protocol`` and ``metaData``.

The table is planned exactly as a first write plans it (:meth:`~table.data.writespec.WriteSpec.plan`):
the same checks of column names, partition and clustering columns and properties, the same protocol, and
Arrow field metadata read the same way (generation expressions, identity columns, invariants). What a
write cannot say is added to the ``metaData``: the table's ``name`` and ``description``.

``mode`` has deltalake's meaning on an existing table: ``error`` raises TableExistsError, ``ignore`` does
nothing, ``overwrite`` replaces it (``CREATE OR REPLACE TABLE``: new schema, partitioning and properties,
every file removed, the protocol never lowered), ``append`` is refused (there is nothing to append).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

import pyarrow as pa

from logstore import StorageOptions
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.data.jobcommit import engine_info
from table.data.writespec import CommitResult, WritePlan, WriteSpec
from table.errors import TableExistsError
from table.location import TableLocation
from table.log.actions import Action, Metadata
from table.log.commit import Commit, OnExisting, ReadScope
from table.log.outcome import SnapshotAfter
from table.log.protocol import merged_protocol
from table.log.writable import check_operation
from table.transaction import Transaction, snapshot_for_write

__all__ = ["create_table"]

_ON_EXISTING = {"error": OnExisting.FAIL, "append": OnExisting.FAIL, "ignore": OnExisting.SKIP,
                "overwrite": OnExisting.CONFLICT}
_SPARK_MODE = {"error": "ErrorIfExists", "append": "Append", "ignore": "Ignore", "overwrite": "Overwrite"}


def create_table(table_uri: str, schema: object, *, mode: str = "error", partition_by: Sequence[str] | None = None,
                 name: str | None = None, description: str | None = None,
                 configuration: Mapping[str, str] | None = None,
                 storage_options: dict[str, str] | StorageOptions | None = None,
                 cluster_by: Sequence[str] | None = None, user_metadata: str | None = None) -> CommitResult:
    """Create the table at ``table_uri`` with ``schema`` (a pyarrow schema, or any object exporting one
    through the Arrow PyCapsule interface) and no data: one commit of ``protocol`` and ``metaData`` (module
    docstring). Returns the version committed (``skipped`` for ``mode="ignore"`` on an existing table).
    ``partition_by``, ``configuration``, ``cluster_by`` as for :func:`~table.data.write.write_table`;
    ``name`` and ``description`` go into ``metaData``."""
    arrow_schema = _arrow_schema(schema)
    for argument, value in (("name", name), ("description", description)):
        if value is not None and not isinstance(value, str):
            raise ArgumentTypeError(f"{argument} must be a string, got {type(value).__name__} {value!r}")
    if not isinstance(table_uri, str):
        raise ArgumentTypeError(f"table_uri must be a string, got {type(table_uri).__name__}")
    spec = WriteSpec.of(mode="error", partition_by=partition_by, configuration=configuration,
                        user_metadata=user_metadata, cluster_by=cluster_by)
    if mode not in _ON_EXISTING:
        raise InvalidArgumentError(f"mode must be one of {', '.join(_ON_EXISTING)}, got {mode!r}")
    location = TableLocation.open(table_uri, storage_options)
    txn = Transaction(location, snapshot_for_write(location))
    snapshot = txn.snapshot
    where = location.uri.table_path
    if snapshot is not None:
        if mode == "error":
            raise TableExistsError(f"a table already exists at {where} (version {snapshot.version}); nothing was "
                                   f"created. Use mode='ignore' to keep it or mode='overwrite' to replace it")
        if mode == "append":
            raise InvalidArgumentError(f"mode='append' cannot create a table at {where}: one exists (version "
                                       f"{snapshot.version}) and a create has no data to append; use "
                                       f"mode='ignore' to keep it or mode='overwrite' to replace it")
        if mode == "ignore":
            return CommitResult.of(snapshot.version, {"skipped": "true"}, operation="CREATE TABLE", snapshot=snapshot)
    # Planned as the first write of a new table is, whether or not one exists (an overwrite replaces it).
    plan = spec.plan(Transaction(location, None), arrow_schema)
    assert plan.metadata is not None and plan.protocol is not None
    metadata = plan.metadata.model_copy(update={"name": name, "description": description})
    commit = _commit(spec, plan, metadata, txn, mode)
    outcome = txn.commit(commit)
    after = SnapshotAfter.of(txn.log_store, outcome)
    if not outcome.committed:
        return CommitResult.of(outcome.version, {"skipped": "true"}, operation="CREATE TABLE", snapshot=after)
    return CommitResult.of(outcome.version, {"numAttempts": str(outcome.attempts)}, operation="CREATE TABLE",
                           snapshot=after)


def _commit(spec: WriteSpec, plan: WritePlan, metadata: Metadata, txn: Transaction, mode: str) -> Commit:
    snapshot = txn.snapshot
    protocol = plan.protocol
    assert protocol is not None
    actions: list[Action] = []
    operation = "CREATE TABLE"
    metrics: dict[str, str] = {}
    if snapshot is not None:  # mode="overwrite": CREATE OR REPLACE
        operation = "CREATE OR REPLACE TABLE"
        protocol = merged_protocol(snapshot.protocol, protocol)  # never lowered: older versions stay readable
        check_operation(snapshot, "the replace", table=snapshot.table_path, removes_data=True,
                        protocol=protocol, metadata=metadata)
        now = int(time.time() * 1000)
        actions = [f.remove(deletion_timestamp=now) for f in snapshot.files]
        metrics = {"numRemovedFiles": str(len(actions)), "numRemovedBytes": str(sum(r.size or 0 for r in actions))}
        if protocol == snapshot.protocol:
            protocol = None
    parameters = {"mode": _SPARK_MODE[mode], "isManaged": "false",
                  "partitionBy": json.dumps(list(plan.partition_by)),
                  "properties": json.dumps(dict(metadata.configuration))}
    if metadata.description is not None:
        parameters["description"] = metadata.description
    if plan.domains:
        parameters["clusterBy"] = json.dumps(list(spec.cluster_by))
    head: list[Action] = [*([protocol] if protocol is not None else []), metadata, *plan.domains]
    return Commit(actions=(*head, *actions), operation=operation, read_scope=ReadScope.whole_table(),
                  operation_parameters=parameters, operation_metrics=metrics, engine_info=engine_info(),
                  user_metadata=spec.user_metadata, on_existing=_ON_EXISTING[mode])


def _arrow_schema(schema: object) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    if hasattr(schema, "__arrow_c_schema__"):  # deltalake's Schema, arro3, polars ... (the PyCapsule interface)
        try:
            return pa.schema(schema)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise ArgumentTypeError(f"schema could not be read as an Arrow schema: {exc}") from None
    raise ArgumentTypeError(f"schema must be a pyarrow schema (pa.schema([...])), got {type(schema).__name__}")
