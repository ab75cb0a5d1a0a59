"""The table properties the user guide calls honoured do what Delta does with them (issue 18, item 8):
``delta.logRetentionDuration`` with ``delta.enableExpiredLogCleanup`` (log cleanup after a checkpoint) and
``delta.deletedFileRetentionDuration`` (vacuum's default retention, below which it needs ``force``).

The files log cleanup must delete are worked out here from Delta's rule, independently of the code: with
checkpoints at versions 2, 4 and 5 (``_last_checkpoint`` names 5) and every file older than the cutoff,
the commits 0-4 and the checkpoints of versions 2 and 4 go (each is followed by a complete checkpoint at
or below version 5), the checkpoint of version 5 and its commit stay. deltalake must still read the
table.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError, VersionNotFoundError
from table import Table, write_table
from table.log.checkpoint import write_checkpoint
from table.maintenance.vacuum import vacuum

DAY_MS = 86_400_000


def rows(start: int, count: int = 2) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64())})


def log_names(table: Table) -> list[str]:
    return sorted(f.name for f in table.log_store.list_files() if f.name[:1].isdigit())


def next_second() -> None:
    """S3 keeps modification times to the second, and Delta's rule lets files go only at a checkpoint newer
    than the file before it (a file no newer is taken as one millisecond newer, and such a file never
    ends a run of deletable files): the checkpoints are written in later seconds than the commits before
    them, as they are when commits come more than a second apart."""
    time.sleep(1.05)


def table_with_two_checkpoints(uri: str, options, configuration: dict[str, str]) -> Table:
    """Versions 0-5, checkpoints of versions 2 and 4 (interval 2)."""
    for n in range(6):
        if n in (2, 4):
            next_second()
        write_table(uri, rows(2 * n), storage_options=options,
                    configuration={"delta.checkpointInterval": "2", **configuration} if n == 0 else None)
    table = Table(uri, storage_options=options)
    assert [n for n in log_names(table) if "checkpoint" in n] == [
        "00000000000000000002.checkpoint.parquet", "00000000000000000004.checkpoint.parquet"]
    return table


def test_log_cleanup_after_a_checkpoint_deletes_what_delta_deletes_and_the_table_still_reads(target):
    uri, options = target
    table = table_with_two_checkpoints(uri, options, {"delta.logRetentionDuration": "interval 1 day"})
    before = log_names(table)
    next_second()
    write_checkpoint(table.log_store, table.snapshot, now_ms=int(time.time() * 1000) + 3 * DAY_MS)  # v5, 3 days on
    kept = log_names(table)
    deleted = [f"{v:020d}.json" for v in range(5)] + [f"{v:020d}.checkpoint.parquet" for v in (2, 4)]
    assert sorted(set(before) - set(kept)) == sorted(deleted)
    assert kept == ["00000000000000000005.checkpoint.parquet", "00000000000000000005.json"]
    fresh = Table(uri, storage_options=options)
    assert fresh.version == 5
    assert sorted(fresh.to_pyarrow_table()["id"].to_pylist()) == list(range(12))
    with pytest.raises(VersionNotFoundError, match="oldest readable version is 5"):
        Table(uri, version=3, storage_options=options)
    if options is not None:
        import deltalake

        from tests.support.fault_harness import deltalake_options

        theirs = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
        assert theirs.version() == 5
        assert sorted(pa.table(theirs.to_pyarrow_table())["id"].to_pylist()) == list(range(12))


@pytest.mark.parametrize("configuration,days", [
    ({"delta.logRetentionDuration": "interval 1 day", "delta.enableExpiredLogCleanup": "false"}, 3),
    ({"delta.logRetentionDuration": "interval 30 days"}, 3),
], ids=["cleanup-disabled", "within-the-retention"])
def test_log_cleanup_deletes_nothing_when_disabled_or_within_the_retention(target, configuration, days):
    uri, options = target
    table = table_with_two_checkpoints(uri, options, configuration)
    before = log_names(table)
    write_checkpoint(table.log_store, table.snapshot, now_ms=int(time.time() * 1000) + days * DAY_MS)
    assert set(before) <= set(log_names(table))


def test_log_cleanup_keeps_every_file_while_there_is_no_checkpoint_before_them(target):
    """Only files a newer checkpoint makes unnecessary go: with the hint naming version 2, the commits
    0-1 go, the checkpoint of version 2 and everything after it stay."""
    uri, options = target
    for n in range(3):
        if n == 2:
            next_second()
        write_table(uri, rows(2 * n), storage_options=options,
                    configuration={"delta.checkpointInterval": "2",
                                   "delta.logRetentionDuration": "interval 1 hour"} if n == 0 else None)
    table = Table(uri, storage_options=options)
    write_checkpoint(table.log_store, table.snapshot, now_ms=int(time.time() * 1000) + 2 * DAY_MS)
    assert log_names(table) == ["00000000000000000002.checkpoint.parquet", "00000000000000000002.json"]


def test_log_cleanup_that_found_nothing_expired_deletes_once_the_files_expire(target):
    """A log store remembers the oldest commit a cleanup found unexpired and lists nothing until the cutoff
    reaches it: once it does, the same log store (a long-lived writer's) deletes what Delta deletes."""
    uri, options = target
    table = table_with_two_checkpoints(uri, options, {"delta.logRetentionDuration": "interval 1 day"})
    before = log_names(table)
    next_second()
    write_checkpoint(table.log_store, table.snapshot, now_ms=int(time.time() * 1000))  # v5: nothing expired yet
    assert set(before) <= set(log_names(table))
    write_checkpoint(table.log_store, table.snapshot, now_ms=int(time.time() * 1000) + 3 * DAY_MS)  # 3 days on
    assert log_names(table) == ["00000000000000000005.checkpoint.parquet", "00000000000000000005.json"]
    assert sorted(Table(uri, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == list(range(12))


# --- vacuum and delta.deletedFileRetentionDuration --------------------------------------------------------


def test_vacuum_defaults_to_the_tables_deleted_file_retention_and_needs_force_below_it(target):
    uri, options = target
    write_table(uri, rows(0), storage_options=options,
                configuration={"delta.deletedFileRetentionDuration": "interval 30 days"})
    write_table(uri, rows(10), mode="overwrite", storage_options=options)
    table = Table(uri, storage_options=options)
    assert vacuum(table).retention_hours == 720
    with pytest.raises(InvalidArgumentError, match="delta.deletedFileRetentionDuration"):
        vacuum(table, retention_hours=168)  # Delta's default, but under this table's 30 days
    assert vacuum(table, retention_hours=168, force=True).retention_hours == 168
    short = Table.for_write(uri + "-short", storage_options=options)
    write_table(short, rows(0), configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    assert vacuum(Table(uri + "-short", storage_options=options)).retention_hours == 48
    assert vacuum(Table(uri + "-short", storage_options=options), retention_hours=100).retention_hours == 100


def test_the_deletion_rule_lets_files_go_a_checkpoint_at_a_time_and_never_past_the_hint():
    """Delta's rule on a listing of names and times (ms), the cutoff at 50: a checkpoint written after the
    cutoff still lets go the expired run before it; a run whose last file is younger stays; nothing of
    the hint's version (6) or after it goes; a checkpoint no newer than the file before it is taken as one
    millisecond newer and lets nothing go."""
    from table.log.cleanup import _expired, _File

    def f(version: int, kind: str, ms: int) -> _File:
        if kind == "json":
            return _File(f"{version:020d}.json", version, ms, None)
        return _File(f"{version:020d}.checkpoint.parquet", version, ms, 1, 1)

    files = [f(0, "json", 10), f(1, "json", 20), f(2, "ckpt", 60), f(2, "json", 61), f(3, "json", 62),
             f(4, "ckpt", 70), f(4, "json", 71), f(5, "json", 72), f(6, "ckpt", 80), f(6, "json", 81)]
    assert _expired(files, 50, max_version=5) == ["00000000000000000000.json", "00000000000000000001.json"]
    assert _expired(files, 65, max_version=5) == [
        "00000000000000000000.json", "00000000000000000001.json", "00000000000000000002.checkpoint.parquet",
        "00000000000000000002.json", "00000000000000000003.json"]
    assert _expired(files, 75, max_version=5) == [f.name for f in files[:8]]
    assert _expired(files, 10_000, max_version=3) == [
        "00000000000000000000.json", "00000000000000000001.json", "00000000000000000002.checkpoint.parquet",
        "00000000000000000002.json", "00000000000000000003.json"]
    same_time = [f(0, "json", 10), f(1, "json", 20), f(2, "ckpt", 20), f(2, "json", 21)]
    assert _expired(same_time, 10_000, max_version=3) == []
    assert _expired([*same_time, f(4, "ckpt", 30)], 10_000, max_version=3) == [
        "00000000000000000000.json", "00000000000000000001.json", "00000000000000000002.checkpoint.parquet",
        "00000000000000000002.json"]
