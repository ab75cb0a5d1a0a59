"""Turning today's Delta features on through the public API: ``write_table(configuration=...)`` when
creating, ``Table.alter.set_table_properties`` later. The protocol each property needs is PROTOCOL.md's
(the expectations below are written from its "Table Features" section), and what enabling requires of the
enabling commit is checked against PROTOCOL.md's requirements one by one; deltalake reads every table.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from table import InvalidArgumentError, Table, write_table
from table.log.actions import AddFile, CommitInfo, Metadata, Protocol
from table.log.snapshot import read_commit
from table.table import forget_snapshots
from tests.support.corpus import canonical, deltalake_rows, to_directory

ICT = {"delta.enableInCommitTimestamps": "true"}
ROWS = {"delta.enableRowTracking": "true"}
V2 = {"delta.checkpointPolicy": "v2"}


def data(start: int, count: int) -> pa.Table:
    return pa.table({"x": pa.array(range(start, start + count), pa.int64()), "p": ["a", "b"] * (count // 2)})


def commit_info(table: Table, version: int) -> CommitInfo:
    actions = read_commit(table.log_store, version)
    assert isinstance(actions[0], CommitInfo)
    return actions[0]


def assert_row_ids_cover_every_row_once(table: Table) -> None:
    """PROTOCOL.md: fresh row ids are unique; each file's rows hold ``baseRowId .. baseRowId + numRecords -
    1``; the high-water mark is at or above every one of them. Row counts read from the files themselves."""
    ranges = []
    for add in table.add_actions():
        count = pa.parquet.read_metadata(pa.BufferReader(table.objects.get(table.uri.key(add.path)))).num_rows
        assert add.base_row_id is not None and add.default_row_commit_version is not None
        ranges.append((add.base_row_id, add.base_row_id + count - 1))
    ranges.sort()
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges  # disjoint
    mark = json.loads(table.snapshot.state.domain_metadata["delta.rowTracking"].configuration)["rowIdHighWaterMark"]
    assert mark >= max(r[1] for r in ranges)


@pytest.mark.parametrize("configuration, expected", [
    (ICT, Protocol(min_reader_version=1, min_writer_version=7, writer_features=["inCommitTimestamp"])),
    (ROWS, Protocol(min_reader_version=1, min_writer_version=7, writer_features=["domainMetadata", "rowTracking"])),
    (V2, Protocol(min_reader_version=3, min_writer_version=7, reader_features=["v2Checkpoint"],
                  writer_features=["v2Checkpoint"])),
    ({**ICT, "delta.columnMapping.mode": "name"},
     Protocol(min_reader_version=2, min_writer_version=7, writer_features=["columnMapping", "inCommitTimestamp"])),
    ({**V2, "delta.enableChangeDataFeed": "true"},
     Protocol(min_reader_version=3, min_writer_version=7, reader_features=["v2Checkpoint"],
              writer_features=["changeDataFeed", "v2Checkpoint"])),
])
def test_a_table_created_with_a_feature_property_gets_the_least_protocol_that_has_it(memory_uri, configuration,
                                                                                      expected):
    write_table(memory_uri, data(0, 4), configuration=configuration)
    assert Table(memory_uri).snapshot.protocol == expected


def test_created_with_in_commit_timestamps_every_commit_has_one_from_version_zero(memory_uri):
    write_table(memory_uri, data(0, 4), configuration=ICT)
    write_table(memory_uri, data(4, 4))
    table = Table(memory_uri)
    stamps = [commit_info(table, v).in_commit_timestamp for v in range(2)]
    assert None not in stamps and stamps[0] < stamps[1]
    assert "delta.inCommitTimestampEnablementVersion" not in table.snapshot.configuration  # on since version 0


def test_in_commit_timestamps_turned_on_later_record_their_enablement(memory_uri):
    write_table(memory_uri, data(0, 4))
    write_table(memory_uri, data(4, 4))
    table = Table(memory_uri)
    result = table.alter.set_table_properties(ICT)
    assert result.version == 2
    table = Table(memory_uri)
    configuration = table.snapshot.configuration
    stamp = commit_info(table, 2).in_commit_timestamp
    # PROTOCOL.md, In-Commit Timestamps, writer requirements 4 and 5.
    assert configuration["delta.inCommitTimestampEnablementVersion"] == "2"
    assert configuration["delta.inCommitTimestampEnablementTimestamp"] == str(stamp)
    assert stamp > table.log_store.stat_file(f"{1:020d}.json").last_modified_ms
    assert table.snapshot.protocol.writer_features and "inCommitTimestamp" in table.snapshot.protocol.writer_features
    write_table(memory_uri, data(8, 4))
    assert commit_info(Table(memory_uri), 3).in_commit_timestamp > stamp
    moment = dt.datetime.fromtimestamp(stamp / 1000, tz=dt.timezone.utc)
    assert Table(memory_uri, timestamp=moment).version == 2  # time travel reads the enablement


def test_created_with_row_tracking_every_file_has_row_ids_and_the_materialized_column_names(memory_uri):
    write_table(memory_uri, data(0, 4), partition_by=["p"], configuration=ROWS)
    write_table(memory_uri, data(4, 6))
    table = Table(memory_uri)
    names = [table.snapshot.configuration.get(k) for k in ("delta.rowTracking.materializedRowIdColumnName",
                                                          "delta.rowTracking.materializedRowCommitVersionColumnName")]
    assert all(names) and len(set(names)) == 2 and not set(names) & set(table.schema.names)
    assert_row_ids_cover_every_row_once(table)
    assert commit_info(table, 1).tags == {"delta.rowTracking.preserved": "true"}


def test_row_tracking_turned_on_later_gives_every_existing_file_its_ids_in_the_enabling_commit(memory_uri):
    write_table(memory_uri, data(0, 4), partition_by=["p"])
    write_table(memory_uri, data(4, 6))
    before = {a.path for a in Table(memory_uri).add_actions()}
    Table(memory_uri).alter.set_table_properties(ROWS)
    table = Table(memory_uri)
    enabling = read_commit(table.log_store, 2)
    readded = [a for a in enabling if isinstance(a, AddFile)]
    assert {a.path for a in readded} == before and not any(a.data_change for a in readded)
    assert next(a for a in enabling if isinstance(a, Metadata)).configuration["delta.enableRowTracking"] == "true"
    assert_row_ids_cover_every_row_once(table)
    write_table(memory_uri, data(10, 2))
    assert_row_ids_cover_every_row_once(Table(memory_uri))
    assert sorted(Table(memory_uri).to_pyarrow_table()["x"].to_pylist()) == list(range(12))


def test_row_tracking_cannot_be_turned_on_while_suspended(memory_uri):
    with pytest.raises(InvalidArgumentError, match="rowTrackingSuspended"):
        write_table(memory_uri, data(0, 2), configuration={**ROWS, "delta.rowTrackingSuspended": "true"})
    write_table(memory_uri, data(0, 2), configuration={"delta.rowTrackingSuspended": "true"})
    with pytest.raises(InvalidArgumentError, match="suspended"):
        Table(memory_uri).alter.set_table_properties(ROWS)
    assert Table(memory_uri).version == 0


def test_the_v2_checkpoint_policy_turned_on_later_upgrades_the_protocol_and_checkpoints_are_v2(memory_uri):
    write_table(memory_uri, data(0, 2), configuration={"delta.checkpointInterval": "2"})
    Table(memory_uri).alter.set_table_properties(V2)
    write_table(memory_uri, data(2, 2))
    table = Table(memory_uri)
    assert table.snapshot.protocol.reader_features == ["v2Checkpoint"]
    names = [f.name for f in table.log_store.list_files() if ".checkpoint." in f.name]
    assert names and all(len(n.split(".")) == 4 for n in names)  # N.checkpoint.<uuid>.parquet


@pytest.mark.interop
def test_deltalake_reads_tables_given_these_features_at_creation_and_later(memory_uri, tmp_path):
    write_table(memory_uri, data(0, 4), partition_by=["p"], configuration={"delta.checkpointInterval": "3"})
    write_table(memory_uri, data(4, 4))
    table = Table(memory_uri)
    table.alter.set_table_properties({**ICT, **ROWS, **V2})
    write_table(memory_uri, data(8, 4))
    table.refresh().delete("x = 5")
    forget_snapshots()
    ours = Table(memory_uri)
    directory = to_directory(ours, tmp_path / "table")
    for version in range(ours.version + 1):
        assert canonical(deltalake_rows(directory, version)) == canonical(
            Table(memory_uri, version=version).to_pyarrow_table()), version
