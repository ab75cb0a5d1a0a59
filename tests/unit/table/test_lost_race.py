"""A lost race costs one more conditional put (issue 23, item 1).

A blind append that loses version N to another blind append learns who won from its refused put (the
winner's entry and its ``commitSummary``), tries N+1 at once with the temp file it already wrote, and reads
the winner's ``N.json`` only later, when its snapshot is next needed. Every other winner (a metadata change,
a removal, an entry without a summary as Delta's and delta-rs's writers leave, a winner holding our
application id) is read and checked with Delta's rules as before.

The race is made deterministic: the winner commits, through the real transaction on another store of the
same table, from inside the loser's conditional put, just before the loser's put reaches the entry table.
The loser's requests are counted (tests/support/counting.py); the expectation of what the table holds is
computed independently, by parsing the log files with ``json``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid

import pytest

from logstore import TableUri, failpoints
from logstore.errors import VersionExistsError
from logstore.external import CommitEntry
from logstore.steps import PUBLISHED
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore, memory_bucket
from table.errors import CommitConflictError, ConflictKind
from table.log import summary
from table.log.actions import AddFile, Metadata, Protocol, Txn
from table.log.commit import Commit, ReadScope
from table.log.schema import schema_string
from table.log.checkpoint import read_last_checkpoint
from table.log.outcome import CatchUp
from table.log.snapshot import advance, load_snapshot, read_commit
from table.log.transaction import MAX_BEHIND, CommitStatus, commit, may_go_past
from tests.support.counting import CountingLogStore
from tests.unit.table.test_transaction import PROTOCOL, SCHEMA, add, metadata


@pytest.fixture(autouse=True)
def racing(monkeypatch):
    """Item 1's path, what a store without transactions (dynalite) does: group commit (item 2, whose lost
    races queue instead: tests/unit/table/test_group_commit.py) is not available."""
    monkeypatch.setattr(MemoryLogStore, "_transactions_supported", lambda self: False)


def blind(*adds: AddFile, app: tuple[str, int] | None = None) -> Commit:
    extra = {} if app is None else {"app_id": app[0], "app_version": app[1]}
    return Commit(actions=tuple(adds), operation="WRITE", operation_parameters={"mode": "Append"},
                  read_scope=ReadScope.blind_append(), **extra)


def created(uri: str):
    store = MemoryLogStore(TableUri.parse(uri))
    first = Commit(actions=(PROTOCOL, metadata(), add("a0")), operation="CREATE TABLE",
                   read_scope=ReadScope.blind_append())
    return commit(store, None, first).snapshot


class Raced(CountingLogStore):
    """The loser's store: the first conditional put it sends lets ``winner`` commit first."""

    winner = None

    def _put_entry(self, entry):
        if self.winner is not None:
            run, self.winner = self.winner, None
            run()
        return super()._put_entry(entry)


def log_files(uri: str) -> dict[int, list[dict]]:
    """Every commit of the table, parsed with json alone: the independent expectation."""
    parsed = TableUri.parse(uri)
    bucket = memory_bucket(parsed.bucket)
    prefix = parsed.key("_delta_log/")
    found = {}
    for info in bucket.list(prefix):
        name = info.key[len(prefix):]
        if "/" not in name and name.endswith(".json"):
            found[int(name[:20])] = [json.loads(line) for line in bucket.get(info.key).decode().splitlines()]
    return found


def live_paths(uri: str) -> set[str]:
    live: set[str] = set()
    for _, actions in sorted(log_files(uri).items()):
        for action in actions:
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    return live


def race(uri: str, base, winner_commit: Commit, *, winner_store=None):
    loser = Raced(TableUri.parse(uri))
    other = winner_store or MemoryLogStore(TableUri.parse(uri))
    won = []
    loser.winner = lambda: won.append(settled(other, base, winner_commit))
    loser.recorder.clear()
    return loser, won


def settled(store, base, winner_commit: Commit):
    """The winner's commit, its entry marked complete before the loser's put goes on: what the loser then
    finds does not depend on how fast this machine runs the winner's finishing steps (a winner still
    finishing is waited for, and finished by the loser when it stalls: the tests at the end of this file)."""
    done = commit(store, base, winner_commit)
    assert store.wait_finished(10)
    return done


def temp_puts(store: CountingLogStore) -> list[str]:
    return [k for k in store.objects.put_keys if "/.tmp/" in k]


# --- the cheap path -----------------------------------------------------------------------------


def test_a_blind_append_losing_to_a_blind_append_commits_next_with_one_more_put_and_no_read_of_the_winner(memory_uri):
    base = created(memory_uri)
    loser, won = race(memory_uri, base, blind(add("theirs")))
    outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert won[0].version == 1
    assert (outcome.status, outcome.version, outcome.attempts) == (CommitStatus.COMMITTED, 2, 2)
    assert loser.entry_calls["put_entry"] == 2                    # one more conditional put, nothing else won
    assert len(temp_puts(loser)) == 1                             # the temp file written once, named twice
    assert loser.commit_reads() == []                             # the winner's 1.json was not read
    assert "latest_entry" not in loser.entry_calls and "list" not in loser.objects.calls  # no Query, no LIST
    # the kept temp file is now the published version 2, and gone: no temp file is left behind
    assert not [i.key for i in memory_bucket(loser.uri.bucket).list(loser.uri.key("_delta_log/.tmp/"))]
    # the log, read independently: both appends, each once, ours after theirs
    files = log_files(memory_uri)
    assert sorted(files) == [0, 1, 2]
    assert [a["add"]["path"] for a in files[2] if "add" in a] == ["p=a/ours.parquet"]
    info = files[2][0]["commitInfo"]
    assert info["readVersion"] == 0 and info["isBlindAppend"] is True
    assert info["operationMetrics"]["numAttempts"] == "1"  # the bytes of the attempt that built them, reused
    # the snapshot comes later, when asked for, and then reads the winner
    assert outcome.known is None and outcome.catch_up is not None
    loser.objects.got.clear()
    after = outcome.catch_up()
    assert after.version == 2
    assert {f.path for f in after.files} == live_paths(memory_uri) == {"p=a/a0.parquet", "p=a/theirs.parquet",
                                                                      "p=a/ours.parquet"}
    assert loser.commit_reads() == [loser.commit_key(1)]
    assert after == load_snapshot(MemoryLogStore(TableUri.parse(memory_uri)))


def test_a_lost_race_the_winners_entry_settles_is_retried_at_once_and_marks_nobody(memory_uri, monkeypatch):
    """Issue 23 item 3: the next attempt of such a loser is a check and a put, its bytes already in storage;
    a pause would only leave the version to others (at 4 writers the pauses were half the writers' time).
    It does not mark the winner's entry either (no turn asked of it) until it lost WAIT_MARK_LOSSES
    versions (tests/unit/logstore/test_ambiguity.py)."""
    from logstore import deadline

    slept = []
    real_sleep = deadline.sleep
    monkeypatch.setattr(deadline, "sleep", lambda seconds: (slept.append(seconds), real_sleep(seconds)))
    base = created(memory_uri)
    loser, won = race(memory_uri, base, blind(add("theirs")))
    outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert won[0].version == 1
    assert (outcome.status, outcome.version, outcome.attempts) == (CommitStatus.COMMITTED, 2, 2)
    assert [s for s in slept if s > 0] == []  # no pause between the lost version and the next
    assert "mark_waiting" not in loser.entry_calls  # the winner was not asked to take a turn
    assert sorted(log_files(memory_uri)) == [0, 1, 2]


def test_a_version_taken_before_the_check_is_judged_by_its_entry_too(memory_uri):
    """A long-lived writer's snapshot is behind: the version it tries exists already (its HEAD says so). One
    Query of the entries from that version on replaces the reading of the winners, the temp file is kept,
    and the next attempt goes after the newest of them."""
    base = created(memory_uri)
    winner = MemoryLogStore(TableUri.parse(memory_uri))
    snapshot = base
    for name in ("theirs-1", "theirs-2", "theirs-3"):
        snapshot = commit(winner, snapshot, blind(add(name))).snapshot
    assert winner.wait_finished(10)  # its entries are complete: the loser's next check need not read them again
    loser = CountingLogStore(memory_uri)
    outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (outcome.version, outcome.attempts) == (4, 2)
    assert loser.entry_calls["put_entry"] == 1 and loser.entry_calls["entries_from"] == 1
    assert loser.entry_calls["get_entry"] == 1  # version 0's, at the first check
    assert len(temp_puts(loser)) == 1 and loser.commit_reads() == []
    assert "latest_entry" not in loser.entry_calls and "list" not in loser.objects.calls
    assert {f.path for f in outcome.catch_up().files} == live_paths(memory_uri)


def test_entries_carry_what_the_commit_is_and_keep_it_when_complete(memory_uri):
    base = created(memory_uri)
    store = MemoryLogStore(TableUri.parse(memory_uri))
    commit(store, base, blind(add("x"), app=("job", 7)))
    store.wait_finished(10)
    entry = store._get_entry(1)
    assert entry.complete
    found = summary.parse(entry.summary)
    assert found.appends_only and dict(found.txns) == {"job": 7}
    assert summary.parse(store._get_entry(0).summary).kinds == "amp"  # the create: add, metaData, protocol


def test_a_commit_due_for_a_checkpoint_returns_before_the_winners_are_read_and_checkpoints_after(memory_uri):
    """The checkpoint needs the winners read: that read and the checkpoint run after the commit returned, and
    the snapshot the writer gets next shares the read."""
    store = MemoryLogStore(TableUri.parse(memory_uri))
    first = Commit(actions=(PROTOCOL, metadata(configuration={"delta.checkpointInterval": "2"}), add("a0")),
                   operation="CREATE TABLE", read_scope=ReadScope.blind_append())
    base = commit(store, None, first).snapshot
    loser, _ = race(memory_uri, base, blind(add("theirs")))
    winner_key, gate, plain_get = loser.commit_key(1), threading.Event(), loser.objects.get

    def gated(key):  # the read of the winner waits until the commit has returned
        if key == winner_key:
            assert gate.wait(10)
        return plain_get(key)

    loser.objects.get = gated
    outcome = commit(loser, base, blind(add("ours")))
    assert (outcome.version, outcome.known) == (2, None)
    fresh = MemoryLogStore(TableUri.parse(memory_uri))
    assert read_last_checkpoint(fresh) is None       # not yet: its read of version 1 waits for the gate
    gate.set()
    assert loser.wait_finished(10)
    assert read_last_checkpoint(fresh).version == 2
    checkpointed = load_snapshot(MemoryLogStore(TableUri.parse(memory_uri)))
    assert checkpointed.checkpoint_version == 2
    assert {f.path for f in checkpointed.files} == live_paths(memory_uri)
    assert outcome.snapshot.version == 2 and {f.path for f in outcome.snapshot.files} == live_paths(memory_uri)
    assert loser.commit_reads() == [winner_key]       # read once, for the checkpoint and the writer both


def test_a_checkpoint_written_after_the_commit_does_not_wait_on_the_pool_it_runs_on(memory_uri, monkeypatch):
    """The checkpoint's catch-up reads the winners on the request pool and waits for them: it runs on a pool
    of its own, or with every request worker taken by such checkpoints nothing would read (here the request
    pool has one worker)."""
    from logstore import pool

    store = MemoryLogStore(TableUri.parse(memory_uri))
    first = Commit(actions=(PROTOCOL, metadata(configuration={"delta.checkpointInterval": "2"}), add("a0")),
                   operation="CREATE TABLE", read_scope=ReadScope.blind_append())
    base = commit(store, None, first).snapshot
    loser, _ = race(memory_uri, base, blind(add("theirs")))
    monkeypatch.setattr(pool, "_DEFAULT", pool.Pool(1, "one-worker-io"))
    outcome = commit(loser, base, blind(add("ours")))
    assert outcome.version == 2
    assert loser.wait_finished(10)
    assert read_last_checkpoint(MemoryLogStore(TableUri.parse(memory_uri))).version == 2


# --- the next commit goes past the versions left unread (the catch-up off the commit path) -------------


def test_the_next_blind_append_goes_past_the_versions_the_last_one_left_unread(memory_uri):
    base = created(memory_uri)
    loser, won = race(memory_uri, base, blind(add("theirs-1")))
    first = commit(loser, base, blind(add("ours-1")))
    assert (first.version, first.known) == (2, None)
    # another blind append takes version 3 just before our next put
    loser.winner = lambda: won.append(settled(MemoryLogStore(TableUri.parse(memory_uri)), won[0].snapshot,
                                              blind(add("theirs-2"))))
    behind = first.catch_up
    second = commit(loser, behind.base, blind(add("ours-2")), behind=behind)
    third = commit(loser, second.catch_up.base, blind(add("ours-3")), behind=second.catch_up)
    loser.wait_finished(10)
    assert won[1].version == 3
    assert [(o.version, o.attempts) for o in (second, third)] == [(4, 2), (5, 1)]
    assert loser.entry_calls["put_entry"] == 5      # one per attempt: 2 + 2 + 1
    assert loser.commit_reads() == []                # neither winner, nor our own commits, read on the way
    assert "latest_entry" not in loser.entry_calls and "list" not in loser.objects.calls
    assert third.catch_up.unread == (1, 3) and [v for v, _ in third.catch_up.known] == [2, 4]
    after = third.snapshot                           # read now, once: the two winners
    assert sorted(loser.commit_reads()) == [loser.commit_key(1), loser.commit_key(3)]
    assert after.version == 5 and {f.path for f in after.files} == live_paths(memory_uri)
    assert after == load_snapshot(MemoryLogStore(TableUri.parse(memory_uri)))
    files = log_files(memory_uri)
    assert [a["add"]["path"] for a in files[5] if "add" in a] == ["p=a/ours-3.parquet"]
    assert files[5][0]["commitInfo"]["readVersion"] == 0  # built on the snapshot it read: version 0


def _behind(base, *, written=None, known=(), judged=True, unread=(1,)):
    store = MemoryLogStore(TableUri.parse(f"memory://mem-{uuid.uuid4().hex[:8]}/t"))
    return CatchUp(store, base, tuple(unread), 1 + len(unread) + len(known),
                   written if written is not None else [add("ours")], judged=judged, known=tuple(known))


def test_what_may_go_past_unread_versions_and_what_reads_them_first(memory_uri):
    base = created(memory_uri)
    assert may_go_past(blind(add("x")), _behind(base))
    # an application's txn must be checked against every version; so must an identity re-plan
    assert not may_go_past(blind(add("x"), app=("job", 1)), _behind(base))
    assert not may_go_past(dataclasses.replace(blind(add("x")), replan=lambda s, c: c), _behind(base))
    # not a blind append of files
    assert not may_go_past(Commit(actions=(add("x"),), operation="WRITE", read_scope=ReadScope.whole_table()),
                           _behind(base))
    # our own last commit changed the schema: the base no longer holds the newest metadata
    assert not may_go_past(blind(add("x")), _behind(base, written=[metadata(), add("ours")]))
    # versions not judged by their entries (a group member's), or too many of them
    assert not may_go_past(blind(add("x")), _behind(base, judged=False))
    assert not may_go_past(blind(add("x")), _behind(base, unread=range(1, MAX_BEHIND + 1)))
    # entries that depend on the version: in-commit timestamps, row tracking
    for feature, key in (("inCommitTimestamp", "delta.enableInCommitTimestamps"),
                         ("rowTracking", "delta.enableRowTracking")):
        protocol = Protocol(min_reader_version=3, min_writer_version=7, reader_features=[],
                            writer_features=[feature, *(["domainMetadata"] if feature == "rowTracking" else [])])
        featured = advance(None, [(0, [protocol, metadata(configuration={key: "true"}), add("a0")])],
                           table_path=base.table_path)
        assert not may_go_past(blind(add("x")), _behind(featured)), feature


def test_a_catch_up_far_behind_reads_the_newest_checkpoint_and_the_commits_after_it(memory_uri):
    store = MemoryLogStore(TableUri.parse(memory_uri))
    first = Commit(actions=(PROTOCOL, metadata(configuration={"delta.checkpointInterval": "2"}), add("a0")),
                   operation="CREATE TABLE", read_scope=ReadScope.blind_append())
    base = snapshot = commit(store, None, first).snapshot
    for i in range(1, 11):
        snapshot = commit(store, snapshot, blind(add(f"t{i}"))).snapshot
    store.wait_finished(10)
    counting = CountingLogStore(memory_uri)
    written = read_commit(store, 10)
    after = CatchUp(counting, base, tuple(range(1, 10)), 10, written)()
    assert counting.commit_reads() == [counting.commit_key(9)]   # checkpoint 8, then 9: not the nine commits
    assert after.version == 10 and {f.path for f in after.files} == live_paths(memory_uri)
    assert {f.path for f in after.files} == {f.path for f in load_snapshot(store).files}


# --- winners the entry does not settle: read and checked as Delta does -------------------------------


def test_a_blind_append_losing_to_a_metadata_change_reads_it_and_conflicts(memory_uri):
    base = created(memory_uri)
    changed = Metadata(**{**base.metadata.model_dump(), "configuration": {"delta.appendOnly": "true"}})
    loser, won = race(memory_uri, base, Commit(actions=(changed,), operation="SET TBLPROPERTIES",
                                               read_scope=ReadScope.whole_table()))
    with pytest.raises(CommitConflictError) as conflict:
        commit(loser, base, blind(add("ours")))
    assert conflict.value.kind is ConflictKind.METADATA_CHANGED
    assert loser.commit_reads() == [loser.commit_key(1)]
    assert loser.entry_calls["put_entry"] == 1
    assert sorted(log_files(memory_uri)) == [0, 1]


def test_a_blind_append_losing_to_a_removal_reads_it_and_commits_without_conflict(memory_uri):
    base = created(memory_uri)
    removal = next(iter(base.files)).remove(deletion_timestamp=1)
    loser, _ = race(memory_uri, base, Commit(actions=(removal,), operation="DELETE", read_scope=ReadScope.whole_table()))
    outcome = commit(loser, base, blind(add("ours")))
    assert outcome.version == 2 and outcome.snapshot is not None
    assert loser.commit_reads() == [loser.commit_key(1)]
    assert len(temp_puts(loser)) == 2  # a body built again on the winner
    assert {f.path for f in outcome.snapshot.files} == live_paths(memory_uri) == {"p=a/ours.parquet"}


def test_an_entry_without_a_summary_is_read_as_before(memory_uri):
    """The winner's entry has no commitSummary, as those of Delta's and delta-rs's writers (and entries Delta's
    recovery rewrote): the loser reads 1.json and goes on as before."""

    class DeltaShaped(MemoryLogStore):  # a writer that knows nothing of summaries or kept temp files
        def write(self, version, body, *, overwrite=False, before_commit=None):
            super().write(version, body, overwrite=overwrite, before_commit=before_commit)

    base = created(memory_uri)
    loser, _ = race(memory_uri, base, blind(add("theirs")), winner_store=DeltaShaped(TableUri.parse(memory_uri)))
    outcome = commit(loser, base, blind(add("ours")))
    assert MemoryLogStore(TableUri.parse(memory_uri))._get_entry(1).summary is None
    assert outcome.version == 2 and outcome.snapshot is not None
    assert loser.commit_reads() == [loser.commit_key(1)]
    assert {f.path for f in outcome.snapshot.files} == live_paths(memory_uri)


def test_a_winner_holding_our_application_id_is_read(memory_uri):
    base = created(memory_uri)
    loser, _ = race(memory_uri, base, blind(add("first-run"), app=("job", 3)))
    outcome = commit(loser, base, blind(add("second-run"), app=("job", 3)))
    assert (outcome.status, outcome.version) == (CommitStatus.ALREADY_COMMITTED, 1)
    assert loser.commit_reads() == [loser.commit_key(1)]
    assert sorted(log_files(memory_uri)) == [0, 1]
    assert not [i.key for i in memory_bucket(loser.uri.bucket).list(loser.uri.key("_delta_log/.tmp/"))]


def test_a_winner_that_bypassed_dynamodb_is_caught_by_the_conditional_publish(memory_uri):
    """A writer that skips the entry table puts 2.json between the loser's check and its publish: the
    loser's conditional PUT of 2.json finds other bytes, so it does not report version 2 as its own."""
    base = created(memory_uri)
    parsed = TableUri.parse(memory_uri)
    bypass = {"done": False}

    class Bypassed(Raced):
        def _put_entry(self, entry):
            result = super()._put_entry(entry)
            if entry.version == 2 and not bypass["done"]:
                bypass["done"] = True
                memory_bucket(parsed.bucket).put(parsed.key("_delta_log/00000000000000000002.json"),
                                                 b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"p=a/rogue.parquet",'
                                                 b'"partitionValues":{"p":"a"},"size":1,"modificationTime":1,"dataChange":true}}\n',
                                                 if_absent=True)
            return result

    loser = Bypassed(parsed)
    other = MemoryLogStore(parsed)
    loser.winner = lambda: commit(other, base, blind(add("theirs")))
    outcome = commit(loser, base, blind(add("ours")))
    assert outcome.version == 3
    files = log_files(memory_uri)
    assert [a["add"]["path"] for v in (1, 2, 3) for a in files[v] if "add" in a] == [
        "p=a/theirs.parquet", "p=a/rogue.parquet", "p=a/ours.parquet"]


# --- faults at the new steps ------------------------------------------------------------------------


def our_versions(uri: str, path: str) -> list[int]:
    return [v for v, actions in sorted(log_files(uri).items())
            if any(a.get("add", {}).get("path") == path for a in actions)]


def test_a_lost_answer_to_the_put_at_the_next_version_is_settled_once(memory_uri):
    base = created(memory_uri)
    loser, _ = race(memory_uri, base, blind(add("theirs")))
    # the winner's put is the first hit; ours at version 1 is refused (no answer to lose); the one at 2 lands
    # and its answer is lost
    with failpoints.armed({"logstore.write.after_put_entry": "raise@2"}):
        outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (outcome.status, outcome.version) == (CommitStatus.COMMITTED, 2)
    assert our_versions(memory_uri, "p=a/ours.parquet") == [2]
    assert sorted(log_files(memory_uri)) == [0, 1, 2]
    assert loser.entry_calls["put_entry"] == 2 and len(temp_puts(loser)) == 1


@pytest.mark.parametrize("point", ["logstore.write.after_keep_temp", "logstore.write.before_reuse_temp"])
def test_a_writer_dying_with_a_kept_temp_file_committed_nothing_and_the_sweep_removes_the_file(memory_uri, point):
    base = created(memory_uri)
    loser, _ = race(memory_uri, base, blind(add("theirs")))
    with pytest.raises(FailpointCrash), failpoints.armed({point: "crash"}):
        commit(loser, base, blind(add("ours")))
    recoverer = MemoryLogStore(TableUri.parse(memory_uri))
    recoverer.recover_all()
    assert our_versions(memory_uri, "p=a/ours.parquet") == []
    assert sorted(log_files(memory_uri)) == [0, 1]
    assert len(recoverer.sweep_temp_files(older_than_seconds=0).deleted) == 1  # the kept one, named by no entry


def test_a_writer_dying_after_winning_the_next_version_with_the_kept_temp_file_is_recovered(memory_uri):
    base = created(memory_uri)
    loser, _ = race(memory_uri, base, blind(add("ours-before")))
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash@2"}):
        commit(loser, base, blind(add("ours")))  # the first hit is the winner's
    # the entry of version 2 names a temp file whose name says version 1: the sweep must keep it
    recoverer = MemoryLogStore(TableUri.parse(memory_uri))
    entry = recoverer._get_entry(2)
    assert not entry.complete and entry.temp_path.startswith(".tmp/00000000000000000001.json.")
    swept = recoverer.sweep_temp_files(older_than_seconds=0)
    assert swept.deleted == () and swept.in_use == (entry.temp_path,)
    assert recoverer.latest_version() == 2  # a reader finishes it
    assert our_versions(memory_uri, "p=a/ours.parquet") == [2]
    assert not [i.key for i in memory_bucket(loser.uri.bucket).list(loser.uri.key("_delta_log/.tmp/"))]


# --- the log store's side --------------------------------------------------------------------------


def test_a_kept_temp_file_goes_only_to_a_write_of_the_same_bytes(memory_uri):
    store = CountingLogStore(memory_uri)
    store.write(0, b'{"commitInfo":{}}\n')
    winner = CommitEntry(store.table_path, 1, f".tmp/00000000000000000001.json.{uuid.uuid4()}", complete=False)
    store.objects.inner.put(store.temp_key(winner.temp_path), b'{"commitInfo":{"w":1}}\n')
    store.entries.claim(winner)
    with pytest.raises(VersionExistsError) as lost:
        store.write(1, b'{"commitInfo":{"a":1}}\n', keep_temp=True)
    kept = lost.value.kept
    assert lost.value.winner == winner and kept is not None
    assert store.objects.inner.get(store.temp_key(kept.temp_path)) == b'{"commitInfo":{"a":1}}\n'
    store.write(2, b'{"commitInfo":{"b":2}}\n', temp=kept)  # other bytes: a temp file of their own
    assert store.read(2) == b'{"commitInfo":{"b":2}}\n'
    store.wait_finished(10)
    assert len(temp_puts(store)) == 3  # version 0's, the kept one, version 2's own
    # the kept one was deleted when it could not be used, and the handle is spent
    assert not [i.key for i in memory_bucket(store.uri.bucket).list(store.uri.key("_delta_log/.tmp/"))]
    assert kept.take(store, b'{"commitInfo":{"a":1}}\n') is None


def test_the_summary_names_every_kind_of_action():
    now = 1
    a = AddFile(path="x", partition_values={}, size=1, modification_time=now, data_change=True)
    compacted = AddFile(path="y", partition_values={}, size=1, modification_time=now, data_change=False)
    meta = Metadata(id="i", schema_string=schema_string(SCHEMA), partition_columns=[], configuration={},
                    created_time=now)
    assert summary.parse(summary.summarize([a])).appends_only
    assert summary.parse(summary.summarize([])).appends_only
    assert summary.parse(summary.summarize([compacted, a.remove(deletion_timestamp=now)])).kinds == "r"
    assert summary.parse(summary.summarize([a, meta, Protocol(min_reader_version=1, min_writer_version=2)])).kinds == "amp"
    assert summary.parse(summary.summarize([a, Txn(app_id="j", version=4)])).txns == {"j": 4}
    many = [Txn(app_id=f"app-{i:04d}-" + "x" * 40, version=i) for i in range(40)]
    assert summary.summarize([a, *many]) is None  # too long for an entry: not written, the loser reads N.json
    assert summary.parse('{"k":"a","z":1}') is None  # says more than this version understands
    assert summary.parse("not json") is None and summary.parse(None) is None


def test_entries_settle_a_blind_append_only_when_each_appended_and_none_names_its_application():
    now = 1
    a = AddFile(path="x", partition_values={}, size=1, modification_time=now, data_change=True)
    appended, removed = summary.summarize([a]), summary.summarize([a.remove(deletion_timestamp=now)])
    j3, j5, k1 = (summary.summarize([a, Txn(app_id=app, version=v)]) for app, v in (("j", 3), ("j", 5), ("k", 1)))
    assert summary.settle([], None) == {}
    assert summary.settle([appended, j5, j3, k1], None) == {"j": 5, "k": 1}  # the highest version of each id
    assert summary.settle([appended, j3], "k") == {"j": 3}
    assert summary.settle([appended, j3], "j") is None  # names the loser's application: read it
    assert summary.settle([appended, removed], None) is None
    assert summary.settle([appended, None], None) is None  # an entry without a summary (Delta's): read it


# --- the Table brings its snapshot up to date when it is next used -----------------------------------


def test_a_long_lived_table_catches_up_when_next_used_and_reads_every_append(memory_uri):
    import pyarrow as pa

    from table import Table, write_table

    write_table(memory_uri, pa.table({"x": [0]}))
    mine = Table(memory_uri)
    write_table(memory_uri, pa.table({"x": [1]}))  # another writer appends: mine is one version behind
    result = write_table(mine, pa.table({"x": [2]}))
    assert result.version == 2 and result.metrics["numAttempts"] == "2"
    assert mine.__dict__.get("_pending") is not None  # not read on the commit path
    assert mine.version == 2  # read now, on first use
    fresh = Table(memory_uri)
    assert sorted(mine.to_pyarrow_table()["x"].to_pylist()) == sorted(fresh.to_pyarrow_table()["x"].to_pylist()) \
        == [0, 1, 2]
    assert {f.path for f in mine.snapshot.files} == live_paths(memory_uri)


# --- the attempt after a lost race: what it asks (issue 23, requests per commit) -------------------


def test_the_attempt_after_a_lost_race_sends_no_head_of_its_version(memory_uri, monkeypatch):
    """The put of version 1 was refused by the winner's entry a moment ago: a writer that uses the entry
    table and took 2 holds 2's entry (our put is refused), and one that skips it is caught by the conditional
    PUT of 2.json (test_a_winner_that_bypassed_dynamodb_is_caught_by_the_conditional_publish)."""
    base = created(memory_uri)
    loser, won = race(memory_uri, base, blind(add("theirs")))
    headed: list[str] = []
    real_head = loser.objects.head
    monkeypatch.setattr(loser.objects, "head", lambda key: (headed.append(key), real_head(key))[1])
    outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (won[0].version, outcome.version, outcome.attempts) == (1, 2, 2)
    assert loser.commit_key(1) in headed          # the first attempt's check
    assert loser.commit_key(2) not in headed      # none before the second
    assert not [k for k in headed if "/.tmp/" in k]  # nor of the winner's temp file (is it stuck?)
    assert our_versions(memory_uri, "p=a/ours.parquet") == [2]


class SlowToFinish(MemoryLogStore):
    """A winner whose UpdateItem marking its entry complete answers ``delay`` seconds late."""

    delay = 0.15

    def _complete_entry(self, version, expire_time):
        time.sleep(self.delay)
        return super()._complete_entry(version, expire_time)


def test_a_loser_waits_for_a_winner_still_finishing_instead_of_finishing_it(memory_uri):
    """The winner of version 1 is still between its publish and its UpdateItem when the loser is ready for
    version 2: the loser waits about as long as its own commits take to finish (measured; set here), reads
    the entry once more, and finds it complete. It neither reads the winner's temp file nor writes 1.json
    nor marks the entry (the recovery it ran before, racing the winner's own requests)."""
    base = created(memory_uri)
    PUBLISHED.wait_all(10)  # version 0's entry complete: the loser's first check has nothing to finish
    winner = SlowToFinish(TableUri.parse(memory_uri))
    loser, won = race(memory_uri, base, blind(add("theirs")), winner_store=winner)
    PUBLISHED.note_finishing(loser.scope, 1.0)
    outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (won[0].version, outcome.version, outcome.attempts) == (1, 2, 2)
    winners_temp = memory_bucket(loser.uri.bucket)
    assert not [k for k in loser.objects.got if "/.tmp/" in k]          # the winner's temp file: not read
    assert loser.commit_key(1) not in loser.objects.put_keys             # 1.json: written by its winner only
    assert loser.entry_calls["complete_entry"] == 1                      # its own entry's, version 2
    assert winners_temp.get(loser.commit_key(1)) and MemoryLogStore(TableUri.parse(memory_uri))._get_entry(1).complete
    assert our_versions(memory_uri, "p=a/ours.parquet") == [2]
    assert our_versions(memory_uri, "p=a/theirs.parquet") == [1]


def test_a_loser_finishes_a_winner_that_died_after_its_put_once_the_wait_is_over(memory_uri):
    """The winner of version 1 dies right after its PutItem: the loser, after its wait, finds the entry still
    incomplete and finishes it from the temp file (as every writer of N+1 does), then commits version 2."""
    base = created(memory_uri)
    loser = Raced(TableUri.parse(memory_uri))
    other = MemoryLogStore(TableUri.parse(memory_uri))

    def winner_dies():
        with pytest.raises(FailpointCrash):
            commit(other, base, blind(add("theirs")))

    loser.winner = winner_dies
    PUBLISHED.note_finishing(loser.scope, 0.05)
    with failpoints.armed({"logstore.write.after_put_entry": "crash@1"}):  # the first hit is the winner's
        outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (outcome.version, outcome.attempts) == (2, 2)
    assert loser.commit_key(1) in loser.objects.put_keys  # the loser published the dead winner's 1.json
    assert our_versions(memory_uri, "p=a/theirs.parquet") == [1]
    assert our_versions(memory_uri, "p=a/ours.parquet") == [2]
    assert MemoryLogStore(TableUri.parse(memory_uri))._get_entry(1).complete


def test_a_loser_whose_winner_turns_out_stuck_comes_back_and_takes_the_version(memory_uri):
    """The winner of version 1 dies right after its PutItem and its temp file is deleted (its content is
    lost: the entry is stuck). The loser did not look at the winner's temp file when its put was refused;
    its next check finds the entry still incomplete, marks it stuck, and the transaction reads the table
    again, comes back to version 1, abandons the entry (grace period 0 here) and commits there."""
    base = created(memory_uri)
    parsed = TableUri.parse(memory_uri)
    loser = Raced(parsed, stuck_grace_seconds=0)
    other = MemoryLogStore(parsed)

    def winner_dies_and_its_temp_file_goes():
        with pytest.raises(FailpointCrash):
            commit(other, base, blind(add("theirs")))
        bucket = memory_bucket(parsed.bucket)
        for info in list(bucket.list(parsed.key("_delta_log/.tmp/"))):
            if other._get_entry(1).temp_path in info.key:
                bucket.delete([info.key])

    loser.winner = winner_dies_and_its_temp_file_goes
    with failpoints.armed({"logstore.write.after_put_entry": "crash@1"}):  # the first hit is the winner's
        outcome = commit(loser, base, blind(add("ours")))
    loser.wait_finished(10)
    assert (outcome.status, outcome.version) == (CommitStatus.COMMITTED, 1)
    assert loser.entry_calls["mark_stuck"] == 1 and loser.entry_calls["abandon_entry"] == 1
    assert sorted(log_files(memory_uri)) == [0, 1]
    assert our_versions(memory_uri, "p=a/ours.parquet") == [1]
    assert our_versions(memory_uri, "p=a/theirs.parquet") == []
    assert MemoryLogStore(parsed)._get_entry(1).complete
