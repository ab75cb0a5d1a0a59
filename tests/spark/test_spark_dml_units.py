"""The parts of Spark DML that need no Spark session: which conjuncts prune, and what a rewrite task
refuses (rows of a file apart or missing, target rows matched twice), run in-process on memory tables."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore import StorageOptions, TableUri, open_object_store
from spark_integration.dml.pruning import binds_to, pruning_filter
from spark_integration.dml.tasks import ACTION, FILE, ROW, ClauseKind, RewriteTask, out_column, pre_column

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("i32", pa.int32()), ("s", pa.string()), ("d", pa.date32()),
                    ("ts", pa.timestamp("us", "UTC")), ("dec", pa.decimal128(10, 2)), ("f", pa.float64()),
                    ("b", pa.bool_()), ("p", pa.string())])


@pytest.mark.parametrize(("condition", "kept"), [
    ("id > 5 AND i32 = 3", "((id > 5) and (i32 == 3))"),
    ("id IN (1, 2)", "((id == 1) or (id == 2))"),
    ("id BETWEEN 1 AND 3", "((id >= 1) and (id <= 3))"),
    ("d = '2026-01-05'", "(d == 2026-01-05)"),
    ("d = DATE '2026-01-05'", "(d == 2026-01-05)"),
    ("dec = 5", "(dec == 5.00)"),
    ("NOT (id < 3)", "(id >= 3)"),
    ("p = 'a' AND f > 1.5", '(p == "a")'),
    ("`p` IS NULL", "is_null(p, {nan_is_null=false})"),
    ("cast(i32 as bigint) = 5", "(i32 == 5)"),
])
def test_conjuncts_both_engines_read_alike_prune(condition, kept):
    assert str(pruning_filter(SCHEMA, condition).filter) == kept


@pytest.mark.parametrize(("condition", "why"), [
    ("s = 5", "a column of the string family with a literal of type int64"),       # Spark: cast(s as bigint) = 5
    ("id = '5'", "a column of the integer family with a literal of type string"),
    ("d = '2026-1-5'", "a column of the date family with a literal of type string"),  # not ISO: parsers differ
    ("f = 1.0", "floating-point, timestamp or other column"),                        # NaN
    ("ts > '2026-01-01'", "floating-point, timestamp or other column"),              # the session's time zone
    ("s = substr('0505', 0, 2)", "DataFusion would fold it"),                        # '0' there, '05' in Spark
    ("s = 'a\\tb'", "backslash or a quote"),                                         # Spark reads a tab
    ("s = 'a''b'", "backslash or a quote"),                                          # Spark reads 'ab'
    ("cast(s as int) = 5", "a cast of a column to another type family"),
    ("p = 'a' OR f > 1.5", "floating-point"),                                        # an OR is one conjunct
    ("1 = 1", "has no column"),
])
def test_conjuncts_the_engines_may_read_differently_never_prune(condition, why):
    pruning = pruning_filter(SCHEMA, condition)
    assert pruning.filter is None
    assert len(pruning.dropped) == 1 and why in pruning.dropped[0]


@pytest.mark.parametrize("condition", ['s = "abc"', "ID = 5", "id = 5Y", "dec = 1.5BD", "s = r'a'"])
def test_text_datafusion_cannot_bind_prunes_nothing(condition):
    pruning = pruning_filter(SCHEMA, condition)
    assert pruning.filter is None and pruning.dropped


def test_a_merge_prunes_by_the_targets_conjuncts_only():
    source = pa.schema([("id", pa.int64()), ("code", pa.string()), ("v", pa.float64())])
    pruning = pruning_filter(SCHEMA, "t.id = s.id AND t.p IN ('a', 'b') AND s.v > 1.0", target_alias="t",
                             source_alias="s", source_schema=source)
    assert str(pruning.filter) == '((p == "a") or (p == "b"))' and set(pruning.columns) == {"id", "p"}
    mixed = pruning_filter(SCHEMA, "t.s = s.id AND s.id = 5", target_alias="t", source_alias="s",
                           source_schema=source)
    assert mixed.filter is None and "string and integer families" in mixed.dropped[0]
    unknown = pruning_filter(SCHEMA, "t.id = s.id AND t.p = 'a'", target_alias="t", source_alias=None,
                             source_schema=source)
    assert unknown.filter is None


def test_a_condition_binds_to_the_partition_columns_only_when_it_names_no_other_column():
    partitions = pa.schema([("p", pa.string())])
    assert binds_to(partitions, "p = 'a' OR p IS NULL")
    assert binds_to(partitions, "t.p = 'a'", alias="t")
    assert not binds_to(partitions, "p = 'a' AND id > 1")
    assert not binds_to(partitions, "P = 'a'")


# --- the rewrite task ------------------------------------------------------------------------------------

TABLE = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rewrite_task(uri: str, *, expected: list[int | None], repeats_allowed: bool = False) -> RewriteTask:
    return RewriteTask(table_path=uri, options=StorageOptions.resolve({}), schema=TABLE, partition_by=[],
                       job_id="job-1", clauses=[ClauseKind("matched", "update"), ClauseKind("matched", "delete")],
                       expected_rows=expected, change_data=False, has_preimage=False, repeats_allowed=repeats_allowed)


def rows(file: int | None, numbers: list[int | None], actions: list[int]) -> pa.Table:
    return pa.table({FILE: pa.array([file] * len(numbers), pa.int32()), ROW: pa.array(numbers, pa.int64()),
                     ACTION: pa.array(actions, pa.int32()),
                     out_column(0): pa.array([n if n is not None else 100 for n in numbers], pa.int64()),
                     out_column(1): pa.array([f"v{n}" for n in numbers])})


def uploads(uri: str) -> list:
    return open_object_store(uri).list_uploads(TableUri.parse(uri).key(""))


def test_a_rewrite_task_writes_the_files_holding_a_changed_row_and_the_inserts(memory_uri):
    task = rewrite_task(memory_uri, expected=[3, 2, 2])
    data, changes, report = task.run([rows(0, [0, 1], [-1, 0]), rows(0, [2], [1]), rows(1, [0, 1], [-1, -1]),
                                      rows(None, [None], [0]), rows(2, [1, 0], [1, 1])], partition=3, attempt=0)
    assert changes is None and data.task_id == 6
    assert report.touched == [0, 2] and report.clause_rows == [2, 3] and report.copied == 1
    assert sum(f.num_records for f in data.files) == 3  # file 0: 0 copied, 1 updated; the insert; file 2: gone


@pytest.mark.parametrize(("batches", "message"), [
    ([rows(0, [0, 1], [0, 0]), rows(1, [0], [0]), rows(0, [2], [0])], "reached rewrite task job-1 apart"),
    ([rows(0, [0], [0])], "received 1 row\\(s\\) of candidate file 0"),
    ([rows(0, [1, 2], [0, 0])], "numbered 1.."),
])
def test_a_rewrite_task_refuses_to_write_part_of_a_file(memory_uri, batches, message):
    task = rewrite_task(memory_uri, expected=[2, 1])
    with pytest.raises(RuntimeError, match=message):
        task.run(batches, partition=0, attempt=0)
    assert uploads(memory_uri) == []


def test_target_rows_matched_twice_are_reported_and_nothing_is_staged(memory_uri):
    data, _, report = rewrite_task(memory_uri, expected=[3]).run([rows(0, [0, 1, 1, 2, 2], [0, 0, 0, 0, 1])],
                                                                 partition=0, attempt=0)
    assert report.repeated == 2 and data.files == [] and uploads(memory_uri) == []
    data, _, report = rewrite_task(memory_uri, expected=[3], repeats_allowed=True).run(
        [rows(0, [0, 1, 1, 2], [-1, 1, 1, -1])], partition=0, attempt=0)
    assert report.repeated == 0 and report.clause_rows == [0, 1] and report.copied == 2
    assert sum(f.num_records for f in data.files) == 2


def from_file_task(memory_uri, table: pa.Table, *, change_data: bool) -> RewriteTask:
    """``table`` written as one file, and a rewrite task over it for a MERGE with an updating and a deleting
    matched clause that carried only ``id`` into Spark: ``v`` is assigned by the update alone, ``w`` by no
    clause (both taken from the file)."""
    from spark_integration.dml.job import file_reader
    from table import Table, write_table

    write_table(memory_uri, table)
    snapshot = Table(memory_uri).snapshot
    return RewriteTask(table_path=memory_uri, options=StorageOptions.resolve({}), schema=table.schema, partition_by=[],
                       job_id="job-1", clauses=[ClauseKind("matched", "update"), ClauseKind("matched", "delete")],
                       expected_rows=[table.num_rows], change_data=change_data, has_preimage=change_data,
                       repeats_allowed=False, copies=file_reader(snapshot, StorageOptions.resolve({})),
                       files=snapshot.files, from_file={1: (0,), 2: ()})


def test_a_rewrite_task_takes_the_columns_spark_did_not_carry_from_the_file(memory_uri):
    """A MERGE carries into Spark only the target columns its conditions and values name: a received row
    takes the file's value of the others unless its clause assigns the column; its preimage is the file's."""
    from table.data.staging import CHANGE_TYPE
    from table.data.uploads import complete_pending

    def read_pending_rows(pending) -> pa.Table:
        objects = open_object_store(memory_uri)
        complete_pending(objects, [pending])
        return pa.concat_tables(pq.read_table(pa.BufferReader(objects.get(f.key))) for f in pending.files)

    table = pa.table({"id": pa.array([0, 1, 2, 3], pa.int64()), "v": ["a", "b", "c", "d"],
                      "w": pa.array([10.0, 11.0, None, 13.0])})
    task = from_file_task(memory_uri, table, change_data=True)
    null_string, null_double = pa.nulls(3, pa.string()), pa.nulls(3, pa.float64())
    received = pa.table({FILE: pa.array([0, 0, 0], pa.int32()), ROW: pa.array([1, 2, 3], pa.int64()),
                         ACTION: pa.array([0, -1, 1], pa.int32()),  # updated, matched and left, deleted
                         out_column(0): pa.array([1, 2, 3], pa.int64()),
                         out_column(1): pa.array(["new", None, None]), out_column(2): null_double,
                         pre_column(0): pa.array([1, 2, 3], pa.int64()), pre_column(1): null_string,
                         pre_column(2): null_double})
    data, changes, report = task.run([received], partition=0, attempt=0)
    assert report.touched == [0] and report.clause_rows == [1, 1] and report.copied == 2
    expected = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "v": ["a", "new", "c"],
                         "w": pa.array([10.0, 11.0, None])})
    assert read_pending_rows(data).sort_by("id").equals(expected)
    changed = read_pending_rows(changes).sort_by([(CHANGE_TYPE, "ascending"), ("id", "ascending")])
    assert changed.to_pylist() == [
        {"id": 3, "v": "d", "w": 13.0, CHANGE_TYPE: "delete"},
        {"id": 1, "v": "new", "w": 11.0, CHANGE_TYPE: "update_postimage"},
        {"id": 1, "v": "b", "w": 11.0, CHANGE_TYPE: "update_preimage"},
    ]


@pytest.mark.parametrize("deleting", [True, False])
def test_without_change_data_a_rewrite_takes_unassigned_columns_from_the_file_as_they_are(memory_uri, deleting):
    """Without change data a rewritten file's columns that no clause assigns are written as the file holds
    them (no copy of the received rows' values), and a file that loses no row is written whole: the file
    written is still every kept row with its clause's values, as computed here by hand."""
    from table.data.uploads import complete_pending

    table = pa.table({"id": pa.array([0, 1, 2, 3, 4], pa.int64()), "v": ["a", "b", "c", "d", "e"],
                      "w": pa.array([10.0, 11.0, None, 13.0, 14.0])})
    task = from_file_task(memory_uri, table, change_data=False)
    actions = [0, -1, 1 if deleting else 0, 0]  # rows 1..4: updated, matched and left, deleted or updated, updated
    received = pa.table({FILE: pa.array([0] * 4, pa.int32()), ROW: pa.array([1, 2, 3, 4], pa.int64()),
                         ACTION: pa.array(actions, pa.int32()),
                         out_column(0): pa.array([1, 2, 3, 4], pa.int64()),
                         out_column(1): pa.array(["new1", None, None if deleting else "new3", "new4"]),
                         out_column(2): pa.nulls(4, pa.float64())})
    data, changes, report = task.run([received], partition=0, attempt=0)
    assert changes is None and report.touched == [0]
    assert report.clause_rows == ([2, 1] if deleting else [3, 0]) and report.copied == 2
    objects = open_object_store(memory_uri)
    complete_pending(objects, [data])
    written = pa.concat_tables(pq.read_table(pa.BufferReader(objects.get(f.key))) for f in data.files)
    expected = [{"id": 0, "v": "a", "w": 10.0}, {"id": 1, "v": "new1", "w": 11.0}, {"id": 2, "v": "c", "w": None},
                {"id": 3, "v": "new3", "w": 13.0}, {"id": 4, "v": "new4", "w": 14.0}]
    if deleting:
        del expected[3]
    assert written.sort_by("id").to_pylist() == expected


def test_a_python_worker_freezes_what_it_imported_once_so_pyspark_s_collection_after_each_task_skips_it():
    """pyspark's reused worker runs gc.collect() after every task; every Python task of the Spark path freezes
    the objects alive at its first call (the imports), once per process: afterwards the collector tracks only
    what later tasks create.
    Run in a fresh interpreter, as a worker is (this process's collector is left alone)."""
    import subprocess
    import sys

    script = (
        "import gc\n"
        "from spark_integration import worker\n"
        "from spark_integration.dml import tasks  # what a DML task's worker imports\n"
        "assert gc.get_freeze_count() == 0\n"
        "worker.freeze_imports()\n"
        "first = gc.get_freeze_count()\n"
        "later = [[i] for i in range(1000)]\n"
        "worker.freeze_imports()\n"
        "print(first, gc.get_freeze_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    first, again = (int(n) for n in done.stdout.split())
    assert first > 10_000 and again == first  # the imports frozen, once; later objects stay collectable


# --- the deadline ----------------------------------------------------------------------------------------


def test_a_change_staged_by_a_job_elsewhere_is_not_timed_out_by_the_job(s3_uri, storage_options):
    """A Spark MERGE's jobs take minutes on a big table; ``execute(staging_timed=False)`` (what the Spark
    operations use) keeps them out of ``DYNACOMMIT_TIMEOUT_SECONDS``, which then bounds the commit."""
    import time

    from table import CommitTimeoutError, DeadlineExceededError, Table, write_table
    from table.operations import delete as python_delete
    from table.operations.rewrite import execute

    options = dict(storage_options, DYNACOMMIT_TIMEOUT_SECONDS="2")
    write_table(s3_uri, pa.table({"id": pa.array([1, 2, 3], pa.int64())}), storage_options=options)

    def slow(table):
        def stage(txn, job_id):  # one attempt, in the transaction execute opened
            time.sleep(2.5)  # longer than the deadline
            return python_delete.stage(txn, "id = 2", job_id)
        return stage

    table = Table(s3_uri, storage_options=options)
    with pytest.raises((CommitTimeoutError, DeadlineExceededError)):
        execute(table, "DELETE", slow(table))
    table = Table(s3_uri, storage_options=options)
    assert table.version == 0
    result = execute(table, "DELETE", slow(table), staging_timed=False)
    assert result.version == 1 and result.metrics["numDeletedRows"] == "1"
    assert sorted(Table(s3_uri, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == [1, 3]
