"""Every command that changes a table or DynamoDB is a dry run unless ``--execute``, and a dry run changes
nothing: S3 (every object version and its bytes, every pending multipart upload) and DynamoDB (every item of
the table, the list of tables) are compared byte for byte before and after each one.

The table is set up so that each command, executed, would act: small files to compact, removed files past a
zero retention, an orphan temp file, a pending upload, rows to delete, no checkpoint, and the newest commit
left unfinished by a writer that died after its PutItem, which any reader that opens the table would
otherwise finish. The bucket has versioning on, so a write followed by a delete still leaves a trace.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import pyarrow as pa
import pytest

from logstore import StorageOptions, failpoints, open_log_store
from logstore.aws import call, dynamodb_client, s3_client
from logstore.entries import plan_recovery
from table import Table, write_table
from table.cli import main
from table.cli.commands import COMMANDS
from table.table import forget_snapshots

VERSIONED_BUCKET = "dynacommit-dry-runs"


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


@dataclasses.dataclass(frozen=True)
class Stack:
    options: dict[str, str]
    table: str         # a live table where every command has work to do
    deleted: str       # a table deleted from S3 whose DynamoDB items remain

    @property
    def resolved(self) -> StorageOptions:
        return StorageOptions.resolve(self.options)


def state(stack: Stack) -> dict:
    """Everything a command could change: each object version of the bucket with its bytes, delete markers,
    pending uploads, the items of both tables, and which DynamoDB tables exist."""
    s3 = s3_client(stack.resolved)
    versions, markers = [], []
    kwargs = {"Bucket": VERSIONED_BUCKET}
    while True:
        page = call("s3:ListObjectVersions", s3.list_object_versions, **kwargs)
        versions += [(v["Key"], v["VersionId"], v["ETag"], v["Size"], v["IsLatest"]) for v in page.get("Versions", [])]
        markers += [(m["Key"], m["VersionId"], m["IsLatest"]) for m in page.get("DeleteMarkers", [])]
        if not page.get("IsTruncated"):
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    bodies = {(key, vid): call("s3:GetObject", s3.get_object, Bucket=VERSIONED_BUCKET, Key=key,
                               VersionId=vid)["Body"].read() for key, vid, *_ in versions}
    uploads = call("s3:ListMultipartUploads", s3.list_multipart_uploads, Bucket=VERSIONED_BUCKET).get("Uploads", [])
    ddb = dynamodb_client(stack.resolved)
    items = {}
    for uri in (stack.table, stack.deleted):
        items[uri] = call("dynamodb:Query", ddb.query, TableName="delta_log", ConsistentRead=True,
                          KeyConditionExpression="tablePath = :p",
                          ExpressionAttributeValues={":p": {"S": uri}})["Items"]
    tables = call("dynamodb:ListTables", ddb.list_tables)["TableNames"]
    return {"versions": sorted(versions), "markers": sorted(markers), "bodies": bodies,
            "uploads": sorted((u["Key"], u["UploadId"]) for u in uploads), "items": items, "tables": sorted(tables)}


@pytest.fixture(scope="module")
def stack(local_stack) -> Stack:
    local_stack.create_bucket(VERSIONED_BUCKET)
    options = {**local_stack.storage_options()}
    s3 = s3_client(StorageOptions.resolve(options))
    call("s3:PutBucketVersioning", s3.put_bucket_versioning, Bucket=VERSIONED_BUCKET,
         VersioningConfiguration={"Status": "Enabled"})
    table = f"s3://{VERSIONED_BUCKET}/live-{uuid.uuid4().hex[:8]}"
    for start in range(0, 12, 3):  # four small files: something to compact
        write_table(table, pa.table({"x": pa.array(range(start, start + 3), pa.int64())}), storage_options=options)
    write_table(table, pa.table({"x": pa.array([100], pa.int64())}), mode="overwrite", storage_options=options)
    write_table(table, pa.table({"x": pa.array(range(3), pa.int64())}), storage_options=options)  # more small files
    store = open_log_store(table, storage_options=options)
    store._put_temp(".tmp/00000000000000000099.json.orphan", b'{"commitInfo":{}}\n')  # an orphan temp file
    store.objects.create_upload(store.uri.key("part-00000-pending-c000.snappy.parquet"))  # a pending upload
    with failpoints.armed({"logstore.write.after_put_entry": "crash"}), pytest.raises(failpoints.FailpointCrash):
        write_table(table, pa.table({"x": pa.array([7], pa.int64())}), storage_options=options)
    deleted = f"s3://{VERSIONED_BUCKET}/deleted-{uuid.uuid4().hex[:8]}"
    write_table(deleted, pa.table({"x": pa.array([1], pa.int64())}), storage_options=options)
    gone = open_log_store(deleted, storage_options=options)
    gone.objects.delete([o.key for o in gone.objects.list(gone.uri.key(""))])
    forget_snapshots()
    return Stack(options, table, deleted)


CHANGING = {
    "create-ddb-table": lambda s: ["create-ddb-table", *flags(s.options),
                                   "--option", "DELTA_DYNAMO_TABLE_NAME=dry_run_never_created"],  # the later wins
    "delete": lambda s: ["delete", s.table, "--where", "x < 2", *flags(s.options)],
    "recover": lambda s: ["recover", s.table, "--temp-age-hours", "0", *flags(s.options)],
    "checkpoint": lambda s: ["checkpoint", s.table, *flags(s.options)],
    "vacuum": lambda s: ["vacuum", s.table, "--retention-hours", "0", "--force", *flags(s.options)],
    "optimize": lambda s: ["optimize", s.table, *flags(s.options)],
    "restore": lambda s: ["restore", s.table, "--version", "0", *flags(s.options)],
    "uploads abort": lambda s: ["uploads", "abort", s.table, "--older-than-hours", "0", *flags(s.options)],
    "drop-table": lambda s: ["drop-table", s.deleted, *flags(s.options)],
}
"""Each changing command with arguments under which, executed, it would change something."""


def test_every_changing_command_is_in_this_test_and_takes_the_same_flags():
    changing = {c.name for c in COMMANDS if c.changes}
    assert changing == set(CHANGING)
    for command in COMMANDS:
        if command.changes:
            assert {"--execute", "--dry-run"} <= command.flags, command.name


@pytest.mark.parametrize("explicit", [False, True], ids=["default", "--dry-run"])
@pytest.mark.parametrize("name", sorted(CHANGING))
def test_a_dry_run_changes_nothing_in_s3_or_dynamodb(stack, name, explicit, capsys):
    argv = [*CHANGING[name](stack), "--json", *(["--dry-run"] if explicit else [])]
    forget_snapshots()
    before = state(stack)
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    forget_snapshots()
    assert state(stack) == before
    document = json.loads(out.splitlines()[0])
    assert document["dryRun"] is True
    command = next(c for c in COMMANDS if c.name == name)
    # Scripts written when the command acted at once are told, unless they asked for the dry run.
    assert ("is a dry run unless --execute" in err) == (command.acted_by_default and not explicit)


def test_the_dry_run_of_recover_says_what_executing_it_does(stack, capsys):
    """The plan is made by reading only; executing recovery afterwards (on a copy of the situation: a table
    of its own) reports the outcome the plan named, entry by entry."""
    options = stack.options
    uri = f"s3://{VERSIONED_BUCKET}/recover-{uuid.uuid4().hex[:8]}"
    write_table(uri, pa.table({"x": pa.array([1], pa.int64())}), storage_options=options)
    with failpoints.armed({"logstore.write.after_put_entry": "crash"}), pytest.raises(failpoints.FailpointCrash):
        write_table(uri, pa.table({"x": pa.array([2], pa.int64())}), storage_options=options)
    forget_snapshots()
    assert main(["recover", uri, "--json", *flags(options)]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert [(e["version"], e["outcome"]) for e in planned["entries"]] == [(1, "COPIED_AND_COMPLETED")]
    assert "write _delta_log/00000000000000000001.json from the temp file" in planned["entries"][0]["wouldDo"]
    assert main(["recover", uri, "--json", "--execute", *flags(options)]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["dryRun"] is False
    assert [(e["version"], e["outcome"]) for e in done["entries"]] == [(1, "COPIED_AND_COMPLETED")]
    assert plan_recovery(open_log_store(uri, storage_options=options)) == []
    forget_snapshots()
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["x"].to_pylist()) == [1, 2]


def test_a_dry_run_plans_on_the_published_version_and_leaves_the_unfinished_commit(stack, capsys):
    """Opening the table in a dry run does not finish the commit its writer left unfinished: the plan is made
    on the version before it (what a reader without write permissions reads), and the entry stays
    incomplete for the run that executes."""
    forget_snapshots()
    assert main(["optimize", stack.table, "--json", *flags(stack.options)]) == 0
    report = json.loads(capsys.readouterr().out)
    newest = open_log_store(stack.table, storage_options=stack.options)._latest_entry()
    assert not newest.complete
    assert report["version"] == newest.version - 1 and report["filesRemoved"] > 1
