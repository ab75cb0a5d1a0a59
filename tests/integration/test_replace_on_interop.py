"""replaceOn / replaceUsing against deltalake (issue 25, item 3): on two tables deltalake built alike, our one
commit leaves the rows that deltalake's DELETE of the matching rows then append of the data leave, and
deltalake reads the table we wrote (deletion vectors included)."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

from table import Table, write_table
from tests.support.dml_reference import rows_of
from tests.support.fault_harness import deltalake_options


@pytest.mark.parametrize("keyword,value,delete", [
    ("replace_using", ["id"], "id IN (3, 4, 9)"),
    ("replace_using", "p", "p = 'a'"),
    ("replace_on", "target.id >= source.id", "id >= 3"),
], ids=["using-id", "using-partition", "on-range"])
def test_our_replace_leaves_the_rows_a_deltalake_delete_then_append_leaves(s3_uri, storage_options, keyword, value,
                                                                           delete):
    options = deltalake_options(storage_options)
    ours, theirs = s3_uri + "-ours", s3_uri + "-theirs"
    base = pa.table({"id": pa.array(range(8), pa.int64()), "p": ["a", "b"] * 4})
    data = pa.table({"id": pa.array([3, 4, 9], pa.int64()), "p": ["a", "a", "a"]})
    for uri in (ours, theirs):
        deltalake.write_deltalake(uri, base, partition_by=["p"], storage_options=options,
                                  configuration={"delta.enableDeletionVectors": "true"})
    deltalake.DeltaTable(theirs, storage_options=options).delete(delete)
    deltalake.write_deltalake(theirs, data, mode="append", storage_options=options)
    write_table(ours, data, mode="overwrite", storage_options=storage_options, **{keyword: value})
    assert Table(ours, storage_options=storage_options).version == 1  # one commit
    read = [pa.table(deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri, storage_options=options))
                     .execute("SELECT id, p FROM t").read_all()) for uri in (ours, theirs)]
    assert rows_of(read[0]) == rows_of(read[1])
