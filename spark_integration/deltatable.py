"""``DynacommitTable``: delta-spark's ``DeltaTable`` names for a dynacommit table, its row-level changes
distributed over Spark.

A thin facade: each method forwards to :mod:`spark_integration.dml` (the operations, planned on the
driver, joined and rewritten in Spark tasks, committed once through the table's transaction path) or to
the reads and the history every other path uses. It works from a classic session and from a Spark Connect
client alike; the commit is made by the calling process, as ``write_dataframe``'s is.

Where delta-spark returns nothing from ``delete``/``update`` or a metrics DataFrame from
``merge(...).execute()``, these return the commit's :class:`~table.data.writespec.CommitResult`
(version and Delta's metrics, typed as the Python API's: :mod:`table.operations.metrics`).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from logstore import StorageOptions
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from spark_integration import vacuum as vacuum_op
from spark_integration.dml import delete as delete_op
from spark_integration.dml import merge as merge_op
from spark_integration.dml import update as update_op
from spark_integration.dml.common import setting_items
from spark_integration.session import executor_python
from spark_integration.optimize import DynacommitOptimizeBuilder
from spark_integration.read import read_dataframe
from table.data.writespec import CommitResult
from table.maintenance.vacuum import RETENTION_CHECK_CONF, VacuumReport
from table.operations.merge import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, Clause, add_clause
from table.operations.optimize import DEFAULT_TARGET_SIZE
from table.table import Table

__all__ = ["DETAIL_SCHEMA", "RESTORE_SCHEMA", "DynacommitMergeBuilder", "DynacommitOptimizeBuilder", "DynacommitTable", "HISTORY_SCHEMA"]

_JOB = StructType([StructField(n, StringType()) for n in ("jobId", "jobName", "jobRunId", "runId", "jobOwnerId",
                                                           "triggerType")])
HISTORY_SCHEMA = StructType([
    StructField("version", LongType()), StructField("timestamp", TimestampType()),
    StructField("userId", StringType()), StructField("userName", StringType()),
    StructField("operation", StringType()), StructField("operationParameters", MapType(StringType(), StringType())),
    StructField("job", _JOB), StructField("notebook", StructType([StructField("notebookId", StringType())])),
    StructField("clusterId", StringType()), StructField("readVersion", LongType()),
    StructField("isolationLevel", StringType()), StructField("isBlindAppend", BooleanType()),
    StructField("operationMetrics", MapType(StringType(), StringType())), StructField("userMetadata", StringType()),
    StructField("engineInfo", StringType()),
])
_RESTORE_METRICS = ("tableSizeAfterRestore", "numOfFilesAfterRestore", "numRemovedFiles", "numRestoredFiles",
                    "removedFilesSize", "restoredFilesSize")
RESTORE_SCHEMA = StructType([StructField(name, LongType()) for name in (
    "table_size_after_restore", "num_of_files_after_restore", "num_removed_files", "num_restored_files",
    "removed_files_size", "restored_files_size")])
"""The columns of the DataFrame delta-spark's ``restoreToVersion`` returns."""
DETAIL_SCHEMA = StructType([
    StructField("format", StringType()), StructField("id", StringType()), StructField("name", StringType()),
    StructField("description", StringType()), StructField("location", StringType()),
    StructField("createdAt", TimestampType()), StructField("lastModified", TimestampType()),
    StructField("partitionColumns", ArrayType(StringType())), StructField("clusteringColumns", ArrayType(StringType())),
    StructField("numFiles", LongType()), StructField("sizeInBytes", LongType()),
    StructField("properties", MapType(StringType(), StringType())), StructField("minReaderVersion", IntegerType()),
    StructField("minWriterVersion", IntegerType()), StructField("tableFeatures", ArrayType(StringType())),
])
"""The columns of ``DESCRIBE DETAIL`` in delta-spark (:mod:`table.log.detail` computes them)."""
"""The columns of ``DESCRIBE HISTORY`` in delta-spark; those dynacommit does not record are null."""


class DynacommitTable:
    """A dynacommit table in a Spark session (delta-spark's ``DeltaTable``). Create it with :meth:`forPath`."""

    def __init__(self, spark: SparkSession, uri: str, options: StorageOptions, alias: str | None = None):
        executor_python(spark)
        self._spark = spark
        self._uri = uri
        self._options = options
        self._alias = alias

    @classmethod
    def forPath(cls, sparkSession: SparkSession, path: str,  # noqa: N802, N803 - delta-spark's names
                storage_options: dict[str, str] | StorageOptions | None = None) -> DynacommitTable:
        """The table at ``path`` (``s3://bucket/table``); TableNotFoundError when there is none. The
        storage options are resolved here (falling back to this process's environment) and reach the
        Spark tasks inside their pickled functions only, never as Spark options."""
        options = StorageOptions.resolve(storage_options)
        Table(path, storage_options=options)  # the table must exist
        return cls(sparkSession, path, options)

    @classmethod
    def isDeltaTable(cls, sparkSession: SparkSession, identifier: str,  # noqa: N802, N803 - delta-spark's names
                     storage_options: dict[str, str] | StorageOptions | None = None) -> bool:
        """Whether a Delta table is at the path ``identifier`` (delta-spark's ``DeltaTable.isDeltaTable``)."""
        return Table.is_deltatable(identifier, StorageOptions.resolve(storage_options))

    def detail(self) -> DataFrame:
        """One row describing the table, with delta-spark's ``DESCRIBE DETAIL`` columns (``DETAIL_SCHEMA``)."""
        record = self._table().detail()
        row = tuple(_instant(record[f.name]) if isinstance(f.dataType, TimestampType) and record[f.name] is not None
                    else record[f.name] for f in DETAIL_SCHEMA.fields)
        return self._spark.createDataFrame([row], DETAIL_SCHEMA)

    def changeColumnType(self, column: str, newType: Any) -> CommitResult:  # noqa: N802, N803 - delta-spark style
        """Widen ``column`` (a dotted path) to ``newType`` (a Spark DataType, a DDL name such as ``"bigint"``,
        or a Delta type name): what delta-spark does with ``ALTER TABLE ... ALTER COLUMN ... TYPE``, which
        Spark cannot route to a path-based table. Needs ``delta.enableTypeWidening=true``; the one rule of
        ``Table.alter.change_column_type``."""
        return self._table().alter.change_column_type(column, newType)

    def clusterBy(self, *cols: str) -> CommitResult:  # noqa: N802 - delta-spark's SQL CLUSTER BY
        """Change the table's liquid clustering columns (``ALTER TABLE ... CLUSTER BY``; no columns: ``CLUSTER
        BY NONE``); ``optimize().executeCompaction()`` then clusters by them. ``Table.alter.cluster_by``'s rule."""
        return self._table().alter.cluster_by(list(cols))

    def alias(self, aliasName: str) -> DynacommitTable:  # noqa: N803 - delta-spark's name
        """This table under ``aliasName``: conditions and values then name its columns ``aliasName.column``."""
        if not isinstance(aliasName, str) or not aliasName:
            raise ArgumentTypeError(f"the alias must be a non-empty string, got {aliasName!r}")
        return DynacommitTable(self._spark, self._uri, self._options, aliasName)

    def toDF(self) -> DataFrame:  # noqa: N802 - delta-spark's name
        """The table's rows at its newest version (under the alias, if any)."""
        frame = read_dataframe(self._spark, self._uri, storage_options=self._options)
        return frame.alias(self._alias) if self._alias else frame

    def delete(self, condition: Any = None) -> CommitResult:
        """Delete the rows where ``condition`` (Spark SQL text or a Column) is true; every row without one."""
        return delete_op.delete(self._spark, self._handle(), condition, alias=self._alias)

    def update(self, condition: Any = None, set: dict[str, Any] | None = None) -> CommitResult:  # noqa: A002
        """Set ``set`` (column -> Spark SQL text or Column) on the rows where ``condition`` is true (every row
        without one)."""
        return update_op.update(self._spark, self._handle(), condition, set, alias=self._alias)

    def updateExpr(self, condition_or_set: Any, set: dict[str, str] | None = None  # noqa: N802, A002 - delta-spark's
                   ) -> CommitResult:
        """delta-spark's Scala ``updateExpr``: ``updateExpr(set)`` sets ``set`` (column -> Spark SQL text) on
        every row, ``updateExpr(condition, set)`` on the rows where the SQL ``condition`` is true. The same
        UPDATE as :meth:`update`, whose values may also be Columns."""
        if set is None:
            return self.update(None, condition_or_set)
        return self.update(condition_or_set, set)

    def merge(self, source: DataFrame, condition: Any) -> DynacommitMergeBuilder:
        """Start a MERGE of ``source`` (alias it: ``source.alias("s")``) on ``condition``; add ``when*``
        clauses, then :meth:`DynacommitMergeBuilder.execute`."""
        if source is None:
            raise InvalidArgumentError("'source' in merge cannot be None")
        if condition is None:
            raise InvalidArgumentError("'condition' in merge cannot be None")
        return DynacommitMergeBuilder(self, source, condition)

    def history(self, limit: int | None = None) -> DataFrame:
        """The commits, newest first (``limit`` of them), with delta-spark's ``DESCRIBE HISTORY`` columns."""
        entries = self._table().history(limit)
        rows = [(e.version, None if e.timestamp is None else _instant(e.timestamp), None, None, e.operation,
                 _strings(e.operation_parameters), None, None, None, e.read_version, e.isolation_level,
                 e.is_blind_append, _strings(e.operation_metrics), e.user_metadata, e.engine_info) for e in entries]
        return self._spark.createDataFrame(rows, HISTORY_SCHEMA)

    # --- CHECK constraints (delta-spark offers them in SQL only: ALTER TABLE ... ADD / DROP CONSTRAINT) -------

    def addConstraint(self, name: str, expression: str) -> CommitResult:  # noqa: N802 - delta-spark's style
        """``ALTER TABLE ... ADD CONSTRAINT name CHECK (expression)``: every row the table holds is checked on
        the driver first (a violation raises ConstraintViolationError), then every write enforces it
        (``Table.alter.add_constraint``)."""
        return self._table().alter.add_constraint({name: expression})

    def dropConstraint(self, name: str, ifExists: bool = False) -> CommitResult:  # noqa: N802, N803
        """``ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name`` (``Table.alter.drop_constraint``)."""
        return self._table().alter.drop_constraint(name, raise_if_not_exists=not ifExists)

    def setColumnDefault(self, column: str, expression: str) -> CommitResult:  # noqa: N802 - delta-spark's style
        """``ALTER TABLE ... ALTER COLUMN column SET DEFAULT expression`` (``Table.alter.set_column_default``):
        rows written without the column then get its value, on every write path."""
        return self._table().alter.set_column_default(column, expression)

    def dropColumnDefault(self, column: str) -> CommitResult:  # noqa: N802 - delta-spark's style
        """``ALTER TABLE ... ALTER COLUMN column DROP DEFAULT`` (``Table.alter.drop_column_default``)."""
        return self._table().alter.drop_column_default(column)

    # --- RESTORE (table.operations.restore: a log-only operation, planned and committed here) --------------

    def restoreToVersion(self, version: int) -> DataFrame:  # noqa: N802 - delta-spark's name
        """Make the newest version hold what ``version`` held, in one commit (Delta's RESTORE). Returns
        delta-spark's one-row metrics DataFrame (``RESTORE_SCHEMA``)."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArgumentTypeError(f"restoreToVersion needs a version number, got {type(version).__name__}")
        return self._restored(self._table().restore(version))

    def restoreToTimestamp(self, timestamp: Any) -> DataFrame:  # noqa: N802 - delta-spark's name
        """RESTORE to the version the table was at ``timestamp`` (a ``datetime``, a date, or a string such as
        ``"2026-11-22 08:00:00"``, in UTC when it names no zone), by Delta's time travel rules."""
        return self._restored(self._table().restore(timestamp))

    def _restored(self, result: CommitResult) -> DataFrame:
        metrics = result.metrics
        row = tuple(int(metrics.get(name, "0")) for name in _RESTORE_METRICS)
        return self._spark.createDataFrame([row], RESTORE_SCHEMA)

    # --- CLONE (table.operations.clone: shallow or deep, committed here) ---------------------------------------

    def clone(self, target: str, isShallow: bool = True, replace: bool = False,  # noqa: N803 - delta-spark's names
              properties: dict[str, str] | None = None) -> DynacommitTable:
        """Clone the table's newest version to ``target`` (delta-spark's ``clone``); returns the clone. Shallow
        (the clone references this table's files) or, with ``isShallow=False``, deep (the files are copied,
        server-side on S3, by the driver's process)."""
        return self._clone(None, target, isShallow, replace, properties)

    def cloneAtVersion(self, version: int, target: str, isShallow: bool = True,  # noqa: N802, N803
                       replace: bool = False, properties: dict[str, str] | None = None) -> DynacommitTable:
        """:meth:`clone` of ``version``."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArgumentTypeError(f"cloneAtVersion needs a version number, got {type(version).__name__}")
        return self._clone(version, target, isShallow, replace, properties)

    def cloneAtTimestamp(self, timestamp: Any, target: str, isShallow: bool = True,  # noqa: N802, N803
                         replace: bool = False, properties: dict[str, str] | None = None) -> DynacommitTable:
        """:meth:`clone` of the version the table was at ``timestamp``, by Delta's time travel rules."""
        return self._clone(timestamp, target, isShallow, replace, properties)

    def _clone(self, version: Any, target: str, shallow: bool, replace: bool,
               properties: dict[str, str] | None) -> DynacommitTable:
        self._table().clone(target, version=version, replace=replace, properties=properties, shallow=shallow)
        return DynacommitTable(self._spark, target, self._options)

    # --- VACUUM on Spark (spark_integration.vacuum) --------------------------------------------------

    def vacuum(self, retentionHours: float | None = None) -> DataFrame:  # noqa: N803 - delta-spark's name
        """Delete the files the newest version does not need and that are older than ``retentionHours``
        (default: the table's ``delta.deletedFileRetentionDuration``, 7 days unless set), listing and
        deleting on the executors; the same files as ``Table.vacuum(dry_run=False)``. A retention under the
        table's is refused, as delta-spark's retention check does; as there, the session setting
        ``spark.databricks.delta.retentionDurationCheck.enabled=false`` turns the check off (and
        ``dynacommit vacuum --spark --force``). Returns the deleted files: ``path`` (relative to the table
        root), ``size``, ``modificationTime``."""
        check = self._spark.conf.get(RETENTION_CHECK_CONF, "true")
        report = self._vacuum(retention_hours=retentionHours, dry_run=False,
                              force=str(check).strip().lower() == "false")
        return vacuum_op.report_frame(self._spark, report)

    def _vacuum(self, *, retention_hours: float | None = None, dry_run: bool = True, force: bool = False,
                deletes_per_second: float | None = vacuum_op.S3_WRITES_PER_PREFIX,
                range_files: int = vacuum_op.RANGE_FILES) -> VacuumReport:
        return vacuum_op.vacuum_on_spark(self._spark, self._table(), retention_hours=retention_hours,
                                         dry_run=dry_run, force=force, deletes_per_second=deletes_per_second,
                                         range_files=range_files)

    # --- OPTIMIZE (spark_integration.optimize) ---------------------------------------------------------

    def optimize(self, *, target_size: int | None = None) -> DynacommitOptimizeBuilder:
        """Start an OPTIMIZE (delta-spark's ``DeltaTable.optimize()``): optionally ``.where(partitionFilter)``,
        then ``.executeCompaction()`` or ``.executeZOrderBy(*cols)``; bins are rewritten in Spark tasks and
        committed once (``dataChange=false``). ``target_size``: bytes a new file aims at (default 128 MiB)."""
        return DynacommitOptimizeBuilder(self._spark, self._table,
                                         target_size=DEFAULT_TARGET_SIZE if target_size is None else target_size)

    def __repr__(self) -> str:
        return f"DynacommitTable({self._uri!r}{'' if self._alias is None else f' AS {self._alias}'})"

    # --- internals ------------------------------------------------------------------------------------

    def _table(self) -> Table:
        return Table(self._uri, storage_options=self._options)

    def _handle(self) -> Table:
        """The table for a DELETE, UPDATE or MERGE: its log is read once, by the operation's first step."""
        return Table.unloaded(self._uri, storage_options=self._options)



class DynacommitMergeBuilder:
    """A MERGE being described (delta-spark's ``DeltaMergeBuilder``); each ``when*`` method returns the
    builder. Semantics: :mod:`spark_integration.dml.merge`."""

    def __init__(self, table: DynacommitTable, source: DataFrame, condition: Any):
        self._table = table
        self._source = source
        self._condition = condition
        self._clauses: list[Clause] = []
        self._schema_evolution = False

    def whenMatchedUpdate(self, condition: Any = None, set: dict[str, Any] | None = None  # noqa: N802, A002
                          ) -> DynacommitMergeBuilder:
        return self._add(MATCHED, "update", condition, tuple(setting_items(set, "'set' in whenMatchedUpdate")))

    def whenMatchedUpdateAll(self, condition: Any = None) -> DynacommitMergeBuilder:  # noqa: N802
        return self._add(MATCHED, "update", condition, None)

    def whenMatchedDelete(self, condition: Any = None) -> DynacommitMergeBuilder:  # noqa: N802
        return self._add(MATCHED, "delete", condition, ())

    def whenNotMatchedInsert(self, condition: Any = None, values: dict[str, Any] | None = None  # noqa: N802
                             ) -> DynacommitMergeBuilder:
        return self._add(NOT_MATCHED, "insert", condition,
                         tuple(setting_items(values, "'values' in whenNotMatchedInsert")))

    def whenNotMatchedInsertAll(self, condition: Any = None) -> DynacommitMergeBuilder:  # noqa: N802
        return self._add(NOT_MATCHED, "insert", condition, None)

    def whenNotMatchedBySourceUpdate(self, condition: Any = None, set: dict[str, Any] | None = None  # noqa: N802, A002
                                     ) -> DynacommitMergeBuilder:
        return self._add(NOT_MATCHED_BY_SOURCE, "update", condition,
                         tuple(setting_items(set, "'set' in whenNotMatchedBySourceUpdate")))

    def whenNotMatchedBySourceDelete(self, condition: Any = None) -> DynacommitMergeBuilder:  # noqa: N802
        return self._add(NOT_MATCHED_BY_SOURCE, "delete", condition, ())

    def withSchemaEvolution(self) -> DynacommitMergeBuilder:  # noqa: N802
        """Let ``*All`` clauses add the source's other columns to the table and widen integer columns."""
        self._schema_evolution = True
        return self

    def execute(self) -> CommitResult:
        """Run the MERGE as one commit; returns its version and Delta's metrics."""
        table = self._table
        return merge_op.merge(table._spark, table._handle(), self._source, self._condition, list(self._clauses),
                              target_alias=table._alias, schema_evolution=self._schema_evolution)

    def _add(self, kind: str, action: str, condition: Any, assignments: tuple | None) -> DynacommitMergeBuilder:
        add_clause(self._clauses, Clause(kind, action, condition, assignments))
        return self

    def __repr__(self) -> str:
        return f"DynacommitMergeBuilder({self._table!r}, {len(self._clauses)} clause(s))"


def _instant(millis: int):
    import datetime as dt

    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.timezone.utc)


def _strings(values: dict[str, Any]) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
