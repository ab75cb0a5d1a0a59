"""The ``dynacommit`` command, run in-process through ``main([...])`` against the moto stack (and
``memory://`` tables for the maintenance commands): every command's plain text, terminal table and JSON,
and the exit statuses."""

from __future__ import annotations

import io
import json
import re
import sys
import uuid

import pyarrow as pa
import pytest

from logstore import RecoveryOutcome, open_log_store
from logstore.external import CommitEntry
from table import Table, progress, write_table
from table.cli import main
from table.cli.commands import COMMANDS
from table.log.checkpoint import read_last_checkpoint
from table.log.actions import serialize_commit

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but tab and newline


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64()),
                     "p": pa.array(["a" if i % 2 else "b" for i in range(start, start + count)])})


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def on_terminal(monkeypatch):
    """``on_terminal(argv)`` runs ``main`` with stdout on a (fake) terminal 200 columns wide and returns the
    exit status and what it printed, escape sequences removed. (pytest puts its own capture back in
    sys.stdout when the test starts, so the terminal goes in around the call.)"""
    monkeypatch.setenv("COLUMNS", "200")

    def run(argv: list[str]) -> tuple[int, str]:
        terminal = Terminal()
        saved, sys.stdout = sys.stdout, terminal
        try:
            status = main(argv)
        finally:
            sys.stdout = saved
        return status, ANSI.sub("", terminal.getvalue())
    return run


def plain_table(text: str, header_start: str) -> list[list[str]]:
    """The rows (cells split on runs of 2+ spaces) of the plain table whose header line starts with
    ``header_start``, header included, up to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start:end]]


def fields(text: str) -> dict[str, str]:
    """The ``name  value`` lines of plain output."""
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("  ")
        if sep and name and not name.startswith(" "):
            found[name] = value.strip()
    return found


@pytest.fixture
def s3_table(s3_uri, storage_options) -> str:
    write_table(s3_uri, rows(0, 4), partition_by=["p"], storage_options=storage_options)
    write_table(s3_uri, rows(4, 4), storage_options=storage_options, app_id="nightly", app_version=1)
    # the UpdateItem marking version 1 complete runs on the pool after the write returned: done before the
    # commands look at the entries (`recover` counts the incomplete ones)
    assert open_log_store(s3_uri, storage_options=storage_options).wait_finished(30)
    return s3_uri


# --- show -------------------------------------------------------------------------------------------


def test_show_prints_version_schema_partitioning_files_and_last_checkpoint(s3_table, storage_options, capsys):
    assert main(["show", s3_table, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    shown = fields(out)
    assert shown["table"] == s3_table and shown["version"] == "1" and shown["partition columns"] == "p"
    assert shown["files"] == "4" and shown["last checkpoint"] == "none" and shown["configuration"] == "(none)"
    assert plain_table(out, "column") == [["column", "type", "nullable", "partition"], ["x", "int64", "yes", "no"],
                                          ["p", "string", "yes", "yes"]]
    assert not CONTROL.search(out)


def test_show_json_and_time_travel(s3_table, storage_options, capsys):
    assert main(["show", s3_table, "--json", "--version", "0", *flags(storage_options)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 0 and shown["partitionColumns"] == ["p"] and shown["numFiles"] == 2
    assert [f["name"] for f in shown["schema"]] == ["x", "p"] and shown["lastCheckpoint"] is None
    assert shown["sizeBytes"] == sum(a.size for a in Table(s3_table, version=0,
                                                           storage_options=storage_options).add_actions())


def test_show_on_a_terminal_is_an_aligned_table(s3_table, storage_options, on_terminal):
    status, out = on_terminal(["show", s3_table, *flags(storage_options)])
    assert status == 0
    assert "─" in out  # the rule under the header
    header = next(line for line in out.splitlines() if "column" in line and "nullable" in line)
    x_row = next(line for line in out.splitlines() if line.split()[:2] == ["x", "int64"])
    assert x_row.index("int64") == header.index("type")
    assert re.search(rf"table\s+{re.escape(s3_table)}", out)


def test_flags_may_come_before_the_command(s3_table, storage_options, capsys):
    assert main(["--json", "show", s3_table, *flags(storage_options)]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1


def test_storage_options_come_from_the_environment(s3_table, storage_options, capsys, monkeypatch):
    for key, value in storage_options.items():
        monkeypatch.setenv(key, value)
    assert main(["show", s3_table, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1


# --- history ----------------------------------------------------------------------------------------


def test_history_lists_commits_newest_first_and_honours_limit(s3_table, storage_options, capsys):
    assert main(["history", s3_table, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    table = plain_table(out, "version")
    assert table[0] == ["version", "timestamp", "operation", "attempts", "parameters", "metrics"]
    rows_ = [row for row in table[1:] if row[0].isdigit()]  # not the lines folded cells continue on
    assert [row[0] for row in rows_] == ["1", "0"]
    assert rows_[0][2] == "WRITE" and rows_[0][3] == "1" and "mode=Append" in rows_[0][4]
    assert "txn=nightly@1" in out.split("\n      0 ")[0] and "numOutputRows=4" in rows_[0][5]
    assert main(["history", s3_table, "--limit", "1", "--json", *flags(storage_options)]) == 0
    (entry,) = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert entry["version"] == 1 and entry["appTxns"] == {"nightly": 1} and entry["operation"] == "WRITE"


def test_history_json_is_one_object_per_line_newest_first(s3_table, storage_options, capsys):
    assert main(["history", s3_table, "--json", *flags(storage_options)]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["version"] for e in entries] == [1, 0]
    assert all(isinstance(e["timestamp"], int) and e["operationParameters"]["mode"] == "Append" for e in entries)
    assert main(["history", s3_table, "--json", "--limit", "0", *flags(storage_options)]) == 0
    assert capsys.readouterr().out == ""


def test_history_on_a_terminal_is_an_aligned_table(s3_table, storage_options, on_terminal):
    status, lines = on_terminal(["history", s3_table, *flags(storage_options)])
    assert status == 0
    lines = lines.splitlines()
    header = next(i for i, line in enumerate(lines) if "operation" in line and "attempts" in line)
    assert "─" in lines[header + 1]
    newest = lines[header + 2]
    oldest = next(line for line in lines[header + 3:] if line.split() and line.split()[0] == "0")
    assert newest.split()[0] == "1"
    assert newest.index("WRITE") == lines[header].index("operation") == oldest.index("WRITE")
    assert "nightly@1" in " ".join(lines[header + 2:lines.index(oldest)])
    assert "[" in " ".join(lines[lines.index(oldest):])  # partitionBy=["p"]: data, never read as markup


# --- recover, checkpoint --------------------------------------------------------------------------


def test_recover_finishes_a_commit_whose_writer_died(s3_table, storage_options, capsys):
    store = open_log_store(s3_table, storage_options=storage_options)
    temp = ".tmp/00000000000000000002.json.crashed"
    store._put_temp(temp, b'{"commitInfo":{"operation":"WRITE"}}\n')
    store._put_entry(CommitEntry(store.table_path, 2, temp, complete=False))
    assert main(["recover", s3_table, "--execute", *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    assert fields(out)["entries"] == "every incomplete entry (1 found)"
    assert any(line.split()[:2] == ["2", "COPIED_AND_COMPLETED"] for line in out.splitlines()), out
    assert main(["recover", s3_table, "--version", "2", "--json", "--execute", *flags(storage_options)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {k: document[k] for k in ("table", "version", "outcome", "description")} == {
        "table": s3_table, "version": 2, "outcome": "ALREADY_COMPLETE",
        "description": RecoveryOutcome.ALREADY_COMPLETE.description}
    assert store.read(2) == b'{"commitInfo":{"operation":"WRITE"}}\n'


def test_recover_finishes_every_incomplete_entry_of_the_table_and_says_what_it_did(s3_table, storage_options,
                                                                                   capsys):
    """Issue 18, item 3: not only the newest. Entries 2 and 3 lost their UpdateItem (their N.json exists),
    entry 4's writer died before writing its N.json: all three end complete, with expireTime."""
    from tests.support.fault_harness import item_problems, table_items

    store = open_log_store(s3_table, storage_options=storage_options)
    for version in (2, 3, 4):
        temp = f".tmp/{version:020d}.json.crashed"
        body = f'{{"commitInfo":{{"operation":"WRITE","n":{version}}}}}\n'.encode()
        store._put_temp(temp, body)
        store._put_entry(CommitEntry(store.table_path, version, temp, complete=False))
        if version < 4:
            store.objects.put(store.commit_key(version), body)
            store.objects.delete([store.temp_key(temp)])
    assert main(["recover", s3_table, "--json", "--execute", *flags(storage_options)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [(e["version"], e["outcome"]) for e in document["entries"]] == [
        (2, "COMPLETED"), (3, "COMPLETED"), (4, "COPIED_AND_COMPLETED")]
    assert all(e["description"] == RecoveryOutcome[e["outcome"]].description for e in document["entries"])
    assert item_problems(table_items(store)) == []
    assert [store.read(v) for v in (2, 3, 4)] == [
        f'{{"commitInfo":{{"operation":"WRITE","n":{v}}}}}\n'.encode() for v in (2, 3, 4)]
    assert main(["recover", s3_table, "--json", "--execute", *flags(storage_options)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == []


def test_recover_deletes_orphan_temp_files_past_their_age_and_keeps_the_young(s3_table, storage_options, capsys):
    store = open_log_store(s3_table, storage_options=storage_options)
    store._put_temp(".tmp/00000000000000000007.json.orphan", b"{}\n")
    flags_ = flags(storage_options)
    assert main(["recover", s3_table, "--json", *flags_]) == 0
    assert json.loads(capsys.readouterr().out)["tempFiles"]["tooYoung"] == [".tmp/00000000000000000007.json.orphan"]
    assert main(["recover", s3_table, "--temp-age-hours", "0", "--dry-run", "--json", *flags_]) == 0
    assert json.loads(capsys.readouterr().out)["tempFiles"]["deleted"] == [".tmp/00000000000000000007.json.orphan"]
    assert store.objects.head(store.temp_key(".tmp/00000000000000000007.json.orphan")) is not None
    assert main(["recover", s3_table, "--temp-age-hours", "0", "--execute", *flags_]) == 0
    assert "deleted 1 orphan temp file" in capsys.readouterr().out
    assert store.objects.head(store.temp_key(".tmp/00000000000000000007.json.orphan")) is None


def test_checkpoint_command_writes_one_and_show_reports_it(s3_table, storage_options, capsys):
    assert main(["checkpoint", s3_table, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would write a checkpoint of version 1\n") and fields(out)["last checkpoint"] == "none"
    assert read_last_checkpoint(Table(s3_table, storage_options=storage_options).log_store) is None
    assert main(["checkpoint", s3_table, "--execute", *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote a checkpoint\n") and fields(out)["checkpoint"].startswith("version 1 (")
    assert fields(out)["data files"] == "4"
    assert main(["show", s3_table, *flags(storage_options)]) == 0
    assert fields(capsys.readouterr().out)["last checkpoint"].startswith("version 1 (")
    assert read_last_checkpoint(Table(s3_table, storage_options=storage_options).log_store).version == 1
    assert main(["checkpoint", s3_table, "--json", "--execute", *flags(storage_options)]) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["table"] == s3_table and written["checkpoint"]["version"] == 1
    assert written["checkpoint"]["numOfAddFiles"] == 4


# --- the DynamoDB table -----------------------------------------------------------------------------


def test_create_ddb_table_says_what_it_did_including_ttl(storage_options, capsys):
    options = {**storage_options, "DELTA_DYNAMO_TABLE_NAME": f"cli_{uuid.uuid4().hex[:8]}"}
    assert main(["create-ddb-table", *flags(options)]) == 0
    shown = fields(capsys.readouterr().out)
    assert shown["status"] == "does not exist: would be created" and shown["TTL"].startswith("would be enabled")
    assert main(["create-ddb-table", "--execute", *flags(options)]) == 0
    shown = fields(capsys.readouterr().out)
    assert shown["DynamoDB table"] == options["DELTA_DYNAMO_TABLE_NAME"] and shown["status"] == "created"
    assert shown["TTL"].startswith("enabled on expireTime") and shown["billing"] == "on-demand (PAY_PER_REQUEST)"
    assert main(["create-ddb-table", "--json", *flags(options)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"tableName": options["DELTA_DYNAMO_TABLE_NAME"], "dryRun": True, "created": False,
                      "billingMode": "PAY_PER_REQUEST", "ttlEnabled": True, "ttlWasEnabled": True,
                      "ttlAttribute": "expireTime", "notes": []}


def test_doctor_exits_1_on_an_error_finding_and_0_on_a_sound_setup(s3_table, storage_options, capsys):
    assert main(["doctor", s3_table, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    checks = {row[1]: row[0] for row in plain_table(out, "status")[1:]}
    assert checks["key schema"] == "ok" and checks["bucket"] == "ok" and checks["ttl"] == "ok"
    assert out.rstrip().endswith("every check passed")
    missing = {**storage_options, "DELTA_DYNAMO_TABLE_NAME": "no_such_table"}
    assert main(["doctor", *flags(missing)]) == 1
    out = capsys.readouterr().out
    assert plain_table(out, "status")[1][0] == "error" and "1 error(s)" in out


def test_doctor_json(s3_table, storage_options, capsys):
    assert main(["doctor", s3_table, "--json", *flags(storage_options)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["errors"] == 0
    assert {f["check"] for f in report["findings"]} >= {"key schema", "billing", "ttl", "bucket"}
    missing = {**storage_options, "DELTA_DYNAMO_TABLE_NAME": "no_such_table"}
    assert main(["doctor", "--json", *flags(missing)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["findings"][0]["severity"] == "error"


def test_doctor_on_a_terminal(s3_table, storage_options, on_terminal):
    status, out = on_terminal(["doctor", s3_table, *flags(storage_options)])
    assert status == 0
    assert re.search(r"ok\s+key schema\s+tablePath", out) and "every check passed" in out


def break_protocol(uri: str, options: dict[str, str], column: dict, **configuration: str) -> None:
    """Commit, straight to the log, a schema with ``column`` added (and ``configuration``) while the
    protocol stays as it is: what a writer that skips the protocol upgrade leaves."""
    table = Table(uri, storage_options=options)
    metadata = table.snapshot.metadata
    schema = json.loads(metadata.schema_string)
    schema["fields"].append(column)
    broken = metadata.model_copy(update={"schema_string": json.dumps(schema),
                                         "configuration": {**metadata.configuration, **configuration}})
    table.log_store.write(table.version + 1, serialize_commit([broken]))


def test_doctor_reports_a_table_whose_schema_needs_features_its_protocol_lacks(s3_table, storage_options, capsys):
    assert main(["doctor", s3_table, "--json", *flags(storage_options)]) == 0
    findings = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert findings["protocol"]["severity"] == "ok"
    assert Table(s3_table, storage_options=storage_options).snapshot.protocol.min_writer_version == 2
    break_protocol(s3_table, storage_options, {"name": "seen", "type": "timestamp_ntz", "nullable": True,
                                               "metadata": {}}, **{"delta.enableDeletionVectors": "true"})

    assert main(["doctor", s3_table, "--json", *flags(storage_options)]) == 1
    report = json.loads(capsys.readouterr().out)
    found = {f["check"]: f for f in report["findings"]}["protocol"]
    assert report["errors"] == 1 and found["severity"] == "error"
    message = found["message"]
    assert "reader 1 / writer 2" in message
    assert "timestampNtz (for a timestamp_ntz column, readers and writers)" in message
    assert "deletionVectors (for delta.enableDeletionVectors=true, readers and writers)" in message
    assert ("SET TBLPROPERTIES ('delta.feature.deletionVectors' = 'supported', 'delta.feature.timestampNtz' = "
            "'supported')") in message
    assert main(["doctor", s3_table, *flags(storage_options)]) == 1
    out = capsys.readouterr().out
    assert "1 error(s)" in out and "timestampNtz" in out


def test_doctor_accepts_features_a_legacy_protocol_implies_and_reports_those_it_does_not(
        s3_uri, storage_options, capsys):
    write_table(s3_uri, rows(0, 2), storage_options=storage_options,
                configuration={"delta.enableChangeDataFeed": "true"})
    assert Table(s3_uri, storage_options=storage_options).snapshot.protocol.min_writer_version == 4
    assert main(["doctor", s3_uri, "--json", *flags(storage_options)]) == 0
    assert {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["protocol"]["severity"] == "ok"
    break_protocol(s3_uri, storage_options, {"name": "v2", "type": "variant", "nullable": True, "metadata": {}})
    assert main(["doctor", s3_uri, "--json", *flags(storage_options)]) == 1
    message = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["protocol"]["message"]
    assert "reader 1 / writer 4" in message and "variantType (for a variant column" in message
    assert "changeDataFeed" not in message


def test_doctor_on_a_uri_without_a_table_has_no_protocol_to_check(s3_uri, storage_options, capsys):
    assert main(["doctor", s3_uri, "--json", *flags(storage_options)]) == 0
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["protocol"]
    assert found["severity"] == "ok" and "no table" in found["message"]


# --- errors -----------------------------------------------------------------------------------------


def test_bad_uri_exits_2_with_the_error_and_no_traceback(capsys):
    assert main(["show", "ftp://bucket/table"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and "scheme 'ftp'" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_missing_table_exits_2_with_the_error(s3_uri, storage_options, capsys):
    assert main(["history", s3_uri, *flags(storage_options)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no table at ") and s3_uri in err


def test_debug_adds_the_traceback_to_a_dynacommit_error(s3_uri, storage_options, capsys):
    assert main(["history", s3_uri, "--debug", *flags(storage_options)]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "TableNotFoundError" in err
    assert err.rstrip().splitlines()[-1].startswith("error: no table at ")


def test_unknown_storage_option_exits_2_naming_it(s3_uri, capsys):
    assert main(["show", s3_uri, "--option", "AWS_REGOIN=eu-west-1"]) == 2
    assert "AWS_REGOIN" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    assert main(["history"]) == 2
    assert main(["show", "s3://b/t", "--option", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["uploads"]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["--help"]) == 0


@pytest.mark.parametrize("argv, flag", [
    (["vacuum", "memory://b/t", "--retention-hours", "inf"], "--retention-hours"),
    (["vacuum", "memory://b/t", "--retention-hours", "nan"], "--retention-hours"),
    (["vacuum", "memory://b/t", "--retention-hours", "-1"], "--retention-hours"),
    (["vacuum", "memory://b/t", "--retention-hours", "1e9"], "--retention-hours"),
    (["vacuum", "memory://b/t", "--retention-hours", "a week"], "--retention-hours"),
    (["uploads", "abort", "memory://b/t", "--older-than-hours=-inf"], "--older-than-hours"),
    (["uploads", "list", "memory://b/t", "--older-than-hours", "NaN"], "--older-than-hours"),
    (["show", "memory://b/t", "--version", "-1"], "--version"),
    (["show", "memory://b/t", "--version", "1.5"], "--version"),
    (["recover", "memory://b/t", "--version", "latest"], "--version"),
    (["history", "memory://b/t", "--limit", "-3"], "--limit"),
])
def test_bad_numbers_exit_2_naming_the_flag_without_a_traceback(argv, flag, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    value = argv[-1].removeprefix(f"{flag}=")
    assert f"argument {flag}: expected" in captured.err and repr(value) in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


class BrokenReporter(progress.Reporter):
    """A progress reporter that fails: an error no dynacommit code expects."""

    def __init__(self, error: BaseException):
        self.error = error

    def start(self, description: str, *, total: int | None) -> progress.Task:
        raise self.error


def test_an_unexpected_error_is_one_line_and_exit_3_unless_debugging(memory_uri, capsys):
    table = orphaned(memory_uri, 1)
    with progress.reporting(BrokenReporter(RuntimeError("the reporter broke\nhalf way"))):
        assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute"]) == 3
        captured = capsys.readouterr()
        assert captured.err == ("error: unexpected RuntimeError: the reporter broke half way "
                                "(run with --debug for the traceback)\n")
        assert captured.out == ""
        assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute", "--debug"]) == 3
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "--debug for the traceback" not in err
        assert err.rstrip().splitlines()[-1] == "error: unexpected RuntimeError: the reporter broke half way"
    assert len(vacuumable(table)) == 1


def test_an_interrupt_exits_130(memory_uri, capsys):
    orphaned(memory_uri, 1)
    with progress.reporting(BrokenReporter(KeyboardInterrupt())):
        assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


# --- maintenance (memory:// tables, same process) ---------------------------------------------------


def orphaned(uri: str, count: int) -> Table:
    """A table at ``uri`` with ``count`` unreferenced files."""
    write_table(uri, rows(0, 4))
    table = Table(uri)
    for i in range(count):
        table.objects.put(table.uri.key(f"part-orphan-{i:04d}.parquet"), b"not referenced")
    return table


def vacuumable(table: Table) -> list[str]:
    return [o.key for o in table.objects.list(table.uri.key("part-orphan"))]


def test_vacuum_is_a_dry_run_unless_executed(memory_uri, capsys):
    table = orphaned(memory_uri, 1)
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force"]) == 0
    out = capsys.readouterr().out
    assert "would delete 1 file(s), 14 bytes" in out and "dry run: nothing was changed; pass --execute to delete them" in out
    assert plain_table(out, "file")[1][:2] == ["part-orphan-0000.parquet", "14"]
    assert len(vacuumable(table)) == 1
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute"]) == 0
    out = capsys.readouterr().out
    assert "deleted 1 file(s)" in out and "dry run" not in out
    assert vacuumable(table) == []


def test_vacuum_json(memory_uri, capsys):
    table = orphaned(memory_uri, 3)
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dryRun"] is True and report["count"] == 3 and report["bytes"] == 42
    assert report["table"] == memory_uri and report["retentionHours"] == 0 and report["keptUnreferenced"] == 0
    assert [f["path"] for f in report["files"]] == [f"part-orphan-{i:04d}.parquet" for i in range(3)]
    assert all(isinstance(f["lastModified"], int) and f["size"] == 14 for f in report["files"])
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dryRun"] is False and vacuumable(table) == []


def test_vacuum_on_a_terminal(memory_uri, on_terminal):
    orphaned(memory_uri, 2)
    status, out = on_terminal(["vacuum", memory_uri, "--retention-hours", "0", "--force"])
    assert status == 0
    assert re.search(r"part-orphan-0001\.parquet\s+14\s+\d{4}-\d\d-\d\d", out)
    assert "would delete 2 file(s)" in out and "pass --execute to delete" in out


def test_vacuum_below_the_retention_without_force_exits_2(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    assert main(["vacuum", memory_uri, "--retention-hours", "1"]) == 2
    # the error is all the CLI says: the dry run waits for the write's own background UpdateItem (marking
    # version 0 complete) rather than warning that it may not send it
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    err = lines[0]
    assert err.startswith("error: a retention of 1 h") and "--force" in err


def test_vacuum_progress_off_a_terminal_is_plain_log_lines(memory_uri, capsys):
    table = orphaned(memory_uri, 2500)
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines and all(" INFO table.progress: deleting files: " in line for line in lines)
    assert lines[0].endswith("started, 0/2500 (0%)") and " done, 2500/2500 (100%) in " in lines[-1]
    assert not CONTROL.search(captured.err) and not CONTROL.search(captured.out)
    assert vacuumable(table) == []


def test_uploads_list_and_abort(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    table = Table(memory_uri)
    key = table.uri.key("p=a/part-00000-left-behind.parquet")
    upload_id = table.objects.create_upload(key).upload_id
    assert main(["uploads", "list", memory_uri]) == 0
    out = capsys.readouterr().out
    listed = plain_table(out, "initiated")
    assert listed[0] == ["initiated", "key", "upload id"] and listed[1][1:] == [key, upload_id]
    assert f"1 pending upload(s) under {memory_uri}" in out
    assert main(["uploads", "abort", memory_uri, "--older-than-hours", "0"]) == 0
    out = capsys.readouterr().out
    assert "would abort 1" in out and "dry run: nothing was changed; pass --execute to abort them" in out
    assert len(table.objects.list_uploads(table.uri.key(""))) == 1
    assert main(["uploads", "abort", memory_uri, "--older-than-hours", "0", "--execute"]) == 0
    captured = capsys.readouterr()
    assert "aborted 1" in captured.out and "aborting uploads: done, 1/1" in captured.err
    assert table.objects.list_uploads(table.uri.key("")) == []
    assert main(["uploads", "list", memory_uri]) == 0
    assert capsys.readouterr().out == f"0 pending upload(s) under {memory_uri}\n"


def test_uploads_json(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    table = Table(memory_uri)
    ids = {table.objects.create_upload(table.uri.key(f"part-{i}.parquet")).upload_id for i in range(2)}
    assert main(["uploads", "list", memory_uri, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == 2 and {u["uploadId"] for u in listed["uploads"]} == ids
    assert listed["table"] == memory_uri and all(isinstance(u["initiated"], int) for u in listed["uploads"])
    assert main(["uploads", "abort", memory_uri, "--json"]) == 0  # default: older than 24 h, none is
    report = json.loads(capsys.readouterr().out)
    assert report == {"table": memory_uri, "dryRun": True, "olderThanHours": 24.0, "count": 0, "remaining": 2,
                      "uploads": []}
    assert main(["uploads", "abort", memory_uri, "--older-than-hours", "0", "--execute", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["count"] == 2 and report["dryRun"] is False and table.objects.list_uploads(table.uri.key("")) == []


def test_uploads_on_a_terminal(memory_uri, on_terminal):
    write_table(memory_uri, rows(0, 2))
    table = Table(memory_uri)
    upload_id = table.objects.create_upload(table.uri.key("part-9.parquet")).upload_id
    status, out = on_terminal(["uploads", "list", memory_uri])
    assert status == 0
    assert re.search(rf"UTC\s+{re.escape(table.uri.key('part-9.parquet'))}\s+{upload_id}", out)
    assert "upload id" in out and "─" in out


def test_delete_is_a_dry_run_that_counts_the_rows_unless_executed(memory_uri, capsys):
    write_table(memory_uri, rows(0, 10), partition_by=["p"])
    assert main(["delete", memory_uri, "--where", "x >= 6"]) == 0
    out = capsys.readouterr().out
    assert "would delete 4 row(s) from 2 file(s) at version 0" in out and "pass --execute to delete" in out
    assert sorted(int(r[-1]) for r in plain_table(out, "file")[1:]) == [2, 2]
    assert Table(memory_uri).version == 0
    assert main(["delete", memory_uri, "--where", "p = 'a'", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dryRun"] is True and report["rowsDeleted"] == 5 and len(report["filesRemovedWhole"]) == 1
    assert main(["delete", memory_uri, "--where", "x >= 6", "--execute", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["committed"] is True and report["version"] == 1 and report["metrics"]["numDeletedRows"] == "4"
    assert sorted(Table(memory_uri).to_pyarrow_table()["x"].to_pylist()) == [0, 1, 2, 3, 4, 5]
    assert main(["delete", memory_uri, "--where", "x > 100", "--execute"]) == 0
    assert "no row matched: nothing committed (the table stays at version 1)" in capsys.readouterr().out


def test_delete_needs_a_valid_where(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    assert main(["delete", memory_uri]) == 2
    assert "--where" in capsys.readouterr().err
    assert main(["delete", memory_uri, "--where", "nope > 1", "--execute"]) == 2
    assert "No field named nope" in capsys.readouterr().err
    assert Table(memory_uri).version == 0


def test_history_shows_row_level_operations_and_their_metrics(memory_uri, capsys):
    write_table(memory_uri, rows(0, 6))
    Table(memory_uri).update({"x": "x * 10"}, predicate="x = 1")
    assert main(["history", memory_uri]) == 0
    out = capsys.readouterr().out
    update_row = next(r for r in plain_table(out, "version")[1:] if r[0] == "1")
    assert "UPDATE" in update_row and any("numUpdatedRows=1" in cell for cell in update_row)
    assert main(["history", memory_uri, "--json", "--limit", "1"]) == 0
    entry = json.loads(capsys.readouterr().out.splitlines()[0])
    assert entry["operation"] == "UPDATE" and entry["operationMetrics"]["numCopiedRows"] == "5"


def test_every_command_is_reachable_and_documented(capsys):
    names = {c.name for c in COMMANDS}
    assert names == {"create-ddb-table", "doctor", "show", "history", "delete", "restore", "recover", "checkpoint",
                     "vacuum", "optimize", "uploads list", "uploads abort", "drop-table"}
    for command in COMMANDS:
        assert main([*command.name.split(), "--help"]) == 0
        assert command.help in " ".join(capsys.readouterr().out.split())
