"""Identity values at job commit: the high-water marks a job moves, and its re-plan after a lost race.

Tasks hand out identity values above the table's high-water mark as they write (:mod:`table.data.rules`;
each task of a Spark job takes every ``slots``-th value from its own slot) and report, per column, the
first and last value they handed out (``PendingSet.identity``). The job commit
(``table.data.jobcommit.with_identity``) makes its commit carry them, as Delta does: a ``metaData`` action whose schema holds each identity column's new
``delta.identity.highWaterMark`` (the furthest value handed out, in the direction of the step).

Many writers append at once. Delta makes two identity writes conflict (both change the metadata); here
they all commit, and never hand out a value twice. The rule: when our commit loses its version to
commits that only moved high-water marks (``table.log.constraints.identity_only_change``; any other
change of the metadata or protocol still conflicts), the transaction calls the commit's ``replan`` (:meth:`IdentityJob._replan`)
with the newest snapshot. Every column whose values the winners reached is moved by a whole number of
steps to just above the winners' mark: each of our files is read back (the job completed it before its
first attempt, and no version references it), its identity column moved, written under a new name, and
the old object deleted; its statistics move with it. The commit's ``metaData`` is rebuilt on the newest
one with our new marks, and the attempt goes on. Values stay unique because every commit's values lie
above the marks of every commit before it, and a commit's mark covers all its values.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstore import ObjectStore, TableUri
from table.data.pendingset import PendingSet
from table.log.actions import Action, AddFile, Metadata
from table.log.commit import Commit
from table.log.constraints import Identity, TableRules, rules_of, with_high_water_marks

if TYPE_CHECKING:  # snapshots are only taken here
    from table.log.snapshot import Snapshot

__all__ = ["IdentityJob"]

log = logging.getLogger(__name__)


class IdentityJob:
    """The identity values one job handed out (``ranges``: per column, the lowest and highest) and the files
    that hold them; see the module docstring."""

    def __init__(self, objects: ObjectStore, uri: TableUri, rules: TableRules, pendingsets: Sequence[PendingSet],
                 physical: dict[str, str]):
        self.objects, self.uri = objects, uri
        self.columns: dict[str, Identity] = {i.column: i for i in rules.identity}
        self.physical = physical
        self.ranges: dict[str, tuple[int, int]] = {}
        for pending in pendingsets:
            for column, (first, last) in pending.identity.items():
                low, high = min(first, last), max(first, last)
                seen = self.ranges.get(column)
                self.ranges[column] = (low, high) if seen is None else (min(seen[0], low), max(seen[1], high))
        #: Objects written by re-plans and not superseded since: deleted with the job's files if it fails.
        self.written: list[str] = []

    def marks(self) -> dict[str, int]:
        """Each column's new high-water mark: the furthest value handed out in the direction of its step."""
        return {c: (high if self.columns[c].step > 0 else low) for c, (low, high) in self.ranges.items()}

    def commit_with_marks(self, commit: Commit, base: Metadata | None, *, replan: bool = True) -> Commit:
        """``commit`` with our marks in its ``metaData`` (added, on ``base``, when it has none); with
        ``replan``, it re-plans our values after a lost race instead of conflicting."""
        own = commit.metadata is not None
        marked = self._marked(commit, base)
        return dataclasses.replace(marked, replan=functools.partial(self._replan, own=own) if replan else None)

    def _marked(self, commit: Commit, base: Metadata | None, others: dict[str, int] | None = None) -> Commit:
        """``commit`` with our marks (and ``others``: the newest marks of columns we handed nothing out of)."""
        metadata = commit.metadata or base
        assert metadata is not None, "an identity column needs a table"
        marked = with_high_water_marks(metadata, {**(others or {}), **self.marks()})
        if commit.metadata is not None:
            return dataclasses.replace(commit, actions=tuple(marked if isinstance(a, Metadata) else a
                                                             for a in commit.actions))
        return dataclasses.replace(commit, actions=(marked, *commit.actions))

    def _replan(self, snapshot: Snapshot, commit: Commit, *, own: bool) -> Commit:
        """The transaction rebased ``commit`` onto ``snapshot``: move our values beyond its marks (module
        docstring) and carry the new marks on its metadata (ours when the job changes the metadata, else the
        snapshot's, whose other content the winners did not change)."""
        moves = self.shifts(snapshot)
        actions: Sequence[Action] = commit.actions
        if moves:
            log.info("identity values of a commit to %s moved by %s after a lost race; rewriting its files",
                     self.uri.table_path, moves)
            moved = self.rewrite([a for a in actions if isinstance(a, AddFile)], moves)
            actions = tuple(moved.get(a.path, a) if isinstance(a, AddFile) else a for a in actions)
            self.ranges = {c: (low + moves.get(c, 0), high + moves.get(c, 0)) for c, (low, high) in self.ranges.items()}
        if not own:
            actions = tuple(a for a in actions if not isinstance(a, Metadata))
        others = {i.column: i.high_water_mark for i in rules_of(snapshot.protocol, snapshot.metadata).identity
                  if i.high_water_mark is not None and i.column not in self.ranges}
        return self._marked(dataclasses.replace(commit, actions=tuple(actions)), snapshot.metadata, others)

    def shifts(self, snapshot: Snapshot) -> dict[str, int]:
        """How far each column's values must move to lie beyond the marks ``snapshot`` holds (0: not at all)."""
        theirs = {i.column: i for i in rules_of(snapshot.protocol, snapshot.metadata).identity}
        moves: dict[str, int] = {}
        for column, (low, high) in self.ranges.items():
            identity = theirs.get(column)
            if identity is None or identity.high_water_mark is None:
                continue
            free = identity.first_free()
            step = identity.step
            ours = low if step > 0 else high
            if (step > 0 and ours >= free) or (step < 0 and ours <= free):
                continue
            moves[column] = free - ours  # a whole number of steps: both lie on start + k * step
        return moves

    def rewrite(self, adds: Sequence[AddFile], moves: dict[str, int]) -> dict[str, AddFile]:
        """Every file of ``adds`` written again with its identity columns moved; old path -> new add."""
        out: dict[str, AddFile] = {}
        for add in adds:
            out[add.path] = self._rewrite_one(add, moves)
        return out

    def _rewrite_one(self, add: AddFile, moves: dict[str, int]) -> AddFile:
        old_key = self.uri.key(unquote(add.path))
        body = self.objects.get(old_key)
        parquet = pq.ParquetFile(io.BytesIO(body))
        table = parquet.read()
        compression = parquet.metadata.row_group(0).column(0).compression if parquet.metadata.num_row_groups else "SNAPPY"
        stats = json.loads(add.stats) if add.stats else {}
        for column, move in moves.items():
            name = self.physical.get(column, column)
            if name not in table.column_names:
                continue
            index = table.column_names.index(name)
            moved = pc.add(table.column(index), pa.scalar(move, table.schema.field(index).type))
            table = table.set_column(index, table.schema.field(index), moved)
            for bound in ("minValues", "maxValues"):
                values = stats.get(bound)
                if isinstance(values, dict) and isinstance(values.get(name), int):
                    values[name] += move
        sink = io.BytesIO()
        pq.write_table(table, sink, compression=str(compression).lower())
        directory, _, name = add.path.rpartition("/")
        parts = name.split("-")
        new_name = "-".join([*parts[:2], f"r{uuid.uuid4().hex[:12]}", *parts[2:]]) if len(parts) > 2 else \
            f"r{uuid.uuid4().hex[:12]}-{name}"
        new_path = f"{directory}/{new_name}" if directory else new_name
        new_key = self.uri.key(unquote(new_path))
        self.objects.put(new_key, sink.getvalue())
        self.written.append(new_key)
        if old_key in self.written:
            self.written.remove(old_key)
        self.objects.delete([old_key])
        return add.model_copy(update={"path": new_path, "size": len(sink.getvalue()),
                                      "stats": json.dumps(stats, separators=(",", ":")) if add.stats else add.stats})
