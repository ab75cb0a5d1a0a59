"""Compaction: small files rewritten into bigger ones in one commit that changes no data, never in the way
of concurrent appends, and never undoing a concurrent removal."""

from __future__ import annotations

import json

import pytest

from logstore.errors import InvalidArgumentError
from table.cli import main
from table.data.write import write_table
from table.log.actions import AddFile
from table.operations.optimize import plan_compaction
from table.table import Table
from tests.support.tables import data_keys, ids, rows, uploads, with_rival

MiB = 1024 * 1024


def small_files(uri: str, options, parts: str = "ab", each: int = 3) -> None:
    """``each`` one-row appends to each partition in ``parts``: as many small files."""
    for i in range(each):
        for part in parts:
            write_table(uri, rows(i * 10 + ord(part), 1, part), partition_by=["part"], storage_options=options)


def add(path: str, size: int, part: str = "a") -> AddFile:
    return AddFile(path=path, partition_values={"part": part}, size=size, modification_time=1, data_change=True)


def test_plan_packs_small_files_of_each_partition_and_leaves_single_and_big_files_alone():
    files = [add("a1", 60 * MiB), add("a2", 50 * MiB), add("a3", 40 * MiB), add("a4", 30 * MiB),
             add("big", 200 * MiB), add("b1", 10 * MiB, "b"), add("c1", 5 * MiB, "c"), add("c2", 6 * MiB, "c")]
    bins = plan_compaction(files, ["part"], target_size=128 * MiB)
    assert [(dict(b.partition_values), sorted(f.path for f in b.files)) for b in bins] == [
        ({"part": "a"}, ["a1", "a2"]), ({"part": "a"}, ["a3", "a4"]), ({"part": "c"}, ["c1", "c2"])]
    assert all(b.size <= 128 * MiB for b in bins)


def test_optimize_rewrites_the_small_files_of_each_partition_in_one_commit_without_changing_data(target):
    uri, options = target
    small_files(uri, options)
    before = Table(uri, storage_options=options)
    report = before.optimize()
    assert (report.files_removed, report.files_added, len(report.bins)) == (6, 2, 2)
    table = Table(uri, storage_options=options)
    assert table.version == before.version == report.version == 6
    assert ids(uri, options) == sorted(i * 10 + ord(p) for i in range(3) for p in "ab")
    assert len(table.snapshot.files) == 2 and all(not f.data_change for f in table.snapshot.files)
    entry = table.history(limit=1)[0]
    assert entry.operation == "OPTIMIZE" and entry.operation_metrics["numRemovedFiles"] == "6"
    assert not entry.is_blind_append and uploads(table) == []
    assert Table(uri, version=5, storage_options=options).to_pyarrow_table().num_rows == 6  # time travel intact


def test_a_dry_run_changes_nothing(target):
    uri, options = target
    small_files(uri, options)
    table = Table(uri, storage_options=options)
    keys = data_keys(table)
    report = table.optimize(dry_run=True)
    assert report.dry_run and report.files_removed == 6 and report.result is None
    assert Table(uri, storage_options=options).version == 5 and data_keys(table) == keys


def test_a_concurrent_append_never_conflicts_with_a_compaction_even_at_serializable(target):
    uri, options = target
    write_table(uri, rows(0, 1, "a"), partition_by=["part"], storage_options=options,
                configuration={"delta.isolationLevel": "Serializable"})
    small_files(uri, options, parts="a", each=2)
    table = Table(uri, storage_options=options)
    append = lambda: write_table(uri, rows(500, 1, "a"), storage_options=options)  # noqa: E731
    report = with_rival(append, table.optimize)
    assert report.result.metrics["numAttempts"] == "2"
    assert ids(uri, options) == sorted([0, 500, ord("a"), 10 + ord("a")])
    files = Table(uri, storage_options=options).snapshot.files
    assert sorted(f.data_change for f in files) == [False, True]  # the compacted file, and the append's


def test_a_concurrent_removal_of_a_file_being_rewritten_makes_the_compaction_plan_again_and_leave_nothing(target):
    uri, options = target
    small_files(uri, options, parts="a", each=3)
    table = Table(uri, storage_options=options)
    keys = data_keys(table)
    replace = lambda: write_table(uri, rows(900, 1, "a"), mode="overwrite", storage_options=options)  # noqa: E731
    report = with_rival(replace, table.optimize)
    assert report.bins == () and report.result is None  # planned again: one file left, nothing to compact
    assert ids(uri, options) == [900]
    after = Table(uri, storage_options=options)
    assert data_keys(after) - keys == {after.uri.key(f.path) for f in after.snapshot.files}  # only the overwrite's
    assert uploads(after) == []


def test_optimize_refuses_a_target_below_the_smallest_part_and_unknown_partition_columns(target):
    uri, options = target
    small_files(uri, options, parts="a", each=2)
    table = Table(uri, storage_options=options)
    with pytest.raises(InvalidArgumentError, match="at least 5242880 bytes"):
        table.optimize(target_size=1024)
    with pytest.raises(InvalidArgumentError, match=r"\['nope'\] are not partition columns"):
        table.optimize(partition={"nope": "x"})


def test_the_optimize_command_compacts_one_partition(s3_uri, storage_options, capsys):
    small_files(s3_uri, storage_options, parts="ab", each=2)
    flags = [f"--option={k}={v}" for k, v in storage_options.items()]
    assert main(["optimize", s3_uri, "--partition", "part=a", "--target-size", "64MiB", "--json", "--execute", *flags]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["filesRemoved"], document["filesAdded"], document["targetSize"]) == (2, 1, 64 * MiB)
    files = Table(s3_uri, storage_options=storage_options).snapshot.files
    assert sorted(f.partition_values["part"] for f in files) == ["a", "b", "b"]
    assert main(["optimize", s3_uri, "--target-size", "0", *flags]) == 2
    assert "--target-size" in capsys.readouterr().err
