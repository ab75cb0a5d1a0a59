"""Loading snapshots: replay, incremental update, time travel, checkpoints as a shortcut, corrupt logs.

Tables are built by committing raw actions through ``table.log.transaction.commit`` (or, for long
histories, direct ``log_store.write`` plus our checkpoints). Read costs are counted with a counting
wrapper around the real in-memory object store and entry table, not with a mock of the algorithm.
"""

from __future__ import annotations

import json
import logging
import uuid

import pyarrow as pa
import pytest

from logstore import TableUri, open_log_store
from logstore.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from table.data.write import write_table
from table.errors import ReadOnlySnapshotError, UnsupportedFeatureError
from table.log.actions import AddFile, Metadata, Protocol, serialize_commit
from table.log.checkpoint import (
    checkpoint_names,
    read_last_checkpoint,
    write_checkpoint,
)
from table.log.commit import Commit, ReadScope
from table.log.history import history
from table.log.schema import schema_string
from table.log.snapshot import advance, load_snapshot, update
from table.log.transaction import commit
from table.table import Table
from tests.support.counting import CountingLogStore

SCHEMA = pa.schema([("x", pa.int64()), ("p", pa.string())])


def table_actions(configuration: dict[str, str] | None = None, *, reader: int = 1) -> list:
    return [
        Protocol(min_reader_version=reader, min_writer_version=2),
        Metadata(id=str(uuid.uuid4()), schema_string=schema_string(SCHEMA), partition_columns=["p"],
                 configuration=configuration or {}, created_time=1),
    ]


def add(name: str, p: str = "a") -> AddFile:
    return AddFile(path=f"p={p}/{name}.parquet", partition_values={"p": p}, size=100, modification_time=1,
                   data_change=True, stats='{"numRecords":1}')


def append(store, snapshot, *files: AddFile, **kwargs):
    return commit(store, snapshot, Commit(actions=tuple(files), operation="WRITE", operation_parameters={"mode": "Append"},
                                          read_scope=ReadScope.blind_append(), **kwargs))


def create(store, *files: AddFile, configuration: dict[str, str] | None = None):
    return commit(store, None, Commit(actions=(*table_actions(configuration), *files), operation="CREATE TABLE",
                                      read_scope=ReadScope.blind_append()))


def paths(snapshot) -> list[str]:
    return [f.path for f in snapshot.files]


def build_long_table(uri: str, commits: int) -> None:
    """``commits`` versions of one small append each, written directly, checkpointed every 10 by our code."""
    store = open_log_store(uri)
    snapshot = None
    for version in range(commits):
        actions = [*table_actions(), add("f0")] if version == 0 else [add(f"f{version}")]
        store.write(version, serialize_commit(actions))
        snapshot = advance(snapshot, [(version, actions)], table_path=store.table_path)
        if version and version % 10 == 0:
            write_checkpoint(store, snapshot)


@pytest.fixture(params=["memory", "s3"])
def any_uri(request) -> str:
    if request.param == "memory":
        return request.getfixturevalue("memory_uri")
    request.getfixturevalue("local_stack")
    return request.getfixturevalue("s3_uri")


@pytest.fixture
def options(any_uri, request) -> dict[str, str] | None:
    return request.getfixturevalue("storage_options") if any_uri.startswith("s3://") else None


# --- replay and update ------------------------------------------------------------------------------


def test_replay_of_committed_actions_gives_files_schema_and_partitioning(any_uri, options):
    store = open_log_store(any_uri, storage_options=options)
    created = create(store, add("a0"))
    second = append(store, created.snapshot, add("b0", "b"))
    snapshot = load_snapshot(open_log_store(any_uri, storage_options=options))
    assert (created.version, second.version, snapshot.version) == (0, 1, 1)
    assert paths(snapshot) == ["p=a/a0.parquet", "p=b/b0.parquet"]
    assert snapshot.schema == SCHEMA
    assert snapshot.partition_columns == ["p"]
    assert snapshot.protocol.min_writer_version == 2
    assert snapshot.checkpoint_version is None
    assert paths(second.snapshot) == paths(snapshot)


def test_update_reads_only_commits_after_the_snapshot(any_uri, options):
    store = open_log_store(any_uri, storage_options=options)
    snapshot = create(store, add("a0")).snapshot
    for i in range(1, 4):
        append(store, load_snapshot(store), add(f"a{i}"))
    updated = update(open_log_store(any_uri, storage_options=options), snapshot)
    assert updated.version == 3
    assert paths(updated) == [f"p=a/a{i}.parquet" for i in range(4)]
    assert update(store, updated) == updated


def test_update_counts_one_entry_query_and_one_get_per_new_commit(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("a0")).snapshot
    for i in range(1, 4):
        append(store, load_snapshot(store), add(f"a{i}"))
    store.wait_finished()  # the writes' finishing steps (UpdateItem, temp-file DELETE) ended: another process reads a finished log
    counting = CountingLogStore(memory_uri)
    updated = update(counting, snapshot)
    assert updated.version == 3
    assert counting.entry_calls["latest_entry"] == 1
    assert counting.objects.calls["list"] == 1  # after the newest entry: a version without one shows up
    assert sorted(counting.commit_reads()) == [counting.commit_key(v) for v in (1, 2, 3)]


def test_time_travel_shows_each_versions_files_also_before_the_last_checkpoint(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0"), configuration={"delta.checkpointInterval": "3"}).snapshot
    for i in range(1, 8):
        snapshot = append(store, snapshot, add(f"f{i}")).snapshot
    assert read_last_checkpoint(store).version == 6
    for version in range(8):
        old = load_snapshot(store, version)
        assert old.version == version
        assert paths(old) == sorted(f"p=a/f{i}.parquet" for i in range(version + 1))
        assert old.time_travel
    assert load_snapshot(store, 4).checkpoint_version == 3
    assert load_snapshot(store, 2).checkpoint_version is None


def test_time_travel_to_a_version_not_written_raises_version_not_found(memory_uri):
    store = open_log_store(memory_uri)
    create(store, add("f0"))
    with pytest.raises(VersionNotFoundError, match="version 5"):
        load_snapshot(store, 5)


def test_no_table_raises_table_not_found(memory_uri):
    with pytest.raises(TableNotFoundError, match="no table"):
        load_snapshot(open_log_store(memory_uri))


def test_thousand_commit_table_loads_from_its_checkpoint_reading_at_most_ten_commits(memory_uri):
    build_long_table(memory_uri, 1006)
    open_log_store(memory_uri).wait_finished()  # the writes' finishing steps (UpdateItem, temp-file DELETE) ended: another process reads a finished log
    counting = CountingLogStore(memory_uri)
    snapshot = load_snapshot(counting)
    assert snapshot.version == 1005
    assert snapshot.checkpoint_version == 1000
    assert len(snapshot.files) == 1006
    assert len(counting.commit_reads()) == 5 <= 10
    assert counting.entry_calls["latest_entry"] == 1
    assert counting.objects.calls["list"] == 1  # after the newest entry, not the whole log


# --- corrupt logs and checkpoints -------------------------------------------------------------------


def test_truncated_commit_file_raises_corrupt_log_error_naming_version_and_line(memory_uri):
    store = open_log_store(memory_uri)
    create(store, add("f0"))
    body = serialize_commit([add("f1"), add("f2")])
    store.write(1, body[: len(body) - 20])
    with pytest.raises(CorruptLogError, match=r"version 1\).*line 2"):
        load_snapshot(store)


def _checkpointed(memory_uri: str):
    """A table with a checkpoint at 10 and commits 11 and 12."""
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0")).snapshot
    for i in range(1, 13):
        snapshot = append(store, snapshot, add(f"f{i}")).snapshot
    assert read_last_checkpoint(store).version == 10
    return store, paths(snapshot)


def test_a_hint_whose_size_does_not_match_is_a_bad_hint_and_its_whole_checkpoint_is_still_used(memory_uri, caplog):
    """The row count differs: the hint is stale, the checkpoint parses and holds protocol and metadata, so
    it is used (falling back to every commit would cost the reader for nothing)."""
    store, expected = _checkpointed(memory_uri)
    hint = json.loads(store.objects.get(store.log_prefix + "_last_checkpoint"))
    store.objects.put(store.log_prefix + "_last_checkpoint", json.dumps({**hint, "size": hint["size"] + 1}).encode())
    with caplog.at_level(logging.WARNING, logger="table.log.snapshot"):
        snapshot = load_snapshot(store)
    assert paths(snapshot) == expected and snapshot.version == 12
    assert snapshot.checkpoint_version == 10
    assert f"holds {hint['size'] + 1} actions, it holds {hint['size']}" in caplog.text


def test_unreadable_checkpoint_falls_back_to_an_older_listed_checkpoint(memory_uri, caplog):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0")).snapshot
    for i in range(1, 23):
        snapshot = append(store, snapshot, add(f"f{i}")).snapshot
    (name,) = checkpoint_names(20)
    store.write_file(name, b"PAR1 not really parquet")
    with caplog.at_level(logging.WARNING, logger="table.log.snapshot"):
        loaded = load_snapshot(store)
    assert paths(loaded) == paths(snapshot)
    assert loaded.checkpoint_version == 10
    assert "not readable parquet" in caplog.text


def test_missing_checkpoint_whose_commits_were_cleaned_up_raises_corrupt_log_error(memory_uri):
    store, _ = _checkpointed(memory_uri)
    (name,) = checkpoint_names(10)
    store.objects.delete([store.commit_key(0), store.commit_key(1), store.log_prefix + name])
    with pytest.raises(CorruptLogError) as caught:
        load_snapshot(store)
    message = str(caught.value)
    assert "00000000000000000010.checkpoint.parquet" in message and "does not exist" in message
    assert "version 0" in message


def test_missing_or_unusable_last_checkpoint_lists_the_log_and_uses_the_newest_checkpoint(memory_uri):
    store, expected = _checkpointed(memory_uri)
    store.objects.put(store.log_prefix + "_last_checkpoint", b"{not json")
    assert load_snapshot(store).checkpoint_version == 10
    store.objects.delete([store.log_prefix + "_last_checkpoint"])
    snapshot = load_snapshot(store)
    assert snapshot.checkpoint_version == 10 and paths(snapshot) == expected


def test_table_needing_an_unsupported_reader_feature_is_refused(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, serialize_commit([*table_actions(reader=4), add("f0")]))
    with pytest.raises(UnsupportedFeatureError, match="reader version 4") as caught:
        load_snapshot(store)
    assert caught.value.feature == "reader version 4"


# --- history ----------------------------------------------------------------------------------------


def test_history_is_newest_first_with_operation_parameters_and_app_txn(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0")).snapshot
    snapshot = append(store, snapshot, add("f1"), app_id="job-7", app_version=3,
                      operation_metrics={"numFiles": "1"}).snapshot
    append(store, snapshot, add("f2"))
    entries = history(store)
    assert [e.version for e in entries] == [2, 1, 0]
    assert entries[1].operation == "WRITE"
    assert entries[1].operation_parameters == {"mode": "Append"}
    assert entries[1].operation_metrics == {"numFiles": "1", "numAttempts": "1"}
    assert entries[1].app_txns == {"job-7": 3}
    assert entries[2].operation == "CREATE TABLE"
    assert all(e.timestamp and e.timestamp > 1_600_000_000_000 for e in entries)


def test_history_limit_bounds_the_commit_files_read(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0")).snapshot
    for i in range(1, 6):
        snapshot = append(store, snapshot, add(f"f{i}")).snapshot
    store.wait_finished()  # the writes' finishing steps (UpdateItem, temp-file DELETE) ended: another process reads a finished log
    counting = CountingLogStore(memory_uri)
    assert [e.version for e in history(counting, limit=2)] == [5, 4]
    assert len(counting.commit_reads()) == 2


# --- Table ------------------------------------------------------------------------------------------


def test_table_exposes_version_schema_partitioning_and_file_uris(any_uri, options):
    store = open_log_store(any_uri, storage_options=options)
    append(store, create(store, add("a0")).snapshot, add("b%200", "b"))
    table = Table(any_uri, storage_options=options)
    assert table.exists and table.version == 1
    assert table.schema == SCHEMA and table.partition_columns == ["p"]
    uri = TableUri.parse(any_uri)
    assert table.files() == [f"{uri.scheme}://{uri.bucket}/{uri.prefix}/p=a/a0.parquet",
                             f"{uri.scheme}://{uri.bucket}/{uri.prefix}/p=b/b 0.parquet"]
    assert [a.path for a in table.add_actions()] == ["p=a/a0.parquet", "p=b/b%200.parquet"]
    assert [h.version for h in table.history()] == [1, 0]


def test_table_update_reads_new_commits_and_returns_itself(memory_uri):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("f0")).snapshot
    table = Table(memory_uri)
    append(store, snapshot, add("f1"))
    assert table.refresh() is table
    assert table.version == 1 and len(table.files()) == 2


def test_missing_table_raises_table_not_found_and_for_write_gives_an_empty_table(memory_uri):
    with pytest.raises(TableNotFoundError):
        Table(memory_uri)
    table = Table.for_write(memory_uri)
    assert (table.exists, table.version, table.snapshot) == (False, -1, None)
    outcome = create(table.log_store, add("f0"))
    table.set_snapshot(outcome.snapshot)
    assert table.exists and table.version == 0


def test_time_travelled_table_refuses_writes(memory_uri):
    store = open_log_store(memory_uri)
    append(store, create(store, add("f0")).snapshot, add("f1"))
    table = Table(memory_uri, version=0)
    assert table.version == 0 and len(table.files()) == 1
    with pytest.raises(ReadOnlySnapshotError, match="time travel"):
        append(table.log_store, table.snapshot, add("f2"))
    with pytest.raises(ReadOnlySnapshotError):
        table.set_snapshot(append(store, load_snapshot(store), add("f3")).snapshot)
    assert table.refresh().version == 2


def test_package_exports_exactly_the_public_api():
    import table

    api = {"Table", "write_table", "create_table", "CommitResult", "ConflictKind"}
    assert set(table.__all__) - api == {name for name in table.__all__ if name.endswith("Error")}
    assert all(getattr(table, name) is not None for name in table.__all__)
    errors = [getattr(table, name) for name in table.__all__ if name.endswith("Error")]
    assert all(issubclass(e, table.DynacommitError) for e in errors)


def test_every_error_of_the_tree_is_importable_from_table():
    import inspect

    import logstore.errors
    import table
    import table.errors

    tree = {cls for module in (logstore.errors, table.errors) for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, logstore.errors.DynacommitError) and cls.__module__ == module.__name__}
    assert {cls.__name__ for cls in tree} <= set(table.__all__)
    assert all(getattr(table, cls.__name__) is cls for cls in tree)

# --- what a process remembers of a table ------------------------------------------------------------


def _counting_tables(monkeypatch, memory_uri) -> list[CountingLogStore]:
    """Make every Table of this test count its log store's calls; returns the stores as they are opened."""
    import table.location as table_module  # every Table and write opens its stores there

    opened: list[CountingLogStore] = []

    def open_counting(uri, *, storage_options=None):
        opened.append(CountingLogStore(memory_uri))
        return opened[-1]

    monkeypatch.setattr(table_module, "open_log_store", open_counting)
    return opened


def test_opening_a_table_again_in_a_process_reads_only_the_commits_since(memory_uri, monkeypatch):
    store = open_log_store(memory_uri)
    snapshot = create(store, add("a0"), configuration={"delta.checkpointInterval": "2"}).snapshot
    for i in range(1, 4):
        snapshot = append(store, snapshot, add(f"a{i}")).snapshot
    opened = _counting_tables(monkeypatch, memory_uri)
    first = Table(memory_uri)
    assert first.version == 3 and "_last_checkpoint" in " ".join(opened[0].objects.got)
    append(store, snapshot, add("a4"))
    second = Table(memory_uri)
    assert second.version == 4 and paths(second.snapshot) == paths(load_snapshot(store))
    assert second.log_store.commit_reads() == [second.log_store.commit_key(4)]
    assert not any("checkpoint" in key for key in second.log_store.objects.got)


def test_an_append_by_uri_starts_from_the_snapshot_the_process_has_and_reads_nothing_first(memory_uri, monkeypatch):
    write_table(memory_uri, pa.table({"x": [1], "p": ["a"]}))
    opened = _counting_tables(monkeypatch, memory_uri)
    write_table(memory_uri, pa.table({"x": [2], "p": ["a"]}))
    calls = opened[0]
    assert calls.entry_calls["latest_entry"] == 0 and calls.commit_reads() == []
    assert sorted(Table(memory_uri).to_pyarrow_table()["x"].to_pylist()) == [1, 2]
