"""Compaction (``OPTIMIZE``): small files of a partition rewritten into bigger ones, in one commit that
changes no data.

Streaming and frequent small appends leave many small files; every read then pays a request per file.
:func:`optimize` plans **bins** (:func:`plan_compaction`): per partition, the files smaller than
``target_size``, packed (largest first) into groups of at most ``target_size`` bytes; a group of one file
is left alone. Each bin's rows are streamed into new files of the same partition through the staging
writer, and one commit replaces them: ``remove`` (``dataChange=false``) of every rewritten file and
``add`` (``dataChange=false``) of every new one. The job commit's rules apply (the new files become
visible only through the commit; a definite failure deletes them).

The commit reads exactly the files it rewrites (``ReadScope.of_files``), so by Delta's rules a
concurrent append never conflicts with it (not even into the same partition), and a concurrent removal
of a file it rewrites does: then it plans again on the newest version (as the row-level operations do,
``table.operations.rewrite``), until the deadline. Readers of the
change data (Delta's streaming source, ours) skip it: ``dataChange=false`` says the table's rows did not
change.

**Z-order** (``z_order=[columns]``, Delta's ``OPTIMIZE ... ZORDER BY``): each partition (of the
``partition`` given, or every one) is one bin holding all its files, whatever their size; its rows
(deletion vectors applied, column mapping resolved by the reader) are sorted by the Z-value of the
columns (:mod:`table.operations.zorder`) and cut into ``max(1, bytes // target_size)`` files of equal row
counts, as Delta sizes them. The commit is the same as a compaction's, with the columns recorded as
the ``zOrderBy`` operation parameter. A partition's rows are held in memory while they are sorted.

**Liquid clustering.** On a clustered table (:mod:`table.log.clustering`) an OPTIMIZE without ``z_order``
clusters instead of compacting: the files not yet clustered (no ``clusteringProvider``; with ``full=True``,
those we clustered too, as Delta's ``OPTIMIZE ... FULL`` after the clustering columns changed; another
implementation's clustered files are left alone, as PROTOCOL.md asks) are one bin, Z-ordered by
the clustering columns and cut as above, and every file it adds carries ``clusteringProvider`` =
``liquid``. Files already clustered are not rewritten again, so repeated runs cost only what arrived since.
``z_order`` on a clustered table is refused, as Delta refuses it.

**Where bins run.** One function rewrites one bin (:meth:`BinWork.rewrite`): in this process one bin
after another (the default), or one Spark task per bin (``spark_integration.optimize``, which passes its
own ``run_bins``); the plan, the commit and so the result are the same either way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from logstore import ObjectStore, TableUri
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table import progress
from table.data.files import filesystem_for
from table.data.pendingset import PendingSet
from table.data.read import fetched_windows, files_dataset
from table.data.staging import MIN_PART_SIZE, StagingWriter
from table.data.writer_settings import WriterSettings
from table.data.uploads import abort_pending
from table.data.writespec import CommitResult
from table.log import clustering, properties
from table.log.actions import AddFile
from table.log.column_mapping import Layout
from table.log.conflicts import partition_types
from table.log.schema import DeltaType, partition_key
from table.log.snapshot import Snapshot
from table.log.metrics import OptimizeMetrics
from table.operations.rewrite import Staged, execute
from table.operations.zorder import check_columns, zorder_sort
from table.transaction import Opens, TableView, Transaction, transaction_of


__all__ = ["DEFAULT_TARGET_SIZE", "Bin", "BinRunner", "BinWork", "FileSelector", "OptimizeReport", "optimize",
           "plan_bins", "plan_compaction", "plan_zorder"]

DEFAULT_TARGET_SIZE = 128 * 1024 * 1024
"""Bytes a compacted file aims at (Delta's ``OPTIMIZE`` aims at 1 GiB; smaller suits S3 readers better)."""


@dataclasses.dataclass(frozen=True)
class Bin:
    """Files of one partition rewritten together into (about) one file."""

    partition_values: Mapping[str, str | None]
    files: tuple[AddFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclasses.dataclass(frozen=True)
class OptimizeReport:
    """What :func:`optimize` did (or, in a dry run, would do)."""

    table: str
    version: int
    dry_run: bool
    target_size: int
    bins: tuple[Bin, ...]
    result: CommitResult | None = None
    z_order: tuple[str, ...] = ()

    @property
    def files_removed(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def bytes_rewritten(self) -> int:
        return sum(b.size for b in self.bins)

    @property
    def metrics(self) -> OptimizeMetrics:
        """The commit's typed metrics (:mod:`table.operations.metrics`); no files added or removed when nothing
        was committed (a dry run, or nothing to compact)."""
        if self.result is not None and isinstance(self.result.metrics, OptimizeMetrics):
            return self.result.metrics
        return OptimizeMetrics.of({"numAddedFiles": "0", "numRemovedFiles": "0"} if self.result is None
                                  else self.result.metrics)

    @property
    def files_added(self) -> int:
        return 0 if self.result is None else int(self.result.metrics.get("numAddedFiles", 0))

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "dryRun": self.dry_run, "targetSize": self.target_size,
                "bins": len(self.bins), "filesRemoved": self.files_removed, "filesAdded": self.files_added,
                "bytesRewritten": self.bytes_rewritten, "zOrderBy": list(self.z_order)}

    def __str__(self) -> str:
        verb = "would rewrite" if self.dry_run else "rewrote"
        done = "" if self.result is None else f" into {self.files_added} file(s), committed as version {self.version}"
        kind = f"file(s) Z-ordered by {', '.join(self.z_order)}" if self.z_order else "small file(s)"
        return (f"optimize {self.table}: {verb} {self.files_removed} {kind} ({self.bytes_rewritten} bytes) in "
                f"{len(self.bins)} bin(s){done}")


def plan_compaction(files: Sequence[AddFile], partition_columns: Sequence[str], *,
                    target_size: int = DEFAULT_TARGET_SIZE, layout: Layout | None = None,
                    types: Mapping[str, DeltaType] | None = None) -> list[Bin]:
    """The bins of the module docstring: per partition, files under ``target_size`` packed largest first
    into the fullest bin they fit (first fit decreasing), bins of two or more files only; and every file
    with a deletion vector, whatever its size: rewriting it purges the rows its vector deletes. ``layout``:
    the table's column mapping (partition values are keyed by physical names); ``types``: the partition
    columns' Delta types by those names, so that values are compared as values."""
    bins: list[Bin] = []
    chosen = [f for f in files if f.size < target_size or f.deletion_vector is not None]
    for values, candidates in _by_partition(chosen, partition_columns, layout, types):
        packed: list[list[AddFile]] = []
        totals: list[int] = []
        for add in sorted(candidates, key=lambda f: (-f.size, f.path)):
            for index, total in enumerate(totals):
                if total + add.size <= target_size:
                    packed[index].append(add)
                    totals[index] += add.size
                    break
            else:
                packed.append([add])
                totals.append(add.size)
        bins.extend(Bin(values, tuple(group)) for group in packed
                    if len(group) > 1 or group[0].deletion_vector is not None)
    return bins


def plan_zorder(files: Sequence[AddFile], partition_columns: Sequence[str], *, layout: Layout | None = None,
                types: Mapping[str, DeltaType] | None = None) -> list[Bin]:
    """Z-order's bins (module docstring): one per partition, all its files (by path), whatever their size."""
    return [Bin(values, tuple(sorted(group, key=lambda f: f.path)))
            for values, group in _by_partition(files, partition_columns, layout, types)]


def _by_partition(files: Sequence[AddFile], partition_columns: Sequence[str], layout: Layout | None,
                  types: Mapping[str, DeltaType] | None) -> list[tuple[dict[str, str | None], list[AddFile]]]:
    """``files`` grouped by partition (values compared as values of their types), in the order of the
    partition values as shown (logical column names)."""
    physical = {c: (layout.physical_name(c) if layout is not None else c) for c in partition_columns}
    by_partition: dict[tuple, list[AddFile]] = {}
    shown: dict[tuple, tuple] = {}
    for add in files:
        values = {physical[c]: add.partition_values.get(physical[c]) for c in partition_columns}
        key = partition_key(values, types or {p: "string" for p in values})
        by_partition.setdefault(key, []).append(add)
        shown.setdefault(key, tuple((c, values[physical[c]] or None) for c in partition_columns))
    ordered = sorted(by_partition.items(), key=lambda item: str(shown[item[0]]))
    return [(dict(shown[key]), group) for key, group in ordered]


@dataclasses.dataclass(frozen=True)
class BinWork:
    """What rewriting a bin needs besides the bin: the table's layout and the operation's settings. Plain
    data (picklable): a Spark task carries it to its executor."""

    table_path: str
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    layout: Layout
    settings: WriterSettings
    z_order: tuple[str, ...] = ()

    @property
    def target_size(self) -> int:
        return self.settings.target_file_size

    @classmethod
    def of(cls, snapshot: Snapshot, target_size: int, z_order: Sequence[str] = ()) -> BinWork:
        settings = WriterSettings.of(snapshot.configuration, target_file_size=target_size)
        return cls(snapshot.table_path, snapshot.schema, tuple(snapshot.partition_columns), snapshot.layout,
                   settings, tuple(z_order))

    def rewrite(self, bin_: Bin, *, objects: ObjectStore, filesystem: Any, job_id: str, task_id: int,
                attempt_id: int = 0) -> PendingSet:
        """Stage ``bin_``'s rows as new files of its partition, named for task ``task_id`` of ``job_id``
        (the bin's index in the plan): compacted as they stream by, or Z-ordered and cut into
        ``max(1, bytes // target_size)`` files. On any failure this writer's uploads are aborted."""
        uri = TableUri.parse(self.table_path)
        writer = StagingWriter(objects, uri, schema=self.schema, partition_by=list(self.partition_columns),
                               layout=self.layout, job_id=job_id, task_id=task_id, attempt_id=attempt_id,
                               settings=self.settings, max_open_files=1)
        with writer:
            dataset = files_dataset(uri, self.schema, self.partition_columns, bin_.files, filesystem,
                                    layout=self.layout)
            windows = fetched_windows(uri, dataset, bin_.files, objects)  # small files: one GET each
            if not self.z_order:
                for window in windows:
                    for batch in window.to_batches():
                        writer.write(pa.Table.from_batches([batch]))
                return writer.finish()
            rows = zorder_sort(pa.concat_tables([window.to_table() for window in windows]), self.z_order)
            pieces = max(1, bin_.size // self.target_size)
            step = max(1, math.ceil(rows.num_rows / pieces))
            for start in range(0, rows.num_rows, step):
                writer.write(rows.slice(start, step))
                writer.roll()
            return writer.finish()


FileSelector = Callable[[Snapshot, Sequence[AddFile]], Sequence[AddFile]]
"""Which of a snapshot's files an OPTIMIZE may rewrite (a predicate over partition values)."""

BinRunner = Callable[[Sequence[Bin], BinWork, str], Sequence[PendingSet]]
"""Runs :meth:`BinWork.rewrite` for every bin (bin ``i`` as task ``i`` of the job id given) and returns
their PendingSets; on failure nothing it staged may stay behind."""


def optimize(table: Transaction | Opens, *, target_size: int | None = None,
             partition: Mapping[str, str | None] | None = None, dry_run: bool = False,
             z_order: Sequence[str] | None = None, run_bins: BinRunner | None = None,
             select: FileSelector | None = None, predicate: Sequence[str] | None = None,
             full: bool = False) -> OptimizeReport:
    """Compact the small files of ``table`` (of one ``partition`` if given), or Z-order all its files by
    ``z_order``, in one commit; see the module docstring. A concurrent commit that removed a file being
    rewritten makes it plan again on the newest version (``table.operations.rewrite.execute``);
    CommitConflictError only when the deadline passes. ``run_bins``: where the bins are rewritten (in
    this process, one after another, by default); ``select``: which of the files (of ``partition``) to
    plan with (a Spark predicate over partition values), ``predicate`` how the log records it.
    ``target_size`` None: the table's ``delta.targetFileSize`` (at least S3's smallest part), else 128 MiB."""
    if target_size is not None and (isinstance(target_size, bool) or not isinstance(target_size, int)):
        raise ArgumentTypeError(f"target_size must be a number of bytes (int), got {target_size!r}")
    if target_size is not None and target_size < MIN_PART_SIZE:
        raise InvalidArgumentError(f"target_size must be at least {MIN_PART_SIZE} bytes (S3's smallest multipart "
                                   f"part), got {target_size}")
    table = transaction_of(table)
    snapshot = table.require("optimize")
    if target_size is None:
        target_size = max(MIN_PART_SIZE, properties.target_file_size(snapshot.configuration) or DEFAULT_TARGET_SIZE)
    _check_partition(snapshot, partition, table)
    if not isinstance(full, bool):
        raise ArgumentTypeError(f"full must be True or False, got {full!r}")
    clustered_by = _clustering_of(snapshot, z_order, table)
    columns: tuple[str, ...] = ()
    if z_order is not None:
        columns = tuple(check_columns(z_order, snapshot.schema, snapshot.partition_columns,
                                      num_indexed_cols=properties.num_indexed_cols(snapshot.configuration),
                                      stats_columns=properties.stats_columns(snapshot.configuration),
                                      table=table.uri.table_path))
    if dry_run:
        bins = plan_bins(snapshot, partition, target_size, columns or clustered_by, select,
                         cluster=bool(clustered_by), full=full)
        return OptimizeReport(table.uri.table_path, snapshot.version, True, target_size, tuple(bins),
                              z_order=columns or clustered_by)
    planned: list[OptimizeReport] = []
    described = list(predicate) if predicate is not None else [f"{k}={v}" for k, v in (partition or {}).items()]
    parameters = {"predicate": json.dumps(described),
                  "zOrderBy": json.dumps(list(columns), separators=(",", ":")), "targetSize": str(target_size)}
    if clustered_by:
        parameters.update({"clusterBy": json.dumps(list(clustered_by), separators=(",", ":")),
                           "isFull": str(full).lower()})
    runner = run_bins if run_bins is not None else _in_process(table)

    def stage(txn: Transaction, job_id: str) -> Staged:
        snapshot = txn.snapshot
        order = columns
        if clustered_by:  # the clustering may have changed since it was read: plan with the newest one
            order = _clustering_of(snapshot, z_order, table)
        if order:  # the schema may have changed since the columns were checked
            check_columns(order, snapshot.schema, snapshot.partition_columns,
                          num_indexed_cols=properties.num_indexed_cols(snapshot.configuration),
                          stats_columns=properties.stats_columns(snapshot.configuration),
                          table=table.uri.table_path)
        bins = plan_bins(snapshot, partition, target_size, order, select, cluster=bool(clustered_by), full=full)
        planned.append(OptimizeReport(table.uri.table_path, snapshot.version, False, target_size, tuple(bins),
                                      z_order=order))
        rewritten = [f for b in bins for f in b.files]
        txn.read_files([f.path for f in rewritten])  # exactly the files it rewrites
        if not bins:
            return Staged("OPTIMIZE", (), (), None, parameters, {})
        pending = tuple(runner(bins, BinWork.of(snapshot, target_size, order), job_id))
        now = int(time.time() * 1000)
        removes = tuple(f.remove(deletion_timestamp=now, data_change=False) for f in rewritten)
        return Staged("OPTIMIZE", removes, pending, None, parameters, {}, data_change=False,
                      stray_uploads_possible=run_bins is not None,
                      clustering_provider=clustering.PROVIDER if clustered_by else None)

    # the rewrite is bounded by the data, not the deadline; it changes no rows (dataChange=false)
    result = execute(table, "OPTIMIZE", stage, staging_timed=False, removes_data=False)
    report = planned[-1]
    if not report.bins:
        return report
    return dataclasses.replace(report, version=result.version, result=result)


def _clustering_of(snapshot: Snapshot, z_order: Sequence[str] | None, table: TableView) -> tuple[str, ...]:
    """The clustering columns OPTIMIZE clusters ``snapshot`` by (empty: not a clustered table); refuses
    ``z_order`` on a clustered table and clustering columns Z-order cannot sort by (nested fields)."""
    columns = clustering.columns_of(snapshot.state, snapshot.layout)
    if not columns:
        return ()
    if z_order is not None:
        raise InvalidArgumentError(f"table {table.uri.table_path} is clustered by {list(columns)}; Delta does not "
                                   f"Z-order a clustered table: run optimize() without z_order to cluster it (change "
                                   f"the columns with t.alter.cluster_by)")
    nested = [c for c in columns if "." in c]
    if nested:
        raise InvalidArgumentError(f"table {table.uri.table_path} is clustered by nested fields {nested}, which "
                                   f"dynacommit's OPTIMIZE cannot cluster by; cluster it with delta-spark")
    return columns


def _check_partition(snapshot: Snapshot, partition: Mapping[str, str | None] | None, table: TableView) -> None:
    if partition is None:
        return
    unknown = set(partition) - set(snapshot.partition_columns)
    if unknown:
        raise InvalidArgumentError(f"{sorted(unknown)} are not partition columns of {table.uri.table_path} "
                                   f"(it is partitioned by {snapshot.partition_columns})")


def plan_bins(snapshot: Snapshot, partition: Mapping[str, str | None] | None, target_size: int,
              z_order: Sequence[str] = (), select: FileSelector | None = None, *, cluster: bool = False,
              full: bool = False) -> list[Bin]:
    """The bins of ``snapshot`` (of ``partition`` only, if given, and of the files ``select`` keeps):
    clustering's with ``cluster`` (the files not clustered yet, and with ``full`` those this project
    clustered (another clustering implementation's files are left to it, as PROTOCOL.md asks): one bin
    Z-ordered by ``z_order``, the clustering columns), Z-order's if ``z_order`` names columns, compaction's
    otherwise. The one plan, wherever the bins then run."""
    files = snapshot.files
    types = partition_types(snapshot.metadata)
    if partition is not None:
        wanted = {snapshot.layout.physical_name(c): v for c, v in partition.items()}
        chosen = {name: types[name] for name in wanted}
        key = partition_key(wanted, chosen)
        files = [f for f in files if partition_key(f.partition_values, chosen) == key]
    if select is not None:
        files = select(snapshot, files)
    if cluster:
        # PROTOCOL.md: recluster only unclustered files and one's own; another implementation's stay its own
        unclustered = [f for f in files if f.clustering_provider is None or (full and f.clustering_provider ==
                                                                              clustering.PROVIDER)]
        return [Bin({}, tuple(sorted(unclustered, key=lambda f: f.path)))] if unclustered else []
    if z_order:
        return plan_zorder(files, snapshot.partition_columns, layout=snapshot.layout, types=types)
    return plan_compaction(files, snapshot.partition_columns, target_size=target_size, layout=snapshot.layout,
                           types=types)


def _in_process(table: TableView) -> BinRunner:
    """Rewrite the bins here, one after another; on failure abort what the finished bins staged."""
    def run(bins: Sequence[Bin], work: BinWork, job_id: str) -> list[PendingSet]:
        filesystem = filesystem_for(table.uri, table.storage_options)
        done: list[PendingSet] = []
        try:
            with progress.task("rewriting files", total=sum(len(b.files) for b in bins)) as task:
                for index, bin_ in enumerate(bins):
                    done.append(work.rewrite(bin_, objects=table.objects, filesystem=filesystem, job_id=job_id,
                                             task_id=index))
                    task.advance(len(bin_.files))
        except BaseException:
            abort_pending(table.objects, done)
            raise
        return done

    return run
