"""The log store's failpoints: every declared one marks a step a plain run really passes through."""

from __future__ import annotations

import pytest

from logstore import RecoveryOutcome, TableUri, failpoints, open_log_store
from logstore.errors import VersionExistsError
from logstore.external import CommitEntry
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore


def body(n: int) -> bytes:
    return f'{{"commitInfo":{{"n":{n}}}}}\n'.encode()


def logstore_failpoints() -> dict[str, str]:
    import logstore.external  # noqa: F401 - declares the log store's failpoints (and imports logstore.sweep)

    return {name: doc for name, doc in failpoints.declared().items() if name.startswith("logstore.")}


@pytest.fixture
def hits():
    seen: list[str] = []
    failpoints.set_hook(seen.append)
    yield seen
    failpoints.set_hook(None)


from logstore.group import GroupClaim, QueuedAppend  # noqa: E402


def run_plain_scenario(uri: str) -> None:
    """Commits, a writer dying after its commit point, the recovery of what it left, an entry whose temp
    file was deleted (stuck), marked and then abandoned, the sweep of an orphan temp file, and a commit whose
    answer was lost."""
    store = open_log_store(uri)
    store.write(0, body(0))
    store.write(1, body(1))
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        store.write(2, body(2))
    open_log_store(uri).recover()
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        store.write(3, body(3))
    store.objects.delete([store.temp_key(store._get_entry(3).temp_path)])
    recoverer = MemoryLogStore(TableUri.parse(uri), stuck_grace_seconds=0)
    assert recoverer.recover() is RecoveryOutcome.ABANDONED
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_temp": "crash"}):
        store.write(3, body(3))
    assert len(recoverer.sweep_temp_files(older_than_seconds=0).deleted) == 1
    with failpoints.armed({"logstore.write.after_put_entry": "raise"}):  # a lost answer, settled by reading
        store.write(3, body(3))
    # a race lost at the conditional put, the temp file kept and taken by the next version's write
    winner = CommitEntry(store.table_path, 4, ".tmp/00000000000000000004.json.winner", complete=False,
                         summary='{"k":"a"}')
    store.objects.put(store.temp_key(winner.temp_path), body(40))
    store.entries.claim(winner)
    with pytest.raises(VersionExistsError) as lost:
        store.write(4, body(4), keep_temp=True)
    store.write(5, body(4), temp=lost.value.kept)
    # a group commit (logstore/group.py): version 6 won together with the claim of a queued append
    store.queue_append(QueuedAppend(store.table_path, "q-1", '{"add":{}}\n', "{}", 2**31, 2**31 + 3600))
    store.write(6, body(6), group=GroupClaim(None, ("q-1",), 0))


def test_every_declared_log_store_failpoint_is_hit_by_a_plain_run(memory_uri, hits):
    declared = logstore_failpoints()
    assert len(declared) >= 10
    run_plain_scenario(memory_uri)
    missed = sorted(set(declared) - set(hits))
    assert not missed, f"declared but never reached (renamed or dead?): {missed}"


def test_every_failpoint_says_what_the_log_holds_there():
    for name, doc in logstore_failpoints().items():
        assert name.count(".") == 2, name
        assert len(doc) > 40, f"{name}: {doc!r} does not describe the state of the log"


def test_write_steps_are_hit_in_protocol_order(memory_uri, hits):
    store = open_log_store(memory_uri)
    store.write(0, body(0))
    store.wait_finished()
    order = [h for h in hits if h.startswith("logstore.write.")]
    assert order[:5] == [
        "logstore.write.before_put_temp",
        "logstore.write.after_put_temp",
        "logstore.write.before_put_entry",
        "logstore.write.after_put_entry",
        "logstore.write.after_copy_to_final",
    ]
    # the DELETE of the temp file and the UpdateItem marking the entry complete go out together
    assert sorted(order[5:]) == ["logstore.write.after_discard_temp", "logstore.write.after_mark_complete",
                                 "logstore.write.before_mark_complete"]
    assert order.index("logstore.write.before_mark_complete") < order.index("logstore.write.after_mark_complete")


def test_a_raise_after_the_commit_point_is_a_lost_answer_and_the_write_still_succeeds(memory_uri):
    store = open_log_store(memory_uri)
    with failpoints.armed({"logstore.write.after_put_entry": "raise"}):
        store.write(0, body(0))
    store.wait_finished()
    assert store.read(0) == body(0)
    assert store._get_entry(0).complete


def test_a_raise_in_recovery_is_retried(memory_uri):
    store = open_log_store(memory_uri)
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        store.write(0, body(0))
    with failpoints.armed({"logstore.recover.before_copy": "raise"}):
        assert store.latest_version() == 0
    assert store.read(0) == body(0)
