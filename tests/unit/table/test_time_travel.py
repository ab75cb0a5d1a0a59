"""Time travel by timestamp, by Delta's rules: the newest version committed at or before the moment, commit
times made increasing, in-commit timestamps from their enablement on, an error before the first version."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import logstore.objects
from table import InvalidArgumentError, Table, VersionNotFoundError, write_table
from table.log.actions import CommitInfo, Metadata, Protocol, serialize_commit
from table.log.schema import schema_string
from table.log.timestamps import first_at_or_after


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


@pytest.fixture
def clock(monkeypatch):
    """The in-memory object store's clock: each PUT happens at the next of the times given."""
    times: list[int] = []
    monkeypatch.setattr(logstore.objects, "_now_ms", lambda: times.pop(0) if times else 10**13)
    return times


def commit_at(uri: str, clock: list[int], ms: int, value: int) -> None:
    clock[:] = [ms] * 50  # every object of this commit (data file, temp file, N.json) is written then
    write_table(uri, pa.table({"id": [value]}))
    clock.clear()


def test_the_version_at_a_moment_is_the_newest_committed_at_or_before_it(memory_uri, clock):
    for version, ms in enumerate((1_000_000, 2_000_000, 3_000_000)):
        commit_at(memory_uri, clock, ms, version)
    for moment, expected in ((1_000_000, 0), (1_999_999, 0), (2_000_000, 1), (2_500_000, 1), (3_000_000, 2),
                             (9_000_000, 2)):
        table = Table(memory_uri, timestamp=at(moment))
        assert table.version == expected
        assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(expected + 1))
    assert Table(memory_uri, timestamp="1970-01-01T00:33:20Z").version == 1  # 2,000,000 ms, as ISO-8601
    assert Table(memory_uri, timestamp=at(2_500_000).replace(tzinfo=None)).version == 1  # naive means UTC


def test_a_range_starting_at_a_moment_starts_at_the_first_version_committed_at_or_after_it(memory_uri, clock):
    """Delta's start of a timestamp range (a stream's startingTimestamp, the change feed's start): the earliest
    version for a moment before every commit, the newest + 1 for one after every commit."""
    for version, ms in enumerate((1_000_000, 2_000_000, 3_000_000)):
        commit_at(memory_uri, clock, ms, version)
    table = Table(memory_uri)
    expected = {0: 0, 1_000_000: 0, 1_000_001: 1, 2_000_000: 1, 2_500_000: 2, 3_000_000: 2, 3_000_001: 3}
    assert {ms: first_at_or_after(table.log_store, table.snapshot, at(ms)) for ms in expected} == expected
    assert first_at_or_after(table.log_store, table.snapshot, "1970-01-01 00:33:20") == 1  # 2,000,000 ms, UTC


def test_a_moment_before_the_first_version_is_an_error_naming_both(memory_uri, clock):
    commit_at(memory_uri, clock, 5_000_000, 0)
    with pytest.raises(VersionNotFoundError, match=r"before the earliest version available.*version 0, committed "
                                                   r"at 1970-01-01T01:23:20.000\+00:00"):
        Table(memory_uri, timestamp=at(4_999_999))


def test_commit_times_that_go_backwards_count_as_a_millisecond_after_the_previous(memory_uri, clock):
    for version, ms in enumerate((5_000_000, 3_000_000, 3_000_000, 7_000_000)):  # clocks of other writers
        commit_at(memory_uri, clock, ms, version)
    assert [Table(memory_uri, timestamp=at(ms)).version for ms in (5_000_000, 5_000_001, 5_000_002, 6_999_999)] \
        == [0, 1, 2, 2]
    with pytest.raises(VersionNotFoundError):
        Table(memory_uri, timestamp=at(4_000_000))


def test_in_commit_timestamps_decide_from_their_enablement_on(memory_uri, clock):
    """Versions 0-1 by file time; version 2 enables in-commit timestamps, which then rule (far from the
    file times, so that using the wrong one shows)."""
    table = Table.for_write(memory_uri)
    schema = schema_string(pa.schema([("id", pa.int64())]))
    store = table.log_store

    def put(version, ms, actions, ict=None):
        info = {"timestamp": ms, "operation": "WRITE"} | ({"inCommitTimestamp": ict} if ict is not None else {})
        clock[:] = [ms] * 10
        store.write(version, serialize_commit([CommitInfo(**info), *actions]))
        clock.clear()

    put(0, 1_000_000, [Protocol(min_reader_version=1, min_writer_version=2), Metadata(id="t", schema_string=schema)])
    put(1, 2_000_000, [])
    enabled = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "2",
               "delta.inCommitTimestampEnablementTimestamp": "50000000"}
    put(2, 3_000_000, [Metadata(id="t", schema_string=schema, configuration=enabled)], ict=50_000_000)
    put(3, 3_000_001, [], ict=60_000_000)
    put(4, 3_000_002, [], ict=70_000_000)
    expected = {1_500_000: 0, 2_500_000: 1, 49_999_999: 1, 50_000_000: 2, 65_000_000: 3, 70_000_000: 4,
                99_000_000: 4}
    assert {ms: Table(memory_uri, timestamp=at(ms)).version for ms in expected} == expected
    first = {0: 0, 2_000_000: 1, 2_000_001: 2, 50_000_000: 2, 50_000_001: 3, 70_000_000: 4, 70_000_001: 5}
    newest = Table(memory_uri).snapshot
    assert {ms: first_at_or_after(store, newest, at(ms)) for ms in first} == first


def test_version_and_timestamp_together_are_refused_and_load_as_version_moves_a_table(memory_uri, clock):
    for version, ms in enumerate((1_000_000, 2_000_000)):
        commit_at(memory_uri, clock, ms, version)
    with pytest.raises(InvalidArgumentError, match="not both"):
        Table(memory_uri, version=0, timestamp=at(1_000_000))
    with pytest.raises(InvalidArgumentError, match="not ISO-8601"):
        Table(memory_uri, timestamp="yesterday")
    table = Table(memory_uri)
    assert table.load_as_version(at(1_500_000)).version == 0 and table.snapshot.time_travel
    assert table.load_as_version(1).version == 1
    assert table.refresh().version == 1 and not table.snapshot.time_travel
