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
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table import progress
from table.data.files import filesystem_for
from table.data.read import files_dataset
from table.data.staging import MIN_PART_SIZE, StagingWriter
from table.data.writespec import CommitResult
from table.log import properties
from table.log.actions import AddFile
from table.log.commit import ReadScope
from table.log.snapshot import Snapshot
from table.maintenance.common import newest_snapshot
from table.operations.rewrite import Staged, execute

if TYPE_CHECKING:  # the Table class uses these modules; they only take its instances
    from table.table import Table

__all__ = ["DEFAULT_TARGET_SIZE", "Bin", "OptimizeReport", "optimize", "plan_compaction"]

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

    @property
    def files_removed(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def bytes_rewritten(self) -> int:
        return sum(b.size for b in self.bins)

    @property
    def files_added(self) -> int:
        return 0 if self.result is None else int(self.result.metrics.get("numAddedFiles", 0))

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "dryRun": self.dry_run, "targetSize": self.target_size,
                "bins": len(self.bins), "filesRemoved": self.files_removed, "filesAdded": self.files_added,
                "bytesRewritten": self.bytes_rewritten}

    def __str__(self) -> str:
        verb = "would rewrite" if self.dry_run else "rewrote"
        done = "" if self.result is None else f" into {self.files_added} file(s), committed as version {self.version}"
        return (f"optimize {self.table}: {verb} {self.files_removed} small file(s) ({self.bytes_rewritten} bytes) in "
                f"{len(self.bins)} bin(s){done}")


def plan_compaction(files: Sequence[AddFile], partition_columns: Sequence[str], *,
                    target_size: int = DEFAULT_TARGET_SIZE) -> list[Bin]:
    """The bins of the module docstring: per partition, files under ``target_size`` packed largest first
    into the fullest bin they fit (first fit decreasing), bins of two or more files only; and every file
    with a deletion vector, whatever its size: rewriting it purges the rows its vector deletes."""
    by_partition: dict[tuple, list[AddFile]] = {}
    for add in files:
        if add.size < target_size or add.deletion_vector is not None:
            key = tuple((c, add.partition_values.get(c) or None) for c in partition_columns)
            by_partition.setdefault(key, []).append(add)
    bins: list[Bin] = []
    for key, candidates in sorted(by_partition.items(), key=lambda item: str(item[0])):
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
        bins.extend(Bin(dict(key), tuple(group)) for group in packed
                    if len(group) > 1 or group[0].deletion_vector is not None)
    return bins


def optimize(table: Table, *, target_size: int = DEFAULT_TARGET_SIZE,
             partition: Mapping[str, str | None] | None = None, dry_run: bool = False) -> OptimizeReport:
    """Compact the small files of ``table`` (of one ``partition`` if given) in one commit; see the module
    docstring. A concurrent commit that removed a file being rewritten makes it plan again on the newest
    version (``table.operations.rewrite.execute``); CommitConflictError only when the deadline passes."""
    if isinstance(target_size, bool) or not isinstance(target_size, int):
        raise ArgumentTypeError(f"target_size must be a number of bytes (int), got {target_size!r}")
    if target_size < MIN_PART_SIZE:
        raise InvalidArgumentError(f"target_size must be at least {MIN_PART_SIZE} bytes (S3's smallest multipart "
                                   f"part), got {target_size}")
    snapshot = newest_snapshot(table, "optimize")
    _check_partition(snapshot, partition, table)
    if dry_run:
        bins = _bins(snapshot, partition, target_size)
        return OptimizeReport(table.uri.table_path, snapshot.version, True, target_size, tuple(bins))
    planned: list[OptimizeReport] = []
    parameters = {"predicate": json.dumps([f"{k}={v}" for k, v in (partition or {}).items()]),
                  "targetSize": str(target_size)}

    def stage(snapshot: Snapshot, job_id: str) -> Staged:
        bins = _bins(snapshot, partition, target_size)
        planned.append(OptimizeReport(table.uri.table_path, snapshot.version, False, target_size, tuple(bins)))
        rewritten = [f for b in bins for f in b.files]
        read = ReadScope.of_files([f.path for f in rewritten])
        if not bins:
            return Staged("OPTIMIZE", (), (), read, parameters, {})
        pending = _rewrite(table, snapshot, bins, job_id, target_size)
        now = int(time.time() * 1000)
        removes = tuple(f.remove(deletion_timestamp=now, data_change=False) for f in rewritten)
        return Staged("OPTIMIZE", removes, (pending,), read, parameters, {}, data_change=False)

    result = execute(table, "OPTIMIZE", stage)
    report = planned[-1]
    if not report.bins:
        return report
    return dataclasses.replace(report, version=result.version, result=result)


def _check_partition(snapshot: Snapshot, partition: Mapping[str, str | None] | None, table: Table) -> None:
    if partition is None:
        return
    unknown = set(partition) - set(snapshot.partition_columns)
    if unknown:
        raise InvalidArgumentError(f"{sorted(unknown)} are not partition columns of {table.uri.table_path} "
                                   f"(it is partitioned by {snapshot.partition_columns})")


def _bins(snapshot: Snapshot, partition: Mapping[str, str | None] | None, target_size: int) -> list[Bin]:
    files = snapshot.files
    if partition is not None:
        files = [f for f in files if all((f.partition_values.get(c) or None) == (v or None)
                                         for c, v in partition.items())]
    return plan_compaction(files, snapshot.partition_columns, target_size=target_size)


def _rewrite(table: Table, snapshot: Snapshot, bins: Sequence[Bin], job_id: str, target_size: int):
    """Stream every bin's rows into new staged files of its partition; the task's PendingSet."""
    filesystem = filesystem_for(table.uri, table.storage_options)
    writer = StagingWriter(table.objects, table.uri, schema=snapshot.schema, partition_by=snapshot.partition_columns,
                           layout=snapshot.layout, job_id=job_id, task_id=0, target_file_size=target_size,
                           max_open_files=1,
                           num_indexed_cols=properties.num_indexed_cols(snapshot.configuration))
    with writer, progress.task("rewriting small files", total=sum(len(b.files) for b in bins)) as task:
        for bin_ in bins:
            dataset = files_dataset(table.uri, snapshot.schema, snapshot.partition_columns, bin_.files, filesystem,
                                    layout=snapshot.layout)
            for batch in dataset.to_batches():
                writer.write(pa.Table.from_batches([batch]))
            task.advance(len(bin_.files))
        return writer.finish()
