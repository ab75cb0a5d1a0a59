"""A pure reader without the permissions to finish a dead writer's commit still reads the table (issue 18,
item 8): finishing a commit writes ``N.json`` (``s3:PutObject``) and marks the entry complete
(``dynamodb:UpdateItem``). A reader whose IAM policy lacks them (the fault proxy answers those requests
``AccessDenied``, as AWS does) skips the repair, says so once, and reads what is published.
"""

from __future__ import annotations

import logging

import pytest

from logstore import open_log_store
from logstore.external import CommitEntry
from table import Table, write_table
from tests.support.fault_harness import item_problems, marker, marker_counts, marker_rows, table_items
from tests.support.fault_proxy import FaultRule

pytestmark = pytest.mark.slow

DENIED = [FaultRule("denied", 1.0, service="s3", operation="PutObject"),
          FaultRule("denied", 1.0, service="s3", operation="DeleteObjects"),
          FaultRule("denied", 1.0, service="dynamodb", operation="UpdateItem")]


def won_but_unpublished(uri: str, options: dict[str, str], *, published: bool) -> None:
    """Version 2 won by a writer that died: its temp file and incomplete entry, with ``N.json`` written
    (``published``: only the UpdateItem was lost) or not."""
    from table.log.actions import serialize_commit
    from table.log.snapshot import read_commit

    store = open_log_store(uri, storage_options=options)
    (add,) = [a for a in read_commit(store, 1) if type(a).__name__ == "AddFile"]
    # a copy of version 1's data file under another name: the unfinished commit holds its rows again
    table = Table(uri, storage_options=options)
    table.objects.put(table.uri.key("part-copy.parquet"), table.objects.get(table.uri.key(add.path)))
    body = serialize_commit([add.model_copy(update={"path": "part-copy.parquet"})])
    temp = ".tmp/00000000000000000002.json.died"
    store._put_temp(temp, body)
    store._put_entry(CommitEntry(store.table_path, 2, temp, complete=False))
    if published:
        store.objects.put(store.commit_key(2), body)
        store.objects.delete([store.temp_key(temp)])


@pytest.mark.parametrize("published", [False, True], ids=["temp-file-only", "entry-not-marked-complete"])
def test_a_reader_without_write_permissions_reads_what_is_published_and_says_so_once(
        published, s3_uri, storage_options, make_fault_proxy, caplog):
    write_table(s3_uri, marker_rows("w", 0), storage_options=storage_options)
    write_table(s3_uri, marker_rows("w", 1), storage_options=storage_options)
    won_but_unpublished(s3_uri, storage_options, published=published)
    proxy = make_fault_proxy(seed=18)
    proxy.set_faults(DENIED)
    reader_options = proxy.storage_options(storage_options)
    caplog.set_level(logging.WARNING, logger="logstore")
    first = Table(s3_uri, storage_options=reader_options)
    again = Table(s3_uri, storage_options=reader_options)  # the remembered snapshot, updated
    expected_version = 2 if published else 1
    assert first.version == again.version == expected_version
    rows = marker_counts(first.to_pyarrow_table(columns=["marker"]))
    assert rows[marker("w", 1)] == 3 * (2 if published else 1) and rows[marker("w", 0)] == 3
    assert proxy.stats().faults.get("denied", 0) >= 1, "the reader never tried to finish the commit"
    said = [r for r in caplog.records if "may not" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert "version 2" in said[0].getMessage()
    # a process that may write finishes it
    proxy.clear_faults()
    assert Table(s3_uri, storage_options=storage_options).version == 2
    assert item_problems(table_items(open_log_store(s3_uri, storage_options=storage_options))) == []
