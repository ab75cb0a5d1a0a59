"""A writer that skips DynamoDB (deltalake >= 1.6.1: an S3 conditional PUT of ``N.json``, no item) takes a
version between our DynamoDB put and our PUT of ``N.json``. Our writer must not report success for a
version that holds another commit: it commits at the next one; recovery of an entry whose ``N.json`` holds
another writer's commit keeps the entry's temp file (SUPERSEDED) and marks the entry complete; readers use
versions that have no entry. deltalake 1.6.6 (this interpreter's) is the other writer, on the moto server.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from logstore import RecoveryOutcome, failpoints, open_log_store
from logstore.external import WRITE_AFTER_PUT_ENTRY
from table import Table, write_table

pytestmark = pytest.mark.interop


def rows(tag: str) -> pa.Table:
    return pa.table({"tag": [tag]})


def deltalake_options(storage_options: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}


def deltalake_append(uri: str, storage_options: dict[str, str], tag: str) -> None:
    from deltalake import write_deltalake

    write_deltalake(uri, rows(tag), mode="append", storage_options=deltalake_options(storage_options))


def entry(store, version: int):
    return store._get_entry(version)  # the DynamoDB item as the store reads it


def tags(uri: str, storage_options: dict[str, str]) -> list[str]:
    return sorted(Table(uri, storage_options=storage_options).to_pyarrow_table()["tag"].to_pylist())


def test_our_commit_that_loses_its_version_to_a_conditional_put_commits_at_the_next(s3_uri, storage_options):
    write_table(s3_uri, rows("first"), storage_options=storage_options)  # version 0

    def theirs_in_between(name: str) -> None:
        if name == WRITE_AFTER_PUT_ENTRY and not taken:
            taken.append(True)
            deltalake_append(s3_uri, storage_options, "theirs")  # writes 1.json, no DynamoDB item

    taken: list[bool] = []
    failpoints.set_hook(theirs_in_between)
    try:
        result = write_table(s3_uri, rows("ours"), storage_options=storage_options)
    finally:
        failpoints.set_hook(None)
    assert taken and result.version == 2  # lost 1 to deltalake after winning its DynamoDB entry
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.wait_finished()
    lost = entry(store, 1)
    assert lost is not None and lost.complete  # no Delta or delta-rs 1.6.0 reader will try to finish it
    assert store.objects.head(store.temp_key(lost.temp_path)) is None  # our own temp file: we know we lost
    assert tags(s3_uri, storage_options) == ["first", "ours", "theirs"]
    from deltalake import DeltaTable

    theirs = DeltaTable(s3_uri, storage_options=deltalake_options(storage_options))
    assert theirs.version() == 2 and sorted(theirs.to_pyarrow_table()["tag"].to_pylist()) == tags(s3_uri,
                                                                                                     storage_options)


def test_recovery_keeps_the_temp_file_of_an_entry_whose_version_another_writer_published(s3_uri, storage_options,
                                                                                      caplog):
    write_table(s3_uri, rows("first"), storage_options=storage_options)
    with failpoints.armed({WRITE_AFTER_PUT_ENTRY: "crash"}), pytest.raises(failpoints.FailpointCrash):
        write_table(s3_uri, rows("dead"), storage_options=storage_options)  # won 1 in DynamoDB, then "died"
    deltalake_append(s3_uri, storage_options, "theirs")  # deltalake sees 0 as the newest: writes 1.json
    store = open_log_store(s3_uri, storage_options=storage_options)
    won = entry(store, 1)
    assert won is not None and not won.complete
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert store.recover(1) is RecoveryOutcome.SUPERSEDED
    assert "another writer's commit" in caplog.text
    assert entry(store, 1).complete
    assert store.objects.get(store.temp_key(won.temp_path))  # what is left of the dead commit is kept
    assert Table(s3_uri, storage_options=storage_options).version == 1
    assert tags(s3_uri, storage_options) == ["first", "theirs"]
    write_table(s3_uri, rows("next"), storage_options=storage_options)  # the table goes on
    assert tags(s3_uri, storage_options) == ["first", "next", "theirs"]


def test_readers_and_writers_use_versions_written_without_an_entry(s3_uri, storage_options):
    write_table(s3_uri, rows("ours-0"), storage_options=storage_options)
    for n in range(3):
        deltalake_append(s3_uri, storage_options, f"theirs-{n}")  # 1, 2, 3: no DynamoDB items
    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == 3
    assert write_table(table, rows("ours-4")).version == 4
    assert tags(s3_uri, storage_options) == ["ours-0", "ours-4", "theirs-0", "theirs-1", "theirs-2"]
