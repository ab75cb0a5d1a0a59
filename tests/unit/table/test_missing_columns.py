"""An append (or overwrite) whose data lacks nullable columns of the table writes nulls there, as delta-spark
does (issue 25, item 5); a missing NOT NULL column or partition column is still refused by name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import Table, write_table
from table.errors import SchemaMismatchError
from tests.support.dml_reference import rows_of

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                    pa.field("score", pa.float64()), pa.field("day", pa.string())])


def first() -> pa.Table:
    return pa.table({"id": [1, 2], "name": ["a", "b"], "score": [1.0, 2.0], "day": ["d1", "d1"]}, schema=SCHEMA)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_missing_nullable_columns_are_written_as_nulls(memory_uri, mode):
    write_table(memory_uri, first(), partition_by=["day"])
    write_table(memory_uri, pa.table({"id": pa.array([3], pa.int64()), "day": ["d2"]}), mode=mode)
    table = Table(memory_uri)
    assert table.schema == SCHEMA  # the schema is the table's, unchanged
    expected = [(3, None, None, "d2")] + ([] if mode == "overwrite" else [(1, "a", 1.0, "d1"), (2, "b", 2.0, "d1")])
    assert sorted(rows_of(table.to_pyarrow_table().select(SCHEMA.names)), key=repr) == sorted(expected, key=repr)


def test_a_missing_not_null_or_partition_column_is_still_refused(memory_uri):
    write_table(memory_uri, first(), partition_by=["day"])
    with pytest.raises(SchemaMismatchError, match="missing column 'id'"):
        write_table(memory_uri, pa.table({"name": ["c"], "day": ["d2"]}))
    with pytest.raises(SchemaMismatchError, match="missing column 'day'"):
        write_table(memory_uri, pa.table({"id": pa.array([3], pa.int64())}))
    assert Table(memory_uri).version == 0
