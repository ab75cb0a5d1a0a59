"""``Table.alter.add_feature`` (deltalake's ``alter.add_feature``) and ``delta.feature.<name>=supported``
(Delta's way): the protocol each gives is compared with deltalake doing the same on a twin table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from table import InvalidArgumentError, Table, UnsupportedFeatureError, write_table
from table.log.snapshot import read_commit
from tests.support.corpus import to_directory, to_memory

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
LEGACY_IMPLIED = {"appendOnly", "invariants"}  # what writer version 2 implies
THEIR_NAMES = {"appendOnly": "AppendOnly", "changeDataFeed": "ChangeDataFeed", "checkConstraints": "CheckConstraints",
               "columnMapping": "ColumnMapping", "deletionVectors": "DeletionVectors",
               "domainMetadata": "DomainMetadata", "generatedColumns": "GeneratedColumns",
               "identityColumns": "IdentityColumns", "invariants": "Invariants", "rowTracking": "RowTracking",
               "timestampNtz": "TimestampWithoutTimezone", "v2Checkpoint": "V2Checkpoint"}


def theirs_of(names):
    """deltalake's TableFeatures members for Delta feature names (deltalake takes only those)."""
    from deltalake import TableFeatures

    return [getattr(TableFeatures, THEIR_NAMES[n]) for n in names]


def twins(tmp_path: Path, *, features=()) -> tuple[str, str]:
    """A table deltalake created (with ``features`` added by deltalake), as a local path for deltalake and a
    copy in memory for us."""
    from deltalake import DeltaTable

    path = str(tmp_path / "theirs")
    table = DeltaTable.create(path, SCHEMA)
    if features:
        table.alter.add_feature(theirs_of(features), allow_protocol_versions_increase=True)
    return path, to_memory(tmp_path / "theirs")


def protocols(path: str, uri: str):
    from deltalake import DeltaTable

    theirs = DeltaTable(path).protocol()
    ours = Table(uri).protocol()
    return ours, theirs


def test_on_a_reader_3_writer_7_table_every_feature_list_equals_deltalake_s(tmp_path):
    from deltalake import DeltaTable, TableFeatures

    path, uri = twins(tmp_path, features=["deletionVectors"])
    for ours_feature, their_feature in [("changeDataFeed", TableFeatures.ChangeDataFeed),
                                        (TableFeatures.ColumnMapping, TableFeatures.ColumnMapping),
                                        (["timestampNtz", "v2Checkpoint"],
                                         [TableFeatures.TimestampWithoutTimezone, TableFeatures.V2Checkpoint]),
                                        ("checkConstraints", TableFeatures.CheckConstraints)]:
        Table(uri).alter.add_feature(ours_feature)
        DeltaTable(path).alter.add_feature(their_feature)
        ours, theirs = protocols(path, uri)
        assert (ours.min_reader_version, ours.min_writer_version) == (theirs.min_reader_version,
                                                                      theirs.min_writer_version) == (3, 7)
        assert sorted(ours.reader_features) == sorted(theirs.reader_features)
        assert sorted(ours.writer_features) == sorted(theirs.writer_features)
    table = Table(uri)
    assert table.history(1)[0].operation == "ADD FEATURE"
    write_table(uri, pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA))  # still writable here


@pytest.mark.parametrize("feature, reader_feature", [
    ("deletionVectors", True), ("changeDataFeed", False), ("columnMapping", True), ("timestampNtz", True),
    ("v2Checkpoint", True), ("appendOnly", False), ("invariants", False), ("checkConstraints", False),
    ("generatedColumns", False), ("identityColumns", False), ("domainMetadata", False), ("rowTracking", False),
])
def test_on_a_legacy_table_versions_rise_only_when_allowed_as_in_deltalake(feature, reader_feature, tmp_path):
    from deltalake import DeltaTable

    path, uri = twins(tmp_path)
    with pytest.raises(InvalidArgumentError, match="allow_protocol_versions_increase"):
        Table(uri).alter.add_feature(feature)
    with pytest.raises(Exception, match="allow_protocol_versions_increase"):
        DeltaTable(path).alter.add_feature(theirs_of([feature]))
    assert Table(uri).version == 0
    Table(uri).alter.add_feature(feature, allow_protocol_versions_increase=True)
    DeltaTable(path).alter.add_feature(theirs_of([feature]), allow_protocol_versions_increase=True)
    ours, theirs = protocols(path, uri)
    assert (ours.min_reader_version, ours.min_writer_version) == (theirs.min_reader_version, theirs.min_writer_version)
    assert ours.min_reader_version == (3 if reader_feature else 1)
    assert (ours.reader_features or []) == (theirs.reader_features or [])
    # Delta keeps what writer 2 implied when a table moves to writer 7; deltalake drops it.
    assert set(ours.writer_features) == set(theirs.writer_features) | LEGACY_IMPLIED


def test_features_dynacommit_cannot_write_are_refused_with_the_reason(memory_uri):
    write_table(memory_uri, pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA))
    for feature, reason in [("catalogManaged", "catalog")]:
        with pytest.raises(UnsupportedFeatureError, match=reason):
            Table(memory_uri).alter.add_feature(feature, allow_protocol_versions_increase=True)
    with pytest.raises(InvalidArgumentError, match="not a Delta table feature"):
        Table(memory_uri).alter.add_feature("fastLanes", allow_protocol_versions_increase=True)
    assert Table(memory_uri).version == 0


def test_a_feature_already_there_commits_nothing(tmp_path):
    path, uri = twins(tmp_path, features=["deletionVectors"])
    assert Table(uri).alter.add_feature("deletionVectors").skipped
    assert Table(uri).version == 1


def test_delta_feature_property_adds_the_feature_as_deltalake_s_add_feature_with_increase(tmp_path):
    from deltalake import DeltaTable

    path, uri = twins(tmp_path)
    Table(uri).alter.set_table_properties({"delta.feature.deletionVectors": "supported",
                                           "delta.feature.changeDataFeed": "supported"})
    DeltaTable(path).alter.add_feature(theirs_of(["deletionVectors", "changeDataFeed"]),
                                       allow_protocol_versions_increase=True)
    ours, theirs = protocols(path, uri)
    assert (ours.min_reader_version, ours.min_writer_version) == (3, 7)
    assert sorted(ours.reader_features) == sorted(theirs.reader_features)
    assert set(ours.writer_features) == set(theirs.writer_features) | LEGACY_IMPLIED
    table = Table(uri)
    assert not any(k.startswith("delta.feature.") for k in table.metadata().configuration)
    assert table.history(1)[0].operation == "SET TBLPROPERTIES"
    # with a real property beside it, one commit carries both; deltalake reads the result
    table.alter.set_table_properties({"delta.feature.checkConstraints": "supported",
                                      "delta.enableChangeDataFeed": "true"})
    actions = read_commit(Table(uri).log_store, 2)
    assert {type(a).__name__ for a in actions} >= {"Protocol", "Metadata"}
    reread = DeltaTable(str(to_directory(Table(uri), tmp_path / "copy")))
    assert "checkConstraints" in reread.protocol().writer_features
    assert reread.metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    with pytest.raises(InvalidArgumentError, match="supported"):
        Table(uri).alter.set_table_properties({"delta.feature.appendOnly": "disabled"})


def test_delta_feature_property_on_create_gives_the_protocol_alter_gives_later(memory_uri, tmp_path):
    from deltalake import DeltaTable

    created = f"{memory_uri}-created"
    rows = pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA)
    write_table(created, rows, configuration={"delta.feature.deletionVectors": "supported"})
    write_table(memory_uri, rows)
    Table(memory_uri).alter.add_feature("deletionVectors", allow_protocol_versions_increase=True)
    assert Table(created).protocol() == Table(memory_uri).protocol()
    assert Table(created).metadata().configuration == {}
    write_table(created, rows, configuration={"delta.feature.deletionvectors": "supported"})  # already; any case
    with pytest.raises(InvalidArgumentError, match="add_feature"):
        write_table(created, rows, configuration={"delta.feature.changeDataFeed": "supported"})
    empty = Table.create(f"{memory_uri}-empty", SCHEMA, configuration={"delta.feature.v2Checkpoint": "supported"})
    assert empty.protocol().reader_features == ["v2Checkpoint"]
    assert DeltaTable(str(to_directory(Table(created), tmp_path / "c"))).protocol().reader_features == [
        "deletionVectors"]


def test_an_append_planned_before_a_feature_was_added_conflicts_and_two_additions_both_land(memory_uri):
    from table import CommitConflictError

    rows = pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA)
    write_table(memory_uri, rows)
    writer, alterer = Table(memory_uri), Table(memory_uri)
    alterer.alter.add_feature("changeDataFeed", allow_protocol_versions_increase=True)
    with pytest.raises(CommitConflictError, match="protocol"):  # Delta's ProtocolChanged
        write_table(writer, rows)
    first, second = Table(memory_uri), Table(memory_uri)
    first.alter.add_feature("deletionVectors", allow_protocol_versions_increase=True)
    second.alter.add_feature("checkConstraints")
    protocol = Table(memory_uri).protocol()
    assert {"changeDataFeed", "deletionVectors", "checkConstraints"} <= set(protocol.writer_features)
    assert protocol.reader_features == ["deletionVectors"]
    assert Table(memory_uri).to_pyarrow_table().num_rows == 1
