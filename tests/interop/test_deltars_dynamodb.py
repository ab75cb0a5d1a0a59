"""Interop with delta-rs 1.6.0's S3DynamoDbLogStore: both commit to one table through one DynamoDB table.

delta-rs runs in its own interpreter (``$DYNACOMMIT_PEER_PYTHON``, built by ``make peer`` with
``deltalake==1.6.0``, the last delta-rs with the DynamoDB log store) through ``peer_deltars.py``; our
store runs in-process. Both point at the session's moto server (S3 + DynamoDB) with the same storage
options dict, ``AWS_S3_LOCKING_PROVIDER=dynamodb`` included.

Wire contract checked here: shared/reference/delta-dynamodb-protocol.md §1 (item schema), §2-§3 (write and
repair), and DESIGN.md "The commit protocol".
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import (
    ExternalLogStore,
    RecoveryOutcome,
    VersionExistsError,
    VersionNotFoundError,
    open_log_store,
)
from logstore.aws import dynamodb_client, s3_client
from logstore.dynamodb import entry_from_item
from logstore.options import StorageOptions, TableUri

pytestmark = [pytest.mark.interop]

PEER_SCRIPT = Path(__file__).with_name("peer_deltars.py")
PEER_DELTALAKE_VERSION = "1.6.0"
PEER_TIMEOUT = 180
TTL = 86_400

DELTARS_TEMP = re.compile(r"^_commit_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.json\.tmp$")
OUR_TEMP = re.compile(r"^\.tmp/(\d{20})\.json\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("tag", pa.string())])
SCHEMA_STRING = json.dumps({"type": "struct", "fields": [
    {"name": "writer", "type": "string", "nullable": True, "metadata": {}},
    {"name": "seq", "type": "long", "nullable": True, "metadata": {}},
    {"name": "tag", "type": "string", "nullable": True, "metadata": {}},
]})


# --------------------------------------------------------------------------------------------- the peer
_PEER_HELP = (
    "the delta-rs interop suite needs deltalake=={v} in its own interpreter: run `make peer` (it builds "
    ".venv-peer and the Makefile exports DYNACOMMIT_PEER_PYTHON; `make test` does both), or set "
    "DYNACOMMIT_PEER_PYTHON to a python that has deltalake=={v} and pyarrow"
).format(v=PEER_DELTALAKE_VERSION)


def _peer_env() -> dict[str, str]:
    # Only the storage options we pass may configure delta-rs: no ambient AWS settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DELTA_DYNAMO_"))}
    env.setdefault("RUST_LOG", "error")
    return env


@pytest.fixture(scope="session")
def peer_python() -> str:
    """The peer interpreter. Fails (never skips) when it is missing or broken: a skipped interop suite
    would hide a broken install."""
    path = os.environ.get("DYNACOMMIT_PEER_PYTHON")
    if not path:
        pytest.fail(f"DYNACOMMIT_PEER_PYTHON is not set; {_PEER_HELP}", pytrace=False)
    try:
        probe = subprocess.run(
            [path, "-c", "import deltalake, pyarrow; print(deltalake.__version__)"],
            capture_output=True, text=True, timeout=60, env=_peer_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"DYNACOMMIT_PEER_PYTHON={path!r} cannot be run ({exc}); {_PEER_HELP}", pytrace=False)
    if probe.returncode != 0:
        pytest.fail(f"DYNACOMMIT_PEER_PYTHON={path!r} cannot import deltalake and pyarrow:\n"
                    f"{probe.stderr.strip()[-1500:]}\n{_PEER_HELP}", pytrace=False)
    found = probe.stdout.strip()
    if found != PEER_DELTALAKE_VERSION:
        pytest.fail(f"DYNACOMMIT_PEER_PYTHON={path!r} has deltalake {found}, not {PEER_DELTALAKE_VERSION} "
                    f"(later releases dropped the DynamoDB log store and would bypass DynamoDB); {_PEER_HELP}",
                    pytrace=False)
    return path


class Peer:
    """delta-rs 1.6.0 on one table, through ``peer_deltars.py`` subprocesses."""

    def __init__(self, python: str, uri: str, options: dict[str, str]):
        self.python = python
        self.uri = uri
        self.options = options

    def _argv(self, command: str, kwargs: dict) -> list[str]:
        return [self.python, str(PEER_SCRIPT), command,
                json.dumps({"uri": self.uri, "options": self.options, **kwargs})]

    @staticmethod
    def _result(command: str, returncode: int, stdout: str, stderr: str) -> dict:
        lines = stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            raise AssertionError(f"peer {command} printed no JSON result (exit {returncode}):\n"
                                 f"stdout: {stdout[-2000:]}\nstderr: {stderr[-3000:]}") from None
        result["_returncode"] = returncode
        result["_stderr"] = stderr[-3000:]
        return result

    def run(self, command: str, *, check: bool = True, **kwargs) -> dict:
        done = subprocess.run(self._argv(command, kwargs), capture_output=True, text=True,
                              timeout=PEER_TIMEOUT, env=_peer_env())
        result = self._result(command, done.returncode, done.stdout, done.stderr)
        if check and (done.returncode != 0 or "error" in result):
            raise AssertionError(f"delta-rs {command} on {self.uri} failed: {result.get('error')}\n"
                                 f"stderr: {done.stderr[-3000:]}")
        assert result["deltalake_version"] == PEER_DELTALAKE_VERSION
        return result

    def start(self, command: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self._argv(command, kwargs), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_peer_env())

    def finish(self, command: str, process: subprocess.Popen) -> dict:
        try:
            stdout, stderr = process.communicate(timeout=PEER_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            raise AssertionError(f"delta-rs {command} (pid {process.pid}) did not finish in {PEER_TIMEOUT}s:\n"
                                 f"{stderr[-3000:]}") from None
        result = self._result(command, process.returncode, stdout, stderr)
        assert process.returncode == 0 and "error" not in result, result
        return result


# --------------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def shared_options(storage_options) -> dict[str, str]:
    """One dict for both implementations: delta-rs 1.6.0 with the DynamoDB log store, and our store."""
    return {
        **storage_options,
        "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "AWS_ENDPOINT_URL_DYNAMODB": storage_options["AWS_ENDPOINT_URL"],
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.fixture
def peer(peer_python, s3_uri, shared_options) -> Peer:
    return Peer(peer_python, s3_uri, shared_options)


class Aws:
    """Raw boto3 access to the table's objects and DynamoDB items, to check the wire format itself."""

    def __init__(self, uri: str, options: dict[str, str]):
        resolved = StorageOptions.resolve(options)
        self.uri = TableUri.parse(uri)
        self.bucket = self.uri.bucket
        self.table_path = self.uri.table_path
        self.ddb_table = resolved.ddb_table_name
        self.s3 = s3_client(resolved)
        self.ddb = dynamodb_client(resolved)

    def log_key(self, relative: str) -> str:
        return self.uri.key("_delta_log/" + relative)

    def get(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def exists(self, key: str) -> bool:
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key).get("Contents", [])
        return any(o["Key"] == key for o in listed)

    def put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)

    def log_listing(self) -> list[str]:
        """Names under ``_delta_log/`` (temp files included), relative to it."""
        prefix = self.log_key("")
        names, kwargs = [], {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            r = self.s3.list_objects_v2(**kwargs)
            names += [o["Key"][len(prefix):] for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return names
            kwargs["ContinuationToken"] = r["NextContinuationToken"]

    def commits_and_deltars_temps(self) -> list[str]:
        """The listing without our own ``.tmp/`` temp files, which we keep (as delta-spark does)."""
        return [n for n in self.log_listing() if not n.startswith(".tmp/")]

    def commit_body(self, version: int) -> bytes:
        return self.get(self.log_key(f"{version:020d}.json"))

    def item(self, version: int) -> dict | None:
        return self.ddb.get_item(TableName=self.ddb_table, ConsistentRead=True, Key={
            "tablePath": {"S": self.table_path}, "fileName": {"S": f"{version:020d}.json"}}).get("Item")

    def items(self) -> list[dict]:
        out, kwargs = [], {"TableName": self.ddb_table, "ConsistentRead": True,
                           "KeyConditionExpression": "tablePath = :tp",
                           "ExpressionAttributeValues": {":tp": {"S": self.table_path}}}
        while True:
            r = self.ddb.query(**kwargs)
            out += r["Items"]
            if "LastEvaluatedKey" not in r:
                return out
            kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]

    def put_incomplete_item(self, version: int, temp_path: str) -> None:
        """PutItem exactly as delta-rs 1.6.0 does at its commit point (reference §2.2 step 2)."""
        self.ddb.put_item(
            TableName=self.ddb_table,
            Item={"tablePath": {"S": self.table_path}, "fileName": {"S": f"{version:020d}.json"},
                  "tempPath": {"S": temp_path}, "complete": {"S": "false"}},
            ConditionExpression="attribute_not_exists(tablePath) and attribute_not_exists(fileName)",
        )


@pytest.fixture
def aws(s3_uri, shared_options) -> Aws:
    return Aws(s3_uri, shared_options)


# --------------------------------------------------------------------------------------------- raw Delta
def _lines(*actions: dict) -> bytes:
    return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions)


def _now_ms() -> int:
    return int(time.time() * 1000)


def commit_zero(marker: str = "ours-create") -> bytes:
    return _lines(
        {"commitInfo": {"timestamp": _now_ms(), "operation": "CREATE TABLE",
                        "operationParameters": {"mode": "ErrorIfExists"}, "dynacommit_marker": marker,
                        "clientVersion": "dynacommit-interop-test"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": SCHEMA_STRING, "partitionColumns": [], "configuration": {},
                      "createdTime": _now_ms()}},
    )


def write_data_file(aws: Aws, relative: str, writer: str, seq: int) -> tuple[dict, dict]:
    """A one-row parquet file under the table root; returns (add action, row)."""
    row = {"writer": writer, "seq": seq, "tag": f"{writer}-{seq:05d}"}
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([row], schema=SCHEMA), buf)
    body = buf.getvalue()
    aws.put(aws.uri.key(relative), body)
    stats = {"numRecords": 1, "minValues": {k: v for k, v in row.items()},
             "maxValues": {k: v for k, v in row.items()}, "nullCount": {k: 0 for k in row}}
    add = {"add": {"path": relative, "partitionValues": {}, "size": len(body), "modificationTime": _now_ms(),
                   "dataChange": True, "stats": json.dumps(stats)}}
    return add, row


def add_commit(add: dict, marker: str) -> bytes:
    return _lines(
        {"commitInfo": {"timestamp": _now_ms(), "operation": "WRITE",
                        "operationParameters": {"mode": "Append"}, "isBlindAppend": True,
                        "dynacommit_marker": marker, "clientVersion": "dynacommit-interop-test"}},
        add,
    )


def parse_commit(body: bytes) -> tuple[list[str], list[str]]:
    """(commitInfo markers, added paths) of one commit file."""
    markers, paths = [], []
    for line in body.decode().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            markers.append(action["commitInfo"].get("dynacommit_marker"))
        if "add" in action:
            paths.append(action["add"]["path"])
    return markers, paths


def assert_complete_item(item: dict, *, temp_pattern: re.Pattern, not_before: float) -> None:
    """complete is S "true", expireTime is N and about now + 1 day, tempPath has the given layout."""
    assert set(item) == {"tablePath", "fileName", "tempPath", "complete", "expireTime"}, item
    assert item["complete"] == {"S": "true"}, item
    assert temp_pattern.match(item["tempPath"]["S"]), item
    assert set(item["expireTime"]) == {"N"}, item
    expire = int(item["expireTime"]["N"])
    assert not_before + TTL - 5 <= expire <= time.time() + TTL + 5, (item, not_before)


# ============================================================================================ 1
def test_deltars_commits_are_read_by_our_store(peer, aws, shared_options):
    """delta-rs creates a table and appends; our store sees exactly its versions and bytes, and the items it
    wrote have the wire format of reference §1 and parse with our code."""
    started = time.time()
    result = peer.run("append", writer="rs", count=4)
    assert result["committed"] == [f"rs-{i:05d}" for i in range(4)] and not result["failed"], result

    store = open_log_store(peer.uri, storage_options=shared_options)
    assert store.latest_version() == 3
    assert list(store.list_from(0)) == [0, 1, 2, 3]
    assert list(store.list_from(2)) == [2, 3]
    for version in range(4):
        body = store.read(version)
        assert body == aws.commit_body(version)
        markers, paths = parse_commit(body)
        assert markers == [f"rs-{version:05d}"], body
        assert len(paths) == 1
    kinds = {next(iter(json.loads(line))) for line in store.read(0).decode().splitlines()}
    assert {"protocol", "metaData", "add", "commitInfo"} <= kinds, kinds

    items = aws.items()
    assert [i["fileName"]["S"] for i in items] == [f"{v:020d}.json" for v in range(4)]
    for item in items:
        assert item["tablePath"] == {"S": peer.uri}  # no trailing slash, scheme as given
        assert_complete_item(item, temp_pattern=DELTARS_TEMP, not_before=started)
        entry = entry_from_item(item, table=peer.uri)
        assert entry.complete and entry.table_path == store.table_path
        assert entry.temp_path == item["tempPath"]["S"]
        assert entry.expire_time == int(item["expireTime"]["N"])
    assert store.recover() is RecoveryOutcome.ALREADY_COMPLETE
    # delta-rs moves its temp files: nothing but the four commits is left in _delta_log/.
    assert aws.log_listing() == [f"{v:020d}.json" for v in range(4)]


# ============================================================================================ 2
def test_our_raw_log_is_loaded_and_extended_by_deltars(peer, aws, shared_options):
    """We write a valid Delta table's log with raw JSON bodies; delta-rs 1.6.0 loads it and appends on top
    of it through DynamoDB; we see its version."""
    started = time.time()
    store = open_log_store(peer.uri, storage_options=shared_options)
    store.write(0, commit_zero())
    rows, paths = [], []
    for seq in range(1, 4):
        relative = f"ours-{seq:05d}-{uuid.uuid4().hex[:8]}.parquet"
        add, row = write_data_file(aws, relative, "ours", seq)
        store.write(seq, add_commit(add, row["tag"]))
        rows.append(row)
        paths.append(relative)
    assert store.wait_finished(timeout=30)  # a write returns before the UpdateItem that marks its item complete
    for item in aws.items():
        assert_complete_item(item, temp_pattern=OUR_TEMP, not_before=started)
        assert OUR_TEMP.match(item["tempPath"]["S"]).group(1) == item["fileName"]["S"][:20]

    loaded = peer.run("load")
    assert loaded["version"] == 3
    assert loaded["files"] == sorted(paths)
    assert loaded["rows"] == sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
    assert loaded["history_markers"] == ["ours-00003", "ours-00002", "ours-00001", "ours-create"]

    appended = peer.run("append", writer="rs", count=1)
    assert appended["committed"] == ["rs-00000"], appended
    assert store.latest_version() == 4
    assert list(store.list_from(0)) == [0, 1, 2, 3, 4]
    markers, added = parse_commit(store.read(4))
    assert markers == ["rs-00000"] and len(added) == 1
    assert_complete_item(aws.item(4), temp_pattern=DELTARS_TEMP, not_before=started)

    reloaded = peer.run("load")
    assert reloaded["version"] == 4
    assert len(reloaded["rows"]) == 4 and {"writer": "rs", "seq": 0, "tag": "rs-00000"} in reloaded["rows"]
    # our next commit goes on top of delta-rs's
    add, _ = write_data_file(aws, "ours-00005.parquet", "ours", 5)
    store.write(5, add_commit(add, "ours-00005"))
    assert peer.run("version")["version"] == 5


# ============================================================================================ 3
OUR_WRITERS = 2
PEER_WRITERS = 2
PEER_COMMITS_EACH = 10
OUR_COMMITS_EACH = 20


def _our_writer(name: str, uri: str, options: dict, aws: Aws, out: dict) -> None:
    store = open_log_store(uri, storage_options=options)
    rng = random.Random(name)
    done, conflicts, missing_previous = [], 0, 0
    try:
        for seq in range(OUR_COMMITS_EACH):
            relative = f"{name}-{seq:05d}.parquet"
            add, row = write_data_file(aws, relative, name, seq)
            body = add_commit(add, row["tag"])
            for _attempt in range(500):
                version = store.latest_version() + 1
                try:
                    store.write(version, body)
                except VersionExistsError:
                    conflicts += 1
                    continue
                except VersionNotFoundError:
                    missing_previous += 1  # an entry was aborted by delta-rs under us; read again
                    time.sleep(0.01)
                    continue
                done.append((row["tag"], version, relative))
                break
            else:
                raise AssertionError(f"{name} could not commit {row['tag']} in 500 attempts")
            time.sleep(rng.uniform(0.02, 0.12))
    except BaseException as exc:  # surfaced by the test
        out["error"] = repr(exc)
    out.update(done=done, conflicts=conflicts, missing_previous=missing_previous)


def _our_reader(uri: str, options: dict, stop: threading.Event, out: dict) -> None:
    """Refreshes as fast as it can: every refresh recovers the latest entry if it is incomplete, so it
    races delta-rs's own repair of the entry it just won."""
    store = open_log_store(uri, storage_options=options)
    refreshes = 0
    try:
        while not stop.is_set():
            store.latest_version()
            refreshes += 1
    except BaseException as exc:
        out["error"] = repr(exc)
    out["refreshes"] = refreshes


@pytest.mark.slow
def test_interleaved_writers_share_one_log(peer, aws, shared_options, capsys, monkeypatch):
    """Our writers (and one refreshing reader) and delta-rs 1.6.0 writers commit to one table at once:
    versions contiguous, every commit present exactly once, one winner per version, no duplicate delta-rs
    commits."""
    # Instrumentation only: count the recoveries our writers run on in-flight delta-rs entries, the race
    # that makes delta-rs re-commit a transaction at N+1 if its temp file outlives our copy (DESIGN.md).
    recoveries: Counter[str] = Counter()
    lock = threading.Lock()
    original = ExternalLogStore._recover_once

    def counting_recover_once(self, entry, *args):
        outcome = original(self, entry, *args)
        layout = "deltars" if entry.temp_path.startswith("_commit_") else "ours"
        with lock:
            recoveries[f"{layout}:{outcome.value}"] += 1
        return outcome

    monkeypatch.setattr(ExternalLogStore, "_recover_once", counting_recover_once)
    store = open_log_store(peer.uri, storage_options=shared_options)
    store.write(0, commit_zero())

    procs = [peer.start("append", writer=f"rs{i}", count=PEER_COMMITS_EACH, max_commit_retries=100)
             for i in range(PEER_WRITERS)]
    outs = [{} for _ in range(OUR_WRITERS)]
    threads = [threading.Thread(target=_our_writer, args=(f"ours{i}", peer.uri, shared_options, aws, outs[i]),
                                daemon=True)
               for i in range(OUR_WRITERS)]
    stop_reader, reader_out = threading.Event(), {}
    reader = threading.Thread(target=_our_reader, args=(peer.uri, shared_options, stop_reader, reader_out),
                              daemon=True)
    try:
        reader.start()
        # start ours once delta-rs is committing; ours are paced to overlap the delta-rs appends
        deadline = time.monotonic() + 60
        while store.latest_version() < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        for t in threads:
            t.start()
        peer_results = [peer.finish("append", p) for p in procs]
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "our writer thread did not finish"
    finally:
        stop_reader.set()
        reader.join(timeout=60)
        for p in procs:  # only the peer processes this test started, by their handles
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    for out in outs + [reader_out]:
        assert "error" not in out, out

    latest = store.latest_version()
    versions = list(store.list_from(0))
    assert versions == list(range(latest + 1)), "versions are not contiguous"

    # who wrote each version, by content and by the DynamoDB winner's temp layout
    by_version: dict[int, str] = {}
    markers_seen: Counter[str] = Counter()
    paths_seen: Counter[str] = Counter()
    winners_mismatch = []
    items = {int(i["fileName"]["S"][:20]): i for i in aws.items()}
    for version in versions:
        markers, paths = parse_commit(store.read(version))
        assert len(markers) == 1, (version, markers)
        by_version[version] = markers[0]
        markers_seen.update(markers)
        paths_seen.update(paths)
        item = items[version]
        assert item["complete"] == {"S": "true"} and "expireTime" in item, item
        temp = item["tempPath"]["S"]
        from_deltars = markers[0].startswith("rs")
        if from_deltars != bool(DELTARS_TEMP.match(temp)) or (not from_deltars and not OUR_TEMP.match(temp)):
            winners_mismatch.append((version, markers[0], temp))
    assert sorted(items) == versions, "one DynamoDB item per version, none more"
    assert not winners_mismatch, f"N.json content does not come from the DynamoDB winner: {winners_mismatch}"

    ours = [(tag, v, path) for out in outs for tag, v, path in out["done"]]
    for tag, version, _ in ours:
        assert by_version[version] == tag, f"our commit {tag} reported version {version}, log has {by_version[version]}"
    committed_rs = [tag for r in peer_results for tag in r["committed"]]
    failed_rs = [f for r in peer_results for f in r["failed"]]
    duplicates = {m: n for m, n in markers_seen.items() if n > 1}
    dup_paths = {p: n for p, n in paths_seen.items() if n > 1}
    failed_landed = [f["tag"] for f in failed_rs if markers_seen[f["tag"]]]
    leftover_temps = [n for n in aws.log_listing() if DELTARS_TEMP.match(n)]
    # which writer owned the entry a failed delta-rs append tripped over ("version N already exists")
    tripped_on = Counter()
    for f in failed_rs:
        found = re.search(r"version (\d+) already exists", f["error"])
        owner = by_version.get(int(found.group(1))) if found else None
        tripped_on["unparsed" if owner is None else "ours" if owner.startswith("ours") else "delta-rs"] += 1

    report = {
        "versions": latest + 1, "commits_ours": len(ours), "commits_deltars": len(committed_rs),
        "deltars_failed": len(failed_rs), "deltars_failed_but_landed": failed_landed,
        "deltars_failures_on_entry_of": dict(tripped_on),
        "deltars_failure_example": failed_rs[0]["error"][:200] if failed_rs else None,
        "our_conflicts": sum(o["conflicts"] for o in outs),
        "our_missing_previous": sum(o["missing_previous"] for o in outs),
        "duplicate_markers": duplicates, "duplicate_paths": len(dup_paths),
        "leftover_deltars_temp_files": len(leftover_temps),
        "our_recoveries": dict(recoveries), "reader_refreshes": reader_out.get("refreshes"),
        "deltars_seconds": [r["seconds"] for r in peer_results],
    }
    with capsys.disabled():
        print(f"\ninterleaved delta-rs/dynacommit commits: {json.dumps(report)}")

    assert not duplicates and not dup_paths, f"duplicate commits: {report}"
    assert len(ours) + len(committed_rs) + len(failed_landed) + 1 == latest + 1, report
    for tag in committed_rs:
        assert markers_seen[tag] == 1, f"delta-rs commit {tag} is not in the log"
    assert len(ours) == OUR_WRITERS * OUR_COMMITS_EACH and latest + 1 >= 40, report

    loaded = peer.run("load")
    assert loaded["version"] == latest
    assert len(loaded["rows"]) == latest  # one row per commit after version 0
    assert sorted(r["tag"] for r in loaded["rows"]) == sorted(m for v, m in by_version.items() if v > 0)

    # Last, because the log itself is sound either way: a delta-rs writer must not fail because it met one
    # of our entries. delta-rs 1.6.0 repairs an incomplete entry with copy-if-absent of its tempPath; if our
    # N.json is already there while our .tmp/ temp file is still there, that copy fails "already exists"
    # four times and the append fails (see test_deltars_and_our_entry_published_but_not_acknowledged).
    assert not failed_rs, (
        f"{len(failed_rs)} of {len(failed_rs) + len(committed_rs)} delta-rs appends failed, "
        f"on entries of {dict(tripped_on)}: {report}"
    )


# ============================================================================================ 4
def test_we_finish_an_entry_deltars_left_incomplete(peer, aws, shared_options):
    """delta-rs stopped after its steps 1-2 (temp ``_commit_<uuid>.json.tmp`` + incomplete item): our
    ``read`` and ``latest_version`` copy the temp to N.json, complete the item and delete the temp."""
    store = open_log_store(peer.uri, storage_options=shared_options)
    store.write(0, commit_zero())
    started = time.time()

    def leave_incomplete(version: int) -> tuple[str, bytes, str]:
        temp = f"_commit_{uuid.uuid4()}.json.tmp"
        relative = f"rs-crashed-{version:05d}.parquet"
        add, row = write_data_file(aws, relative, "rs-crashed", version)
        body = add_commit(add, row["tag"])
        aws.put(aws.log_key(temp), body)        # delta-rs step 1
        aws.put_incomplete_item(version, temp)  # delta-rs step 2, its commit point
        assert "expireTime" not in aws.item(version)
        return temp, body, relative

    # through read(v)
    temp1, body1, path1 = leave_incomplete(1)
    assert not aws.exists(aws.log_key(f"{1:020d}.json"))
    assert store.read(1) == body1
    assert aws.commit_body(1) == body1
    assert_complete_item(aws.item(1), temp_pattern=DELTARS_TEMP, not_before=started)
    assert aws.item(1)["tempPath"] == {"S": temp1}
    assert temp1 not in aws.log_listing(), "the delta-rs temp file must be deleted once N.json exists"

    # through latest_version()
    temp2, body2, path2 = leave_incomplete(2)
    assert store.latest_version() == 2
    assert aws.commit_body(2) == body2
    assert_complete_item(aws.item(2), temp_pattern=DELTARS_TEMP, not_before=started)
    assert temp2 not in aws.log_listing()

    # delta-rs stopped between its copy and its temp delete: N.json there, temp there, item incomplete
    temp3, body3, path3 = leave_incomplete(3)
    aws.put(aws.log_key(f"{3:020d}.json"), body3)
    assert store.recover() is RecoveryOutcome.COMPLETED
    assert_complete_item(aws.item(3), temp_pattern=DELTARS_TEMP, not_before=started)
    assert temp3 not in aws.log_listing()

    assert aws.commits_and_deltars_temps() == [f"{v:020d}.json" for v in range(4)]
    loaded = peer.run("load")
    assert loaded["version"] == 3 and loaded["files"] == sorted([path1, path2, path3])


def _crash_after_commit_point(store) -> None:
    """Our writer dies right after its commit point (step 2): no N.json, item incomplete."""
    store._publish = lambda version, temp_path, body: None


def test_deltars_finishes_an_entry_we_left_incomplete(peer, aws, shared_options):
    """Our store stopped after its commit point (``.tmp/N.json.<uuid>`` + incomplete item, no N.json):
    delta-rs 1.6.0 loading the table repairs it, and our store then sees it complete."""
    store = open_log_store(peer.uri, storage_options=shared_options)
    store.write(0, commit_zero())
    started = time.time()
    crashed = open_log_store(peer.uri, storage_options=shared_options)
    _crash_after_commit_point(crashed)
    add, row = write_data_file(aws, "ours-crashed-00001.parquet", "ours", 1)
    body = add_commit(add, row["tag"])
    crashed.write(1, body)

    item = aws.item(1)
    assert item["complete"] == {"S": "false"} and "expireTime" not in item, item
    temp = item["tempPath"]["S"]
    assert OUR_TEMP.match(temp), item
    assert temp in aws.log_listing()
    assert aws.commits_and_deltars_temps() == [f"{0:020d}.json"]

    assert peer.run("version")["version"] == 1        # DeltaTable(...).version() repairs the entry
    assert aws.commit_body(1) == body
    assert_complete_item(aws.item(1), temp_pattern=OUR_TEMP, not_before=started)
    # delta-rs repairs by rename (copy + delete): our Java-layout temp file is gone too
    assert temp not in aws.log_listing()
    assert aws.commits_and_deltars_temps() == [f"{v:020d}.json" for v in range(2)]

    assert store.recover(1) is RecoveryOutcome.ALREADY_COMPLETE
    assert store.latest_version() == 1 and store.read(1) == body
    loaded = peer.run("load")
    assert loaded["rows"] == [row]


def test_deltars_and_our_entry_published_but_not_acknowledged(peer, aws, shared_options):
    """Our writer dies between its steps 3 and 4: N.json written, item still incomplete. If our Java-layout
    temp file is still there, delta-rs 1.6.0's repair (copy-if-absent of tempPath to N.json) fails on the
    existing N.json, four times, and it cannot even load the table until someone completes the entry
    (reference §5, 'repair when N.json exists'); if the temp is gone, delta-rs takes it as already moved and
    completes the entry. Our writer deletes the temp before step 4, so delta-rs loads the table; our
    recovery completes the entry too."""
    store = open_log_store(peer.uri, storage_options=shared_options)
    store.write(0, commit_zero())
    started = time.time()
    crashed = open_log_store(peer.uri, storage_options=shared_options)
    crashed._mark_complete_quietly = lambda version: None  # dies after PUT N.json, before UpdateItem
    add, row = write_data_file(aws, "ours-unacked-00001.parquet", "ours", 1)
    body = add_commit(add, row["tag"])
    crashed.write(1, body)
    item = aws.item(1)
    assert item["complete"] == {"S": "false"} and aws.commit_body(1) == body
    # Our writer drops its temp file as soon as N.json exists, so delta-rs takes it as already moved.
    assert item["tempPath"]["S"] not in aws.log_listing()

    before = peer.run("version", check=False)
    assert before.get("version") == 1, before
    assert aws.commit_body(1) == body

    assert store.latest_version() == 1                    # our recovery: N.json exists -> mark complete
    assert_complete_item(aws.item(1), temp_pattern=OUR_TEMP, not_before=started)
    assert peer.run("version")["version"] == 1
    assert peer.run("load")["rows"] == [row]
