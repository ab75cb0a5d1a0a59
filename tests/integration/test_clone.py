"""Shallow CLONE (issue 25, item 3): the clone's version 0 references the source's files by absolute URI and
reads as the source version it was cloned from, by us and by deltalake; it then lives its own life
(writes, DELETE, VACUUM of the clone leave the source alone). Deletion vectors of the source are followed."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, write_table
from table.errors import TableExistsError
from tests.support.dml_reference import rows_of
from tests.support.fault_harness import deltalake_options


def rows(ids, p="a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids))})


@pytest.mark.parametrize("configuration", [None, {"delta.enableDeletionVectors": "true"}], ids=["plain", "dv"])
def test_a_shallow_clone_reads_as_its_source_version_for_us_and_deltalake(s3_uri, storage_options, configuration):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-clone"
    write_table(source_uri, rows([1, 2, 3]), partition_by=["p"], storage_options=storage_options,
                configuration=configuration)
    write_table(source_uri, rows([4, 5], "b"), storage_options=storage_options)
    source = Table(source_uri, storage_options=storage_options)
    source.delete("id = 2")  # a deletion vector with "dv"
    expected = Table(source_uri, storage_options=storage_options).to_pyarrow_table()
    result = Table(source_uri, storage_options=storage_options).clone(target_uri, properties={"delta.appendOnly": "false"})
    assert result.version == 0
    assert result.metrics["sourceNumOfFiles"] == str(len(source.refresh().add_actions()))
    clone = Table(target_uri, storage_options=storage_options)
    assert rows_of(clone.to_pyarrow_table()) == rows_of(expected)
    assert all(f.path.startswith("s3://") for f in clone.add_actions())
    assert clone.metadata().id != source.metadata().id
    assert clone.metadata().configuration == {**source.metadata().configuration, "delta.appendOnly": "false"}
    entry = clone.history(1)[0]
    assert entry.operation == "CLONE" and entry.operation_parameters["isShallow"] == "true"
    theirs = deltalake.DeltaTable(target_uri, storage_options=deltalake_options(storage_options))
    # deltalake's DataFusion reader follows absolute paths (its pyarrow dataset joins every path to the root)
    read = deltalake.QueryBuilder().register("t", theirs).execute("SELECT id, p FROM t").read_all()
    assert rows_of(pa.table(read).select(expected.column_names)) == rows_of(expected)

    # the clone lives its own life; the source is untouched
    write_table(target_uri, rows([9], "c"), storage_options=storage_options)
    Table(target_uri, storage_options=storage_options).delete("id = 1")
    Table(target_uri, storage_options=storage_options).vacuum(0, dry_run=False, enforce_retention_duration=False)
    assert sorted(Table(target_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == [3, 4, 5, 9]
    assert rows_of(Table(source_uri, storage_options=storage_options).to_pyarrow_table()) == rows_of(expected)


def test_clone_at_a_version_and_the_refusals(s3_uri, storage_options):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-clone"
    write_table(source_uri, rows([1]), storage_options=storage_options)
    write_table(source_uri, rows([2]), storage_options=storage_options)
    source = Table(source_uri, storage_options=storage_options)
    source.clone(target_uri, version=0)
    assert Table(target_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist() == [1]
    with pytest.raises(TableExistsError, match="replace=True"):
        source.clone(target_uri)
    result = source.clone(target_uri, replace=True)
    assert result.version == 1 and result.metrics["numRemovedFiles"] == "1"
    assert sorted(Table(target_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == [1, 2]
    with pytest.raises(InvalidArgumentError, match="onto itself"):
        source.clone(source_uri, replace=True)


def test_a_clones_protocol_holds_what_its_properties_need_and_a_replace_never_downgrades(s3_uri, storage_options):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-clone"
    write_table(source_uri, rows([1, 2]), storage_options=storage_options)
    source = Table(source_uri, storage_options=storage_options)
    source.clone(target_uri, properties={"delta.enableChangeDataFeed": "true"})
    clone = Table(target_uri, storage_options=storage_options)
    assert (clone.protocol().min_writer_version >= 4 or "changeDataFeed" in (clone.protocol().writer_features or []))
    clone.delete("id = 1")  # writes change data: the protocol allows it
    feed = clone.refresh().load_cdf(1, 1).read_all()
    assert feed["id"].to_pylist() == [1] and feed["_change_type"].to_pylist() == ["delete"]
    featured_uri = s3_uri + "-featured"
    write_table(featured_uri, rows([5]), storage_options=storage_options,
                configuration={"delta.enableDeletionVectors": "true"})
    before = Table(featured_uri, storage_options=storage_options).protocol()
    source.clone(featured_uri, replace=True)
    after = Table(featured_uri, storage_options=storage_options)
    assert set(before.writer_features or []) <= set(after.protocol().writer_features or [])
    assert after.metadata().id == Table(featured_uri, version=0, storage_options=storage_options).metadata().id
    with pytest.raises(InvalidArgumentError, match="column mapping mode"):
        source.clone(s3_uri + "-mapped", properties={"delta.columnMapping.mode": "name"})


def test_restoring_a_clone_whose_source_files_were_vacuumed_is_refused(s3_uri, storage_options):
    """The clone's files are the source's, by absolute URI: RESTORE looks for them too."""
    from table.errors import DataFileMissingError

    source_uri, target_uri = s3_uri + "-source", s3_uri + "-clone"
    write_table(source_uri, rows([1, 2]), storage_options=storage_options)
    Table(source_uri, storage_options=storage_options).clone(target_uri)
    Table(target_uri, storage_options=storage_options).delete("id = 1")  # the clone rewrites the source's file
    Table(source_uri, storage_options=storage_options).delete("id = 1")
    Table(source_uri, storage_options=storage_options).vacuum(0, dry_run=False, enforce_retention_duration=False)
    with pytest.raises(DataFileMissingError, match="1 of its files are gone"):
        Table(target_uri, storage_options=storage_options).restore(0)
