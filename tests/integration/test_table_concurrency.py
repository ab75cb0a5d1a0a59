"""Transactions racing from separate OS processes through one DynamoDB table (moto server), as
separate clusters would: every commit lands once, at contiguous versions, and the log replays to it."""

from __future__ import annotations

import json
import multiprocessing
import uuid

import pyarrow as pa
import pytest

from logstore import open_log_store
from table.log.actions import AddFile, Metadata, Protocol, parse_commit
from table.log.commit import Commit, ReadScope
from table.log.schema import schema_string
from table.log.snapshot import load_snapshot
from table.log.transaction import commit

pytestmark = pytest.mark.slow

PROCESSES = 4
COMMITS_EACH = 25


def _append_worker(uri: str, options: dict[str, str], writer: str, commits: int) -> dict[str, int]:
    """Runs in a spawned process: open its own store, commit ``commits`` appends one marker file each."""
    store = open_log_store(uri, storage_options=options)
    snapshot = load_snapshot(store)
    attempts = 0
    for i in range(commits):
        marker = AddFile(path=f"w={writer}/{writer}-{i:03d}.parquet", partition_values={"w": writer}, size=1,
                         modification_time=1, data_change=True)
        outcome = commit(store, snapshot, Commit(actions=(marker,), operation="WRITE",
                                                 operation_parameters={"writer": writer},
                                                 read_scope=ReadScope.blind_append()))
        snapshot = outcome.snapshot
        attempts += outcome.attempts
    return {"writer": writer, "attempts": attempts, "last": snapshot.version}


@pytest.mark.parametrize("group_commit", ["on", "off"])
def test_four_processes_appending_25_commits_each_land_every_commit_once_at_contiguous_versions(
        s3_uri, storage_options, group_commit):
    storage_options = {**storage_options, "DYNACOMMIT_GROUP_COMMIT": group_commit}
    store = open_log_store(s3_uri, storage_options=storage_options)
    created = commit(store, None, Commit(actions=(
        Protocol(min_reader_version=1, min_writer_version=2),
        Metadata(id=str(uuid.uuid4()), schema_string=schema_string(pa.schema([("x", pa.int64()), ("w", pa.string())])),
                 partition_columns=["w"], configuration={}),
    ), operation="CREATE TABLE", read_scope=ReadScope.blind_append()))
    assert created.version == 0
    writers = [f"p{n}" for n in range(PROCESSES)]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        results = pool.starmap(_append_worker, [(s3_uri, storage_options, w, COMMITS_EACH) for w in writers])
    total = PROCESSES * COMMITS_EACH
    assert sum(r["attempts"] for r in results) >= total

    # Contended blind appends may commit together (group commit: several appends in one version), so the
    # versions are contiguous and at most one per append, and every append's marker is in exactly one.
    versions = list(store.list_from(0))
    newest = versions[-1]
    assert versions == list(range(newest + 1)) and newest <= total
    if group_commit == "off":
        assert newest == total  # one version per append, as every Delta writer commits
    markers = []
    for version in versions[1:]:
        adds = [a for a in parse_commit(store.read(version)) if isinstance(a, AddFile)]
        assert adds, f"version {version} holds no add"
        markers.extend(a.path for a in adds)
    expected = {f"w={w}/{w}-{i:03d}.parquet" for w in writers for i in range(COMMITS_EACH)}
    assert sorted(markers) == sorted(expected)  # each marker exactly once

    snapshot = load_snapshot(open_log_store(s3_uri, storage_options=storage_options))
    assert snapshot.version == newest
    assert {f.path for f in snapshot.files} == expected
    assert snapshot.checkpoint_version == newest - newest % 10  # every 10th version checkpoints
    print("\nattempts per writer:", json.dumps({r["writer"]: r["attempts"] for r in results}))
