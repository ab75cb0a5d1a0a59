"""Files are pruned by guarantees that this process keeps from one operation to the next (by the files'
statistics and partition values, and the columns' names and types): pruning with them kept gives the
files a cold process gives, and tables whose logs read alike but whose columns differ in type are each
pruned right."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from table import Table, write_table
from table.data import fragments, read
from table.data.skipping import Guarantees


def _chunks(uri: str, partition_type: pa.DataType, count: int = 6) -> None:
    """``count`` appends, append ``p`` holding ids ``10p .. 10p + 9`` in partition ``p``."""
    for p in range(count):
        write_table(uri, pa.table({"id": pa.array(range(10 * p, 10 * p + 10), pa.int64()),
                                   "p": pa.array([p] * 10, pa.int64()).cast(partition_type)}),
                    partition_by=["p"])


def _partitions(files) -> list[str]:
    return sorted(f.partition_values["p"] for f in files)


def test_pruning_with_kept_guarantees_gives_the_files_a_cold_process_gives(memory_uri, monkeypatch):
    _chunks(memory_uri, pa.int64())
    between = (pc.field("id") >= 25) & (pc.field("id") < 42)  # ids of partitions 2, 3 and 4
    snapshot = Table(memory_uri).snapshot
    monkeypatch.setattr(fragments, "_GUARANTEES", Guarantees())
    cold = read.prune_files(snapshot, between, columns=["id"])
    warm = read.prune_files(snapshot, between, columns=["id"])
    assert _partitions(cold) == _partitions(warm) == ["2", "3", "4"]
    Table(memory_uri).delete("id = 30")  # partition 3's file is rewritten: new statistics, same partition
    snapshot = Table(memory_uri).snapshot
    assert _partitions(read.prune_files(snapshot, between, columns=["id"])) == ["2", "3", "4"]
    assert _partitions(read.prune_files(snapshot, pc.field("id") == 30, columns=["id"])) == []
    assert _partitions(read.prune_files(snapshot, pc.field("id") == 31, columns=["id"])) == ["3"]


def test_tables_alike_in_the_log_but_not_in_type_are_each_pruned_right(memory_uri):
    # the same statistics and partition values in the log; the partition column a timestamp with a time zone
    # in one table and without one in the other (pyarrow cannot compare the two)
    zoned, local = memory_uri, memory_uri + "-local"
    for uri, kind in ((zoned, pa.timestamp("us", tz="UTC")), (local, pa.timestamp("us"))):
        write_table(uri, pa.table({"id": pa.array([1, 2], pa.int64()),
                                   "t": pa.array([0, 0], pa.int64()).cast(pa.timestamp("us")).cast(kind)}),
                    partition_by=["t"])
        write_table(uri, pa.table({"id": pa.array([1, 2], pa.int64()),
                                   "t": pa.array([3_600_000_000] * 2, pa.int64()).cast(pa.timestamp("us")).cast(kind)}),
                    partition_by=["t"])
    assert [a.stats for a in Table(zoned).add_actions()] == [a.stats for a in Table(local).add_actions()]
    assert [a.partition_values for a in Table(zoned).add_actions()] == \
        [a.partition_values for a in Table(local).add_actions()]
    for uri, kind in ((zoned, pa.timestamp("us", tz="UTC")), (local, pa.timestamp("us"))):
        hour = pc.field("t") == pa.scalar(3_600_000_000, pa.int64()).cast(pa.timestamp("us")).cast(kind)
        (add,) = read.prune_files(Table(uri).snapshot, hour)
        assert Table(uri).to_pyarrow_table(filter=hour).num_rows == 2
