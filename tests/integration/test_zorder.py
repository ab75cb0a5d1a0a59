"""Z-order clustering (``OPTIMIZE ... ZORDER BY``): the same rows, in files whose value ranges barely overlap,
read by deltalake, with Delta's refusals and Delta's history entry."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from logstore.errors import ArgumentTypeError, InvalidArgumentError
from table.cli import main
from table.data.staging import MIN_PART_SIZE
from table.data.write import write_table
from table.operations.zorder import zorder_values
from table.table import Table
from tests.support.tables import uploads, with_rival

DV_AND_MAPPING = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}


def random_rows(seed: int, count: int, part: str | None = None) -> pa.Table:
    generator = np.random.default_rng(seed)
    columns = {"id": np.arange(count) + seed * 10**6,
               "x": generator.integers(0, 10**9, count), "y": generator.integers(0, 10**9, count)}
    if part is not None:
        columns["part"] = pa.array([part] * count)
    return pa.table(columns)


def sorted_rows(rows: pa.Table) -> list[dict]:
    return rows.sort_by("id").to_pylist()


def boxes(table: Table, physical: dict[str, str] | None = None) -> list[tuple[int, int, int, int]]:
    """Each live file's (min x, max x, min y, max y), read from its Parquet footer, not from the log."""
    names = physical or {"x": "x", "y": "y"}
    found = []
    for add in table.snapshot.files:
        metadata = pq.ParquetFile(io.BytesIO(table.objects.get(table.uri.key(add.path)))).metadata
        bounds = {}
        for column in ("x", "y"):
            index = metadata.schema.names.index(names[column])
            stats = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)]
            bounds[column] = (min(s.min for s in stats), max(s.max for s in stats))
        found.append((*bounds["x"], *bounds["y"]))
    return found


def files_per_lookup(found: list[tuple[int, int, int, int]]) -> float:
    """How many files a lookup of a random (x, y) point must open, by their min/max boxes: the sum of the
    boxes' shares of the plane the values come from."""
    return sum((x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in found) / 10**18


def test_z_values_interleave_the_scaled_ranks_bit_by_bit():
    """Against the curve written out as bit strings: dense ranks scaled to 32 bits, then alternated."""
    rows = pa.table({"a": [5, 1, 5, None, 3], "b": ["q", "z", "a", "a", None]})
    ranks = {"a": [2, 0, 2, 3, 1], "b": [1, 2, 0, 0, 3]}  # dense, nulls last
    distinct = {"a": 4, "b": 4}
    expected = []
    for i in range(rows.num_rows):
        scaled = {c: format(ranks[c][i] * 2**32 // distinct[c], "032b") for c in "ab"}
        expected.append(int("".join(x + y for x, y in zip(scaled["a"], scaled["b"])), 2))
    assert zorder_values(rows, ["a", "b"]).tolist() == expected


def test_z_order_keeps_every_row_and_leaves_files_whose_ranges_barely_overlap(memory_uri):
    for seed in range(8):
        write_table(memory_uri, random_rows(seed, 400_000))  # about 25 MB as this writer encodes it
    table = Table(memory_uri)
    expected = sorted_rows(table.to_pyarrow_table())
    before = boxes(table)
    size = sum(f.size for f in table.snapshot.files)
    assert size >= 4 * MIN_PART_SIZE  # so that four files of at least the smallest target come out
    report = table.optimize(z_order=["x", "y"], target_size=size // 4)
    after_table = Table(memory_uri)
    after = boxes(after_table)
    assert (report.files_removed, report.files_added, len(after)) == (8, 4, 4)
    assert sorted_rows(after_table.to_pyarrow_table()) == expected
    assert files_per_lookup(before) > 7.9  # every file covers the whole plane
    assert files_per_lookup(after) < 1.5  # about a quadrant each (cut by row count, so edges can spill)
    entry = after_table.history(limit=1)[0]
    assert entry.operation == "OPTIMIZE" and entry.operation_parameters["zOrderBy"] == '["x","y"]'  # as Delta writes it
    assert all(not f.data_change for f in after_table.snapshot.files)


def test_z_order_of_a_mapped_table_with_deletion_vectors_keeps_deleted_rows_deleted_and_deltalake_reads_it(
        s3_uri, storage_options):
    write_table(s3_uri, random_rows(0, 300, "a"), partition_by=["part"], configuration=DV_AND_MAPPING,
                storage_options=storage_options)
    for seed, part in ((1, "b"), (2, "a"), (3, "b")):
        write_table(s3_uri, random_rows(seed, 300, part), storage_options=storage_options)
    Table(s3_uri, storage_options=storage_options).delete("x < 200000000")
    table = Table(s3_uri, storage_options=storage_options)
    assert any(f.deletion_vector is not None for f in table.snapshot.files)
    everything = pa.concat_tables([random_rows(s, 300, p) for s, p in ((0, "a"), (1, "b"), (2, "a"), (3, "b"))])
    expected = sorted_rows(everything.filter(pc.greater_equal(everything["x"], 200_000_000)))
    append = lambda: write_table(s3_uri, random_rows(9, 10, "a"), storage_options=storage_options)  # noqa: E731
    report = with_rival(append, lambda: table.optimize(z_order=["y", "x"]))
    assert report.result.metrics["numAttempts"] == "2"  # the append came first; no conflict, no re-plan
    assert report.result.metrics["numReplans"] == "0"
    assert [(dict(b.partition_values), len(b.files)) for b in report.bins] == [({"part": "a"}, 2), ({"part": "b"}, 2)]
    expected = sorted(expected + random_rows(9, 10, "a").to_pylist(), key=lambda r: r["id"])
    after = Table(s3_uri, storage_options=storage_options)
    assert sorted_rows(after.to_pyarrow_table()) == expected
    assert all(f.deletion_vector is None for f in after.snapshot.files if not f.data_change)
    import deltalake

    from tests.support.fault_harness import deltalake_options

    theirs = deltalake.DeltaTable(s3_uri, storage_options=deltalake_options(storage_options))
    assert theirs.version() == after.version
    read = pa.RecordBatchReader.from_stream(
        deltalake.QueryBuilder().register("t", theirs).execute("SELECT id, x, y, part FROM t")).read_all()
    assert sorted(read.to_pylist(), key=lambda r: r["id"]) == expected
    assert json.loads(theirs.history(1)[0]["operationParameters"]["zOrderBy"]) == ["y", "x"]
    assert uploads(after) == []


def test_z_order_refuses_partition_unknown_nested_and_unindexed_columns(memory_uri):
    rows = pa.table({"id": [1, 2], "s": pa.array([{"a": 1}, {"a": 2}]), "late": [3, 4], "part": ["a", "b"]})
    write_table(memory_uri, rows, partition_by=["part"], configuration={"delta.dataSkippingNumIndexedCols": "2"})
    table = Table(memory_uri)
    for columns, message in ((["part"], "'part' is a partition column"), (["nope"], "'nope' is not a column"),
                             (["s"], "has type struct"), (["late"], "'late' .* has no statistics"),
                             ([], "names no column"), (["id", "id"], "names a column twice")):
        with pytest.raises(InvalidArgumentError, match=message):
            table.optimize(z_order=columns)
    with pytest.raises(ArgumentTypeError, match="list of column names"):
        table.optimize(z_order="id")
    assert Table(memory_uri).version == 0


def test_the_optimize_command_z_orders(s3_uri, storage_options, capsys):
    for seed in range(3):
        write_table(s3_uri, random_rows(seed, 50), storage_options=storage_options)
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    assert main(["optimize", s3_uri, "--zorder-by", "x,y", "--json", "--execute", *flags]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["filesRemoved"], document["filesAdded"], document["zOrderBy"]) == (3, 1, ["x", "y"])
    assert main(["optimize", s3_uri, "--zorder-by", "nope", "--execute", *flags]) != 0
    assert "'nope' is not a column" in capsys.readouterr().err
