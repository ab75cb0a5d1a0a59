"""The sweep of orphan commit temp files (``ExternalLogStore.sweep_temp_files``, run by ``dynacommit recover``).

A writer killed between its PUT of the temp file and the end of its commit leaves the temp file behind:
``_delta_log/.tmp/{N:020d}.json.<uuid>`` (Delta's layout and ours) or ``_delta_log/_commit_<uuid>.json.tmp``
(delta-rs's). Only a temp file named by an *incomplete* entry is needed (it is that commit's content until
N.json exists); every other one can go. The S3 lifecycle rule on ``.tmp/`` (infra/s3-lifecycle.json,
30 days) is the backstop; the sweep removes them as soon as it is safe.

What is swept: a temp file older than the safety age (``older_than_seconds``, by its LastModified) that no
incomplete entry references. References are looked up with the entries a temp file can belong to: the
version in a Delta-layout name (one GetItem per distinct version) and, for delta-rs names, which carry no
version, the newest entry.

Why that is safe, and why the age:

* A temp file becomes needed only when its writer's conditional put of the entry names it, and writers
  send that put right after the PUT of the temp file. Our writers never send it later than their deadline
  (``DYNACOMMIT_TIMEOUT_SECONDS``, default 120 s; every request checks the deadline before it is sent,
  SDK retries included), so a temp file of ours older than the largest timeout in use never becomes
  referenced: nothing can start referencing it between the sweep's look-up and its delete. Delta and
  delta-rs writers have no such bound but put the entry milliseconds after the temp file; the default age
  of one hour covers any pause of such a writer between the two requests (a GC pause, a suspended VM)
  by orders of magnitude, and keeps the temp files of every commit in flight.
* A temp file a lost write kept and the next version's write named (``KeptTemp``) keeps the name of the
  version it was first written for: the version in its name is not the entry that names it. That entry is
  incomplete only while it is the newest (every writer finishes N before it claims N+1), and the newest
  entry is consulted for every name; and the whole transaction, every attempt of it, runs under one
  deadline, so the age argument above holds for it too.
* A temp file named by a complete entry is not needed: N.json exists, and every reader looks there first.
* An incomplete entry older than the newest one cannot name a delta-rs temp file: every writer finishes
  (or, delta-rs, repairs) the newest entry before it writes the next version.
* Even a wrong deletion could not lose an acknowledged commit of ours: a writer acknowledges only when
  N.json holds its bytes or its temp file is still there after the commit point (logstore/external.py).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore import failpoints
from logstore.errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    from logstore.external import CommitEntry, ExternalLogStore

DEFAULT_SWEEP_AGE_SECONDS = 3600.0

SWEEP_BEFORE_DELETE = failpoints.declare(
    "logstore.sweep.before_delete",
    "the temp sweep chose the orphan temp files (old enough, named by no incomplete entry); none is "
    "deleted yet: dying here changes nothing")
SWEEP_AFTER_DELETE = failpoints.declare(
    "logstore.sweep.after_delete",
    "the orphan temp files are deleted; every temp file an incomplete entry names is still there")

_JAVA_TEMP = re.compile(r"^\.tmp/(\d{20})\.json\.[^/]+$")


@dataclass(frozen=True)
class TempSweepReport:
    """What a sweep found, by name relative to ``_delta_log/``: ``deleted`` (or, with ``dry_run``, that would
    be), ``in_use`` (named by an incomplete entry: the content of a commit not yet written out) and
    ``too_young`` (newer than the safety age: possibly a commit in flight)."""

    deleted: tuple[str, ...]
    in_use: tuple[str, ...]
    too_young: tuple[str, ...]
    dry_run: bool
    older_than_seconds: float

    def __str__(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{verb} {len(self.deleted)} orphan temp file(s), kept {len(self.in_use)} in use by an "
                f"unfinished commit and {len(self.too_young)} younger than {self.older_than_seconds:g} s")


def check_age(older_than_seconds: object) -> float:
    if isinstance(older_than_seconds, bool) or not isinstance(older_than_seconds, (int, float)):
        raise ArgumentTypeError(f"older_than_seconds must be a number of seconds, got {older_than_seconds!r}")
    if not math.isfinite(older_than_seconds) or older_than_seconds < 0:
        raise InvalidArgumentError(
            f"older_than_seconds must be a finite number >= 0, got {older_than_seconds!r}; the default of "
            f"{DEFAULT_SWEEP_AGE_SECONDS:g} s keeps every commit in flight")
    return float(older_than_seconds)


def sweep_temp_files(store: ExternalLogStore, *, older_than_seconds: float, dry_run: bool) -> TempSweepReport:
    """See the module docstring; ``ExternalLogStore.sweep_temp_files`` is the public entry point."""
    age = check_age(older_than_seconds)
    cutoff_ms = (time.time() - age) * 1000
    old: list[str] = []
    too_young: list[str] = []
    for name, modified_ms in _temp_files(store):
        (old if modified_ms <= cutoff_ms else too_young).append(name)
    entries = _Entries(store)
    in_use = [name for name in old if _referenced(name, entries)]
    orphans = [name for name in old if name not in in_use]
    if orphans and not dry_run:
        failpoints.hit(SWEEP_BEFORE_DELETE)
        store.objects.delete([store.log_prefix + name for name in orphans])
        failpoints.hit(SWEEP_AFTER_DELETE)
    return TempSweepReport(tuple(orphans), tuple(in_use), tuple(too_young), dry_run, age)


def _temp_files(store: ExternalLogStore) -> Iterator[tuple[str, int]]:
    """(name relative to ``_delta_log/``, last modified ms) of every temp file, both layouts."""
    for prefix in (".tmp/", "_commit_"):
        for info in store.objects.list(store.log_prefix + prefix):
            name = info.key[len(store.log_prefix):]
            if prefix == ".tmp/" or name.endswith(".json.tmp"):
                yield name, info.last_modified_ms


class _Entries:
    """The entries a sweep consults, each read once: by version, and the newest."""

    def __init__(self, store: ExternalLogStore):
        self.store = store
        self._by_version: dict[int, CommitEntry | None] = {}
        self._newest: tuple[CommitEntry | None] | None = None

    def get(self, version: int) -> CommitEntry | None:
        if version not in self._by_version:
            self._by_version[version] = self.store._get_entry(version)
        return self._by_version[version]

    def newest(self) -> CommitEntry | None:
        if self._newest is None:
            self._newest = (self.store._latest_entry(),)
        return self._newest[0]


def _referenced(name: str, entries: _Entries) -> bool:
    match = _JAVA_TEMP.match(name)
    candidates = [entries.get(int(match.group(1)))] if match else []
    candidates.append(entries.newest())
    return any(e is not None and not e.complete and e.temp_path == name for e in candidates)
