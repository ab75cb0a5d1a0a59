"""A won entry whose content is lost (temp file and N.json both gone) never blocks the table: readers stop
before it and mark it, writers and ``recover`` abandon it after the grace period, and no acknowledged commit
is lost by that, whatever its original writer does meanwhile (issue 7, item 2).

The interleavings run the original writer in a thread held at a failpoint (tests/unit/logstore/pausing.py).
"""

from __future__ import annotations

import logging
import uuid

import pytest

from logstore import (
    CommitStateUnknownError,
    RecoveryOutcome,
    VersionExistsError,
    VersionNotFoundError,
    failpoints,
)
from logstore.errors import AmbiguousError, StorageError
from logstore.external import CommitEntry
from logstore.failpoints import FailpointCrash
from tests.unit.logstore.pausing import Pauser, Run

AFTER_PUT_ENTRY = "logstore.write.after_put_entry"
BEFORE_DELETE = "logstore.abandon.before_delete"


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def with_grace(store, seconds: float):
    store.stuck_grace_seconds = seconds
    return store


def leave_stuck(store, version: int = 1):
    """Version ``version`` won by a writer that died after its commit point, then its temp file deleted."""
    with pytest.raises(FailpointCrash), failpoints.armed({AFTER_PUT_ENTRY: "crash"}):
        store.write(version, body(f"lost-{version}"))
    entry = store._get_entry(version)
    store.objects.delete([store.temp_key(entry.temp_path)])
    return entry


def versions_and_bodies(store):
    versions = list(store.list_from(0))
    assert versions == list(range(len(versions))), "versions are not contiguous"
    return [store.read(v) for v in versions]


# ------------------------------------------------------------------------------------------ readers mark
def test_a_stuck_entry_no_longer_fails_readers_for_everyone(store, open_store, caplog):
    store.write(0, body(0))
    leave_stuck(store)
    reader = open_store()
    with caplog.at_level(logging.WARNING, logger="logstore"):
        assert reader.latest_version() == 0
        assert reader.latest_version() == 0
    warnings = [r.getMessage() for r in caplog.records if "content is lost" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per store
    assert "version 1" in warnings[0] and "abandoned" in warnings[0] and store.table_path in warnings[0]
    with pytest.raises(VersionNotFoundError, match="content is lost"):
        reader.read(1)
    assert reader.read(0) == body(0)


def test_readers_only_mark_a_stuck_entry_and_never_delete_it(store, open_store):
    store.write(0, body(0))
    lost = leave_stuck(store)
    reader = with_grace(open_store(), 0)
    assert reader.latest_version() == 0
    marked = reader._get_entry(1)
    assert marked is not None and marked.temp_path == lost.temp_path and marked.stuck_since is not None
    with pytest.raises(VersionNotFoundError):
        reader.read(1)
    assert reader.latest_version() == 0
    assert reader._get_entry(1) == marked  # still there, still the same mark


# ---------------------------------------------------------------------------------- recover and writers
def test_recover_marks_then_abandons_once_the_grace_period_is_over(store, open_store):
    store.write(0, body(0))
    leave_stuck(store)
    recoverer = open_store()
    assert recoverer.recover() is RecoveryOutcome.STUCK_MARKED
    assert recoverer.recover() is RecoveryOutcome.STUCK_MARKED  # within the grace period: left alone
    assert recoverer._get_entry(1).stuck_since is not None
    assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ABANDONED
    assert recoverer._get_entry(1) is None
    writer = open_store()
    assert writer.latest_version() == 0
    writer.write(1, body("again"))
    assert versions_and_bodies(writer) == [body(0), body("again")]


def test_the_next_writer_of_the_version_abandons_it_after_the_grace_period_and_commits(store, open_store):
    store.write(0, body(0))
    leave_stuck(store)
    writer = with_grace(open_store(), 0.3)
    version = writer.latest_version() + 1
    assert version == 1
    writer.write(version, body("next"))  # lost the put to the stuck entry, waited out the grace, took over
    writer.wait_finished()
    assert versions_and_bodies(writer) == [body(0), body("next")]
    assert writer._get_entry(1).complete and writer._get_entry(1).stuck_since is None


def test_a_writer_finding_the_previous_version_stuck_marks_or_abandons_it_and_asks_to_read_again(store,
                                                                                               open_store):
    store.write(0, body(0))
    leave_stuck(store)
    with pytest.raises(VersionNotFoundError, match="marked stuck"):
        open_store().write(2, body(2))
    assert store._get_entry(1).stuck_since is not None
    with pytest.raises(VersionNotFoundError, match="abandoned"):
        with_grace(open_store(), 0).write(2, body(2))
    assert store._get_entry(1) is None
    writer = open_store()
    writer.write(writer.latest_version() + 1, body(1))
    assert versions_and_bodies(writer) == [body(0), body(1)]


def test_a_stuck_entry_with_a_delta_rs_temp_path_is_abandoned(store, open_store):
    store.write(0, body(0))
    temp = f"_commit_{uuid.uuid4()}.json.tmp"  # delta-rs's layout; the file itself is gone
    store._put_entry(CommitEntry(store.table_path, 1, temp, complete=False))
    reader = open_store()
    assert reader.latest_version() == 0
    assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ABANDONED
    writer = open_store()
    writer.write(1, body(1))
    assert versions_and_bodies(writer) == [body(0), body(1)]


def test_an_entry_whose_commit_file_exists_is_never_taken_for_stuck(store, open_store):
    """The temp file is gone because N.json was written (the writer died before marking complete): that
    entry is finished, not abandoned, even with no grace at all."""
    store.write(0, body(0))

    class Unmarked(type(store)):
        def _complete_entry(self, version, expire_time):
            raise StorageError("throttled", operation="dynamodb:UpdateItem", retryable=True)

    unmarked = Unmarked.__new__(Unmarked)
    unmarked.__dict__.update(store.__dict__)
    unmarked.write(1, body(1))
    assert not store._get_entry(1).complete
    assert with_grace(open_store(), 0).recover() is RecoveryOutcome.COMPLETED
    assert versions_and_bodies(store) == [body(0), body(1)]


# ------------------------------------------------------------------- interleavings, original writer alive
def test_original_writer_publishing_after_abandonment_keeps_its_commit_and_a_later_claimant_fails(
        store, open_store):
    store.write(0, body(0))
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        w1 = Run("w1", lambda: store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ABANDONED
        pauser.release("w1", AFTER_PUT_ENTRY)
        assert w1.result() is None  # acknowledged: its N.json landed (If-None-Match, first)
    late = open_store()
    with pytest.raises(VersionExistsError):
        late.write(1, body("late"))  # step 0 finds 1.json
    assert late.latest_version() == 1  # 1.json has no entry: found by the listing after the newest entry
    late.write(2, body(2))
    assert versions_and_bodies(late) == [body(0), body("w1"), body(2)]


def test_original_writer_publishing_after_a_new_claimant_won_the_entry_keeps_its_commit_and_the_claimant_fails(
        store, open_store):
    store.write(0, body(0))
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        pauser.hold("w2", AFTER_PUT_ENTRY)
        w1 = Run("w1", lambda: store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ABANDONED
        claimant = open_store()
        w2 = Run("w2", lambda: claimant.write(1, body("w2")))
        pauser.wait_reached("w2", AFTER_PUT_ENTRY)  # the new entry for 1 is w2's
        pauser.release("w1", AFTER_PUT_ENTRY)
        assert w1.result() is None  # w1's N.json lands first: acknowledged
        pauser.release("w2", AFTER_PUT_ENTRY)
        with pytest.raises(VersionExistsError, match="other bytes"):
            w2.result()  # 412 with other bytes: failure, never success
    reader = open_store()
    assert reader.latest_version() == 1
    assert versions_and_bodies(reader) == [body(0), body("w1")]
    assert reader._get_entry(1).complete
    assert list(reader.objects.list(reader.log_prefix + ".tmp/")) == []


def test_new_claimant_publishing_first_makes_the_late_original_writer_fail(store, open_store):
    store.write(0, body(0))
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        w1 = Run("w1", lambda: store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ABANDONED
        open_store().write(1, body("w2"))  # acknowledged
        pauser.release("w1", AFTER_PUT_ENTRY)
        with pytest.raises(VersionExistsError, match="other bytes"):
            w1.result()
    assert versions_and_bodies(open_store()) == [body(0), body("w2")]


def test_original_writer_publishing_within_the_grace_period_is_finished_not_abandoned(store, open_store):
    store.write(0, body(0))
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        w1 = Run("w1", lambda: store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        assert open_store().latest_version() == 0  # a reader marks it
        assert store._get_entry(1).stuck_since is not None
        pauser.release("w1", AFTER_PUT_ENTRY)
        assert w1.result() is None
    store.wait_finished()  # its UpdateItem, sent after write returned
    assert with_grace(open_store(), 0).recover() is RecoveryOutcome.ALREADY_COMPLETE
    entry = store._get_entry(1)
    assert entry.complete and entry.stuck_since is None
    assert versions_and_bodies(store) == [body(0), body("w1")]


def test_original_writer_whose_temp_is_gone_and_whose_publish_fails_never_reports_success(store, open_store):
    store.write(0, body(0))

    class CopyFails(type(store)):
        def _copy_to_final(self, version, data):
            raise AmbiguousError("connection reset while writing N.json", operation="s3:PutObject")

    w1_store = CopyFails.__new__(CopyFails)
    w1_store.__dict__.update(store.__dict__)
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        w1 = Run("w1", lambda: w1_store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        pauser.release("w1", AFTER_PUT_ENTRY)
        with pytest.raises(CommitStateUnknownError, match="temp file"):
            w1.result()
    assert open_store().latest_version() == 0  # its entry is stuck, and nobody was told it committed


def test_a_failed_publish_with_the_temp_file_still_there_is_acknowledged_and_finished_by_readers(store,
                                                                                                open_store):
    store.write(0, body(0))

    class CopyFails(type(store)):
        def _copy_to_final(self, version, data):
            raise AmbiguousError("connection reset while writing N.json", operation="s3:PutObject")

    w1 = CopyFails.__new__(CopyFails)
    w1.__dict__.update(store.__dict__)
    w1.write(1, body("w1"))
    assert open_store().latest_version() == 1
    assert versions_and_bodies(store) == [body(0), body("w1")]


def test_two_abandoners_race_and_exactly_one_deletes(store, open_store):
    store.write(0, body(0))
    leave_stuck(store)
    assert open_store().latest_version() == 0  # marked
    deleted = []

    def abandoner(name):
        mine = with_grace(open_store(), 0)
        inner = mine._abandon_entry

        def counting(entry):
            done = inner(entry)
            deleted.append((name, done))
            return done

        mine._abandon_entry = counting
        return mine.recover(1)

    with Pauser() as pauser:
        for name in ("a", "b"):
            pauser.hold(name, BEFORE_DELETE)
        a, b = Run("a", lambda: abandoner("a")), Run("b", lambda: abandoner("b"))
        pauser.wait_reached("a", BEFORE_DELETE)
        pauser.wait_reached("b", BEFORE_DELETE)
        pauser.release("a", BEFORE_DELETE)
        assert a.result() is RecoveryOutcome.ABANDONED
        pauser.release("b", BEFORE_DELETE)
        assert b.result() is RecoveryOutcome.ABANDONED  # gone: by the other one
    assert sorted(deleted) == [("a", True), ("b", False)]
    assert store._get_entry(1) is None


def test_a_late_abandoner_never_deletes_the_entry_of_a_new_claim(store, open_store):
    store.write(0, body(0))
    leave_stuck(store)
    assert open_store().latest_version() == 0  # marked
    with Pauser() as pauser:
        pauser.hold("late", BEFORE_DELETE)
        late = Run("late", lambda: with_grace(open_store(), 0).recover(1))
        pauser.wait_reached("late", BEFORE_DELETE)
        assert with_grace(open_store(), 0).recover(1) is RecoveryOutcome.ABANDONED
        claimant = open_store()
        claimant.write(1, body("new"))  # a new claim for 1
        claimant.wait_finished()  # ... completed
        pauser.release("late", BEFORE_DELETE)
        assert late.result() is RecoveryOutcome.ALREADY_COMPLETE
    assert store._get_entry(1).complete
    assert versions_and_bodies(store) == [body(0), body("new")]


def test_a_stuck_entry_completed_by_its_original_writer_is_not_deleted_by_a_late_abandoner(store, open_store):
    store.write(0, body(0))
    with Pauser() as pauser:
        pauser.hold("w1", AFTER_PUT_ENTRY)
        pauser.hold("late", BEFORE_DELETE)
        w1 = Run("w1", lambda: store.write(1, body("w1")))
        pauser.wait_reached("w1", AFTER_PUT_ENTRY)
        store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
        late = Run("late", lambda: with_grace(open_store(), 0).recover(1))
        pauser.wait_reached("late", BEFORE_DELETE)  # marked, verified stuck, about to delete
        pauser.release("w1", AFTER_PUT_ENTRY)
        assert w1.result() is None  # published
        store.wait_finished()  # and completed: the entry is no longer incomplete
        pauser.release("late", BEFORE_DELETE)
        assert late.result() is RecoveryOutcome.ALREADY_COMPLETE
    assert store._get_entry(1).complete
    assert versions_and_bodies(store) == [body(0), body("w1")]


def test_a_java_style_stuck_entry_is_abandoned_and_a_java_style_completion_clears_the_mark(s3_uri, local_stack):
    """Items as delta-spark writes them: the legacy ``Expected`` condition, Delta's temp layout, and
    completion by an unconditional PutItem of the whole item."""
    from logstore import open_log_store
    from logstore.aws import dynamodb_client
    from logstore.dynamodb import DynamoDBLogStore

    options = local_stack.storage_options()
    store = open_log_store(s3_uri, storage_options=options)
    store.write(0, body(0))
    ddb = dynamodb_client(local_stack.options())

    def java_put(version: int, temp: str, **extra) -> None:
        item = {"tablePath": {"S": s3_uri}, "fileName": {"S": f"{version:020d}.json"}, "tempPath": {"S": temp},
                "complete": {"S": "false"}, **extra}
        ddb.put_item(TableName="delta_log", Item=item, Expected={"fileName": {"Exists": False}})

    java_put(1, f".tmp/{1:020d}.json.{uuid.uuid4()}")  # Java died after its commit point; temp file gone
    assert isinstance(store, DynamoDBLogStore)
    assert store.latest_version() == 0
    assert store._get_entry(1).stuck_since is not None
    assert with_grace(open_log_store(s3_uri, storage_options=options), 0).recover() is RecoveryOutcome.ABANDONED
    store.write(1, body(1))

    # A Java writer alive after all completes its entry by rewriting the whole item: the mark is gone.
    temp = f".tmp/{2:020d}.json.{uuid.uuid4()}"
    store.objects.put(store.temp_key(temp), body("java-2"))
    java_put(2, temp)
    store.objects.delete([store.temp_key(temp)])
    assert store.latest_version() == 1  # marked
    store.objects.put(store.commit_key(2), body("java-2"))
    ddb.put_item(TableName="delta_log", Item={
        "tablePath": {"S": s3_uri}, "fileName": {"S": f"{2:020d}.json"}, "tempPath": {"S": temp},
        "complete": {"S": "true"}, "expireTime": {"N": "4102444800"}})
    entry = store._get_entry(2)
    assert entry.complete and entry.stuck_since is None
    assert with_grace(open_log_store(s3_uri, storage_options=options), 0).recover(2) is RecoveryOutcome.ALREADY_COMPLETE
    assert versions_and_bodies(store) == [body(0), body(1), body("java-2")]
