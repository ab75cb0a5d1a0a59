"""replaceOn / replaceUsing (issue 25, item 3): ``write_table(..., mode="overwrite", replace_on=... |
replace_using=...)`` deletes the table's rows that match a row of the data and adds the data, in one commit.
The expected table is computed by DuckDB over the input rows (``NOT EXISTS`` against the data, then the data),
independently of the code's MERGE path."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import CommitConflictError, Table, write_table
from table.log.actions import AddFile, RemoveFile
from table.log.snapshot import read_commit
from tests.support.dml_reference import duckdb_delete, rows_of
from tests.support.tables import with_rival


def rows(ids, day="d1", v=None) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([day] * len(ids), pa.string()),
                     "v": pa.array(v if v is not None else [float(i or 0) for i in ids], pa.float64())})


def setup(uri, configuration=None, partition_by=("day",)) -> pa.Table:
    first, second = rows([1, 2, 3, None], "d1"), rows([10, 11], "d2")
    write_table(uri, first, partition_by=list(partition_by) or None, configuration=configuration)
    write_table(uri, second)
    return pa.concat_tables([first, second])


def expected(target: pa.Table, data: pa.Table, condition: str) -> pa.Table:
    """Delta's meaning, by DuckDB: the target rows no data row matches, then the data."""
    con = duckdb.connect()
    con.register("target_rows", target)
    con.register("data_rows", data)
    kept = con.sql(f"SELECT * FROM target_rows AS target WHERE NOT EXISTS "
                   f"(SELECT 1 FROM data_rows AS source WHERE {condition})").to_arrow_table()
    return pa.concat_tables([kept.cast(target.schema), data])


CASES = [
    # (keyword, value, the same condition in DuckDB, data)
    ("replace_using", ["id"], "target.id = source.id", rows([2, 11, 40, None], "d3")),
    ("replace_using", "day", "target.day = source.day", rows([7], "d1")),          # partition column
    ("replace_using", "id, day", "target.id = source.id AND target.day = source.day", rows([1, 10], "d1")),
    ("replace_on", "target.id <=> source.id", "target.id IS NOT DISTINCT FROM source.id", rows([None, 3], "d2")),
    ("replace_on", "target.id > source.id", "target.id > source.id", rows([9], "d9")),
    ("replace_using", ["id"], "target.id = source.id", rows([], "d1")),            # empty data: nothing deleted
]


@pytest.mark.parametrize("keyword,value,duck,data", CASES,
                         ids=["using-id", "using-partition", "using-two", "on-null-safe", "on-range", "empty"])
@pytest.mark.parametrize("configuration", [None, {"delta.enableDeletionVectors": "true"}], ids=["cow", "dv"])
def test_replace_deletes_the_matching_rows_and_adds_the_data(memory_uri, keyword, value, duck, data, configuration):
    base = setup(memory_uri, configuration)
    result = write_table(memory_uri, data, mode="overwrite", **{keyword: value})
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(expected(base, data, duck))
    if data.num_rows == 0:  # empty data deletes nothing and adds nothing: there is nothing to commit
        assert result.version == 1 and Table(memory_uri).version == 1
        return
    entry = Table(memory_uri).history(1)[0]
    assert entry.operation == "WRITE" and entry.operation_parameters["mode"] == "Overwrite"
    if keyword == "replace_on":
        assert entry.operation_parameters["replaceOnCond"] == value
    else:
        names = value.split(", ") if isinstance(value, str) else value
        assert entry.operation_parameters["replaceUsingCols"] == f"({', '.join(names)})"
    deleted = base.num_rows + data.num_rows - Table(memory_uri).to_pyarrow_table().num_rows
    assert result.metrics["numOutputRows"] == str(data.num_rows)
    assert result.metrics["numDeletedRows"] == str(deleted)


def test_replace_using_null_never_matches_as_in_delta(memory_uri):
    """Delta's documented example: NULL keys match nothing under replaceUsing, and do under ``<=>``."""
    students = pa.table({"name": ["Dylan", "Doug", "Julia", "Adam"], "country": ["US", "UK", "IT", None]})
    new = pa.table({"name": ["Peter", "Jennie", "Eva"], "country": ["FR", "UK", None]})
    write_table(memory_uri, students)
    write_table(memory_uri, new, mode="overwrite", replace_using="country")
    assert sorted(Table(memory_uri).to_pyarrow_table().column("name").to_pylist()) == \
        ["Adam", "Dylan", "Eva", "Jennie", "Julia", "Peter"]
    write_table(memory_uri, pa.table({"name": ["Zed"], "country": pa.array([None], pa.string())}),
                mode="overwrite", replace_on="t.country <=> s.country", source_alias="s", target_alias="t")
    assert sorted(Table(memory_uri).to_pyarrow_table().column("name").to_pylist()) == \
        ["Dylan", "Jennie", "Julia", "Peter", "Zed"]


def test_deletion_vectors_mark_the_rows_instead_of_copying_the_files(memory_uri):
    setup(memory_uri, {"delta.enableDeletionVectors": "true"}, partition_by=())
    result = write_table(memory_uri, rows([2], "d1"), mode="overwrite", replace_using="id")
    actions = read_commit(Table(memory_uri).log_store, result.version)
    assert any(isinstance(a, AddFile) and a.deletion_vector is not None for a in actions)
    assert result.metrics["numCopiedRows"] == "0" and result.metrics["numDeletedRows"] == "1"


def test_bad_uses_are_refused_naming_the_problem(memory_uri):
    with pytest.raises(InvalidArgumentError, match="no table at"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_using="id")
    setup(memory_uri)
    before = Table(memory_uri).version
    with pytest.raises(InvalidArgumentError, match="needs mode='overwrite'"):
        write_table(memory_uri, rows([1]), replace_using="id")
    with pytest.raises(InvalidArgumentError, match="together"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_using="id", replace_on="target.id = source.id")
    with pytest.raises(InvalidArgumentError, match="cannot be combined"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_using="id", predicate="id = 1")
    with pytest.raises(InvalidArgumentError, match="which the table does not have"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_using="nope")
    with pytest.raises(InvalidArgumentError, match="replace_on"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_on="target.nope = source.id")
    with pytest.raises(InvalidArgumentError):  # an unqualified column both sides have is ambiguous, as in Delta
        write_table(memory_uri, rows([1]), mode="overwrite", replace_on="id = id")
    with pytest.raises(InvalidArgumentError, match="give replace_on too"):
        write_table(memory_uri, rows([1]), mode="append", target_alias="t")
    assert Table(memory_uri).version == before


def test_a_concurrent_delete_of_a_replaced_row_conflicts_and_nothing_lands(memory_uri):
    base = setup(memory_uri)
    with pytest.raises(CommitConflictError):
        with_rival(lambda: Table(memory_uri).delete("id = 2"),
                   lambda: write_table(memory_uri, rows([2], "d1"), mode="overwrite", replace_using="id"))
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(duckdb_delete(base, "id = 2"))


def test_a_concurrent_append_to_another_partition_does_not_stop_it(memory_uri):
    base = setup(memory_uri)
    appended = rows([50], "d2")
    data = rows([7], "d1")
    with_rival(lambda: write_table(memory_uri, appended),
               lambda: write_table(memory_uri, data, mode="overwrite", replace_using="day"))
    want = pa.concat_tables([expected(base, data, "target.day = source.day"), appended])
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(want)


def test_a_stream_of_batches_is_read_once_and_the_change_data_feed_says_both_sides(memory_uri):
    base = setup(memory_uri, {"delta.enableChangeDataFeed": "true"})
    data = rows(list(range(0, 300)), "d5")
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=64))
    version = write_table(memory_uri, reader, mode="overwrite", replace_using="id").version
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(expected(base, data, "target.id = source.id"))
    changes = Table(memory_uri).load_cdf(version, version).read_all() if hasattr(
        Table(memory_uri).load_cdf(version, version), "read_all") else Table(memory_uri).load_cdf(version, version)
    kinds = sorted(set(changes.column("_change_type").to_pylist()))
    assert kinds == ["delete", "insert"]
    deleted = sorted(r for r in changes.filter(pa.compute.equal(changes["_change_type"], "delete"))
                     .column("id").to_pylist())
    assert deleted == [1, 2, 3, 10, 11]
    assert json.loads(Table(memory_uri).history(1)[0].operation_parameters["partitionBy"]) == ["day"]


def test_with_schema_mode_merge_a_widened_key_and_a_new_column_are_committed(memory_uri):
    narrow = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": ["a", "b", "c"]})
    write_table(memory_uri, narrow, configuration={"delta.enableTypeWidening": "true"})
    data = pa.table({"id": pa.array([2, 3_000_000_000], pa.int64()), "v": ["B", "big"], "extra": ["x", "y"]})
    write_table(memory_uri, data, mode="overwrite", replace_using="id", schema_mode="merge")
    table = Table(memory_uri)
    assert table.schema.field("id").type == pa.int64() and "extra" in table.schema.names
    got = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "v": "a", "extra": None}, {"id": 2, "v": "B", "extra": "x"},
                   {"id": 3, "v": "c", "extra": None}, {"id": 3_000_000_000, "v": "big", "extra": "y"}]


def test_aliases_are_refused_with_replace_using(memory_uri):
    setup(memory_uri)
    with pytest.raises(InvalidArgumentError, match="takes no alias"):
        write_table(memory_uri, rows([1]), mode="overwrite", replace_using="id", source_alias="s")
