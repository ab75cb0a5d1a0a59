"""Writer and recovery publish through one path (logstore/publish.py): an entry left at any step of a write,
or of a recovery, is finished into the same ``N.json`` bytes an uninterrupted writer leaves, with the entry
complete and no temp file behind."""

from __future__ import annotations

import pytest

from logstore import TableUri, failpoints, open_log_store
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore

BODY = b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"a.parquet","size":1}}\n'


class Routes(MemoryLogStore):
    """The in-memory store, noting which route each publish of ``N.json`` took."""

    def __init__(self, uri: str, seen: list[str]):
        super().__init__(TableUri.parse(uri))
        self.seen = seen

    def _publish_final(self, version, body, route, *, present=False):
        self.seen.append(route.name)
        return super()._publish_final(version, body, route, present=present)


def finished(store) -> tuple[bytes, bool, list[str]]:
    """N.json of version 1 as stored, whether its entry is complete, and the temp files left."""
    store.wait_finished()
    temps = [i.key for i in store.objects.list(store.log_prefix) if "/.tmp/" in i.key]
    return store.objects.get(store.commit_key(1)), store._get_entry(1).complete, temps


def uninterrupted(uri: str) -> bytes:
    store = open_log_store(uri)
    store.write(0, b'{"commitInfo":{}}\n')
    store.write(1, BODY)
    data, complete, temps = finished(store)
    assert complete and temps == []
    return data


@pytest.mark.parametrize("cut", ["logstore.write.after_put_entry", "logstore.write.after_copy_to_final",
                                 "logstore.write.after_discard_temp"])
def test_recovery_of_a_write_cut_at_each_step_leaves_the_writers_bytes(memory_uri, cut):
    expected = uninterrupted(memory_uri + "-twin")
    writer = open_log_store(memory_uri)
    writer.write(0, b'{"commitInfo":{}}\n')
    with pytest.raises(FailpointCrash), failpoints.armed({cut: "crash"}):
        writer.write(1, BODY)
        writer.wait_finished()  # the temp file's DELETE runs on the pool: a crash there is raised here
    seen: list[str] = []
    Routes(memory_uri, seen).recover()
    assert finished(open_log_store(memory_uri)) == (expected, True, [])
    assert expected == BODY
    # recovery went through the same path while the temp file was there (to PUT N.json, or to compare it with
    # the N.json the writer had put); once the writer had deleted it, only the entry was left to mark
    assert seen == ([] if cut == "logstore.write.after_discard_temp" else ["recovery"])


@pytest.mark.parametrize("cut", ["logstore.recover.before_copy", "logstore.recover.after_copy"])
def test_a_recovery_cut_at_each_step_is_finished_by_the_next_into_the_same_bytes(memory_uri, cut):
    expected = uninterrupted(memory_uri + "-twin")
    writer = open_log_store(memory_uri)
    writer.write(0, b'{"commitInfo":{}}\n')
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        writer.write(1, BODY)
    with pytest.raises(FailpointCrash), failpoints.armed({cut: "crash"}):
        open_log_store(memory_uri).recover()
    seen: list[str] = []
    Routes(memory_uri, seen).recover()
    assert finished(open_log_store(memory_uri)) == (expected, True, [])
    assert seen == ["recovery"]


def test_the_writer_publishes_through_the_same_path(memory_uri):
    seen: list[str] = []
    store = Routes(memory_uri, seen)
    store.write(0, b'{"commitInfo":{}}\n')
    store.write(1, BODY)
    assert seen == ["writer", "writer"]
    assert finished(store) == (uninterrupted(memory_uri + "-twin"), True, [])
