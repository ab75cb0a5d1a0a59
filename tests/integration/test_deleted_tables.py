"""A table deleted from S3 while its DynamoDB items remain (issue 27, item 4), on the moto stack.

Reading or writing it used to raise CorruptLogError advising to restore 00000000000000000000.json; now the
error says the table was deleted and names ``dynacommit drop-table``, which lists the items (and what is
left in S3) and deletes them with ``--execute``, after which the table can be created again. The error and
the command must never take a live table for a deleted one: items expired by TTL while the files exist,
and a log whose old commits log cleanup removed, are read as they are, and drop-table refuses them.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from logstore import ConfigurationError, open_log_store
from logstore.entries import drop_entries
from logstore.external import PUBLISHED
from table import Table, write_table
from table.cli import main
from table.table import forget_snapshots
from tests.support.fault_harness import table_items


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def rows(start: int, count: int = 2) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64())})


def delete_prefix(uri: str, options: dict[str, str], *, keep_data: bool = False) -> None:
    PUBLISHED.wait_all()  # every entry marked complete, as long after the last write
    store = open_log_store(uri, storage_options=options)
    prefix = store.log_prefix if keep_data else store.uri.key("")
    store.objects.delete([o.key for o in store.objects.list(prefix)])
    forget_snapshots()  # as a new process would open it


def test_a_deleted_table_is_named_and_drop_table_lets_it_be_created_again(s3_uri, storage_options, capsys):
    for start in (0, 2, 4):
        write_table(s3_uri, rows(start), storage_options=storage_options)
    delete_prefix(s3_uri, storage_options, keep_data=True)  # the log is gone, data files are left
    for attempt in (lambda: Table(s3_uri, storage_options=storage_options),
                    lambda: write_table(s3_uri, rows(10), storage_options=storage_options)):
        with pytest.raises(ConfigurationError) as raised:
            attempt()
        message = str(raised.value)
        assert "was deleted from S3" in message and "holds 3 entries" in message
        assert f"dynacommit drop-table {s3_uri} --execute" in message

    assert main(["drop-table", s3_uri, "--json", *flags(storage_options)]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["dryRun"] is True and [e["version"] for e in planned["entries"]] == [0, 1, 2]
    assert planned["deleted"] == [] and len(planned["objectsLeft"]) == 3  # the three data files
    assert len(table_items(open_log_store(s3_uri, storage_options=storage_options))) == 3

    assert main(["drop-table", s3_uri, *flags(storage_options)]) == 0
    out = capsys.readouterr().out
    assert "would delete 3 entries" in out and "3 object(s) still under the table's prefix" in out
    assert "pass --execute" in out

    assert main(["drop-table", s3_uri, "--execute", "--json", *flags(storage_options)]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == [0, 1, 2]
    assert table_items(open_log_store(s3_uri, storage_options=storage_options)) == []
    assert write_table(s3_uri, rows(10), storage_options=storage_options).version == 0
    forget_snapshots()
    assert Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["x"].to_pylist() == [10, 11]


def test_drop_table_refuses_a_live_table(s3_uri, storage_options, capsys):
    write_table(s3_uri, rows(0), storage_options=storage_options)
    PUBLISHED.wait_all()  # the temp file's DELETE goes out after the write returned: the log holds 0.json alone
    assert main(["drop-table", s3_uri, "--execute", *flags(storage_options)]) == 2
    assert "is not deleted: _delta_log/ still holds 00000000000000000000.json" in capsys.readouterr().err
    assert len(table_items(open_log_store(s3_uri, storage_options=storage_options))) == 1


def test_items_expired_while_the_files_exist_are_no_deleted_table(s3_uri, storage_options):
    """TTL removes items in no set order; the table is read from its files, and is never called deleted."""
    for start in (0, 2, 4):
        write_table(s3_uri, rows(start), storage_options=storage_options)
    PUBLISHED.wait_all()
    store = open_log_store(s3_uri, storage_options=storage_options)
    for entry in list(store._all_entries())[:2]:  # versions 0 and 1 expired, 2 remains
        assert store._drop_entry(entry)
    forget_snapshots()
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["x"].to_pylist()) == list(range(6))
    with pytest.raises(ConfigurationError, match="is not deleted"):
        drop_entries(store, dry_run=False)


def test_a_log_whose_old_commits_were_cleaned_up_is_no_deleted_table(s3_uri, storage_options):
    """Log cleanup deletes old commits once a checkpoint covers them: the missing commits are no sign of a
    deleted table (the checkpoint is in _delta_log/), and the table reads from the checkpoint."""
    for start in range(0, 24, 2):  # versions 0-11; a checkpoint at 10
        write_table(s3_uri, rows(start), storage_options=storage_options,
                    configuration={"delta.checkpointInterval": "10"} if start == 0 else None)
    PUBLISHED.wait_all()
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.objects.delete([store.commit_key(v) for v in range(10)])  # what cleanup leaves: checkpoint 10, 10, 11
    forget_snapshots()
    assert sorted(Table(s3_uri, storage_options=storage_options).to_pyarrow_table()["x"].to_pylist()) == list(range(24))
