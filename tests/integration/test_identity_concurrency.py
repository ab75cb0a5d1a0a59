"""Identity columns under many writers: processes appending to one table through DynamoDB (moto) all
commit, and no identity value is handed out twice (table.data.identity re-plans a lost race)."""

from __future__ import annotations

import json
import multiprocessing
import uuid

import pyarrow as pa
import pytest

from logstore import TableUri, open_log_store, open_object_store
from table import Table, write_table
from table.log.actions import Metadata, Protocol, serialize_commit
from table.log.constraints import rules_of

pytestmark = pytest.mark.slow

PROCESSES = 4
APPENDS_EACH = 5
ROWS_EACH = 3


def _append_worker(uri: str, options: dict[str, str], writer: str) -> int:
    """Runs in a spawned process: ``APPENDS_EACH`` appends of ``ROWS_EACH`` rows without the identity column."""
    for i in range(APPENDS_EACH):
        write_table(uri, pa.table({"writer": [writer] * ROWS_EACH, "seq": [i] * ROWS_EACH}),
                    storage_options=options)
    return APPENDS_EACH


def test_processes_appending_to_an_identity_table_all_commit_with_distinct_values(s3_uri, storage_options):
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {
            "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False}},
        {"name": "writer", "type": "string", "nullable": True, "metadata": {}},
        {"name": "seq", "type": "long", "nullable": True, "metadata": {}}]})
    open_log_store(s3_uri, storage_options=storage_options).write(0, serialize_commit([
        Protocol(min_reader_version=1, min_writer_version=6),
        Metadata(id=str(uuid.uuid4()), schema_string=schema, configuration={}, created_time=1)]))
    writers = [f"w{n}" for n in range(PROCESSES)]
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        done = pool.starmap(_append_worker, [(s3_uri, storage_options, w) for w in writers])
    assert sum(done) == PROCESSES * APPENDS_EACH

    table = Table(s3_uri, storage_options=storage_options)
    assert table.version == PROCESSES * APPENDS_EACH  # every append committed, once
    got = table.to_pyarrow_table()
    total = PROCESSES * APPENDS_EACH * ROWS_EACH
    ids = got.column("id").to_pylist()
    assert got.num_rows == total and len(set(ids)) == total  # none lost, none handed out twice
    counted = {(w, s): 0 for w in writers for s in range(APPENDS_EACH)}
    for row in got.select(["writer", "seq"]).to_pylist():
        counted[(row["writer"], row["seq"])] += 1
    assert set(counted.values()) == {ROWS_EACH}
    retried = [e for e in table.history() if int((e.operation_metrics or {}).get("numAttempts", "1")) > 1]
    print(f"{len(retried)} of {table.version} appends lost a race and re-planned their identity values")
    (identity,) = rules_of(table.snapshot.protocol, table.snapshot.metadata).identity
    assert identity.high_water_mark == max(ids) and min(ids) >= 1
    # deltalake reads the same rows, and no object is left that the log does not reference
    import deltalake

    theirs = deltalake.DeltaTable(s3_uri, storage_options=storage_options).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == sorted(ids)
    table_uri = TableUri.parse(s3_uri)
    objects = {o.key.rsplit("/", 1)[-1] for o in open_object_store(table_uri, storage_options=storage_options)
               .list(table_uri.key("")) if "/_delta_log/" not in o.key}
    assert objects == {a.path.rsplit("/", 1)[-1] for a in table.snapshot.files}
