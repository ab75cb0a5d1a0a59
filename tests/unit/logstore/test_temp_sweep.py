"""The sweep of orphan temp files (issue 7, item 5d): it deletes what no unfinished commit needs, past the
safety age, and nothing else."""

from __future__ import annotations

import math
import time
import uuid

import pytest

from logstore import RecoveryOutcome, TableUri, failpoints, open_log_store
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from logstore.external import CommitEntry
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def crash_at(name):
    return failpoints.armed({name: "crash"})


def backdate(store, name: str, seconds: float) -> None:
    """Make ``_delta_log/<name>`` look ``seconds`` old (the in-memory bucket keeps LastModified by key)."""
    key = store.log_prefix + name
    data, _ = store.objects._objects[key]
    store.objects._objects[key] = (data, int((time.time() - seconds) * 1000))


def temp_names(store) -> list[str]:
    names = [o.key[len(store.log_prefix):] for o in store.objects.list(store.log_prefix)]
    return sorted(n for n in names if n.startswith(".tmp/") or n.endswith(".json.tmp"))


@pytest.fixture
def mem(memory_uri) -> MemoryLogStore:
    return MemoryLogStore(TableUri.parse(memory_uri))


def leave_orphans(store):
    """Versions 0 and 1 committed; then: an orphan temp of a writer killed before its entry (Java layout), a
    delta-rs orphan, a temp left behind by a finished commit (2), the temp of an unfinished commit (3: entry
    incomplete, N.json absent: needed), and a delta-rs temp the newest, incomplete, entry names (4: needed)."""
    store.write(0, body(0))
    store.write(1, body(1))
    with pytest.raises(FailpointCrash), crash_at("logstore.write.after_put_temp"):
        store.write(2, body("orphan"))
    orphan = next(n for n in temp_names(store))
    deltars_orphan = f"_commit_{uuid.uuid4()}.json.tmp"
    store.objects.put(store.log_prefix + deltars_orphan, body("rs-orphan"))
    with pytest.raises(FailpointCrash), crash_at("logstore.write.after_copy_to_final"):
        store.write(2, body(2))
    finished = store._get_entry(2).temp_path
    store._mark_complete(2)  # finished by someone who could not delete the temp file
    with pytest.raises(FailpointCrash), crash_at("logstore.write.after_put_entry"):
        store.write(3, body(3))
    needed = store._get_entry(3).temp_path
    deltars_needed = f"_commit_{uuid.uuid4()}.json.tmp"
    store.objects.put(store.log_prefix + deltars_needed, body(4))
    store._put_entry(CommitEntry(store.table_path, 4, deltars_needed, complete=False))  # delta-rs: no check of 3
    return {"orphan": orphan, "deltars_orphan": deltars_orphan, "needed": needed, "finished": finished,
            "deltars_needed": deltars_needed}


def test_sweep_deletes_old_orphans_and_keeps_what_unfinished_commits_need(mem):
    names = leave_orphans(mem)
    for name in names.values():
        backdate(mem, name, 7200)
    report = mem.sweep_temp_files()
    assert sorted(report.deleted) == sorted([names["orphan"], names["deltars_orphan"], names["finished"]])
    assert sorted(report.in_use) == sorted([names["needed"], names["deltars_needed"]])
    assert report.too_young == () and not report.dry_run
    assert temp_names(mem) == sorted([names["needed"], names["deltars_needed"]])
    # what the unfinished commits need is intact: readers finish them
    reader = open_log_store(mem.table_path)
    assert reader.latest_version() == 4
    assert [reader.read(v) for v in range(5)] == [body(0), body(1), body(2), body(3), body(4)]
    assert temp_names(mem) == []


def test_sweep_keeps_temp_files_younger_than_the_safety_age(mem):
    names = leave_orphans(mem)
    backdate(mem, names["orphan"], 7200)
    report = mem.sweep_temp_files(older_than_seconds=3600)
    assert report.deleted == (names["orphan"],)
    assert sorted(report.too_young) == sorted(n for k, n in names.items() if k != "orphan")
    assert "deleted 1 orphan temp file(s)" in str(report)


def test_a_dry_run_reports_and_deletes_nothing(mem):
    leave_orphans(mem)
    before = temp_names(mem)
    report = mem.sweep_temp_files(older_than_seconds=0, dry_run=True)
    assert report.dry_run and len(report.deleted) == 3
    assert temp_names(mem) == before
    assert "would delete 3" in str(report)


def test_sweep_on_a_store_with_s3_listing_and_batch_delete(store):
    """Both temp layouts listed by prefix and deleted in one batch, on every backend."""
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), crash_at("logstore.write.after_put_temp"):
        store.write(1, body("orphan"))
    with pytest.raises(FailpointCrash), crash_at("logstore.write.after_put_entry"):
        store.write(1, body(1))
    needed = store._get_entry(1).temp_path
    store.objects.put(store.log_prefix + f"_commit_{uuid.uuid4()}.json.tmp", body("rs-orphan"))
    report = store.sweep_temp_files(older_than_seconds=0)
    assert len(report.deleted) == 2 and report.in_use == (needed,)
    assert temp_names(store) == [needed]
    assert store.read(1) == body(1)
    assert store.recover() is RecoveryOutcome.ALREADY_COMPLETE


def test_a_crash_in_the_sweep_leaves_every_needed_temp_file(mem):
    names = leave_orphans(mem)
    with pytest.raises(FailpointCrash), crash_at("logstore.sweep.before_delete"):
        mem.sweep_temp_files(older_than_seconds=0)
    assert len(temp_names(mem)) == len(names)


@pytest.mark.parametrize("bad,error", [(-1, InvalidArgumentError), (math.nan, InvalidArgumentError),
                                       (math.inf, InvalidArgumentError), ("3600", ArgumentTypeError),
                                       (True, ArgumentTypeError)])
def test_a_bad_safety_age_is_refused_by_name(mem, bad, error):
    with pytest.raises(error, match="older_than_seconds"):
        mem.sweep_temp_files(older_than_seconds=bad)
