"""Delta actions: JSON names, lossless round trips, real delta-rs logs, and corrupt lines."""

from __future__ import annotations

import json

import pydantic
import pytest

from logstore.errors import CorruptLogError
from table.log.actions import (
    AddFile,
    Cdc,
    CheckpointMetadata,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
    action_from_dict,
    action_to_dict,
    parse_commit,
    serialize_commit,
)

SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]},
    separators=(",", ":"),
)
STATS = '{"numRecords":3,"minValues":{"x":1},"maxValues":{"x":3},"nullCount":{"x":0}}'

SAMPLES = {
    "protocol": Protocol(min_reader_version=1, min_writer_version=2),
    "protocol_with_features": Protocol(
        min_reader_version=3, min_writer_version=7, reader_features=["timestampNtz"], writer_features=["timestampNtz"]
    ),
    "metadata": Metadata(
        id="af23c9d7-fff1-4a5a-a2c8-55c59bd782aa",
        name="events",
        description="test table",
        format=Format(),
        schema_string=SCHEMA,
        partition_columns=["day"],
        configuration={"delta.appendOnly": "true"},
        created_time=1_700_000_000_000,
    ),
    "add": AddFile(
        path="day=2024-01-01/part-00000-abc-c000.snappy.parquet",
        partition_values={"day": "2024-01-01"},
        size=841_454,
        modification_time=1_512_909_768_000,
        data_change=True,
        stats=STATS,
        tags={"INSERTION_TIME": "1"},
        base_row_id=4071,
        default_row_commit_version=41,
    ),
    "add_null_partition": AddFile(
        path="day=__HIVE_DEFAULT_PARTITION__/part-1.parquet",
        partition_values={"day": None},
        size=1,
        modification_time=2,
        data_change=False,
    ),
    "remove": RemoveFile(
        path="part-00001.parquet",
        data_change=True,
        deletion_timestamp=1_515_488_792_485,
        extended_file_metadata=True,
        partition_values={},
        size=10,
    ),
    "txn": Txn(app_id="3ba13872-2d47-4e17-86a0-21afd2a22395", version=364_475, last_updated=1),
    "commit_info": CommitInfo.model_validate(
        {
            "timestamp": 1_515_491_537_026,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": "[]"},
            "isBlindAppend": True,
            "userName": "michael@databricks.com",
            "notebook": {"notebookId": "4443029"},
        }
    ),
    "cdc": Cdc(path="_change_data/cdc-00001.parquet", partition_values={}, size=1213, data_change=False),
    "domain_metadata": DomainMetadata(domain="delta.x", configuration='{"k":"v"}', removed=False),
    "sidecar": Sidecar(path="016ae953.parquet", size_in_bytes=2, modification_time=3, tags={}),
    "checkpoint_metadata": CheckpointMetadata(version=3, tags={"numOfAddFiles": "42"}),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_action_type_survives_serialize_then_parse(name):
    action = SAMPLES[name]
    body = serialize_commit([action])
    assert parse_commit(body) == [action]


def test_a_commit_keeps_its_actions_in_order():
    actions = list(SAMPLES.values())
    assert parse_commit(serialize_commit(actions)) == actions


def test_serialized_field_names_are_deltas_camel_case():
    add = json.loads(serialize_commit([SAMPLES["add"]]))
    assert add == {
        "add": {
            "path": "day=2024-01-01/part-00000-abc-c000.snappy.parquet",
            "partitionValues": {"day": "2024-01-01"},
            "size": 841454,
            "modificationTime": 1512909768000,
            "dataChange": True,
            "stats": STATS,
            "tags": {"INSERTION_TIME": "1"},
            "baseRowId": 4071,
            "defaultRowCommitVersion": 41,
        }
    }
    protocol = json.loads(serialize_commit([SAMPLES["protocol_with_features"]]))
    assert protocol == {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    }
    metadata = json.loads(serialize_commit([SAMPLES["metadata"]]))["metaData"]
    assert set(metadata) == {
        "id", "name", "description", "format", "schemaString", "partitionColumns", "configuration", "createdTime",
    }
    txn = json.loads(serialize_commit([SAMPLES["txn"]]))
    assert txn == {"txn": {"appId": "3ba13872-2d47-4e17-86a0-21afd2a22395", "version": 364475, "lastUpdated": 1}}


def test_serialization_is_one_compact_newline_terminated_line_per_action_without_nulls():
    body = serialize_commit([SAMPLES["protocol"], SAMPLES["add_null_partition"]])
    assert body == (
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
        b'{"add":{"path":"day=__HIVE_DEFAULT_PARTITION__/part-1.parquet","partitionValues":{"day":null},'
        b'"size":1,"modificationTime":2,"dataChange":false}}\n'
    )


def test_stats_and_schema_string_stay_json_strings_inside_the_json():
    metadata = json.loads(serialize_commit([SAMPLES["metadata"]]))["metaData"]
    add = json.loads(serialize_commit([SAMPLES["add"]]))["add"]
    assert isinstance(metadata["schemaString"], str) and json.loads(metadata["schemaString"])["type"] == "struct"
    assert isinstance(add["stats"], str) and json.loads(add["stats"])["numRecords"] == 3


def test_non_ascii_paths_are_written_as_utf8():
    add = SAMPLES["add"].model_copy(update={"path": "city=Zürich/part-0.parquet"})
    body = serialize_commit([add])
    assert "Zürich".encode() in body
    assert parse_commit(body)[0].path == "city=Zürich/part-0.parquet"


def test_fields_we_do_not_model_survive_a_round_trip_even_when_null():
    line = (
        b'{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":2,"dataChange":true,'
        b'"futureField":{"nested":[1,2]},"futureNull":null}}\n'
    )
    (add,) = parse_commit(line)
    assert add.model_extra == {"futureField": {"nested": [1, 2]}, "futureNull": None}
    again = serialize_commit([add])
    assert b'"futureNull":null' in again
    assert parse_commit(again) == [add]


def test_commit_info_keeps_every_key_it_was_given():
    info = SAMPLES["commit_info"]
    assert info.operation == "WRITE" and info.is_blind_append is True
    written = json.loads(serialize_commit([info]))["commitInfo"]
    assert written["userName"] == "michael@databricks.com"
    assert written["notebook"] == {"notebookId": "4443029"}


def test_an_add_with_a_deletion_vector_parses_and_exposes_its_unique_id():
    line = (
        b'{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":2,"dataChange":true,'
        b'"deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":4,'
        b'"sizeInBytes":40,"cardinality":6}}}\n'
    )
    (add,) = parse_commit(line)
    assert isinstance(add.deletion_vector, DeletionVectorDescriptor)
    assert add.logical_key == ("a.parquet", "uab^-aqEH.-t@S}K{vb[*k^@4")
    inline = DeletionVectorDescriptor(storage_type="i", path_or_inline_dv="wi5b", size_in_bytes=40, cardinality=6)
    assert inline.unique_id == "iwi5b"


def test_v2_checkpoint_actions_parse_into_their_models_and_keep_unknown_fields():
    body = (b'{"checkpointMetadata":{"version":1,"tags":{"numOfAddFiles":"42"}}}\n'
            b'{"sidecar":{"path":"016ae953.parquet","sizeInBytes":2,"modificationTime":3,"future":1}}\n')
    metadata, sidecar = parse_commit(body)
    assert metadata == CheckpointMetadata(version=1, tags={"numOfAddFiles": "42"})
    assert isinstance(sidecar, Sidecar) and sidecar.size_in_bytes == 2 and sidecar.model_extra == {"future": 1}
    assert serialize_commit(parse_commit(body)) == body


def test_removing_an_add_carries_its_partition_values_size_and_stats():
    add = SAMPLES["add"]
    remove = add.remove(deletion_timestamp=99)
    assert remove == RemoveFile(
        path=add.path,
        data_change=True,
        deletion_timestamp=99,
        extended_file_metadata=True,
        partition_values={"day": "2024-01-01"},
        size=841_454,
        stats=STATS,
        tags={"INSERTION_TIME": "1"},
        base_row_id=4071,
        default_row_commit_version=41,
    )
    assert remove.logical_key == add.logical_key == (add.path, None)


def test_actions_are_immutable():
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        SAMPLES["txn"].version = 5  # type: ignore[misc]


def test_blank_lines_and_a_missing_final_newline_are_accepted():
    body = b'\n{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n\n  \n{"txn":{"appId":"a","version":1}}'
    assert parse_commit(body) == [SAMPLES["protocol"], Txn(app_id="a", version=1)]


def test_action_to_dict_and_back_is_the_identity():
    for action in SAMPLES.values():
        assert action_from_dict(action_to_dict(action)) == action


# --- corrupt input -----------------------------------------------------------------------------------


def _error(body: bytes, **kwargs) -> str:
    with pytest.raises(CorruptLogError) as info:
        parse_commit(body, **kwargs)
    return str(info.value)


def test_a_line_that_is_not_json_names_version_path_and_line_number():
    body = b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\nnot json at all\n'
    message = _error(body, version=7, where="_delta_log/00000000000000000007.json")
    assert "version 7" in message
    assert "_delta_log/00000000000000000007.json" in message
    assert "line 2" in message
    assert "not valid JSON" in message


def test_a_truncated_final_line_is_reported_as_truncated():
    full = serialize_commit([SAMPLES["protocol"], SAMPLES["add"]])
    message = _error(full[:-40], version=3)
    assert "line 2" in message and "truncated" in message


def test_unknown_action_key_is_corruption_naming_the_key():
    message = _error(b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n{"ad":{"path":"x"}}\n', version=1)
    assert "line 2" in message and "'ad'" in message and "unknown action" in message


def test_a_line_with_two_action_keys_is_corruption():
    message = _error(b'{"txn":{"appId":"a","version":1},"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n')
    assert "line 1" in message and "exactly one action key" in message


def test_a_line_that_is_not_an_object_is_corruption():
    assert "expected a JSON object" in _error(b'["add"]\n')
    assert "must be a JSON object" in _error(b'{"add":null}\n')


def test_an_add_missing_required_fields_names_them():
    message = _error(b'{"add":{"path":"a.parquet","partitionValues":{}}}\n', version=2)
    assert "malformed 'add'" in message
    for field in ("size", "modificationTime", "dataChange"):
        assert field in message


@pytest.mark.parametrize(
    "field, value",
    [("size", '"10"'), ("dataChange", "1"), ("partitionValues", '{"p":3}'), ("path", "null")],
)
def test_wrongly_typed_fields_are_corruption_not_coerced(field, value):
    fields = {"path": '"a.parquet"', "partitionValues": "{}", "size": "1", "modificationTime": "2", "dataChange": "true"}
    fields[field] = value
    line = "{" + '"add":{' + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}}\n"
    message = _error(line.encode(), version=5)
    assert field in message and "line 1" in message


def test_non_utf8_and_nan_are_corruption():
    assert "not UTF-8" in _error(b'{"txn":{"appId":"\xff","version":1}}\n')
    assert "NaN" in _error(b'{"txn":{"appId":"a","version":NaN}}\n')


# --- real logs written by delta-rs ------------------------------------------------------------------


@pytest.mark.interop
def test_every_commit_delta_rs_writes_parses_and_round_trips(deltars_commits):
    kinds = set()
    for version, body in deltars_commits:
        actions = parse_commit(body, version=version)
        assert actions, f"version {version} parsed to nothing"
        assert parse_commit(serialize_commit(actions)) == actions
        assert len(actions) == sum(1 for line in body.splitlines() if line.strip())
        kinds.update(type(a) for a in actions)
    assert {CommitInfo, AddFile} <= kinds


@pytest.mark.interop
def test_delta_rs_add_actions_match_the_raw_json(deltars_commits):
    """Every field delta-rs wrote is found again, under the same name, after our round trip."""
    for version, body in deltars_commits:
        for raw_line, action in zip((l for l in body.splitlines() if l.strip()), parse_commit(body)):
            raw = json.loads(raw_line)
            ours = json.loads(serialize_commit([action]))
            (key,) = raw
            expected = {k: v for k, v in raw[key].items() if v is not None}
            assert ours[key] == expected, f"version {version}: {key} differs"
