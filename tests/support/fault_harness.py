"""What the fault suites share: marker commits, worker processes, and the audit of a table after faults.

Every commit a suite makes carries ``ROWS_PER_COMMIT`` rows with one *marker* (``w2-0017``: writer and
sequence number), so the table itself says which commits landed, how often, and whether whole: a marker
found in two versions is a duplicated commit, a marker with fewer rows than its commit had is a torn one.

:func:`audit` is the fault-free reader: it reads the table straight from the local stack (never through
the fault proxy) with our reader and with ``deltalake``, lists the log and the DynamoDB items, and
returns what it found; :func:`judge` holds that against what the writers were told.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "support", "fault_worker.py")
ROWS_PER_COMMIT = 3
SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("row", pa.int64()), ("marker", pa.string())])

__all__ = [
    "ROOT",
    "ROWS_PER_COMMIT",
    "SCHEMA",
    "Audit",
    "CommitRecord",
    "Verdict",
    "audit",
    "child_env",
    "cli_command",
    "deltalake_options",
    "describe_error",
    "item_problems",
    "judge",
    "log_problems",
    "marker",
    "marker_counts",
    "marker_rows",
    "parse_records",
    "table_items",
    "worker_command",
]


# --- marker commits -------------------------------------------------------------------------------


def marker(writer: str, seq: int) -> str:
    return f"{writer}-{seq:04d}"


def marker_rows(writer: str, seq: int) -> pa.Table:
    name = marker(writer, seq)
    return pa.table({"writer": [writer] * ROWS_PER_COMMIT, "seq": [seq] * ROWS_PER_COMMIT,
                     "row": list(range(ROWS_PER_COMMIT)), "marker": [name] * ROWS_PER_COMMIT}, schema=SCHEMA)


def marker_counts(rows: pa.Table) -> Counter:
    """Rows per marker in a table read back."""
    return Counter(rows.column("marker").to_pylist())


def describe_error(exc: BaseException) -> dict:
    """What a worker reports about an error: enough to judge it without unpickling anything."""
    from logstore.errors import DynacommitError

    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "dynacommit": isinstance(exc, DynacommitError),
        "mro": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc)[:600],
    }


# --- processes --------------------------------------------------------------------------------------


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: this interpreter's, without ambient AWS settings or armed failpoints,
    with the repository on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("DYNACOMMIT_FAILPOINTS", "DELTA_DYNAMO_TABLE_NAME")}
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def worker_command(role: str, settings: Mapping) -> list[str]:
    return [sys.executable, WORKER, role, json.dumps(dict(settings))]


def cli_command(*args: str, options: Mapping[str, str]) -> list[str]:
    """``dynacommit ARGS`` as a child process, with the storage options as ``--option`` flags."""
    flags = [f"--option={k}={v}" for k, v in options.items()]
    return [sys.executable, "-m", "table.cli", *args, *flags]


@dataclasses.dataclass
class CommitRecord:
    """One commit a writer began: what it was told (``ok``/``version``/``error``), or nothing if it died
    first (``end`` None)."""

    writer: str
    seq: int
    marker: str
    begin: float
    end: float | None = None
    ok: bool | None = None
    version: int | None = None
    error: dict | None = None

    @property
    def error_type(self) -> str | None:
        return None if self.error is None else self.error["type"]


def parse_records(text: str) -> tuple[list[CommitRecord], bool]:
    """The commits in a writer's output, and whether it printed ``done``."""
    records: dict[str, CommitRecord] = {}
    done = False
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "begin":
            records[event["marker"]] = CommitRecord(event["writer"], event["seq"], event["marker"], event["at"])
        elif event["event"] == "end":
            record = records[event["marker"]]
            record.end, record.ok = event["at"], event["ok"]
            record.version, record.error = event.get("version"), event.get("error")
        elif event["event"] == "done":
            done = True
    return list(records.values()), done


# --- the audit --------------------------------------------------------------------------------------


def deltalake_options(storage_options: Mapping[str, str]) -> dict[str, str]:
    """Our storage options as current deltalake takes them (plain S3 reads; no DynamoDB)."""
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


@dataclasses.dataclass
class Audit:
    """What a fault-free reader found in a table (see :func:`audit`). ``errors`` lists what it could not do."""

    latest: int = -1
    listed: list[int] = dataclasses.field(default_factory=list)
    version_markers: dict[int, list[str]] = dataclasses.field(default_factory=dict)
    group_sizes: dict[int, int] = dataclasses.field(default_factory=dict)
    """Appends of each group commit (``commitInfo.groupCommit``: the leader and its members)."""
    live_markers: Counter = dataclasses.field(default_factory=Counter)  # marker -> live files of the snapshot
    row_counts: Counter = dataclasses.field(default_factory=Counter)
    missing_files: list[str] = dataclasses.field(default_factory=list)
    entry_problems: list[str] = dataclasses.field(default_factory=list)
    deltalake_version: int | None = None
    deltalake_counts: Counter | None = None
    errors: list[str] = dataclasses.field(default_factory=list)

    def marker_versions(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for version, markers in sorted(self.version_markers.items()):
            for name in markers:
                found.setdefault(name, []).append(version)
        return found

    def problems(self) -> list[str]:
        """Violations of the invariants every table must keep, whatever happened to its writers."""
        found = list(self.errors)
        if self.listed != list(range(self.latest + 1)):
            gaps = sorted(set(range(self.latest + 1)) - set(self.listed))
            extra = sorted(set(self.listed) - set(range(self.latest + 1)))
            found.append(f"versions not contiguous 0..{self.latest}: missing {gaps[:20]}, beyond the latest {extra[:20]}")
        for name, versions in self.marker_versions().items():
            if len(versions) > 1:
                found.append(f"commit {name} is in {len(versions)} versions {versions}")
        if not any(e.startswith("our reader failed to read") for e in self.errors):
            for name in set(self.live_markers) | set(self.row_counts):
                rows, files = self.row_counts.get(name, 0), self.live_markers.get(name, 0)
                if rows != ROWS_PER_COMMIT * files:
                    found.append(f"commit {name} has {rows} rows in the table, expected {ROWS_PER_COMMIT * files} "
                                 f"({files} live files)")
        for version, markers in self.version_markers.items():
            if len(markers) > self.group_sizes.get(version, 1):
                found.append(f"version {version} adds the files of {len(markers)} commits {markers}")
        found += [f"file referenced by the log is missing: {p}" for p in self.missing_files]
        found += self.entry_problems
        if self.deltalake_counts is not None:
            if self.deltalake_version != self.latest:
                found.append(f"deltalake reads version {self.deltalake_version}, we read {self.latest}")
            if self.deltalake_counts != self.row_counts:
                diff = (self.deltalake_counts - self.row_counts) + (self.row_counts - self.deltalake_counts)
                found.append(f"deltalake reads other rows than we do: {dict(list(diff.items())[:10])}")
        return found


def audit(uri: str, storage_options: Mapping[str, str], *, with_deltalake: bool = True) -> Audit:
    """Read the table at ``uri`` as a fault-free reader would, and everything needed to judge it.

    Our reader first (``Table``, which finishes an incomplete newest entry as any reader does), then the
    log version by version (the markers each version adds, from its files' stats), the live files (HEAD
    each), the DynamoDB items of the table (each complete, each with its ``N.json``), and ``deltalake``.
    """
    from logstore import open_log_store
    from table import Table
    from table.log.actions import AddFile, CommitInfo
    from table.log.group import group_txn_ids
    from table.log.snapshot import read_commit

    result = Audit()
    options = dict(storage_options)
    try:
        table = Table(uri, storage_options=options)
        result.latest = table.version
    except Exception as exc:  # noqa: BLE001 - the audit reports, the test judges
        result.errors.append(f"our reader failed to load the table: {type(exc).__name__}: {exc}")
        return result
    try:
        result.row_counts = marker_counts(table.to_pyarrow_table(columns=["marker"]))
    except Exception as exc:  # noqa: BLE001
        result.errors.append(f"our reader failed to read the rows: {type(exc).__name__}: {exc}")
    store = open_log_store(uri, storage_options=options)
    try:
        result.listed = list(store.list_from(0))
        for version in result.listed:
            actions = read_commit(store, version)
            adds = [a for a in actions if isinstance(a, AddFile)]
            result.version_markers[version] = [_marker_of(table, a) for a in adds]
            infos = [a for a in actions if isinstance(a, CommitInfo)]
            members = group_txn_ids(infos[0]) if infos else frozenset()
            if len(infos) != 1:
                result.errors.append(f"version {version} holds {len(infos)} commitInfo actions")
            if members:
                result.group_sizes[version] = 1 + len(members)
    except Exception as exc:  # noqa: BLE001
        result.errors.append(f"reading the log failed: {type(exc).__name__}: {exc}")
    for add in table.add_actions():
        if table.objects.head(table.uri.key(_unquote(add.path))) is None:
            result.missing_files.append(add.path)
        else:
            result.live_markers[_marker_of(table, add)] += 1
    if table.uri.scheme != "memory":
        result.entry_problems = _entry_problems(store)
    if with_deltalake:
        try:
            import deltalake

            theirs = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
            result.deltalake_version = theirs.version()
            result.deltalake_counts = marker_counts(pa.table(theirs.to_pyarrow_table(columns=["marker"])))
        except Exception as exc:  # noqa: BLE001
            result.errors.append(f"deltalake could not load the table: {type(exc).__name__}: {exc}")
    return result


def log_problems(uri: str, storage_options: Mapping[str, str]) -> list[str]:
    """What any table must keep whatever its rows are: versions 0..latest each listed once, every DynamoDB
    item complete with its ``N.json``, every live file present (after our reader loaded the table)."""
    from logstore import open_log_store
    from table import Table

    table = Table(uri, storage_options=dict(storage_options))
    store = open_log_store(uri, storage_options=dict(storage_options))
    listed = list(store.list_from(0))
    problems = [] if listed == list(range(table.version + 1)) else [f"versions listed {listed}, latest {table.version}"]
    problems += [f"file referenced by the log is missing: {a.path}" for a in table.add_actions()
                 if table.objects.head(table.uri.key(_unquote(a.path))) is None]
    return problems + _entry_problems(store)


def _unquote(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _marker_of(table, add) -> str:
    """The marker of the commit that wrote this file: its stats (every row holds the same marker), or the
    file itself when a writer wrote no stats."""
    stats = json.loads(add.stats) if add.stats else {}
    low, high = stats.get("minValues", {}).get("marker"), stats.get("maxValues", {}).get("marker")
    if low is not None and low == high:
        return low
    import pyarrow.parquet as pq

    body = table.objects.get(table.uri.key(_unquote(add.path)))
    values = set(pq.read_table(pa.BufferReader(body), columns=["marker"]).column("marker").to_pylist())
    if len(values) != 1:
        raise AssertionError(f"data file {add.path} holds rows of {len(values)} commits: {sorted(values)[:5]}")
    return values.pop()


def table_items(store) -> list[dict]:
    """Every DynamoDB item of the store's table, as DynamoDB returns them, oldest version first. Read
    straight from DynamoDB: nothing is finished on the way, as a reader would."""
    from logstore.aws import call, dynamodb_client

    client = dynamodb_client(store.options)
    found: list[dict] = []
    kwargs = {"TableName": store.ddb_table, "KeyConditionExpression": "tablePath = :p",
              "ExpressionAttributeValues": {":p": {"S": store.table_path}}, "ConsistentRead": True}
    while True:
        page = call("dynamodb:Query", client.query, where=store.table_path, **kwargs)
        found += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def item_problems(items: Sequence[dict], *, except_newest: bool = False) -> list[str]:
    """Items that are not finished: incomplete, marked stuck, or complete without ``expireTime`` (an item
    DynamoDB's TTL never removes). ``except_newest``: the newest item may still be incomplete (its writer's
    UpdateItem on its way, or the writer gone; the next reader or writer finishes it)."""
    problems = []
    newest = max((item["fileName"]["S"] for item in items), default=None)
    for item in items:
        name = item["fileName"]["S"]
        complete = item.get("complete", {}).get("S")
        if "stuckSince" in item:
            problems.append(f"DynamoDB entry {name} is marked stuck")
        elif complete != "true":
            if not (except_newest and name == newest):
                problems.append(f"DynamoDB entry {name} is incomplete (no expireTime: TTL never removes it)")
        elif "expireTime" not in item:
            problems.append(f"DynamoDB entry {name} is complete without expireTime: TTL never removes it")
    return problems


def _entry_problems(store) -> list[str]:
    """Every DynamoDB item of the table must be complete, with ``expireTime``, and have its ``N.json``
    once a reader ran."""
    items = table_items(store)
    problems = item_problems(items)
    for item in items:
        name = item["fileName"]["S"]
        if store.objects.head(store.log_prefix + name) is None:
            problems.append(f"DynamoDB entry {name} (complete={item.get('complete', {}).get('S')}, tempPath="
                            f"{item.get('tempPath', {}).get('S')}) has no {name} in _delta_log/")
    return problems


# --- the verdict ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Verdict:
    """Writers' records held against an audit. Every list names commits by marker."""

    attempted: int
    acknowledged: int
    landed: int
    lost: list[str]                 # told success, not in the table (or not at the version it was told)
    duplicated: list[str]           # in more than one version
    untyped_errors: list[str]       # an error that is not a DynacommitError
    false_failures: list[str]       # told a definite failure, yet in the table
    unknown_landed: int             # CommitStateUnknownError, then found once
    unknown_absent: int             # CommitStateUnknownError, then absent
    in_flight: int                  # the writer died before it was told anything
    errors_by_type: Counter
    phantoms: list[str]             # in the table, but never begun by any writer

    @property
    def failures(self) -> list[str]:
        out = []
        for name, values in (("lost", self.lost), ("duplicated", self.duplicated),
                             ("untyped errors", self.untyped_errors), ("definite failure yet landed",
                                                                       self.false_failures),
                             ("landed without a writer", self.phantoms)):
            if values:
                out.append(f"{len(values)} {name}: {values[:10]}")
        return out

    def summary(self) -> dict:
        return {"attempted": self.attempted, "acknowledged": self.acknowledged, "landed": self.landed,
                "lost": len(self.lost), "duplicated": len(self.duplicated),
                "untyped_errors": len(self.untyped_errors), "definite_failure_yet_landed": len(self.false_failures),
                "unknown_then_landed": self.unknown_landed, "unknown_then_absent": self.unknown_absent,
                "in_flight_when_killed": self.in_flight, "errors_by_type": dict(self.errors_by_type)}


def judge(records: Sequence[CommitRecord], found: Audit, *, expected_elsewhere: Iterable[str] = ()) -> Verdict:
    """Hold what each writer was told against what the table holds. ``expected_elsewhere``: markers
    committed by the test itself (the creating commit)."""
    versions = found.marker_versions()
    begun = {r.marker for r in records} | set(expected_elsewhere)
    lost, duplicated, untyped, false_failures = [], [], [], []
    unknown_landed = unknown_absent = in_flight = 0
    errors: Counter = Counter()
    for record in records:
        where = versions.get(record.marker, [])
        if len(where) > 1:
            duplicated.append(record.marker)
        if record.ok:
            if where != [record.version] and len(where) <= 1:
                lost.append(f"{record.marker} (told version {record.version}, found in {where})")
        elif record.ok is None:
            in_flight += 1
        else:
            errors[record.error_type] += 1
            if not record.error["dynacommit"]:
                untyped.append(f"{record.marker}: {record.error['module']}.{record.error_type}: "
                               f"{record.error['message'][:200]}")
            if record.error_type == "CommitStateUnknownError":
                if len(where) == 1:
                    unknown_landed += 1
                elif not where:
                    unknown_absent += 1
            elif where:
                false_failures.append(f"{record.marker} ({record.error_type}: {record.error['message'][:160]}) "
                                      f"is in version(s) {where}")
    phantoms = sorted(set(versions) - begun)
    return Verdict(attempted=len(records), acknowledged=sum(1 for r in records if r.ok),
                   landed=sum(1 for r in records if versions.get(r.marker)), lost=lost, duplicated=duplicated,
                   untyped_errors=untyped, false_failures=false_failures, unknown_landed=unknown_landed,
                   unknown_absent=unknown_absent, in_flight=in_flight, errors_by_type=errors, phantoms=phantoms)


# --- harness seams ----------------------------------------------------------------------------------

HARNESS_SEAMS = {
    "harness.write.after_put_temp": "_put_temp",
    "harness.write.after_put_entry": "_put_entry",
    "harness.write.after_copy_to_final": "_copy_to_final",
    "harness.write.after_mark_complete": "_mark_complete",
}
"""Failpoints the crash-matrix harness adds to a worker on its own, after each one-side-effect step of
:class:`logstore.external.ExternalLogStore` (defined in the parts it is composed of), to prove the harness (kill, audit, verdict) on the product's
real algorithm independently of the failpoints the product declares. Each wraps the step: the step runs
unchanged, then the failpoint is hit."""


def install_harness_seams(*, declare: bool = True):
    """Wrap the steps of :data:`HARNESS_SEAMS` where each backend defines them, so that each is followed
    by a hit of its failpoint; returns a function that puts the steps back. ``declare`` registers the
    names with :func:`logstore.failpoints.declare` (worker processes; a test process leaves the product's
    list of failpoints alone)."""
    import functools

    from logstore import failpoints
    from logstore.dynamodb import DynamoDBLogStore
    from logstore.external import ExternalLogStore
    from tests.support.memory import MemoryLogStore

    replaced = []
    for name, method in HARNESS_SEAMS.items():
        if declare:
            failpoints.declare(name, f"harness: after ExternalLogStore.{method}")
        for cls in (ExternalLogStore, DynamoDBLogStore, MemoryLogStore):
            # ExternalLogStore's steps come from the parts it is composed of (logstore/publish.py, ...)
            owner = next(c for c in cls.__mro__ if method in vars(c))
            if owner is not cls and cls is not ExternalLogStore:
                continue
            step = vars(owner)[method]

            @functools.wraps(step)
            def after(self, *args, __step=step, __name=name, **kwargs):
                result = __step(self, *args, **kwargs)
                failpoints.hit(__name)
                return result

            setattr(cls, method, after)
            replaced.append((cls, method, step if owner is cls else None))

    def undo() -> None:
        for cls, method, step in reversed(replaced):
            if step is None:
                delattr(cls, method)  # inherited again from the part that defines it
            else:
                setattr(cls, method, step)

    return undo
