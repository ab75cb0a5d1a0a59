"""The ``dynacommit`` command, run in-process through ``main([...])`` against the moto stack (and
``memory://`` tables for the maintenance commands)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from logstore import open_log_store
from logstore.external import CommitEntry
from table import Table, write_table
from table.cli import main


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64()),
                     "p": pa.array(["a" if i % 2 else "b" for i in range(start, start + count)])})


@pytest.fixture
def s3_table(s3_uri, storage_options) -> str:
    write_table(s3_uri, rows(0, 4), partition_by=["p"], storage_options=storage_options)
    write_table(s3_uri, rows(4, 4), storage_options=storage_options, app_id="nightly", app_version=1)
    return s3_uri


def test_show_prints_version_schema_partitioning_files_and_last_checkpoint(s3_table, storage_options, capsys):
    assert main(["show", s3_table, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    assert f"table            {s3_table}" in out and "version          1" in out
    assert "  x: int64" in out and "  p: string (partition)" in out
    assert "partition columns p" in out
    assert "files            4" in out and "last checkpoint  none" in out


def test_show_json_and_time_travel(s3_table, storage_options, capsys):
    assert main(["show", s3_table, "--json", "--version", "0", *flags(storage_options)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 0 and shown["partitionColumns"] == ["p"] and shown["numFiles"] == 2
    assert [f["name"] for f in shown["schema"]] == ["x", "p"] and shown["lastCheckpoint"] is None
    assert shown["sizeBytes"] == sum(a.size for a in Table(s3_table, version=0,
                                                           storage_options=storage_options).add_actions())


def test_history_lists_commits_newest_first_and_honours_limit(s3_table, storage_options, capsys):
    assert main(["history", s3_table, *flags(storage_options)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["1", "0"]
    assert "WRITE" in lines[0] and "app nightly@1" in lines[0] and "mode=Append" in lines[0]
    assert main(["history", s3_table, "--limit", "1", "--json", *flags(storage_options)]) == 0
    (entry,) = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert entry["version"] == 1 and entry["appTxns"] == {"nightly": 1} and entry["operation"] == "WRITE"


def test_checkpoint_command_writes_one_and_show_reports_it(s3_table, storage_options, capsys):
    assert main(["checkpoint", s3_table, *flags(storage_options)]) == 0
    assert "version 1" in capsys.readouterr().out
    assert main(["show", s3_table, *flags(storage_options)]) == 0
    assert "last checkpoint  version 1 (" in capsys.readouterr().out
    assert Table(s3_table, storage_options=storage_options).snapshot.checkpoint_version == 1


def test_storage_options_come_from_the_environment(s3_table, storage_options, capsys, monkeypatch):
    for key, value in storage_options.items():
        monkeypatch.setenv(key, value)
    assert main(["show", s3_table, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1


def test_recover_finishes_a_commit_whose_writer_died(s3_table, storage_options, capsys):
    store = open_log_store(s3_table, storage_options=storage_options)
    temp = ".tmp/00000000000000000002.json.crashed"
    store._put_temp(temp, b'{"commitInfo":{"operation":"WRITE"}}\n')
    store._put_entry(CommitEntry(store.table_path, 2, temp, complete=False))
    assert main(["recover", s3_table, *flags(storage_options)]) == 0
    assert "COPIED_AND_COMPLETED" in capsys.readouterr().out
    assert main(["recover", s3_table, "--version", "2", *flags(storage_options)]) == 0
    assert "ALREADY_COMPLETE" in capsys.readouterr().out
    assert store.read(2) == b'{"commitInfo":{"operation":"WRITE"}}\n'


def test_create_ddb_table_says_what_it_did_including_ttl(storage_options, capsys):
    options = {**storage_options, "DELTA_DYNAMO_TABLE_NAME": f"cli_{uuid.uuid4().hex[:8]}"}
    assert main(["create-ddb-table", *flags(options)]) == 0
    out = capsys.readouterr().out
    assert f"DynamoDB table {options['DELTA_DYNAMO_TABLE_NAME']}: created" in out and "TTL" in out
    assert main(["create-ddb-table", *flags(options)]) == 0
    assert "already existed" in capsys.readouterr().out


def test_doctor_exits_1_on_an_error_finding_and_0_on_a_sound_setup(s3_table, storage_options, capsys):
    assert main(["doctor", s3_table, *flags(storage_options)]) == 0
    assert "[ok] key schema" in capsys.readouterr().out
    missing = {**storage_options, "DELTA_DYNAMO_TABLE_NAME": "no_such_table"}
    assert main(["doctor", *flags(missing)]) == 1
    assert "[error]" in capsys.readouterr().out


def test_bad_uri_exits_2_with_the_error_and_no_traceback(capsys):
    assert main(["show", "ftp://bucket/table"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and "scheme 'ftp'" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_missing_table_exits_2_with_the_error(s3_uri, storage_options, capsys):
    assert main(["history", s3_uri, *flags(storage_options)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no table at ") and s3_uri in err


def test_unknown_storage_option_exits_2_naming_it(s3_uri, capsys):
    assert main(["show", s3_uri, "--option", "AWS_REGOIN=eu-west-1"]) == 2
    assert "AWS_REGOIN" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    assert main(["history"]) == 2
    assert main(["show", "s3://b/t", "--option", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


# --- maintenance (memory:// tables, same process) ---------------------------------------------------


def test_vacuum_is_a_dry_run_unless_executed(memory_uri, capsys):
    write_table(memory_uri, rows(0, 4))
    table = Table(memory_uri)
    orphan = table.uri.key("part-orphan.parquet")
    table.objects.put(orphan, b"not referenced")
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force"]) == 0
    out = capsys.readouterr().out
    assert "would delete 1 file(s)" in out and "part-orphan.parquet" in out
    assert table.objects.head(orphan) is not None
    assert main(["vacuum", memory_uri, "--retention-hours", "0", "--force", "--execute"]) == 0
    assert "deleted 1 file(s)" in capsys.readouterr().out
    assert table.objects.head(orphan) is None


def test_vacuum_below_the_retention_without_force_exits_2(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    assert main(["vacuum", memory_uri, "--retention-hours", "1"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_uploads_list_and_abort(memory_uri, capsys):
    write_table(memory_uri, rows(0, 2))
    table = Table(memory_uri)
    key = table.uri.key("p=a/part-00000-left-behind.parquet")
    upload_id = table.objects.create_upload(key).upload_id
    assert main(["uploads", "list", memory_uri]) == 0
    out = capsys.readouterr().out
    assert upload_id in out and "1 pending upload(s)" in out
    assert main(["uploads", "abort", memory_uri, "--older-than-hours", "0"]) == 0
    assert "would abort 1" in capsys.readouterr().out
    assert len(table.objects.list_uploads(table.uri.key(""))) == 1
    assert main(["uploads", "abort", memory_uri, "--older-than-hours", "0", "--execute"]) == 0
    assert "aborted 1" in capsys.readouterr().out
    assert table.objects.list_uploads(table.uri.key("")) == []
