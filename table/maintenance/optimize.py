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
of a file it rewrites does (``CommitConflictError``, nothing committed: run it again). Readers of the
change data (Delta's streaming source, ours) skip it: ``dataChange=false`` says the table's rows did not
change.
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
from table import progress
from table.data.files import filesystem_for
from table.data.jobcommit import commit_files, engine_info
from table.data.read import files_dataset
from table.data.staging import MIN_PART_SIZE, StagingWriter
from table.data.writespec import CommitResult
from table.log import properties
from table.log.actions import AddFile
from table.log.commit import Commit, ReadScope
from table.maintenance.common import newest_snapshot

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
        return 0 if self.result is None else int(self.result.metrics.get("numFiles", 0))

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
    into the fullest bin they fit (first fit decreasing), bins of two or more files only."""
    by_partition: dict[tuple, list[AddFile]] = {}
    for add in files:
        if add.size < target_size:
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
        bins.extend(Bin(dict(key), tuple(group)) for group in packed if len(group) > 1)
    return bins


def optimize(table: Table, *, target_size: int = DEFAULT_TARGET_SIZE,
             partition: Mapping[str, str | None] | None = None, dry_run: bool = False) -> OptimizeReport:
    """Compact the small files of ``table`` (of one ``partition`` if given) in one commit; see the module
    docstring. Raises CommitConflictError when a concurrent commit removed a file being rewritten."""
    if isinstance(target_size, bool) or not isinstance(target_size, int):
        raise ArgumentTypeError(f"target_size must be a number of bytes (int), got {target_size!r}")
    if target_size < MIN_PART_SIZE:
        raise InvalidArgumentError(f"target_size must be at least {MIN_PART_SIZE} bytes (S3's smallest multipart "
                                   f"part), got {target_size}")
    snapshot = newest_snapshot(table, "optimize")
    files = snapshot.files
    if partition is not None:
        unknown = set(partition) - set(snapshot.partition_columns)
        if unknown:
            raise InvalidArgumentError(f"{sorted(unknown)} are not partition columns of {table.uri.table_path} "
                                       f"(it is partitioned by {snapshot.partition_columns})")
        files = [f for f in files if all((f.partition_values.get(c) or None) == (v or None)
                                         for c, v in partition.items())]
    bins = plan_compaction(files, snapshot.partition_columns, target_size=target_size)
    report = OptimizeReport(table.uri.table_path, snapshot.version, dry_run, target_size, tuple(bins))
    if dry_run or not bins:
        return report
    job_id = str(uuid.uuid4())
    started = time.monotonic()
    pending = _rewrite(table, bins, job_id, target_size)
    rewritten = [f for b in bins for f in b.files]

    def build(adds: list[AddFile], metrics: dict[str, str]) -> Commit:
        now = int(time.time() * 1000)
        removes = [f.remove(deletion_timestamp=now, data_change=False) for f in rewritten]
        metrics = {**metrics, "numRemovedFiles": str(len(removes)),
                   "numRemovedBytes": str(sum(f.size for f in rewritten)), "numAddedFiles": str(len(adds))}
        return Commit(actions=(*removes, *(a.model_copy(update={"data_change": False}) for a in adds)),
                      operation="OPTIMIZE", read_scope=ReadScope.of_files([f.path for f in rewritten]),
                      operation_parameters={"predicate": json.dumps([f"{k}={v}" for k, v in (partition or {}).items()]),
                                            "targetSize": str(target_size)},
                      operation_metrics=metrics, engine_info=engine_info())

    result = commit_files(table, [pending], build, job_id=job_id, partition_by=snapshot.partition_columns,
                          engine_info=engine_info(), upload_seconds=time.monotonic() - started, sweep_strays=False)
    return dataclasses.replace(report, version=result.version, result=result)


def _rewrite(table: Table, bins: Sequence[Bin], job_id: str, target_size: int):
    """Stream every bin's rows into new staged files of its partition; the task's PendingSet."""
    snapshot = table.snapshot
    assert snapshot is not None
    filesystem = filesystem_for(table.uri, table.storage_options)
    writer = StagingWriter(table.objects, table.uri, schema=snapshot.schema, partition_by=snapshot.partition_columns,
                           job_id=job_id, task_id=0, target_file_size=target_size, max_open_files=1,
                           num_indexed_cols=properties.num_indexed_cols(snapshot.configuration))
    with writer, progress.task("rewriting small files", total=sum(len(b.files) for b in bins)) as task:
        for bin_ in bins:
            dataset = files_dataset(table.uri, snapshot.schema, snapshot.partition_columns, bin_.files, filesystem)
            for batch in dataset.to_batches():
                writer.write(pa.Table.from_batches([batch]))
            task.advance(len(bin_.files))
        return writer.finish()
