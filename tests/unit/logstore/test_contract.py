"""The LogStore contract (logstore/base.py), for every backend."""

from __future__ import annotations

import threading

import pytest

from logstore import (
    RecoveryOutcome,
    TableNotFoundError,
    VersionExistsError,
    VersionNotFoundError,
)


def body(n: int) -> bytes:
    return f'{{"commitInfo":{{"n":{n}}}}}\n'.encode()


def test_written_entries_read_back_exactly(store):
    for v in range(5):
        store.write(v, body(v))
    assert [store.read(v) for v in range(5)] == [body(v) for v in range(5)]


def test_second_write_of_a_version_raises_version_exists_and_keeps_the_first(store, open_store):
    store.write(0, body(0))
    with pytest.raises(VersionExistsError) as info:
        open_store().write(0, body(99))
    assert info.value.version == 0
    assert store.table_path in str(info.value)
    assert store.read(0) == body(0)


def test_latest_version_and_list_from(store):
    for v in range(12):
        store.write(v, body(v))
    assert store.latest_version() == 11
    assert list(store.list_from(0)) == list(range(12))
    assert list(store.list_from(10)) == [10, 11]
    assert list(store.list_from(12)) == []


def test_list_from_ignores_checkpoints_and_temp_files(store):
    for v in range(3):
        store.write(v, body(v))
    store.objects.put(store.log_prefix + f"{2:020d}.checkpoint.parquet", b"PAR1")
    store.objects.put(store.log_prefix + "_last_checkpoint", b"{}")
    store.objects.put(store.log_prefix + "_commit_abc.json.tmp", b"x")
    assert list(store.list_from(0)) == [0, 1, 2]
    assert list(store.list_from(2)) == [2]


def test_writing_past_the_end_is_refused(store):
    store.write(0, body(0))
    with pytest.raises(VersionNotFoundError, match="version 1 does not exist"):
        store.write(2, body(2))
    assert list(store.list_from(0)) == [0]


def test_empty_table_has_no_latest_version(store):
    with pytest.raises(TableNotFoundError, match=store.table_path):
        store.latest_version()
    with pytest.raises(VersionNotFoundError):
        store.read(0)


def test_recover_on_complete_table_is_a_no_op(store):
    assert store.recover() is RecoveryOutcome.NOTHING_TO_RECOVER
    store.write(0, body(0))
    store.wait_finished()  # write returns before the UpdateItem marking the entry complete
    assert store.recover() is RecoveryOutcome.ALREADY_COMPLETE
    assert store.recover(0) is RecoveryOutcome.ALREADY_COMPLETE


def test_negative_or_non_int_versions_are_rejected(store):
    with pytest.raises(ValueError, match="non-negative int"):
        store.write(-1, b"x")
    for bad in (1.5, "1", True):
        with pytest.raises(TypeError, match="non-negative int"):
            store.write(bad, b"x")


def test_eight_threads_racing_write_each_body_exactly_once(store, open_store):
    per_thread, threads = 8, 8
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        mine = open_store()
        try:
            for i in range(per_thread):
                payload = f'{{"commitInfo":{{"writer":{t},"i":{i}}}}}\n'.encode()
                while True:
                    try:
                        nxt = mine.latest_version() + 1
                    except TableNotFoundError:
                        nxt = 0
                    try:
                        mine.write(nxt, payload)
                        break
                    except VersionExistsError:
                        continue
        except BaseException as exc:  # surfaced below; a thread must not die silently
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    versions = list(store.list_from(0))
    assert versions == list(range(per_thread * threads))
    bodies = [store.read(v) for v in versions]
    assert len(set(bodies)) == len(bodies) == per_thread * threads


def test_a_write_makes_the_same_calls_at_version_5_and_500(memory_uri):
    """A commit's work does not grow with the table's history (no listing, no per-version lookups)."""
    from tests.support.memory import MemoryLogStore
    from logstore.objects import MemoryObjectStore
    from logstore.options import TableUri

    calls: list[str] = []

    class Counting(MemoryObjectStore):
        def __getattribute__(self, name):
            if name in ("get", "head", "put", "delete", "list"):
                calls.append(name)
            return super().__getattribute__(name)

    class CountingStore(MemoryLogStore):
        def _get_entry(self, version):
            calls.append("get_entry")
            return super()._get_entry(version)

        def _latest_entry(self):
            calls.append("latest_entry")
            return super()._latest_entry()

    store = CountingStore(TableUri.parse(memory_uri), Counting("counting"))
    counts = {}
    for v in range(501):
        calls.clear()
        store.write(v, body(v))
        store.wait_finished()
        counts[v] = sorted(calls)
    assert counts[5] == counts[500]
    assert "list" not in counts[500]


def test_commit_file_deleted_after_its_commit_reads_as_version_not_found(store):
    store.write(0, body(0))
    store.wait_finished()
    store.objects.delete([store.commit_key(0)])
    with pytest.raises(VersionNotFoundError, match="deleted after the commit"):
        store.read(0)
