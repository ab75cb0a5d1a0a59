"""The external store's newest entry is a lower bound: versions above it are found by one listing and
named in a warning (issue 7, item 6)."""

from __future__ import annotations

import logging

import pytest

from tests.support.memory import MemoryLogStore


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def delete_entry(store, version: int) -> None:
    """What a person (or a script) deleting the DynamoDB item does, behind the protocol's back."""
    if isinstance(store, MemoryLogStore):
        store.entries.delete(store.table_path, version)
        return
    from logstore.aws import call

    call("dynamodb:DeleteItem", store.client.delete_item, TableName=store.ddb_table, Key=store._key(version))


def unannounced_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("logstore") and "have no entry" in r.getMessage()]


def test_the_newest_entry_deleted_by_hand_does_not_hide_its_version(store, open_store, caplog):
    for v in range(5):
        store.write(v, body(v))
    delete_entry(store, 4)
    reader = open_store()
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert reader.latest_version() == 4
    warnings = unannounced_warnings(caplog)
    assert len(warnings) == 1 and "versions 4 " in warnings[0] and "newest entry is version 3" in warnings[0]
    writer = open_store()
    writer.write(writer.latest_version() + 1, body(5))  # the writer moves on instead of retrying 4 forever
    assert list(writer.list_from(0)) == list(range(6))


def test_a_plain_conditional_put_with_no_entry_is_seen_and_named(store, open_store, caplog):
    for v in range(3):
        store.write(v, body(v))
    assert store.objects.put(store.commit_key(3), body("bypass"), if_absent=True)  # an S3-only writer
    assert store.objects.put(store.commit_key(4), body("bypass-2"), if_absent=True)
    reader = open_store()
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert reader.latest_version() == 4
        assert reader.latest_version() == 4
    warnings = unannounced_warnings(caplog)
    assert len(warnings) == 1, warnings  # once per store
    assert "versions 3, 4 " in warnings[0] and "bypasses DynamoDB" in warnings[0]
    assert reader.read(4) == body("bypass-2")


def test_a_table_with_no_entries_left_is_listed_from_the_known_version_without_a_warning(memory_uri, caplog):
    from logstore import TableUri

    store = MemoryLogStore(TableUri.parse(memory_uri))
    for v in range(12):
        store.write(v, body(v))
    for v in range(12):
        store.entries.delete(store.table_path, v)  # all expired
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert store.latest_version() == 11
        assert store.latest_version(start=10) == 11
    assert unannounced_warnings(caplog) == []


def test_the_known_version_counts_even_when_its_commit_file_was_cleaned_up(memory_uri):
    from logstore import TableUri

    store = MemoryLogStore(TableUri.parse(memory_uri))
    for v in range(11):
        store.write(v, body(v))
    for v in range(11):
        store.entries.delete(store.table_path, v)
    store.objects.delete([store.commit_key(v) for v in range(11)])  # log cleanup after a checkpoint at 10
    store.objects.put(store.log_prefix + f"{10:020d}.checkpoint.parquet", b"PAR1")
    assert store.latest_version(start=10) == 10


def test_latest_version_makes_one_query_and_one_listing_whatever_the_history(memory_uri):
    from tests.support.counting import CountingLogStore

    store = CountingLogStore(memory_uri)
    for v in range(300):
        store.write(v, body(v))
    store.wait_finished()
    counts = {}
    for v in (5, 299):
        store.calls.clear()
        assert store.latest_version(start=min(v, 5)) == 299
        counts[v] = sorted(store.calls)
    assert counts[5] == counts[299] == ["latest_entry", "list"]


@pytest.mark.parametrize("expired", [True, False])
def test_versions_above_an_expired_newest_entry_are_not_warned_about(memory_uri, caplog, expired):
    import dataclasses
    import time

    from logstore import TableUri

    store = MemoryLogStore(TableUri.parse(memory_uri))
    for v in range(4):
        store.write(v, body(v))
    store.entries.delete(store.table_path, 3)  # TTL removed the newer one first
    entry = store._get_entry(2)
    store.entries.replace(dataclasses.replace(entry, expire_time=int(time.time()) + (-60 if expired else 3600)))
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert store.latest_version() == 3
    assert bool(unannounced_warnings(caplog)) is not expired


def test_a_version_committed_between_the_query_and_the_listing_is_not_taken_for_a_bypassing_writer(
        memory_uri, caplog):
    """Under contention a commit often lands after the Query for the newest entry and before the LIST:
    its entry exists, so it is no writer that bypasses DynamoDB, and no warning says so."""
    from logstore import TableUri

    class CommitLandsMeanwhile(MemoryLogStore):
        rival = None

        def _latest_entry(self):
            newest = super()._latest_entry()
            if self.rival is not None:
                rival, self.rival = self.rival, None
                rival.write(newest.version + 1, body("meanwhile"))
            return newest

    uri = TableUri.parse(memory_uri)
    writer = MemoryLogStore(uri)
    for v in range(3):
        writer.write(v, body(v))
    reader = CommitLandsMeanwhile(uri)
    reader.rival = MemoryLogStore(uri)
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert reader.latest_version() == 3
    assert unannounced_warnings(caplog) == []
