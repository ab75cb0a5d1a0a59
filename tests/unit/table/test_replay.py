"""Snapshot replay as a pure function, checked by hand and against delta-rs, and protocol checks."""

from __future__ import annotations

import json
import pickle
from urllib.parse import unquote

import pytest

from logstore.errors import CorruptLogError
from table.errors import UnsupportedFeatureError
from table.log.actions import (
    AddFile,
    Cdc,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
    parse_commit,
)
from table.log.protocol import SUPPORTED_WRITER_FEATURES, check_readable, check_writable
from table.log.state import TableState, apply, empty_state, replay

SCHEMA = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'
PROTOCOL = Protocol(min_reader_version=1, min_writer_version=2)
METADATA = Metadata(id="t-1", schema_string=SCHEMA)


def add(path: str, size: int = 1) -> AddFile:
    return AddFile(path=path, partition_values={}, size=size, modification_time=0, data_change=True)


def remove(path: str) -> RemoveFile:
    return RemoveFile(path=path, data_change=True, deletion_timestamp=5)


def created(*actions) -> TableState:
    return apply(empty_state(), 0, [PROTOCOL, METADATA, *actions])


def test_empty_state_has_no_version_and_nothing_in_it():
    state = empty_state()
    assert state.version == -1 and state.protocol is None and state.metadata is None
    assert dict(state.files) == {} and dict(state.tombstones) == {} and dict(state.app_txns) == {}


def test_version_zero_sets_protocol_metadata_and_files():
    state = created(CommitInfo(operation="CREATE"), add("a"), add("b"))
    assert state.version == 0
    assert state.protocol == PROTOCOL and state.metadata == METADATA
    assert set(state.files) == {"a", "b"}


def test_apply_does_not_change_the_state_it_was_given():
    before = created(add("a"))
    after = apply(before, 1, [remove("a"), add("b")])
    assert set(before.files) == {"a"} and before.version == 0
    assert set(after.files) == {"b"} and after.version == 1


def test_state_mappings_are_read_only():
    state = created(add("a"))
    with pytest.raises(TypeError):
        state.files["b"] = add("b")  # type: ignore[index]


def test_remove_across_commits_takes_a_file_out_and_leaves_a_tombstone():
    state = apply(created(add("a"), add("b")), 1, [remove("a")])
    assert set(state.files) == {"b"}
    assert set(state.tombstones) == {"a"}
    assert state.tombstones["a"].deletion_timestamp == 5


def test_add_then_remove_of_one_path_in_one_commit_leaves_it_removed():
    state = created(add("a"), remove("a"))
    assert set(state.files) == set() and set(state.tombstones) == {"a"}


def test_re_adding_a_removed_path_makes_it_live_again():
    state = apply(apply(created(add("a")), 1, [remove("a")]), 2, [add("a", size=7)])
    assert state.files["a"].size == 7
    assert "a" not in state.tombstones


def test_re_adding_a_live_path_replaces_its_metadata():
    state = apply(created(add("a", size=1)), 1, [add("a", size=2)])
    assert state.files["a"].size == 2 and len(state.files) == 1


def test_latest_protocol_and_metadata_win():
    newer = Metadata(id="t-1", schema_string=SCHEMA, configuration={"k": "v"})
    upgraded = Protocol(min_reader_version=1, min_writer_version=7, writer_features=["timestampNtz"])
    state = apply(created(), 1, [newer, upgraded])
    assert state.metadata == newer and state.protocol == upgraded


def test_latest_txn_per_app_wins_even_when_its_version_is_lower():
    state = apply(created(Txn(app_id="job", version=5), Txn(app_id="other", version=1)), 1, [Txn(app_id="job", version=3)])
    assert state.app_version("job") == 3
    assert state.app_version("other") == 1
    assert state.app_version("never") is None


def test_domain_metadata_latest_wins_and_removed_deletes():
    state = created(DomainMetadata(domain="d", configuration="1", removed=False))
    state = apply(state, 1, [DomainMetadata(domain="d", configuration="2", removed=False)])
    assert state.domain_metadata["d"].configuration == "2"
    state = apply(state, 2, [DomainMetadata(domain="d", configuration="2", removed=True)])
    assert "d" not in state.domain_metadata


def test_commit_info_cdc_and_unknown_actions_do_not_change_the_files():
    cdc = Cdc(path="_change_data/c.parquet", partition_values={}, size=1, data_change=False)
    sidecar = Sidecar(path="s.parquet", size_in_bytes=1, modification_time=1)
    state = created(add("a"), CommitInfo(operation="WRITE"), cdc, sidecar)
    assert set(state.files) == {"a"}


def test_versions_must_follow_each_other():
    state = created()
    with pytest.raises(ValueError, match="consecutive"):
        apply(state, 2, [add("a")])
    with pytest.raises(ValueError, match="consecutive"):
        apply(state, 0, [add("a")])


def test_replay_can_start_at_a_checkpoint_version():
    state = apply(empty_state(), 10, [PROTOCOL, METADATA, add("a")])
    assert state.version == 10
    assert apply(state, 11, [add("b")]).version == 11


def test_replay_of_many_commits_equals_applying_them_one_by_one():
    commits = [(0, [PROTOCOL, METADATA, add("a")]), (1, [add("b")]), (2, [remove("a"), Txn(app_id="j", version=1)])]
    folded = empty_state()
    for version, actions in commits:
        folded = apply(folded, version, actions)
    assert replay(commits) == folded
    assert replay([], state=folded) is folded


def test_a_table_without_protocol_or_metadata_is_corrupt():
    with pytest.raises(CorruptLogError, match="no metaData"):
        apply(empty_state(), 0, [PROTOCOL, add("a")])
    with pytest.raises(CorruptLogError, match="no protocol"):
        apply(empty_state(), 0, [METADATA])


def test_two_metadata_actions_in_one_commit_are_corrupt():
    with pytest.raises(CorruptLogError, match="more than one metaData"):
        apply(empty_state(), 0, [PROTOCOL, METADATA, METADATA])


DV = DeletionVectorDescriptor(storage_type="u", path_or_inline_dv="ab^-aqEH.-t@S}K{vb[*k^", offset=4, size_in_bytes=40, cardinality=6)


def test_a_deletion_vector_replaces_the_logical_file_at_its_path():
    """PROTOCOL.md, "Action Reconciliation": a logical file is (path, deletionVector.uniqueId)."""
    with_dv = add("a").model_copy(update={"deletion_vector": DV})
    state = apply(created(add("a")), 1, [remove("a"), with_dv])
    assert state.files["a"].deletion_vector == DV
    newer = DV.model_copy(update={"offset": 90, "cardinality": 7})
    state = apply(state, 2, [with_dv.model_copy(update={"deletion_vector": newer}), remove("a").model_copy(
        update={"deletion_vector": DV})])  # the new vector first, then the remove of the old: order does not matter
    assert state.files["a"].deletion_vector == newer
    state = apply(state, 3, [remove("a").model_copy(update={"deletion_vector": DV})])  # an old variant: nothing
    assert state.files["a"].deletion_vector == newer


def test_a_remove_of_a_deletion_vector_variant_leaves_the_plain_file_live():
    dv_remove = remove("a").model_copy(update={"deletion_vector": DV})
    state = apply(created(add("a")), 1, [dv_remove])
    assert set(state.files) == {"a"}
    assert state.tombstones["a"].deletion_vector == DV


def test_append_only_is_active_only_when_set_and_supported_by_the_protocol():
    append_only = Metadata(id="t", schema_string=SCHEMA, configuration={"delta.appendOnly": "true"})
    assert apply(empty_state(), 0, [PROTOCOL, append_only]).append_only is True
    assert apply(empty_state(), 0, [PROTOCOL, METADATA]).append_only is False
    writer_1 = Protocol(min_reader_version=1, min_writer_version=1)
    assert apply(empty_state(), 0, [writer_1, append_only]).append_only is False
    features = Protocol(min_reader_version=1, min_writer_version=7, writer_features=["appendOnly"])
    assert apply(empty_state(), 0, [features, append_only]).append_only is True
    no_feature = Protocol(min_reader_version=1, min_writer_version=7, writer_features=[])
    assert apply(empty_state(), 0, [no_feature, append_only]).append_only is False


def test_checkpoint_interval_defaults_to_ten():
    assert created().checkpoint_interval == 10
    custom = Metadata(id="t", schema_string=SCHEMA, configuration={"delta.checkpointInterval": "3"})
    assert apply(empty_state(), 0, [PROTOCOL, custom]).checkpoint_interval == 3


# --- protocol checks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "protocol",
    [
        Protocol(min_reader_version=1, min_writer_version=1),
        Protocol(min_reader_version=1, min_writer_version=2),
        Protocol(min_reader_version=3, min_writer_version=7, reader_features=["timestampNtz"], writer_features=["timestampNtz"]),
        Protocol(min_reader_version=1, min_writer_version=7, writer_features=[]),
        Protocol(min_reader_version=3, min_writer_version=7, reader_features=["deletionVectors"],
                 writer_features=["deletionVectors"]),
    ],
    ids=["1/1", "1/2", "3/7 timestampNtz", "1/7 no features", "3/7 deletionVectors"],
)
def test_protocols_we_implement_pass_every_check(protocol):
    check_readable(protocol)
    check_writable(protocol)
    check_writable(protocol)


@pytest.mark.parametrize(
    "protocol, feature",
    [
        (Protocol(min_reader_version=5, min_writer_version=5), "reader version 5"),
        (Protocol(min_reader_version=4, min_writer_version=7, writer_features=[]), "reader version 4"),
        (
            Protocol(min_reader_version=3, min_writer_version=7, reader_features=["someFutureFeature"],
                     writer_features=["someFutureFeature"]),
            "someFutureFeature",
        ),
    ],
)
def test_unreadable_protocols_raise_naming_the_feature_and_who_can_read_them(protocol, feature):
    with pytest.raises(UnsupportedFeatureError) as info:
        check_readable(protocol)
    assert info.value.feature == feature
    assert feature in str(info.value)
    assert "delta-spark" in str(info.value) and "delta-rs" in str(info.value)
    with pytest.raises(UnsupportedFeatureError):
        check_writable(protocol)


def test_a_catalog_managed_table_is_refused_saying_to_go_through_its_catalog():
    """PROTOCOL.md forbids filesystem-based readers and writers of a catalog-managed table: no path-based
    client can take it, so the error says what can (its catalog, or a copy that is not catalog-managed)."""
    protocol = Protocol(min_reader_version=3, min_writer_version=7, reader_features=["catalogManaged", "timestampNtz"],
                        writer_features=["catalogManaged", "inCommitTimestamp"])
    for check in (check_readable, check_writable):
        with pytest.raises(UnsupportedFeatureError) as info:
            check(protocol)
        assert info.value.feature == "catalogManaged"
        assert "through its catalog" in str(info.value) and "CLONE" in str(info.value)


@pytest.mark.parametrize(
    "protocol, feature",
    [
        (Protocol(min_reader_version=1, min_writer_version=7, writer_features=["someFutureFeature"]),
         "someFutureFeature"),
        (Protocol(min_reader_version=3, min_writer_version=7, reader_features=["variantType"],
                  writer_features=["appendOnly", "variantType", "someFutureFeature"]), "someFutureFeature"),
    ],
)
def test_readable_but_unwritable_protocols_fail_only_the_write_check(protocol, feature):
    check_readable(protocol)
    with pytest.raises(UnsupportedFeatureError) as info:
        check_writable(protocol)
    assert info.value.feature == feature and feature in str(info.value)
    with pytest.raises(UnsupportedFeatureError):
        check_writable(protocol)


def test_we_claim_only_writer_features_we_honour():
    """Each claim is tested where the feature is implemented: timestampNtz (we write such columns),
    appendOnly (AppendOnlyError), changeDataFeed (change data files), deletionVectors
    (test_deletion_vectors.py), columnMapping (its tests), and the features of
    tests/unit/table/test_log_features.py (domain metadata, row tracking, in-commit timestamps, V2
    checkpoints, vacuum protocol check, checkpoint protection, clustering), typeWidening
    (tests/unit/table/test_type_widening.py), and the rules on rows (invariants, CHECK constraints,
    generated and identity columns: tests/unit/table/test_constraints.py), variant shredding
    (tests/unit/table/test_variant_shredding.py)."""
    assert SUPPORTED_WRITER_FEATURES == {
        "timestampNtz", "appendOnly", "changeDataFeed", "deletionVectors", "columnMapping", "domainMetadata",
        "rowTracking", "inCommitTimestamp", "v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection",
        "clustering", "typeWidening", "typeWidening-preview", "invariants", "checkConstraints",
        "generatedColumns", "identityColumns", "allowColumnDefaults", "icebergCompatV1", "icebergCompatV2",
        "collations", "variantType", "variantType-preview", "variantShredding", "variantShredding-preview"}


@pytest.mark.parametrize("writer", [3, 4, 6])
def test_legacy_writer_versions_3_to_6_are_written_with_check_constraints(writer):
    """Their features (CHECK constraints, generated and identity columns) are enforced on the data path."""
    protocol = Protocol(min_reader_version=1, min_writer_version=writer)
    plain = Metadata(id="t", schema_string=json.dumps({"type": "struct", "fields": []}),
                     configuration={"delta.enableChangeDataFeed": "true"})
    check_writable(protocol, metadata=plain)
    constrained = plain.model_copy(update={"configuration": {"delta.constraints.positive": "x > 0"}})
    check_writable(protocol, metadata=constrained)


def test_a_schema_with_invariants_is_writable_because_we_enforce_them():
    schema = json.dumps({"type": "struct", "fields": [
        {"name": "x", "type": "integer", "nullable": True,
         "metadata": {"delta.invariants": '{"expression": {"expression": "x > 3"}}'}}]})
    check_writable(PROTOCOL, metadata=Metadata(id="t", schema_string=schema))
    check_writable(PROTOCOL, metadata=METADATA)


def test_unsupported_feature_error_survives_pickling():
    with pytest.raises(UnsupportedFeatureError) as info:
        check_readable(Protocol(min_reader_version=5, min_writer_version=5))
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.feature == "reader version 5"


# --- against delta-rs -------------------------------------------------------------------------------


@pytest.mark.interop
def test_replay_finds_the_files_delta_rs_reads_at_every_version(deltars_table, deltars_commits):
    from deltalake import DeltaTable

    state = empty_state()
    for version, body in deltars_commits:
        state = apply(state, version, parse_commit(body, version=version))
        reference = DeltaTable(str(deltars_table), version=version)
        ours = {f"{deltars_table}/{unquote(path)}" for path in state.files}
        assert ours == set(reference.file_uris()), f"files differ at version {version}"
        assert state.metadata.id == reference.metadata().id
        assert state.partition_columns == list(reference.metadata().partition_columns)
        theirs = reference.protocol()
        assert (state.protocol.min_reader_version, state.protocol.min_writer_version) == (
            theirs.min_reader_version,
            theirs.min_writer_version,
        )
    assert state.version == deltars_commits[-1][0]


@pytest.mark.interop
def test_delta_rs_tables_are_readable_and_writable_change_data_feed_included(deltars_table, deltars_commits):
    state = replay((v, parse_commit(body, version=v)) for v, body in deltars_commits)
    check_readable(state.protocol)
    check_writable(state.protocol, metadata=state.metadata)
    if deltars_table.name == "change_data_feed":
        assert state.protocol.min_writer_version == 4
