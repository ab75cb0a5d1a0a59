"""Deep CLONE (issue 25, item 3): ``Table.clone(target, shallow=False)`` copies the source version's data files
and deletion vector files into the target, which names them by relative path; the clone reads as the source
version did, by us and by deltalake, after the source is deleted outright."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

from logstore import TableUri
from logstore.errors import InvalidArgumentError
from table import Table, write_table
from table.errors import TableExistsError
from tests.support.dml_reference import rows_of
from tests.support.fault_harness import deltalake_options
from tests.support.tables import with_rival


def rows(ids, p="a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids))})


def make_source(uri, options, configuration=None) -> pa.Table:
    write_table(uri, rows([1, 2, 3]), partition_by=["p"], storage_options=options, configuration=configuration)
    write_table(uri, rows([4, 5], "b"), storage_options=options)
    Table(uri, storage_options=options).delete("id = 2")  # a deletion vector with delta.enableDeletionVectors
    return Table(uri, storage_options=options).to_pyarrow_table()


def drop_table(uri, options) -> None:
    """Delete every object of the table at ``uri`` (its log too)."""
    table = Table(uri, storage_options=options)
    table.objects.delete([o.key for o in table.objects.list(table.uri.key(""))])


def read_by_deltalake(uri, options) -> pa.Table:
    theirs = deltalake.DeltaTable(uri, storage_options=deltalake_options(options))
    return pa.table(deltalake.QueryBuilder().register("t", theirs).execute("SELECT id, p FROM t").read_all())


@pytest.mark.parametrize("configuration", [None, {"delta.enableDeletionVectors": "true"}], ids=["plain", "dv"])
def test_a_deep_clone_reads_as_its_source_after_the_source_is_deleted(s3_uri, storage_options, configuration):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-deep"
    expected = make_source(source_uri, storage_options, configuration)
    source = Table(source_uri, storage_options=storage_options)
    files = source.add_actions()
    result = source.clone(target_uri, shallow=False)
    assert result.metrics["numCopiedFiles"] == str(len(files)) == result.metrics["sourceNumOfFiles"]
    assert result.metrics["copiedFilesSize"] == str(sum(f.size for f in files)) == result.metrics["sourceTableSize"]
    clone = Table(target_uri, storage_options=storage_options)
    assert all("://" not in f.path for f in clone.add_actions())
    assert sorted(f.path for f in clone.add_actions()) == sorted(f.path for f in files)  # relative paths kept
    if configuration:
        vectors = [f.deletion_vector for f in clone.add_actions() if f.deletion_vector is not None]
        assert vectors and all(v.storage_type == "u" for v in vectors)
    entry = clone.history(1)[0]
    assert entry.operation == "CLONE" and entry.operation_parameters["isShallow"] == "false"

    drop_table(source_uri, storage_options)
    assert rows_of(Table(target_uri, storage_options=storage_options).to_pyarrow_table()) == rows_of(expected)
    assert rows_of(read_by_deltalake(target_uri, storage_options).select(expected.column_names)) == rows_of(expected)
    if not configuration:  # relative paths: deltalake's pyarrow reader reads it (it refuses deletion vectors)
        theirs = deltalake.DeltaTable(target_uri, storage_options=deltalake_options(storage_options))
        assert rows_of(pa.table(theirs.to_pyarrow_table()).select(expected.column_names)) == rows_of(expected)
    # the clone is a table of its own: it takes writes and DML
    write_table(target_uri, rows([9], "c"), storage_options=storage_options)
    Table(target_uri, storage_options=storage_options).delete("id = 1")
    assert sorted(Table(target_uri, storage_options=storage_options).to_pyarrow_table()["id"].to_pylist()) == [3, 4, 5, 9]


def test_a_deep_clone_of_a_shallow_clone_copies_the_files_it_references(s3_uri, storage_options):
    source_uri, shallow_uri, deep_uri = s3_uri + "-source", s3_uri + "-shallow", s3_uri + "-deep"
    expected = make_source(source_uri, storage_options, {"delta.enableDeletionVectors": "true"})
    Table(source_uri, storage_options=storage_options).clone(shallow_uri)
    Table(shallow_uri, storage_options=storage_options).clone(deep_uri, shallow=False)
    drop_table(source_uri, storage_options)
    drop_table(shallow_uri, storage_options)
    deep = Table(deep_uri, storage_options=storage_options)
    assert all("://" not in f.path for f in deep.add_actions())
    assert rows_of(deep.to_pyarrow_table()) == rows_of(expected)
    assert rows_of(read_by_deltalake(deep_uri, storage_options).select(expected.column_names)) == rows_of(expected)


def test_a_deep_clone_replacing_an_earlier_one_reuses_no_path_and_survives_its_vacuum(s3_uri, storage_options):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-deep"
    make_source(source_uri, storage_options)
    source = Table(source_uri, storage_options=storage_options)
    source.clone(target_uri, shallow=False)
    first = {f.path for f in Table(target_uri, storage_options=storage_options).add_actions()}
    write_table(source_uri, rows([7], "b"), storage_options=storage_options)
    expected = Table(source_uri, storage_options=storage_options).to_pyarrow_table()
    Table(source_uri, storage_options=storage_options).clone(target_uri, shallow=False, replace=True)
    second = {f.path for f in Table(target_uri, storage_options=storage_options).add_actions()}
    assert not first & second
    Table(target_uri, storage_options=storage_options).vacuum(0, dry_run=False, enforce_retention_duration=False)
    assert rows_of(Table(target_uri, storage_options=storage_options).to_pyarrow_table()) == rows_of(expected)


def test_a_deep_clone_of_a_version_whose_files_are_gone_is_refused_and_leaves_nothing(s3_uri, storage_options):
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-deep"
    make_source(source_uri, storage_options)
    source = Table(source_uri, storage_options=storage_options)
    gone = source.add_actions()[0]
    source.objects.delete([source.uri.key(gone.path)])
    with pytest.raises(InvalidArgumentError, match="is gone") as caught:
        source.clone(target_uri, shallow=False)
    assert "Nothing was committed" in str(caught.value)
    # no table there, and no copy left behind under its path
    left = [o.key for o in source.objects.list(TableUri.parse(target_uri).key(""))]
    assert left == []


def test_a_deep_clone_losing_its_target_to_another_table_deletes_its_copies(s3_uri, storage_options):
    """Another writer creates a table at the target while the clone copies: the clone's commit is refused
    (the target exists), the commit provably did not happen, and every file it copied is deleted."""
    source_uri, target_uri = s3_uri + "-source", s3_uri + "-deep"
    make_source(source_uri, storage_options, {"delta.enableDeletionVectors": "true"})
    rival = rows([100], "z")
    with pytest.raises(TableExistsError):
        with_rival(lambda: write_table(target_uri, rival, storage_options=storage_options),
                   lambda: Table(source_uri, storage_options=storage_options).clone(target_uri, shallow=False))
    target = Table(target_uri, storage_options=storage_options)
    assert target.version == 0 and target.to_pyarrow_table().to_pylist() == rival.to_pylist()
    live = {target.uri.key(f.path) for f in target.add_actions()}
    stored = {o.key for o in target.objects.list(target.uri.key("")) if "/_delta_log/" not in o.key}
    assert stored == live
