"""Group commit (issue 23, item 2), on the in-memory store, whose entry table has DynamoDB's transaction
semantics: a contended blind append queues, and a writer that wins the next version takes it into the same
``N.json`` with one transaction; every writer learns exactly one outcome.

The races are made deterministic with failpoint hooks: a rival commits, through the real transaction in
this process, at a named step of the writer under test. What the table holds is checked independently,
by parsing the log files with ``json`` and by reading the rows back.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pyarrow as pa
import pytest

from logstore import TableUri, failpoints, open_log_store
from logstore.errors import ConfigurationError
from logstore.group import GroupChanged, GroupClaim, QueuedAppend, queue_key
from tests.support.memory import memory_bucket
from logstore.options import StorageOptions
from table import Table, write_table

OFF = {"DYNACOMMIT_GROUP_COMMIT": "off"}


def rows(writer: str, n: int = 2) -> pa.Table:
    return pa.table({"writer": [writer] * n, "seq": list(range(n))})


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


class Rivals:
    """A failpoint hook: at the first hit of each named failpoint, run the rival commit given for it."""

    def __init__(self, **at):
        self.at = {name.replace("__", "."): run for name, run in at.items()}
        self.results: dict[str, object] = {}

    def __call__(self, name: str) -> None:
        run = self.at.pop(name, None)
        if run is not None:
            self.results[name] = run()


@pytest.fixture
def hooked():
    def install(rivals: Rivals) -> Rivals:
        failpoints.set_hook(rivals)
        return rivals

    yield install
    failpoints.set_hook(None)


def test_a_queued_append_is_taken_into_the_next_group_and_learns_its_version(memory_uri, hooked):
    """B loses version 1 to A and queues; C, on the now contended table, wins version 2 and takes B with it:
    B's ``CommitResult.version`` is 2, version 2 holds both appends under one commitInfo naming B."""
    write_table(memory_uri, rows("creator"))
    rivals = hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(memory_uri), rows("c"))))
    b = write_table(Table(memory_uri), rows("b"))
    c = rivals.results["logstore.group.before_transaction"]
    assert (b.version, c.version) == (2, 2)
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2]
    v2 = found[2]
    infos = [a["commitInfo"] for a in v2 if "commitInfo" in a]
    assert len(infos) == 1 and infos[0]["operation"] == "WRITE"
    assert len(infos[0]["groupCommit"]["members"]) == 1
    assert infos[0]["operationMetrics"]["numOutputRows"] == "4"  # summed over the group
    assert len([a for a in v2 if "add" in a]) == 2
    table = Table(memory_uri)
    assert Counter(table.to_pyarrow_table().column("writer").to_pylist()) == {"creator": 2, "a": 2, "b": 2, "c": 2}
    # the queue is empty again: B deleted its claimed item once it knew
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []


def test_an_append_alone_in_its_group_claims_its_own_item_and_the_version(memory_uri, hooked):
    """B loses version 1, queues, and wins version 2 itself (a group of one): its item is claimed by its own
    transaction, and the log is an ordinary version."""
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a"))))
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == 2
    info = [a["commitInfo"] for a in log_files(memory_uri)[2] if "commitInfo" in a][0]
    assert "groupCommit" not in info
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist())["b"] == 2


def test_the_same_application_id_never_lands_twice_through_a_group(memory_uri, hooked):
    """B (app_id "job", version 1) is queued; C commits the same app_id and version and leads: it may not
    take B, so it commits alone; B then finds its application's txn in the table and withdraws: the rows of
    job version 1 are in the table once."""
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(memory_uri), rows("c"), app_id="job",
                                                                app_version=1)))
    b = write_table(Table(memory_uri), rows("b"), app_id="job", app_version=1)
    assert b.version == 2 and b.skipped  # the version holding job version 1: C's
    counts = Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist())
    assert counts["b"] + counts["c"] == 2, counts  # job version 1 once
    txns = [a["txn"] for v in log_files(memory_uri).values() for a in v if "txn" in a]
    assert [t["appId"] for t in txns] == ["job"]
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []  # withdrawn


def test_members_with_other_application_ids_join_and_their_txns_are_recorded(memory_uri, hooked):
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(memory_uri), rows("c"), app_id="other",
                                                                app_version=7)))
    b = write_table(Table(memory_uri), rows("b"), app_id="job", app_version=1)
    assert b.version == 2
    txns = {a["txn"]["appId"]: a["txn"]["version"] for a in log_files(memory_uri)[2] if "txn" in a}
    assert txns == {"job": 1, "other": 7}
    table = Table(memory_uri)
    assert table.snapshot.state.app_version("job") == 1 and table.snapshot.state.app_version("other") == 7
    # replaying either application's write is skipped
    again = write_table(Table(memory_uri), rows("b"), app_id="job", app_version=1)
    assert again.version == 2
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist())["b"] == 2


def test_a_metadata_change_is_never_grouped_and_a_queued_append_conflicting_with_it_withdraws(memory_uri, hooked):
    """B is queued; a property change wins version 2: B does not pass Delta's conflict rules against it, so
    it withdraws (its item is gone) and reports the conflict; nothing of B is in the table."""
    from table.errors import CommitConflictError

    write_table(memory_uri, rows("creator"))
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: Table(memory_uri).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 31 days"})))
    with pytest.raises(CommitConflictError):
        write_table(Table(memory_uri), rows("b"))
    assert "b" not in Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()
    assert open_log_store(memory_uri).queued() == []


def test_off_switch_makes_every_append_race_for_a_version_of_its_own(memory_uri, hooked):
    write_table(memory_uri, rows("creator"))
    seen: list[str] = []

    class Recording(Rivals):
        def __call__(self, name):
            seen.append(name)
            super().__call__(name)

    hooked(Recording(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri, storage_options=OFF), rows("a")),
        table__commit__after_lost_race=lambda: write_table(Table(memory_uri, storage_options=OFF), rows("c"))))
    b = write_table(Table(memory_uri, storage_options=OFF), rows("b"))
    assert b.version == 3  # a at 1, c at 2, b at 3: one version each
    assert not [n for n in seen if n.startswith(("logstore.group.", "table.group."))]
    assert open_log_store(memory_uri, storage_options=OFF).group_commit_available() is False
    assert all("groupCommit" not in a.get("commitInfo", {}) for v in log_files(memory_uri).values() for a in v)


def test_off_switch_is_an_option_and_an_environment_variable(monkeypatch):
    assert StorageOptions.resolve({}).group_commit is True
    assert StorageOptions.resolve(OFF).group_commit is False
    assert StorageOptions.resolve(OFF).to_dict()["DYNACOMMIT_GROUP_COMMIT"] == "off"
    monkeypatch.setenv("DYNACOMMIT_GROUP_COMMIT", "off")
    assert StorageOptions.resolve({}).group_commit is False
    with pytest.raises(ConfigurationError, match="DYNACOMMIT_GROUP_COMMIT='maybe' is not a switch"):
        StorageOptions.resolve({"DYNACOMMIT_GROUP_COMMIT": "maybe"})


# --- the store's side: claims and withdrawals exclude each other ------------------------------------


def _item(table_path: str, member_id: str, claim_until: int = 2**31) -> QueuedAppend:
    return QueuedAppend(table_path, member_id, '{"add":{}}\n', "{}", claim_until, claim_until + 3600)


def _entry_body(version: int) -> bytes:
    return json.dumps({"commitInfo": {"v": version}}).encode() + b"\n"


def test_a_claimed_append_cannot_be_withdrawn_and_a_withdrawn_one_cannot_be_claimed(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    store.queue_append(_item(store.table_path, "q-1"))
    store.queue_append(_item(store.table_path, "q-2"))
    store.write(1, _entry_body(1), group=GroupClaim(None, ("q-1",), now=0))
    claimed = store.withdraw("q-1")
    assert claimed is not None and claimed.claimed_by == 1  # refused: committed at 1
    assert store.withdraw("q-2") is None  # withdrawn
    with pytest.raises(GroupChanged) as changed:
        store.write(2, _entry_body(2), group=GroupClaim(None, ("q-2",), now=0))
    assert changed.value.members == ("q-2",) and not changed.value.own
    # nothing of the refused transaction happened: version 2 is free, its temp file gone
    assert store.latest_version() == 1
    assert not [o for o in store.objects.list(store.log_prefix + ".tmp/")]
    store.write(2, _entry_body(2))


def test_a_transaction_is_all_or_nothing(memory_uri):
    """Version taken: no claim happens; an expired member (claimUntil past): neither the version nor the
    others are taken."""
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    store.queue_append(_item(store.table_path, "q-1"))
    store.queue_append(_item(store.table_path, "q-old", claim_until=10))
    with pytest.raises(GroupChanged):
        store.write(1, _entry_body(1), group=GroupClaim(None, ("q-1", "q-old"), now=100))
    assert all(q.waiting for q in store.queued())
    store.write(1, _entry_body(1))
    from logstore.errors import VersionExistsError

    with pytest.raises(VersionExistsError):
        store.write(1, _entry_body(9), group=GroupClaim(None, ("q-1",), now=100))
    assert store.queued_append("q-1").waiting


def test_queued_items_never_share_the_tables_partition(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    store.queue_append(_item(store.table_path, "q-1"))
    assert [e.version for e in store._all_entries()] == [0]
    assert queue_key(store.table_path) != store.table_path
    assert store.latest_version() == 0


def test_every_group_failpoint_is_passed(memory_uri, hooked):
    """The new steps (logstore/group.py, table/log/group.py) are each passed by the scenarios above."""
    seen: list[str] = []
    write_table(memory_uri, rows("creator"))

    class Recording(Rivals):
        def __call__(self, name):
            seen.append(name)
            super().__call__(name)

    hooked(Recording(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(memory_uri), rows("c"))))
    write_table(Table(memory_uri), rows("b"))
    hooked(Recording(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("d")),
        logstore__group__before_transaction=lambda: Table(memory_uri).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 30 days"})))
    with pytest.raises(Exception):
        write_table(Table(memory_uri), rows("e"))
    declared = {n for n in failpoints.declared() if n.startswith(("logstore.group.", "table.group."))}
    assert declared == {"logstore.group.before_transaction", "logstore.group.after_transaction",
                        "logstore.group.before_publish", "table.group.after_queued", "table.group.after_claimed",
                        "table.group.before_withdraw"}
    assert declared <= set(seen), sorted(declared - set(seen))


@pytest.mark.parametrize("answer", ["condition_failed_after_retry", "no_answer"])
def test_a_queued_item_whose_put_lost_its_answer_is_still_queued_and_lands_once(memory_uri, hooked, monkeypatch,
                                                                               answer):
    """The PutItem of the queued item lands, but its answer is lost: an SDK retry is refused because the item
    exists (ours), or no answer comes at all. The item is ours and waiting either way, so the append must not
    report a definite failure (its job would delete the files a group then commits: found by the fault
    suite); it goes on as queued and lands exactly once."""
    from logstore.aws import ConditionFailed
    from logstore.errors import AmbiguousError
    from tests.support.memory import MemoryLogStore

    real = MemoryLogStore._queue_put

    def lossy(self, item):
        real(self, item)
        if answer == "no_answer":
            raise AmbiguousError("memory:PutItem: no answer (test)", operation="memory:PutItem")
        raise ConditionFailed("memory:PutItem", retried=True)

    monkeypatch.setattr(MemoryLogStore, "_queue_put", lossy)
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a"))))
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == 2
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {"creator": 2, "a": 2, "b": 2}
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert [q for q in store.queued() if q.waiting] == []


# --- a member's look: one request, which deletes a claimed item; an item gone is settled from the log ------


def _queue_requests(monkeypatch) -> list[tuple[str, str]]:
    """The requests for one queued item the in-memory store serves from now on, as (kind, item id) in order
    (recorded; the requests are the real ones)."""
    from tests.support.memory import MemoryLogStore

    sent: list[tuple[str, str]] = []
    for name in ("_queue_put", "_queue_get", "_queue_delete", "_queue_take_claimed"):
        def recorded(self, first, *args, _real=getattr(MemoryLogStore, name), _name=name):
            sent.append((_name, getattr(first, "member_id", first)))
            return _real(self, first, *args)

        monkeypatch.setattr(MemoryLogStore, name, recorded)
    return sent


def _delete_queue(uri: str, state: str) -> None:
    """Delete every queued item of the table in ``state``, as its TTL or a hand would."""
    store = open_log_store(uri)
    for item in store.queued():
        assert item.state == state, item
        assert store._queue_delete(item.member_id, state)


def test_a_member_that_finds_its_item_claimed_deletes_it_in_the_same_request(memory_uri, hooked, monkeypatch):
    """B loses version 1 to A and queues; right then C wins version 2 and takes B. B's first look at its item
    finds it claimed and deletes it in that one request (a conditional delete that returns the item): B
    sends no read of its item and no delete after it, and the queue is empty when B returns."""
    write_table(memory_uri, rows("creator"))
    rivals = hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        table__group__after_queued=lambda: write_table(Table(memory_uri), rows("c"))))
    sent = _queue_requests(monkeypatch)
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == rivals.results["table.group.after_queued"].version == 2
    assert open_log_store(memory_uri).queued() == []
    open_log_store(memory_uri).wait_finished()
    b_id = sent[0][1]  # B queued first (C, which found B waiting, queued too and then led)
    assert [kind for kind, item in sent if item == b_id] == ["_queue_put", "_queue_take_claimed"]
    [info] = [a["commitInfo"] for a in log_files(memory_uri)[2] if "commitInfo" in a]
    assert len(info["groupCommit"]["members"]) == 1
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2}


def test_a_member_whose_claimed_item_is_gone_before_its_look_learns_its_version_from_the_log(memory_uri, hooked):
    """C takes B into version 2, then B's claimed item is deleted before B looks (as when B's own look deleted
    it and its answer was lost, and the look sent again found nothing). Nothing claims an item that is gone,
    so the log holds the answer: B reads the versions after its snapshot, finds version 2 naming its
    transaction, and is committed there, once."""
    write_table(memory_uri, rows("creator"))

    def c_then_gone():
        c = write_table(Table(memory_uri), rows("c"))
        _delete_queue(memory_uri, "claimed")
        return c

    rivals = hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        table__group__after_queued=c_then_gone))
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == rivals.results["table.group.after_queued"].version == 2
    assert sorted(log_files(memory_uri)) == [0, 1, 2]
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2}


@pytest.mark.parametrize("answer", ["lost_and_sent_again", "deadline_before_the_retry"])
def test_a_look_that_deleted_its_claimed_item_without_an_answer_learns_its_version_from_the_log(
        memory_uri, hooked, monkeypatch, answer):
    """The look that finds B's item claimed deletes it, but no answer comes back to B:

    * ``lost_and_sent_again``: the look, sent again, finds nothing (what the in-memory store answers here);
      B settles it from the log;
    * ``deadline_before_the_retry``: B's deadline passes before the look is sent again. B's way out
      withdraws, and finds its item gone: that must not read as "withdrawn, not committed" (a caller would
      then delete the files version 2 holds). A look of B's went unanswered, so B settles it from the log.

    Either way B is committed at version 2, its rows once, and the queue is empty."""
    from logstore.errors import DeadlineExceededError
    from tests.support.memory import MemoryLogStore

    real = MemoryLogStore._queue_take_claimed

    def unanswered(self, member_id):
        found = real(self, member_id)
        if found is None or found.claimed_by is None:
            return found
        if answer == "lost_and_sent_again":
            return None
        raise DeadlineExceededError("dynamodb:DeleteItem", 120.0,
                                    "the deadline passed before the look was sent again (test)")

    monkeypatch.setattr(MemoryLogStore, "_queue_take_claimed", unanswered)
    write_table(memory_uri, rows("creator"))
    rivals = hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        table__group__after_queued=lambda: write_table(Table(memory_uri), rows("c"))))
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == rivals.results["table.group.after_queued"].version == 2
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2}
    assert open_log_store(memory_uri).queued() == []


def test_a_queued_append_whose_item_is_gone_while_it_waited_commits_once_on_its_own(memory_uri, hooked):
    """B queues, and its waiting item is deleted before any group takes it (its TTL passed, or a hand). B's
    look finds nothing; no version names B's transaction, and nothing can claim the item any more: B was not
    committed, and goes on as an append that never queued. Its rows land once, in a version of their own."""
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        table__group__after_queued=lambda: _delete_queue(memory_uri, "waiting")))
    b = write_table(Table(memory_uri), rows("b"))
    assert b.version == 2
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2]
    assert [a["commitInfo"].get("groupCommit") for a in found[2] if "commitInfo" in a] == [None]
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2}


# --- at many writers: the oldest leads, a leader goes past what was committed while it waited ---------------


def test_queued_ids_sort_by_the_time_their_appends_queued():
    """The queue's Query returns items in ``fileName`` order, so a leader takes the oldest first only if ids
    sort as their queueing times do (to the microsecond, the ids' resolution), across a change in the number
    of digits of the time's lower part and whatever the uuids."""
    from table.log.group import member_id

    times_ns = [1_700_000_000_000_000_000 + step for step in (0, 1_000, 999_000, 9_999_000, 10_000_000, 10**12)]
    ids = [member_id(t) for t in reversed(times_ns)]
    assert sorted(ids) == [member_id_ for _, member_id_ in sorted(zip(reversed(times_ns), ids))]
    assert all(i.startswith("q-") and not i.endswith(".json") for i in ids)


def test_a_queued_leader_goes_past_the_versions_committed_while_it_waited(memory_uri, hooked):
    """B loses version 1 to A and queues; while it waits, C (racing, group commit off) commits version 2. B,
    the only append waiting, leads: it judges version 2 by its entry and sends its one transaction for version
    3, instead of losing version 2 first. Checked against the log parsed with json and B's attempts once C
    committed (hits of the failpoint before each attempt's write): one, at version 3 (an attempt at version 2
    would find ``2.json`` taken, keep its temp file and try again); every append is there once."""
    write_table(memory_uri, rows("creator"))
    attempts: list[str] = []

    class Counting(Rivals):
        def __call__(self, name):
            if name == "table.commit.before_write" and "table.group.after_queued" in self.results:
                attempts.append(name)
            super().__call__(name)

    hooked(Counting(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri, storage_options=OFF), rows("a")),
        table__group__after_queued=lambda: write_table(Table(memory_uri, storage_options=OFF), rows("c"))))
    b = write_table(Table(memory_uri), rows("b"))
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3]
    assert all(len([a for a in actions if "add" in a]) == 1 for actions in found.values())
    assert b.version == 3
    assert len(attempts) == 1
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2}
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []


def test_a_queued_leader_that_went_past_versions_and_lost_the_next_settles_it_by_the_winners_entry(
        memory_uri, hooked, monkeypatch):
    """As above, and D (racing) takes version 3 right before B's transaction: B's group attempt, having judged
    version 2 by its entry, loses version 3 to a blind append and settles that loss by D's entry, as any lost
    race judged by entries: it commits at version 4 without reading a version (the rivals' own reads are left
    out), and its table shows every row afterwards."""
    write_table(memory_uri, rows("creator"))
    table_b = Table(memory_uri)
    rivals_running = []

    def rival(name: str):
        def run():
            rivals_running.append(name)
            try:
                return write_table(Table(memory_uri, storage_options=OFF), rows(name))
            finally:
                rivals_running.remove(name)
        return run

    hooked(Rivals(logstore__write__before_put_entry=rival("a"), table__group__after_queued=rival("c"),
                  logstore__group__before_transaction=rival("d")))
    reads = _commit_reads(monkeypatch, TableUri.parse(memory_uri).bucket, unless=lambda: bool(rivals_running))
    assert write_table(table_b, rows("b")).version == 4
    assert reads == []
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3, 4]
    assert all(len([a for a in actions if "add" in a]) == 1 for actions in found.values())
    assert Counter(table_b.to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "d": 2}


def test_a_group_attempt_that_loses_its_version_goes_on_with_the_same_members_in_one_transaction(
        memory_uri, hooked, monkeypatch):
    """B loses version 1 to A and queues; C, on the contended table, leads a group taking B, and D (racing)
    takes version 2 right before C's transaction. C's group attempt settles that loss by D's entry and goes
    on at version 3 with the same members at once: its next request is the transaction, with no read of the
    queue, no Query of the versions taken and no PUT of its temp file (the one it wrote is the same bytes).
    Each append is in the log once, and B's and C's ``CommitResult.version`` is 3."""
    from logstore.objects import MemoryObjectStore
    from tests.support.memory import MemoryEntryTable, MemoryLogStore

    write_table(memory_uri, rows("creator"))
    sent: list[str] = []  # C's requests from D's win to C's return, by kind
    watching = []

    def recorded(cls, name, kind, when=lambda *a: True):
        real = getattr(cls, name)

        def call(self, *args, **kwargs):
            if watching and when(*args):
                sent.append(kind)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, call)

    recorded(MemoryEntryTable, "transact", "transaction")
    recorded(MemoryLogStore, "_queue_items", "queue read")
    recorded(MemoryLogStore, "_entries_from", "entries query")
    recorded(MemoryObjectStore, "put_tagged", "temp PUT", when=lambda key, *a: "/.tmp/" in key)

    def c_leads():
        try:
            return write_table(Table(memory_uri), rows("c"))
        finally:
            watching.clear()

    def d_takes_version_2():
        d = write_table(Table(memory_uri, storage_options=OFF), rows("d"))
        watching.append(True)
        return d

    class SecondTransaction(Rivals):
        """B's transaction runs C; C's runs D."""

        transactions = 0

        def __call__(self, name):
            if name == "logstore.group.before_transaction":
                self.transactions += 1
                if self.transactions == 2:
                    self.at["c's transaction"] = d_takes_version_2
                    name = "c's transaction"
            super().__call__(name)

    rivals = hooked(SecondTransaction(logstore__write__before_put_entry=lambda: write_table(Table(memory_uri),
                                                                                            rows("a")),
                                      logstore__group__before_transaction=c_leads))
    b = write_table(Table(memory_uri), rows("b"))
    c, d = rivals.results["logstore.group.before_transaction"], rivals.results["c's transaction"]
    assert (d.version, c.version, b.version) == (2, 3, 3)
    assert sent == ["transaction", "transaction"]  # lost at 2, won at 3: nothing else on the way
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3]
    infos = [a["commitInfo"] for a in found[3] if "commitInfo" in a]
    assert len(infos) == 1 and len(infos[0]["groupCommit"]["members"]) == 1
    assert sum(len([a for a in actions if "add" in a]) for actions in found.values()) == 5
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "d": 2}
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []


# --- fewer requests at many writers: the hand-over, and joining at once ------------------------------


def test_a_winning_group_hands_the_queue_over_to_the_oldest_append_still_waiting(memory_uri):
    """After a group won version N, its leader marks the oldest append still waiting (``leadAfter = N``) and
    no other: that one leads the next group at its next look, without reading the queue to learn that it
    is the oldest. Claimed and expired items are passed over."""
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    for member_id, claim_until in (("q-1", 2**31), ("q-2", 10), ("q-3", 2**31), ("q-4", 2**31)):
        store.queue_append(_item(store.table_path, member_id, claim_until=claim_until))
    store.write(1, _entry_body(1), group=GroupClaim(None, ("q-1",), now=0))
    store.hand_over(1)
    store.wait_finished()
    assert {q.member_id: q.lead_after for q in store.queued()} == {"q-1": None, "q-2": None, "q-3": 1, "q-4": None}
    assert store.queued_append("q-3").waiting  # marked, not claimed
    assert store.withdraw("q-3") is None  # a marked append still withdraws like any waiting one


def test_the_hand_over_waits_about_twice_the_longest_recent_return_of_the_process_that_led(monkeypatch):
    """A process that led a group hands the queue over unless it leads the next group first: the hand-over
    waits for it twice the longest of its last returns from a win to its next lead (0.5 s before three were
    seen), at least 0.1 s, at most 0.5 s. The returns are timed on a stubbed clock."""
    from logstore.queued import HandOver
    from table.log import group_member

    now = [100.0]
    monkeypatch.setattr(group_member.time, "monotonic", lambda: now[0])
    cadence = group_member._Cadence()
    waits = []
    for gap in (0.03, 0.06, 0.02, 0.04):
        waits.append(cadence.hand_over_after())
        cadence.led(HandOver())
        now[0] += gap
        assert cadence.take_lead()
    waits.append(cadence.hand_over_after())
    assert waits == pytest.approx([0.5, 0.5, 0.5, 2 * 0.06, 2 * 0.06])
    for gap in (0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01):  # the 0.06 s return is forgotten
        cadence.led(HandOver())
        now[0] += gap
        assert cadence.take_lead()
    assert cadence.hand_over_after() == 0.1
    cadence.led(HandOver())
    now[0] += 1.5  # a writer that paused: the next hand-over waits the longest
    assert cadence.take_lead()
    assert cadence.hand_over_after() == 0.5


def test_a_hand_over_sent_later_marks_nobody_when_cancelled_first(memory_uri):
    """A leader's process that starts the next group itself cancels its last group's hand-over before it is
    sent: no append is marked, so the append it would have marked does not lead too. Sent (here at once), it
    marks the oldest waiting append and can no longer be cancelled; sent when nobody waits, it marks nobody
    and the process may still lead."""
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    for member_id in ("q-1", "q-2"):
        store.queue_append(_item(store.table_path, member_id))
    later = store.hand_over(0, after=3600)
    assert later.cancel() and later.cancel()
    later.fire()  # what its timer would do: nothing, it was cancelled
    store.wait_finished()
    assert [q.lead_after for q in store.queued()] == [None, None]
    sent = store.hand_over(0)
    store.wait_finished()
    assert {q.member_id: q.lead_after for q in store.queued()} == {"q-1": 0, "q-2": None}
    assert sent.may_mark() and not sent.cancel()
    for member_id in ("q-1", "q-2"):
        assert store.withdraw(member_id) is None
    nobody = store.hand_over(0)
    store.wait_finished()
    assert not nobody.may_mark() and nobody.cancel()


def test_a_hand_over_sent_later_is_sent_now_by_a_process_waiting_for_its_finishing_steps(memory_uri):
    """A process about to end (a Spark job commit, interpreter exit) waits for its finishing steps: a hand-over
    still waiting for its timer is sent then, so that the queue is handed over though the process leads no more."""
    store = open_log_store(memory_uri)
    store.write(0, _entry_body(0))
    store.queue_append(_item(store.table_path, "q-1"))
    later = store.hand_over(0, after=3600)
    assert store.wait_finished()
    assert [q.lead_after for q in store.queued()] == [0]
    assert later.may_mark() and not later.cancel()


def test_a_process_whose_hand_over_marked_an_append_joins_it_instead_of_leading(memory_uri, hooked, monkeypatch):
    """C led version 2 (taking B); its hand-over waits (here: until the test sends it). D loses version 3 to
    A2 and queues; then C's hand-over is sent and marks D. C's next append must not lead at once: D, marked,
    leads (two leaders would race for the version). C queues behind D; since D's writer is busy in this
    test (C's append runs inside D's queueing), C leads only after its patience, taking D: both in version 4,
    once each, and C queued."""
    from table.log import group_member

    monkeypatch.setattr(group_member, "HAND_OVER_AFTER_SECONDS", 3600)
    monkeypatch.setattr(group_member, "_CADENCES", {})
    store = open_log_store(memory_uri)
    marks: list = []

    def c_after_the_hand_over(table_c):
        [cadence] = group_member._CADENCES.values()
        handing = cadence.handing_over
        assert handing is not None
        handing.fire()  # its timer, now
        store.wait_finished()
        marks.extend(q.lead_after for q in store.queued())
        return write_table(table_c, rows("c2"))

    rivals, queued, d = _c_leads_version_2_then_d_queues(memory_uri, hooked, c_after_the_hand_over)
    assert marks == [2]  # D, the only append waiting, marked by the hand-over of version 2
    assert rivals.results["table.group.after_queued"].version == 4 == d.version
    assert queued == ["table.group.after_queued"] * 2  # D's, then C's: C joined the queue
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3, 4]
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "a2": 2, "c2": 2, "d": 2}
    store.wait_finished()
    assert store.queued() == []


def test_an_append_right_after_one_a_group_took_queues_at_once_and_lands_once(memory_uri, hooked, monkeypatch):
    """B's append is taken into C's group; B's next append on the same table, a moment later, queues at
    once (no read of the queue first), finds nobody else waiting at its look, and leads a group of its own:
    one version, its rows once, the queue empty afterwards. (A group of two, the default, makes the next append
    queue at once.) That group held B alone: B's third append, a moment later still, writes alone without
    queueing (a writer the others left alone does not wait for a group of itself at each append)."""
    from table.log import group_member

    monkeypatch.setattr(group_member, "JOIN_AT_ONCE_GROUP", 2)
    write_table(memory_uri, rows("creator"))
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(Table(memory_uri), rows("c"))))
    table_b = Table(memory_uri)
    assert write_table(table_b, rows("b")).version == 2
    # C led its group in this process: forget that, as if C ran elsewhere (else B's next append would lead).
    monkeypatch.setattr(group_member, "_CADENCES", {})
    seen: list[str] = []

    class Recording(Rivals):
        def __call__(self, name):
            seen.append(name)
            super().__call__(name)

    hooked(Recording())
    again = write_table(table_b, rows("b2"))
    assert again.version == 3
    assert "table.group.after_queued" in seen
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3]
    assert [a["commitInfo"]["operation"] for a in found[3] if "commitInfo" in a] == ["WRITE"]
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "b2": 2}
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []
    seen.clear()
    third = write_table(table_b, rows("b3"))
    assert third.version == 4
    assert not [name for name in seen if name.startswith("table.group.")]
    assert [a["commitInfo"].get("groupCommit") for a in log_files(memory_uri)[4] if "commitInfo" in a] == [None]
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist())["b3"] == 2


# --- a claimed member's snapshot: what its leader knew of the versions before its claim ----------------------


def _commit_reads(monkeypatch, bucket: str, unless=lambda: False) -> list[int]:
    """The versions whose ``N.json`` the memory bucket serves from now on (the reads are recorded, not changed),
    but for reads made while ``unless()`` is true."""
    from logstore.objects import MemoryObjectStore

    reads: list[int] = []
    real = MemoryObjectStore.get

    def get(self, key):
        name = key.rsplit("/", 1)[-1]
        if (self.bucket == bucket and "/_delta_log/" in key and name.endswith(".json") and name[:20].isdigit()
                and not unless()):
            reads.append(int(name[:20]))
        return real(self, key)

    monkeypatch.setattr(MemoryObjectStore, "get", get)
    return reads


def _taken_into_cs_group(memory_uri, hooked, *, c_opens_late: bool = False) -> Table:
    """B loses version 1 to A and queues; C wins version 2 and takes B with it. C's table opens with B's (at
    version 0), or after A's append (``c_opens_late``: at version 1). Returns B's table."""
    write_table(memory_uri, rows("creator"))
    table_b = Table(memory_uri)
    table_c = None if c_opens_late else Table(memory_uri)
    rivals = hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(table_c or Table(memory_uri), rows("c"))))
    assert write_table(table_b, rows("b")).version == 2
    assert rivals.results["logstore.group.before_transaction"].version == 2
    return table_b


def _claims(monkeypatch) -> list[GroupClaim]:
    """The claims the memory entry table applies from now on (recorded, not changed)."""
    from tests.support.memory import MemoryEntryTable

    claims: list[GroupClaim] = []
    real = MemoryEntryTable.transact

    def transact(self, entry, claim):
        real(self, entry, claim)
        claims.append(claim)

    monkeypatch.setattr(MemoryEntryTable, "transact", transact)
    return claims


def _read_after(table_b: Table, memory_uri: str, reads: list[int]) -> None:
    """B's table shows every row once it is next used (reading version 1 then), and the log, parsed with json,
    holds each append once."""
    assert Counter(table_b.to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "b2": 2}
    assert 1 in reads
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3]
    assert sum(len([a for a in actions if "add" in a]) for actions in found.values()) == 5


def test_a_member_whose_leader_knew_the_versions_before_its_claim_goes_past_them_unread(memory_uri, hooked,
                                                                                      monkeypatch):
    """C's snapshot is as old as B's (version 0); C judged version 1 (A's append) by its entry and wrote
    version 2 with B, recording on B's claim that every version from 1 on is a blind append naming no
    application transaction (``appendsFrom = 1``). B's next blind append then commits without reading
    ``1.json`` (nor ``2.json``, which B read when it was claimed); B's table still shows every row afterwards
    (read after write: the versions are read when its snapshot is next used), and the log, parsed with json,
    holds each append once."""
    claims = _claims(monkeypatch)
    table_b = _taken_into_cs_group(memory_uri, hooked)
    assert [(c.members != (), c.appends_from) for c in claims] == [(True, 1)]
    hooked(Rivals())
    reads = _commit_reads(monkeypatch, TableUri.parse(memory_uri).bucket)
    assert write_table(table_b, rows("b2")).version == 3
    assert reads == []
    _read_after(table_b, memory_uri, reads)


def test_a_member_older_than_its_leaders_snapshot_judges_the_versions_before_its_claim_by_their_entries(
        memory_uri, hooked, monkeypatch):
    """C opened the table after A's append (version 1), so it knows nothing of version 1's kind beyond its
    snapshot: its claim says ``appendsFrom = 2``, and B, whose snapshot is at version 0, cannot count version 1
    as vouched for. B's next blind append judges version 1 by its entry (A's ``commitSummary``: an append),
    as a lost race judges its winner, and commits without reading ``1.json``; B's table still shows every row
    afterwards (version 1 read then), and the log holds each append once."""
    claims = _claims(monkeypatch)
    table_b = _taken_into_cs_group(memory_uri, hooked, c_opens_late=True)
    assert [c.appends_from for c in claims if c.members] == [2]
    hooked(Rivals())
    store = open_log_store(memory_uri)
    queried: list[int] = []
    real = type(store)._entries_from
    monkeypatch.setattr(type(store), "_entries_from", lambda self, v: queried.append(v) or real(self, v))
    reads = _commit_reads(monkeypatch, TableUri.parse(memory_uri).bucket)
    assert write_table(table_b, rows("b2")).version == 3
    assert reads == []
    assert queried == [1]
    _read_after(table_b, memory_uri, reads)


def test_a_member_reads_the_versions_before_its_claim_whose_entries_do_not_say_what_they_hold(memory_uri, hooked,
                                                                                             monkeypatch):
    """As above, but version 1's entry carries no ``commitSummary`` (as Delta's writers leave it, and Delta's
    recovery rewrites ours): B cannot judge it by its entry, and reads ``1.json`` before its next append."""
    table_b = _taken_into_cs_group(memory_uri, hooked, c_opens_late=True)
    hooked(Rivals())
    store = open_log_store(memory_uri)
    entries = store.entries
    entry = entries.get(store.table_path, 1)
    assert entry.summary is not None
    entries.replace(dataclasses.replace(entry, summary=None))
    reads = _commit_reads(monkeypatch, TableUri.parse(memory_uri).bucket)
    assert write_table(table_b, rows("b2")).version == 3
    assert 1 in reads
    assert Counter(table_b.to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "b2": 2}


def _c_leads_version_2_then_d_queues(memory_uri, hooked, c_next):
    """C leads version 2, taking B; then D loses version 3 to A2 and queues, and while D queues C appends
    again (``c_next(table_c)``). The rivals (their results by failpoint), the queueings seen, D's result."""
    write_table(memory_uri, rows("creator"))
    table_c = Table(memory_uri)
    hooked(Rivals(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a")),
        logstore__group__before_transaction=lambda: write_table(table_c, rows("c"))))
    assert write_table(Table(memory_uri), rows("b")).version == 2
    queued: list[str] = []

    class Recording(Rivals):
        def __call__(self, name):
            if name == "table.group.after_queued":
                queued.append(name)
            super().__call__(name)

    rivals = hooked(Recording(
        logstore__write__before_put_entry=lambda: write_table(Table(memory_uri), rows("a2")),
        table__group__after_queued=lambda: c_next(table_c)))
    return rivals, queued, write_table(Table(memory_uri), rows("d"))


def test_a_process_that_led_a_group_leads_the_next_one_at_once(memory_uri, hooked):
    """C led version 2 (taking B). D then loses version 3 to A2 and queues; C's next append, right after, does
    not queue behind D (it would wait for D to learn, at a look, that it leads): it reads the queue and leads
    at once, taking D into version 4. Each append is in the log once, D's ``CommitResult.version`` is 4, and
    only D queued."""
    rivals, queued, d = _c_leads_version_2_then_d_queues(memory_uri, hooked,
                                                         lambda table_c: write_table(table_c, rows("c2")))
    assert rivals.results["table.group.after_queued"].version == 4
    assert d.version == 4
    assert queued == ["table.group.after_queued"]  # D's; C did not queue
    found = log_files(memory_uri)
    assert sorted(found) == [0, 1, 2, 3, 4]
    infos = [a["commitInfo"] for a in found[4] if "commitInfo" in a]
    assert len(infos) == 1 and len(infos[0]["groupCommit"]["members"]) == 1
    assert Counter(Table(memory_uri).to_pyarrow_table().column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2, "a2": 2, "c2": 2, "d": 2}
    store = open_log_store(memory_uri)
    store.wait_finished()
    assert store.queued() == []
