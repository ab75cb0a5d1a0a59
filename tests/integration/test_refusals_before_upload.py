"""Every refusal that can be known before data moves is raised before the first upload (issue 27).

The bucket has versioning on: a file that a refused write uploaded and then deleted again would still
have its object version and a delete marker. For each refusal on each in-process path (``write_table``;
DELETE, UPDATE and MERGE; OPTIMIZE) the test asserts the error and that the table's prefix holds not one
new object version, delete marker or pending upload afterwards. A refusal that only the commit can know
(the table changed while the job staged) still deletes what it staged, and its message says so.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import (
    AppendOnlyError,
    CommitConflictError,
    InvalidArgumentError,
    ReadOnlySnapshotError,
    SchemaMismatchError,
    Table,
    UnsupportedFeatureError,
    write_table,
)
from tests.support.tables import with_rival
from tests.support.versions import make_versioned_bucket, raw_table, table_uri, trace

BUCKET = "dynacommit-refusals"


@pytest.fixture(scope="module")
def bucket(local_stack) -> str:
    make_versioned_bucket(local_stack, BUCKET)
    return BUCKET


@pytest.fixture
def uri(bucket) -> str:
    return table_uri(bucket)


def n(*values: int) -> pa.Table:
    return pa.table({"n": pa.array(values, pa.int64())})


def refused(uri: str, options: dict[str, str], error: type[Exception], action, *, match: str):
    """Run ``action``; it must raise ``error`` (its message matching ``match``) and leave nothing in the
    bucket: no new object version, no delete marker, no pending upload under the table."""
    from logstore.steps import PUBLISHED

    PUBLISHED.wait_all(30)  # the earlier commits' temp-file DELETEs, sent on the pool after they returned
    before = trace(uri, options)
    with pytest.raises(error, match=match) as raised:
        action()
    left = trace(uri, options).since(before)
    assert left.empty, f"the refused operation left traces in the versioned bucket: {left}"
    return raised.value


# --- write_table -------------------------------------------------------------------------------------

ICEBERG = {"delta.enableIcebergCompatV2": "true"}  # without the column mapping it requires: not writable
FEATURE_TABLES = {
    # name: (raw_table arguments, the feature the refusal names)
    "iceberg-compat-without-column-mapping": (dict(writer=["icebergCompatV2"], configuration=ICEBERG), "icebergCompatV2"),
}


@pytest.mark.parametrize("case", sorted(FEATURE_TABLES))
def test_write_table_refuses_a_table_it_cannot_write_before_uploading(case, uri, storage_options):
    arguments, feature = FEATURE_TABLES[case]
    raw_table(uri, storage_options, **arguments)
    error = refused(uri, storage_options, UnsupportedFeatureError,
                    lambda: write_table(uri, n(1, 2, 3), storage_options=storage_options), match=feature)
    assert error.feature == feature
    assert Table(uri, storage_options=storage_options).version == 0


def test_write_table_refuses_an_overwrite_of_an_append_only_table_before_uploading(uri, storage_options):
    write_table(uri, n(1, 2), configuration={"delta.appendOnly": "true"}, storage_options=storage_options)
    error = refused(uri, storage_options, AppendOnlyError,
                    lambda: write_table(uri, n(3), mode="overwrite", storage_options=storage_options),
                    match="delta.appendOnly=true")
    assert "nothing was written" in str(error)
    table = Table(uri, storage_options=storage_options)
    assert table.version == 0 and sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 2]


def test_write_table_refusals_of_schema_options_and_time_travel_upload_nothing(uri, storage_options):
    write_table(uri, n(1, 2), storage_options=storage_options)
    write_table(uri, n(3), storage_options=storage_options)
    refused(uri, storage_options, SchemaMismatchError,
            lambda: write_table(uri, pa.table({"n": ["one"]}), storage_options=storage_options), match="n")
    refused(uri, storage_options, InvalidArgumentError,
            lambda: write_table(uri, n(4), mode="sideways", storage_options=storage_options), match="mode")
    refused(uri, storage_options, InvalidArgumentError,
            lambda: write_table(uri, n(4), partition_by=["n"], storage_options=storage_options),
            match="partitioned by")
    old = Table(uri, version=0, storage_options=storage_options)
    refused(uri, storage_options, ReadOnlySnapshotError, lambda: write_table(old, n(4)), match="pinned to version 0")
    assert Table(uri, storage_options=storage_options).version == 1


# --- DELETE, UPDATE, MERGE ---------------------------------------------------------------------------


@pytest.fixture
def append_only(uri, storage_options) -> Table:
    """An append-only table whose one file holds the rows 1, 2 and 3: a change to row 1 rewrites the file."""
    write_table(uri, n(1, 2, 3), configuration={"delta.appendOnly": "true"}, storage_options=storage_options)
    return Table(uri, storage_options=storage_options)


DML = {
    "delete": lambda t: t.delete("n = 1"),
    "delete-nothing-matches": lambda t: t.delete("n = 99"),
    "update": lambda t: t.update({"n": "n + 10"}, predicate="n = 1"),
    "merge-update": lambda t: t.merge(n(1), "target.n = source.n").when_matched_update_all().execute(),
    "merge-delete": lambda t: t.merge(n(1), "target.n = source.n").when_matched_delete().execute(),
    "merge-by-source-delete": lambda t: t.merge(n(1), "target.n = source.n")
    .when_not_matched_by_source_delete().when_not_matched_insert_all().execute(),
}


@pytest.mark.parametrize("case", sorted(DML))
def test_dml_on_an_append_only_table_is_refused_before_uploading(case, append_only, uri, storage_options):
    error = refused(uri, storage_options, AppendOnlyError, lambda: DML[case](append_only),
                    match="delta.appendOnly=true")
    assert "nothing was written" in str(error)
    table = Table(uri, storage_options=storage_options)
    assert table.version == 0 and sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 2, 3]


def test_an_insert_only_merge_into_an_append_only_table_is_not_refused(append_only, uri, storage_options):
    result = append_only.merge(n(3, 4), "target.n = source.n").when_not_matched_insert_all().execute()
    assert result.version == 1
    assert sorted(Table(uri, storage_options=storage_options).to_pyarrow_table()["n"].to_pylist()) == [1, 2, 3, 4]


def test_dml_on_a_table_with_a_refused_feature_or_time_travelled_is_refused_before_uploading(uri, storage_options):
    write_table(uri, n(1, 2, 3), storage_options=storage_options)
    old = Table(uri, version=0, storage_options=storage_options)
    refused(uri, storage_options, ReadOnlySnapshotError, lambda: old.delete("n = 1"), match="pinned to version 0")
    raw_table(uri, storage_options, version=1, writer=["icebergCompatV2"], configuration=ICEBERG)
    table = Table(uri, storage_options=storage_options)
    error = refused(uri, storage_options, UnsupportedFeatureError, lambda: table.update({"n": "n + 1"}, predicate="n = 2"),
                    match="icebergCompatV2")
    assert error.feature == "icebergCompatV2"


# --- OPTIMIZE ----------------------------------------------------------------------------------------


def test_optimize_of_a_table_with_a_refused_feature_is_refused_before_uploading(uri, storage_options):
    for value in (1, 2, 3):  # three small files: something to compact
        write_table(uri, n(value), storage_options=storage_options)
    raw_table(uri, storage_options, version=3, writer=["icebergCompatV2"], configuration=ICEBERG)
    table = Table(uri, storage_options=storage_options)
    error = refused(uri, storage_options, UnsupportedFeatureError, lambda: table.optimize(), match="icebergCompatV2")
    assert error.feature == "icebergCompatV2"
    assert len(Table(uri, storage_options=storage_options).files()) == 3


def test_optimize_of_an_append_only_table_is_not_refused(uri, storage_options):
    """A compaction changes no rows (dataChange=false): Delta allows it on an append-only table."""
    for value in (1, 2, 3):
        write_table(uri, n(value), configuration={"delta.appendOnly": "true"}, storage_options=storage_options)
    report = Table(uri, storage_options=storage_options).optimize()
    assert report.version == 3
    table = Table(uri, storage_options=storage_options)
    assert len(table.files()) == 1 and sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 2, 3]


# --- what only the commit can know -------------------------------------------------------------------


def test_a_refusal_known_only_at_commit_deletes_the_staged_files_and_says_so(uri, storage_options):
    """The table is created by another writer, with a CHECK constraint, while our write stages: only the
    commit can see it. The uploads did happen (versioning shows them), were deleted again, and the
    message says exactly that rather than claiming nothing was written."""
    ours = Table.for_write(uri, storage_options=storage_options)
    before = trace(uri, storage_options)
    rival = lambda: raw_table(uri, storage_options, writer_version=3,  # noqa: E731
                              configuration={"delta.constraints.positive": "n > 0"})
    with pytest.raises(CommitConflictError, match="CHECK constraints") as raised:
        with_rival(rival, lambda: write_table(ours, n(1, 2)))
    message = str(raised.value)
    assert "nothing was written" not in message
    assert "1 file(s) this job staged for the commit were deleted again" in message
    left = trace(uri, storage_options).since(before)
    data = {key for key, _ in left.versions if not key.startswith("_delta_log/")}
    assert len(data) == 1, left  # the staged file was uploaded ...
    assert {key for key, _ in left.markers if not key.startswith("_delta_log/")} == data  # ... and deleted again
    assert not left.uploads
    assert Table(uri, storage_options=storage_options).version == 0


# --- rows that break the table's rules ---------------------------------------------------------------


def test_rows_breaking_a_check_constraint_are_refused_and_leave_no_trace(uri, storage_options):
    """The rule is checked on each batch before it is encoded: a violation aborts the job's uploads, so
    the versioned bucket holds nothing of the refused write (table.data.rules)."""
    from table import ConstraintViolationError

    write_table(uri, n(1, 2), storage_options=storage_options)
    Table(uri, storage_options=storage_options).alter.add_constraint({"positive": "n > 0"})
    message = r"CHECK constraint positive \(n > 0\) violated by row with values: n=-3"
    refused(uri, storage_options, ConstraintViolationError,
            lambda: write_table(uri, n(5, -3), storage_options=storage_options), match=message)
    refused(uri, storage_options, ConstraintViolationError,
            lambda: write_table(uri, n(-3), mode="overwrite", storage_options=storage_options), match=message)
    refused(uri, storage_options, ConstraintViolationError,
            lambda: Table(uri, storage_options=storage_options).update({"n": "n - 4"}, predicate="n = 1"),
            match=r"n=-3")
    refused(uri, storage_options, ConstraintViolationError,
            lambda: Table(uri, storage_options=storage_options).merge(n(-3), "target.n = source.n")
            .when_not_matched_insert_all().execute(), match=message)
    assert Table(uri, storage_options=storage_options).version == 1
