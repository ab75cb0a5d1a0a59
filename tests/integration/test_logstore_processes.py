"""Races between OS processes through one DynamoDB table (moto server), as separate clusters would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logstore import RecoveryOutcome, open_log_store
from logstore.aws import call, dynamodb_client

WORKER = Path(__file__).with_name("logstore_worker.py")
pytestmark = pytest.mark.slow


def run_writers(uri: str, options: dict, processes: int, per_process: int) -> list[dict]:
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), uri, json.dumps(options), str(per_process), f"p{n}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(processes)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_four_processes_thirty_writes_each_every_body_once_one_winner_per_version(s3_uri, storage_options):
    figures = run_writers(s3_uri, storage_options, processes=4, per_process=30)
    store = open_log_store(s3_uri, storage_options=storage_options)
    versions = list(store.list_from(0))
    assert versions == list(range(120))
    bodies = [json.loads(store.read(v))["commitInfo"] for v in versions]
    seen = {(b["writer"], b["i"]) for b in bodies}
    assert len(seen) == 120 == len(bodies)
    assert seen == {(f"p{n}", i) for n in range(4) for i in range(30)}
    items = call("dynamodb:Query", dynamodb_client(store.options).query, TableName=store.ddb_table,
                 KeyConditionExpression="tablePath = :tp", ExpressionAttributeValues={":tp": {"S": s3_uri}},
                 ConsistentRead=True)["Items"]
    assert sorted(i["fileName"]["S"] for i in items) == [f"{v:020d}.json" for v in range(120)]
    assert {i["complete"]["S"] for i in items} == {"true"}
    print("\nrace figures:", figures)


def test_recovery_racing_in_several_processes_is_harmless(s3_uri, storage_options):
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.write(0, b'{"commitInfo":{"n":0}}\n')
    # Leave version 1 won but unfinished, as a writer dying after the conditional put would.
    temp = ".tmp/00000000000000000001.json.crashed"
    body = b'{"commitInfo":{"n":1}}\n'
    store._put_temp(temp, body)
    from logstore.external import CommitEntry

    store._put_entry(CommitEntry(store.table_path, 1, temp, complete=False))
    code = (
        "import json,sys\n"
        "from logstore import open_log_store\n"
        "s = open_log_store(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "print(s.recover(1).value)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, s3_uri, json.dumps(storage_options)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outcomes.append(RecoveryOutcome(out.strip()))
    assert outcomes.count(RecoveryOutcome.COPIED_AND_COMPLETED) <= 1
    assert set(outcomes) <= {RecoveryOutcome.COPIED_AND_COMPLETED, RecoveryOutcome.COMPLETED,
                             RecoveryOutcome.ALREADY_COMPLETE}
    assert store.read(1) == body
    assert store._get_entry(1).complete


WRITE_FAILPOINTS = [
    ("logstore.write.before_put_temp", False),
    ("logstore.write.after_put_temp", False),
    ("logstore.write.before_put_entry", False),
    ("logstore.write.after_put_entry", True),
    ("logstore.write.after_copy_to_final", True),
    ("logstore.write.after_discard_temp", True),
    ("logstore.write.before_mark_complete", True),
    ("logstore.write.after_mark_complete", True),
]
AFTER_ACKNOWLEDGED = {"logstore.write.after_discard_temp", "logstore.write.before_mark_complete",
                      "logstore.write.after_mark_complete"}
KILLED_WRITER = (
    "import json,sys\n"
    "from logstore import open_log_store\n"
    "s = open_log_store(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
    "s.write(1, sys.argv[3].encode())\n"
    "print('survived')\n"
)


@pytest.mark.parametrize("failpoint,committed", WRITE_FAILPOINTS, ids=[f for f, _ in WRITE_FAILPOINTS])
def test_a_writer_killed_at_any_step_loses_and_doubles_nothing(s3_uri, storage_options, failpoint, committed):
    """kill -9 of a writer process at each step of the commit; then the next reader, writer and recover
    see the killed commit wholly or not at all (present exactly when the commit point had passed)."""
    import os

    store = open_log_store(s3_uri, storage_options=storage_options)
    store.write(0, b'{"commitInfo":{"n":0}}\n')
    killed_body = b'{"commitInfo":{"n":"killed"}}\n'
    env = dict(os.environ, DYNACOMMIT_FAILPOINTS=f"{failpoint}=kill")
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, s3_uri, json.dumps(storage_options),
                           killed_body.decode()], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, (done.returncode, done.stderr[-2000:])
    # The UpdateItem marking the entry complete and the temp file's DELETE are sent after write returned (the
    # pool sends them before the process exits): only there may the writer have been told of its commit
    # before it died.
    assert failpoint in AFTER_ACKNOWLEDGED or "survived" not in done.stdout, done.stdout

    reader = open_log_store(s3_uri, storage_options=storage_options)
    assert reader.latest_version() == (1 if committed else 0)
    writer = open_log_store(s3_uri, storage_options=storage_options)
    nxt = writer.latest_version() + 1
    writer.write(nxt, b'{"commitInfo":{"n":"next"}}\n')
    writer.wait_finished()
    assert open_log_store(s3_uri, storage_options=storage_options).recover() is RecoveryOutcome.ALREADY_COMPLETE
    versions = list(reader.list_from(0))
    assert versions == list(range(nxt + 1))
    bodies = [reader.read(v) for v in versions]
    assert bodies.count(killed_body) == (1 if committed else 0)
    assert bodies[-1] == b'{"commitInfo":{"n":"next"}}\n'
    assert all(reader._get_entry(v).complete for v in versions)
