"""Every public log store operation has a deadline (issue 7, item 9): past it, nothing half-done is left
visible (DeadlineExceededError), or the outcome is explicitly unknown (CommitStateUnknownError), or, past
the commit point, the commit stands."""

from __future__ import annotations

import http.server
import threading

import pytest

from logstore import (
    CommitStateUnknownError,
    ConfigurationError,
    StorageOptions,
    TableUri,
    VersionNotFoundError,
    deadline,
    failpoints,
    open_log_store,
)
from logstore.aws import call, dynamodb_client
from logstore.errors import DeadlineExceededError
from logstore.failpoints import FailpointCrash
from tests.support.memory import MemoryLogStore

SHORT = 0.6     # the deadline given to an operation
STALL = 1000    # ms a failpoint holds it: well past the deadline


def body(n) -> bytes:
    return f'{{"commitInfo":{{"n":"{n}"}}}}\n'.encode()


def short_store(store, seconds: float = SHORT):
    """``store`` with a short deadline; its clients are built and a connection open before (a first
    request pays for both, which is not what these tests are about). Version 0 must exist."""
    store.read(0)
    getattr(store, "client", None)  # the DynamoDB client, when there is one
    store.timeout_seconds = seconds
    return store


def temp_files(store) -> list[str]:
    return [o.key for o in store.objects.list(store.log_prefix + ".tmp/")]


# ------------------------------------------------------------------------------------------- options
def test_the_timeout_and_the_grace_period_are_storage_options_with_environment_fallback(monkeypatch):
    assert StorageOptions.resolve({}).timeout_seconds == 120.0
    assert StorageOptions.resolve({}).stuck_entry_grace_seconds == 60.0
    resolved = StorageOptions.resolve({"DYNACOMMIT_TIMEOUT_SECONDS": "2.5",
                                       "DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS": "0"})
    assert (resolved.timeout_seconds, resolved.stuck_entry_grace_seconds) == (2.5, 0.0)
    monkeypatch.setenv("DYNACOMMIT_TIMEOUT_SECONDS", "30")
    assert StorageOptions.resolve({}).timeout_seconds == 30.0
    store = open_log_store("memory://b/t", storage_options={"DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS": "5"})
    assert (store.timeout_seconds, store.stuck_grace_seconds) == (30.0, 5.0)
    assert StorageOptions.resolve({"DYNACOMMIT_TIMEOUT_SECONDS": "7"}).to_dict()["DYNACOMMIT_TIMEOUT_SECONDS"] == "7.0"


@pytest.mark.parametrize("key,value", [
    ("DYNACOMMIT_TIMEOUT_SECONDS", "0"), ("DYNACOMMIT_TIMEOUT_SECONDS", "-1"),
    ("DYNACOMMIT_TIMEOUT_SECONDS", "inf"), ("DYNACOMMIT_TIMEOUT_SECONDS", "nan"),
    ("DYNACOMMIT_TIMEOUT_SECONDS", "two minutes"), ("DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS", "-5"),
    ("DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS", "nan"),
])
def test_a_bad_duration_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigurationError, match=key):
        StorageOptions.resolve({key: value})


# ------------------------------------------------------------------------------------------- writes
@pytest.mark.parametrize("failpoint", ["logstore.write.after_put_temp", "logstore.write.before_put_entry"])
def test_past_the_deadline_before_the_commit_point_nothing_is_left(store, open_store, failpoint):
    store.write(0, body(0))
    writer = short_store(open_store())
    with failpoints.armed({failpoint: f"sleep:{STALL}"}), pytest.raises(DeadlineExceededError) as info:
        writer.write(1, body(1))
    assert f"write of {writer.table_path}" in str(info.value)
    assert not isinstance(info.value, CommitStateUnknownError)
    assert writer._get_entry(1) is None
    assert temp_files(writer) == []
    assert open_store().latest_version() == 0
    open_store().write(1, body("next"))


def test_past_the_deadline_after_the_commit_point_the_commit_stands(store, open_store):
    store.write(0, body(0))
    writer = short_store(open_store())
    with failpoints.armed({"logstore.write.after_put_entry": f"sleep:{STALL}"}):
        writer.write(1, body(1))  # durable: success, and whoever comes next finishes it
    reader = open_store()
    assert reader.latest_version() == 1
    assert reader.read(1) == body(1)


def test_a_commit_published_past_its_deadline_still_deletes_its_temp_file(store, open_store):
    """Issue 18, item 2: the DELETE of the temp file after N.json is written is a cleanup like any other,
    with time of its own: a temp file left beside N.json makes delta-rs 1.5.1-1.6.0 take its repair for a
    lost race."""
    store.write(0, body(0))
    writer = short_store(open_store())
    with failpoints.armed({"logstore.write.after_copy_to_final": f"sleep:{STALL}"}):
        writer.write(1, body(1))  # the commit stands
    assert open_store().read(1) == body(1)
    assert writer.wait_finished(30)  # the DELETE went out on the pool, with the cleanup deadline of its own
    assert temp_files(writer) == []


def test_an_unclear_put_that_cannot_be_settled_in_time_is_commit_state_unknown(store, open_store):
    store.write(0, body(0))
    writer = short_store(open_store())
    with failpoints.armed({"logstore.write.after_put_entry": "raise",
                           "logstore.write.before_read_back": f"sleep:{STALL}"}):
        with pytest.raises(CommitStateUnknownError, match="may or may not have happened") as info:
            writer.write(1, body(1))
    assert info.value.version == 1
    assert len(temp_files(writer)) == 1  # nothing cleaned up: the put did land
    assert open_store().read(1) == body(1)


def test_a_writer_waiting_for_a_stuck_entry_past_its_deadline_fails_cleanly(store, open_store):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        store.write(1, body("lost"))
    store.objects.delete([store.temp_key(store._get_entry(1).temp_path)])
    # the grace period outlasts any deadline; the deadline only has to outlast the put, the read-back and the
    # marking before the wait (a loaded machine spent the shorter one before the wait began)
    writer = short_store(open_store(), seconds=3.0)
    writer.stuck_grace_seconds = 3600
    with pytest.raises(DeadlineExceededError, match="stuck") as info:
        writer.write(1, body(1))
    assert "dynacommit recover" in str(info.value)
    assert temp_files(writer) == []
    assert writer._get_entry(1).stuck_since is not None


def test_an_enclosing_deadline_that_ends_sooner_wins(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, body(0))
    with deadline.deadline(0.1, "job commit of nightly"), failpoints.armed(
            {"logstore.write.before_put_entry": "sleep:400"}):
        with pytest.raises(DeadlineExceededError, match="job commit of nightly"):
            store.write(1, body(1))


# ------------------------------------------------------------------------------------- reads, recovery
def test_recovery_stopped_by_the_deadline_leaves_the_entry_to_finish_later(store, open_store):
    store.write(0, body(0))
    with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
        store.write(1, body(1))
    reader = short_store(open_store())
    with failpoints.armed({"logstore.recover.before_copy": f"sleep:{STALL}"}), pytest.raises(DeadlineExceededError):
        reader.latest_version()
    with failpoints.armed({"logstore.recover.before_copy": f"sleep:{STALL}"}), pytest.raises(DeadlineExceededError):
        reader.recover()
    assert not reader._get_entry(1).complete
    assert open_store().read(1) == body(1)


def test_read_and_list_from_run_under_their_own_deadline(memory_uri):
    store = MemoryLogStore(TableUri.parse(memory_uri), timeout_seconds=0.2)
    store.write(0, body(0))
    assert list(store.list_from(0)) == [0]
    with failpoints.armed({"logstore.recover.before_copy": "sleep:500"}):
        with pytest.raises(FailpointCrash), failpoints.armed({"logstore.write.after_put_entry": "crash"}):
            store.write(1, body(1))
        with pytest.raises(DeadlineExceededError, match=f"read of {store.table_path}"):
            store.read(1)
    with pytest.raises(VersionNotFoundError):
        store.read(2)


# --------------------------------------------------------------------------- the SDK's own retries
class Failing500(http.server.BaseHTTPRequestHandler):
    """Answers every request with a DynamoDB 500, after a pause: a service that is down."""

    requests = 0
    lock = threading.Lock()

    def do_POST(self):
        with Failing500.lock:
            Failing500.requests += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        threading.Event().wait(0.1)
        self.send_response(500)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.end_headers()
        self.wfile.write(b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"down"}')

    def log_message(self, *args):
        pass


@pytest.fixture
def failing_dynamodb():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Failing500.requests = 0
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_sdk_retries_stop_at_the_deadline(failing_dynamodb):
    options = StorageOptions.resolve({"AWS_ENDPOINT_URL": failing_dynamodb, "AWS_ALLOW_HTTP": "true",
                                      "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    client = dynamodb_client(options)
    with deadline.deadline(0.25, "probe"), pytest.raises(DeadlineExceededError) as info:
        call("dynamodb:GetItem", client.get_item, TableName="t", Key={"k": {"S": "v"}})
    assert info.value.retried  # an attempt had been sent before the deadline stopped the retries
    assert 1 <= Failing500.requests < 7  # the client allows 7 attempts
    before = Failing500.requests
    with deadline.deadline(0.25, "probe"):
        threading.Event().wait(0.3)
        with pytest.raises(DeadlineExceededError) as late:
            call("dynamodb:GetItem", client.get_item, TableName="t", Key={"k": {"S": "v"}})
    assert not late.value.retried and Failing500.requests == before  # nothing sent past the deadline


def test_a_commit_point_failing_until_the_deadline_is_commit_state_unknown(s3_uri, storage_options,
                                                                           failing_dynamodb):
    options = dict(storage_options, AWS_ENDPOINT_URL_DYNAMODB=failing_dynamodb, DYNACOMMIT_TIMEOUT_SECONDS="0.5")
    store = open_log_store(s3_uri, storage_options=options)
    assert store.client is not None and store.objects.client is not None  # built outside the deadline
    with pytest.raises(CommitStateUnknownError) as info:
        store.write(0, body(0))
    assert info.value.version == 0 and Failing500.requests >= 1
    assert len(temp_files(store)) == 1  # the state is unknown: nothing was cleaned up
