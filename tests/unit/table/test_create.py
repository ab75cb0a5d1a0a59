"""``Table.create`` / ``create_table`` (deltalake's ``DeltaTable.create``): a table with no data, read by
deltalake, and deltalake's created tables read here; ``mode`` as deltalake gives it meaning, checked
against deltalake doing the same on a twin path."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from table import (
    InvalidArgumentError,
    Table,
    TableExistsError,
    create_table,
    write_table,
)
from table.log.snapshot import read_commit
from tests.support.corpus import to_directory, to_memory

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("amount", pa.float64())])


def test_a_created_table_is_version_zero_without_files_and_deltalake_reads_name_and_description(memory_uri,
                                                                                                  tmp_path):
    from deltalake import DeltaTable

    table = Table.create(memory_uri, SCHEMA, partition_by=["day"], name="sales", description="daily sales",
                         configuration={"delta.appendOnly": "true"})
    assert table.version == 0 and table.files() == []
    actions = read_commit(table.log_store, 0)
    assert {type(a).__name__ for a in actions} == {"CommitInfo", "Protocol", "Metadata"}
    theirs = DeltaTable(str(to_directory(table, tmp_path / "t")))
    assert theirs.version() == 0
    assert pa.schema(theirs.schema()) == SCHEMA
    meta = theirs.metadata()
    assert (meta.name, meta.description, meta.partition_columns) == ("sales", "daily sales", ["day"])
    assert meta.configuration == {"delta.appendOnly": "true"}
    assert theirs.history(1)[0]["operation"] == "CREATE TABLE"


def test_deltalake_s_created_table_reads_here_and_takes_appends(tmp_path):
    from deltalake import DeltaTable

    DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["day"], name="n", description="d")
    uri = to_memory(tmp_path / "t")
    table = Table(uri)
    assert (table.version, table.schema, table.partition_columns) == (0, SCHEMA, ["day"])
    assert (table.metadata().name, table.metadata().description) == ("n", "d")
    rows = pa.table({"id": [1], "day": ["mon"], "amount": [2.5]}, schema=SCHEMA)
    write_table(uri, rows)
    assert Table(uri).to_pyarrow_table().to_pylist() == rows.to_pylist()


def test_generated_and_identity_columns_from_field_metadata_as_the_first_write_takes_them(memory_uri, tmp_path):
    from deltalake import DeltaTable

    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False, metadata={"delta.identity.start": "1", "delta.identity.step": "1",
                                                            "delta.identity.allowExplicitInsert": "false"}),
        pa.field("amount", pa.float64()),
        pa.field("double", pa.float64(), metadata={"delta.generationExpression": "amount * 2"}),
    ])
    table = Table.create(memory_uri, schema)
    assert set(table.protocol().writer_features or []) >= {"generatedColumns", "identityColumns"} or \
        table.protocol().min_writer_version == 6
    write_table(memory_uri, pa.table({"amount": [1.0, 2.0]}))
    got = sorted(Table(memory_uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "amount": 1.0, "double": 2.0}, {"id": 2, "amount": 2.0, "double": 4.0}]
    # The same schema created by deltalake records the same column metadata.
    DeltaTable.create(str(tmp_path / "theirs"), pa.schema([schema.field("amount"), schema.field("double")]))
    theirs = json.loads(DeltaTable(str(tmp_path / "theirs")).schema().to_json())["fields"][1]["metadata"]
    ours = json.loads(table.metadata().schema_string)["fields"][2]["metadata"]
    assert ours["delta.generationExpression"] == theirs["delta.generationExpression"]


def _outcome(action):
    try:
        result = action()
    except (TableExistsError, InvalidArgumentError) as exc:
        return "refused", type(exc).__name__
    except Exception as exc:  # deltalake's errors
        return "refused", type(exc).__name__
    return "done", result


@pytest.mark.parametrize("mode", ["error", "append", "ignore", "overwrite"])
def test_mode_on_an_existing_table_means_what_it_means_in_deltalake(mode, memory_uri, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    rows = pa.table({"id": [1], "day": ["mon"], "amount": [2.5]}, schema=SCHEMA)
    other = pa.schema([("x", pa.int32()), ("y", pa.string())])
    write_table(memory_uri, rows)
    write_deltalake(str(tmp_path / "t"), rows)
    ours = _outcome(lambda: Table.create(memory_uri, other, mode=mode, name="again"))
    theirs = _outcome(lambda: DeltaTable.create(str(tmp_path / "t"), other, mode=mode, name="again"))
    assert ours[0] == theirs[0]
    mine, their = Table(memory_uri), DeltaTable(str(tmp_path / "t"))
    assert mine.version == their.version()
    assert mine.schema == pa.schema(their.schema())
    assert len(mine.files()) == len(their.file_uris())
    assert mine.metadata().name == their.metadata().name
    if mode == "overwrite":
        assert mine.history(1)[0].operation == their.history(1)[0]["operation"] == "CREATE OR REPLACE TABLE"
        assert mine.to_pyarrow_table().num_rows == 0


@pytest.mark.parametrize("mode", ["error", "append", "ignore", "overwrite"])
def test_every_mode_creates_where_there_is_no_table_as_in_deltalake(mode, memory_uri, tmp_path):
    from deltalake import DeltaTable

    DeltaTable.create(str(tmp_path / "t"), SCHEMA, mode=mode)
    assert create_table(memory_uri, SCHEMA, mode=mode).version == DeltaTable(str(tmp_path / "t")).version() == 0


def test_overwrite_never_lowers_the_protocol_and_honours_append_only(memory_uri):
    Table.create(memory_uri, SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    replaced = Table.create(memory_uri, SCHEMA, mode="overwrite")
    assert "deletionVectors" in (replaced.protocol().reader_features or [])
    Table.create(memory_uri, SCHEMA, mode="overwrite", configuration={"delta.appendOnly": "true"})
    with pytest.raises(Exception, match="append"):
        Table.create(memory_uri, SCHEMA, mode="overwrite")


def test_a_deltalake_schema_is_taken_through_the_arrow_interface(memory_uri, tmp_path):
    from deltalake import DeltaTable, Schema

    DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    theirs = DeltaTable(str(tmp_path / "t")).schema()
    assert isinstance(theirs, Schema)
    assert Table.create(memory_uri, theirs).schema == SCHEMA


def test_bad_arguments_are_named(memory_uri):
    with pytest.raises(InvalidArgumentError, match="mode"):
        Table.create(memory_uri, SCHEMA, mode="replace")
    with pytest.raises(InvalidArgumentError, match="delta.bogus"):
        Table.create(memory_uri, SCHEMA, configuration={"delta.bogus": "1"})
    with pytest.raises(Exception, match="schema"):
        Table.create(memory_uri, {"id": "long"})
    with pytest.raises(Exception, match="nope"):
        Table.create(memory_uri, SCHEMA, partition_by=["nope"])
    assert not Table.is_deltatable(memory_uri)
