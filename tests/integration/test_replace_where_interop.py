"""replaceWhere against deltalake's (issue 25, item 3): the same overwrite with a predicate on two tables that
deltalake built alike leaves the same rows, and deltalake reads the table we wrote."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

from table import write_table
from tests.support.dml_reference import rows_of
from tests.support.fault_harness import deltalake_options


@pytest.mark.parametrize("predicate", ["p = 'a'", "id > 2 AND id < 6"], ids=["partition", "data-columns"])
def test_our_replace_where_leaves_the_rows_deltalakes_leaves(s3_uri, storage_options, predicate):
    options = deltalake_options(storage_options)
    ours, theirs = s3_uri + "-ours", s3_uri + "-theirs"
    base = pa.table({"id": pa.array(range(8), pa.int64()), "p": ["a", "b"] * 4})
    data = pa.table({"id": pa.array([3, 4], pa.int64()), "p": ["a", "a"]})
    for uri in (ours, theirs):
        deltalake.write_deltalake(uri, base, partition_by=["p"], storage_options=options)
    deltalake.write_deltalake(theirs, data, mode="overwrite", predicate=predicate, storage_options=options)
    write_table(ours, data, mode="overwrite", predicate=predicate, storage_options=storage_options)
    read = [pa.table(deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()).select(["id", "p"])
            for uri in (ours, theirs)]
    assert rows_of(read[0]) == rows_of(read[1])
