"""What a commit costs in requests (issue 9): at most four round trips one after another (the last, the
UpdateItem, not waited for), the same number of requests at version 5 and 5,000, no read of the previous
entry by the writer that published it, and a lost race that learns its winner without another read.

The stores are the real in-memory ones behind a counting layer (tests/unit/logstore/counting.py) that gives
each request a few milliseconds of service time, so requests sent together overlap on its logical clock.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

import pytest

from logstore import StorageOptions, open_log_store
from logstore.aws import ConditionFailed, dynamodb_client, s3_client
from logstore.errors import VersionExistsError
from logstore.external import CommitEntry
from tests.support.counting import CountingLogStore

SERVICE_TIME = 0.05  # long enough that requests sent together overlap even on a loaded machine


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def fill(store, versions: int) -> None:
    """A table with ``versions`` finished commits, written straight into the stores (fast)."""
    expire = int(time.time()) + 86_400
    for v in range(versions):
        store.objects.inner.put(store.commit_key(v), body(v))
        store.entries.claim(CommitEntry(store.table_path, v, f".tmp/{v:020d}.json.x", complete=True,
                                        expire_time=expire))


def test_a_commit_takes_four_round_trips_one_after_another(memory_uri):
    store = CountingLogStore(memory_uri, delay=SERVICE_TIME)
    fill(store, 5)
    store.recorder.clear()
    store.write(5, body(5))
    store.wait_finished()
    kinds = collections.Counter(store.calls)
    # HEAD 5.json | GetItem(4) | PUT temp, then PutItem, then PUT 5.json, then DELETE temp | UpdateItem
    assert kinds == {"head": 1, "get_entry": 1, "put": 2, "put_entry": 1, "delete": 1, "complete_entry": 1}
    assert store.recorder.sequential_round_trips() == 4


def test_a_writer_that_published_the_previous_version_does_not_read_its_entry(memory_uri):
    """N-1.json exists because this process wrote it: the next commit sends only the HEAD of N.json
    beside its temp file's PUT, and two DynamoDB requests in all (the put and the UpdateItem)."""
    store = CountingLogStore(memory_uri, delay=SERVICE_TIME)
    fill(store, 5)
    store.write(5, body(5))
    store.wait_finished()
    store.recorder.clear()
    store.write(6, body(6))
    store.wait_finished()
    assert collections.Counter(store.calls) == {"head": 1, "put": 2, "put_entry": 1, "delete": 1,
                                                "complete_entry": 1}
    assert store.recorder.sequential_round_trips() == 4
    other = CountingLogStore(memory_uri)  # another store (process) on the table: it still reads N-1's entry
    other.write(7, body(7))
    assert "get_entry" in other.calls


def test_a_write_returns_before_the_update_item_and_the_delete_of_step_4(memory_uri):
    """The UpdateItem and the temp file's DELETE are step 4's, neither waited for: the commit is acknowledged
    while both are held, N.json holds the bytes; once they are let go the entry is complete and the temp
    file gone."""
    import threading

    release = threading.Event()

    class HeldFinish(CountingLogStore):
        def _complete_entry(self, version, expire_time):
            assert release.wait(30)
            return super()._complete_entry(version, expire_time)

        def _drop_published_temp(self, temp_path):
            assert release.wait(30)
            return super()._drop_published_temp(temp_path)

    store = HeldFinish(memory_uri)
    store.write(0, body(0))
    assert store.read(0) == body(0)
    assert not store._get_entry(0).complete
    assert len(list(store.objects.list(store.log_prefix + ".tmp/"))) == 1
    release.set()
    store.wait_finished()
    assert store._get_entry(0).complete
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []


def test_a_commit_makes_the_same_requests_at_version_5_and_5000(memory_uri):
    counts = {}
    for versions in (5, 5000):
        store = CountingLogStore(f"{memory_uri}-{versions}")
        fill(store, versions)
        store.recorder.clear()
        store.write(versions, body(versions))
        store.wait_finished()
        counts[versions] = sorted(store.calls)
        store.recorder.clear()
        assert store.latest_version() == versions
        counts[f"latest {versions}"] = sorted(store.calls)
    assert counts[5] == counts[5000]
    assert counts["latest 5"] == counts["latest 5000"] == ["latest_entry", "list"]


def test_a_lost_race_learns_the_winner_from_the_failed_put_itself(memory_uri):
    store = CountingLogStore(memory_uri)
    fill(store, 1)
    winner = CommitEntry(store.table_path, 1, ".tmp/00000000000000000001.json.winner", complete=False)

    class RacedAtTheCommitPoint(CountingLogStore):
        def _put_entry(self, entry):
            self.entries.claim(winner)  # another writer's put lands just before ours
            return super()._put_entry(entry)

    raced = RacedAtTheCommitPoint(store.uri, store.objects)
    store.objects.inner.put(store.temp_key(winner.temp_path), body("winner"))  # the winner is alive
    store.recorder.clear()
    with pytest.raises(Exception) as info:
        raced.write(1, body("ours"))
    assert type(info.value).__name__ == "VersionExistsError"
    after_put = store.calls[store.calls.index("put_entry") + 1:]
    assert "get_entry" not in after_put  # the owner came with the refusal (ReturnValuesOnConditionCheckFailure)


def test_dynamodb_returns_the_existing_item_with_a_failed_condition(s3_uri, storage_options):
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.write(0, body(0))
    # write returns before its UpdateItem marks the entry complete: wait for it, or the PutItem below may
    # overtake it (it did with the lean client, whose requests leave sooner than botocore's)
    assert store.wait_finished(30)
    with pytest.raises(ConditionFailed) as info:
        store._put_entry(CommitEntry(store.table_path, 0, ".tmp/other", complete=False))
    owner = info.value.owner
    assert owner is not None and owner.complete and owner.version == 0 and owner.temp_path.startswith(".tmp/00")


def test_clients_are_shared_per_connection_settings(storage_options):
    options = StorageOptions.resolve(storage_options)
    assert s3_client(options) is s3_client(StorageOptions.resolve(dict(storage_options)))
    assert dynamodb_client(options) is dynamodb_client(options)
    other = StorageOptions.resolve(dict(storage_options, AWS_REGION="eu-west-1"))
    assert s3_client(other) is not s3_client(options)
    slower = StorageOptions.resolve(dict(storage_options, DYNACOMMIT_TIMEOUT_SECONDS="5"))
    assert s3_client(slower) is s3_client(options)  # not a connection setting
    a = open_log_store("s3://b/one", storage_options=options)
    b = open_log_store("s3://b/two", storage_options=options)
    assert a.client is b.client and a.objects.client is b.objects.client


FORKED = """
import os, sys
import tests.support.memory  # the in-process memory:// scheme
from logstore import open_log_store
store = open_log_store("memory://forked/t")
store.write(0, b'{"a":0}\\n')          # the pool exists in the parent now
pid = os.fork()
if pid == 0:
    child = open_log_store("memory://forked/t")
    child.write(1, b'{"a":1}\\n')      # needs a pool of its own: the parent's threads are not here
    os._exit(0 if child.latest_version() == 1 else 3)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_commits_with_a_pool_of_its_own():
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0 and "child exit 0" in done.stdout, done.stderr[-2000:]


def test_before_commit_runs_after_the_preparation_and_before_the_commit_point(memory_uri):
    """A job commit's data files complete beside the log store's checks and temp file: the hook sees
    those done and the conditional put not yet sent; every attempt calls it."""
    store = CountingLogStore(memory_uri)
    fill(store, 2)
    seen: list[list[str]] = []
    store.recorder.clear()
    store.write(2, body(2), before_commit=lambda: seen.append(list(store.calls)))
    assert len(seen) == 1 and sorted(seen[0]) == ["get_entry", "head", "put"]
    assert store.read(2) == body(2)


def test_a_failing_before_commit_commits_nothing_and_leaves_no_temp_file(memory_uri):
    store = CountingLogStore(memory_uri)
    fill(store, 1)

    def data_file_failed():
        raise OSError("the data file could not be written")

    with pytest.raises(OSError, match="data file"):
        store.write(1, body(1), before_commit=data_file_failed)
    assert "put_entry" not in store.calls
    assert store._get_entry(1) is None
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []
    with pytest.raises(TypeError, match="before_commit"):
        store.write(1, body(1), before_commit="not a function")


def test_dynamodb_entries_carry_the_summary_through_a_refusal_and_completion(s3_uri, storage_options):
    """commitSummary is written with the entry, comes back with a refused put (ALL_OLD, which moto honours),
    and stays when the entry is marked complete; an entry written without one (as Delta's) has none."""
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.write(0, body(0), summary='{"k":"amp"}')
    assert store.wait_finished(30)
    with pytest.raises(ConditionFailed) as info:
        store._put_entry(CommitEntry(store.table_path, 0, ".tmp/other", complete=False))
    assert info.value.item is not None and info.value.owner.summary == '{"k":"amp"}' and info.value.owner.complete
    store.write(1, body(1))
    assert store.wait_finished(30)
    assert store._get_entry(1).summary is None
    with pytest.raises(VersionExistsError) as lost:
        store.write(1, body(2), keep_temp=True)  # found taken at step 0 (1.json exists): one Query of the entries
    kept = lost.value.kept
    assert [(e.version, e.summary) for e in kept.winners] == [(1, None)]
    kept.discard()
