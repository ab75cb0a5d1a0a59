"""``delta.dataSkippingStatsColumns`` against deltalake writing the same table property: the same columns get
statistics, with the same bounds, and each reads the other's table with a filter on a column with and one
without statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from table.data.write import write_table
from table.log import properties
from table.table import Table

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.interop


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i:05d}" if i % 7 else None for i in ids]),
        "amount": pa.array([i * 2.5 for i in ids], pa.float64()),
        "day": pa.array([i // 10 for i in ids], pa.int32()).cast(pa.date32()),
        "note.x": pa.array([f"x{i}" for i in ids]),
    })


def their_stats(path: Path) -> list[dict]:
    """The stats of the ``add`` actions deltalake wrote, as its log holds them."""
    return [json.loads(json.loads(line)["add"]["stats"]) for entry in sorted((path / "_delta_log").glob("*.json"))
            for line in entry.read_text().splitlines() if '"add"' in line and "add" in json.loads(line)]


# deltalake matches the names with their case and leaves nested fields out; Delta (and dynacommit) match names
# without regard to case and cover nested fields (tests/unit/table/test_stats_columns.py)
@pytest.mark.parametrize("listed", ["name", "id, day", "`name`,amount", "`note.x`,id"])
def test_the_same_columns_get_the_same_statistics_as_deltalake_gives_them(memory_uri, tmp_path, listed):
    data = rows(0, 200)
    configuration = {properties.STATS_COLUMNS: listed}
    write_table(memory_uri, data, configuration=configuration)
    deltalake.write_deltalake(str(tmp_path), data, configuration=configuration)
    ours = [json.loads(f.stats) for f in Table(memory_uri).snapshot.files]
    theirs = their_stats(tmp_path)
    assert len(ours) == len(theirs) == 1
    for key in ("nullCount", "minValues", "maxValues"):
        assert ours[0][key] == theirs[0][key], key
    assert ours[0]["numRecords"] == theirs[0]["numRecords"] == 200


def test_each_reads_the_others_table_filtering_on_columns_with_and_without_statistics(s3_uri, storage_options):
    theirs = s3_uri + "-theirs"
    options = {k: v for k, v in storage_options.items() if k != "DELTA_DYNAMO_TABLE_NAME"}
    options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    configuration = {properties.STATS_COLUMNS: "name"}
    for start in range(0, 300, 100):
        write_table(s3_uri, rows(start, 100), configuration=configuration, storage_options=storage_options)
        deltalake.write_deltalake(theirs, rows(start, 100), configuration=configuration, mode="append",
                                  storage_options=options)
    everything = rows(0, 300)
    for condition in (pc.field("id") >= 250, pc.field("name") >= "n00250"):
        expected = everything.filter(condition).sort_by("id")
        for uri in (s3_uri, theirs):
            got = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table(filters=condition)
            assert got.sort_by("id").equals(expected), (uri, str(condition))
            got = Table(uri, storage_options=storage_options).to_pyarrow_table(filter=condition)
            assert got.sort_by("id").equals(expected), (uri, str(condition))
