"""Operations run in a :class:`table.transaction.Transaction`: it records what the operation reads as it
reads it, commits once through the one commit path, and tells the Table that opened it; nothing else
moves the Table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError
from table import Table, write_table
from table.log.actions import AddFile
from table.log.commit import ReadKind
from table.log.snapshot import read_commit
from table.operations import delete as delete_op
from table.operations import scan
from table.operations.rewrite import execute
from table.transaction import Transaction
from tests.support.tables import with_rival


def rows(ids, p="a"):
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids))})


def test_a_delete_records_the_files_it_read_in_its_transaction_and_commits_them(memory_uri):
    write_table(memory_uri, rows([1, 2, 3]))
    write_table(memory_uri, rows([10, 11]))
    table = Table(memory_uri)
    seen: list[Transaction] = []

    def stage(txn, job_id):
        seen.append(txn)
        return delete_op.stage(txn, "id >= 10", job_id)

    result = execute(table, "DELETE", stage)
    (txn,) = seen
    scope = txn.read_scope
    second = next(a for a in read_commit(table.log_store, 1) if isinstance(a, AddFile))
    # statistics rule out the first file: the delete read only the second, and says so
    assert scope.kind is ReadKind.PREDICATE and scope.files == frozenset([second.path])
    assert result.version == 2 and table.version == 2  # the Table followed its transaction
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]


def test_reads_of_several_kinds_are_judged_as_a_read_of_the_whole_table(memory_uri):
    write_table(memory_uri, rows([1, 2]), partition_by=["p"])
    txn = Table(memory_uri).transaction()
    assert txn.read_scope.kind is ReadKind.NOTHING  # a blind append until something is read
    txn.read_partitions([{"p": "a"}])
    txn.read_partitions([{"p": "b"}])
    assert txn.read_scope.kind is ReadKind.PARTITIONS and len(txn.read_scope.partitions) == 2
    txn.read_files(["x.parquet"])
    assert txn.read_scope.kind is ReadKind.WHOLE_TABLE


def test_two_predicate_reads_cover_what_either_would_see(memory_uri):
    write_table(memory_uri, rows([1, 2, 3]))
    txn = Table(memory_uri).transaction()
    low = scan.read(txn, pa.compute.field("id") < 2, ["id"], predicate="id < 2")
    txn.read_predicate((), lambda add: add.path == "only-this.parquet", "elsewhere")
    scope = txn.read_scope
    assert scope.kind is ReadKind.PREDICATE and scope.files == frozenset(f.path for f in low.files)
    assert scope.matcher(AddFile(path="only-this.parquet", partition_values={}, size=1, modification_time=0,
                                 data_change=True))


def test_a_transaction_moves_to_the_newest_version_only_before_it_reads(memory_uri):
    write_table(memory_uri, rows([1]))
    table = Table(memory_uri)
    txn = table.transaction()
    write_table(memory_uri, rows([2]))
    assert txn.refresh().version == 1 and table.version == 1  # the Table follows what its transaction read
    txn.read_whole_table()
    with pytest.raises(InvalidArgumentError, match="only before it reads"):
        txn.refresh()


def test_a_re_plan_runs_in_a_new_transaction_on_the_newest_version(memory_uri):
    write_table(memory_uri, rows([1, 2, 3]))
    table = Table(memory_uri)
    seen: list[Transaction] = []

    def stage(txn, job_id):
        seen.append(txn)
        return delete_op.stage(txn, "id = 2", job_id)

    # a rival removes every file the first plan read, between its staging and its commit: a conflict
    result = with_rival(lambda: Table(memory_uri).delete("id >= 1") and write_table(memory_uri, rows([2, 5])),
                        lambda: execute(table, "DELETE", stage))
    assert len(seen) == 2 and seen[0] is not seen[1]
    assert [t.snapshot.version for t in seen] == [0, 2]
    assert seen[0].outcome is None and seen[1].outcome is not None and seen[1].outcome.version == 3
    assert result.metrics["numReplans"] == "1"
    assert sorted(Table(memory_uri).to_pyarrow_table()["id"].to_pylist()) == [5]
    assert table.version == 3


def test_a_transaction_commits_at_most_once(memory_uri):
    write_table(memory_uri, rows([1, 2]))
    table = Table(memory_uri)
    txn = table.transaction()
    delete_op.delete(txn, "id = 1")
    assert txn.outcome is not None and table.version == 1
    with pytest.raises(InvalidArgumentError, match="committed already"):
        delete_op.delete(txn, "id = 2")


def test_an_operation_on_a_handle_behind_the_table_plans_again_on_the_newest_version(memory_uri):
    # The first plan is staged on the handle's version while the newest is read; a newer version replaces
    # that plan before anything is committed (not a conflict: no re-plan is counted), and its deletion
    # vector file goes.
    write_table(memory_uri, rows([1, 2, 3]), configuration={"delta.enableDeletionVectors": "true"})
    table = Table(memory_uri)
    write_table(memory_uri, rows([4, 5]))  # another handle: version 1, which the table does not hold
    planned: list[int] = []

    def stage(txn, job_id):
        planned.append(txn.snapshot.version)
        return delete_op.stage(txn, "id % 2 = 0", job_id)

    result = execute(table, "DELETE", stage)
    assert planned == [0, 1]
    assert result.version == 2 and result.metrics["numReplans"] == "0"
    assert result.metrics["numDeletedRows"] == "2"
    assert sorted(Table(memory_uri).to_pyarrow_table()["id"].to_pylist()) == [1, 3, 5]
    vectors = [o.key for o in table.objects.list(table.uri.key("")) if "deletion_vector_" in o.key]
    in_use = {a.deletion_vector.path_or_inline_dv for a in Table(memory_uri).add_actions()
              if a.deletion_vector is not None}
    assert len(vectors) == 1 and len(in_use) == 1  # the dropped plan's vector file is gone


def test_a_predicate_on_a_column_added_since_the_handle_was_opened_runs_on_the_newest_version(memory_uri):
    # The plan on the handle's version fails (no such column); the newest version has it: the operation
    # runs there, as it would have had it read the newest version first.
    write_table(memory_uri, rows([1, 2]))
    table = Table(memory_uri)
    write_table(memory_uri, pa.table({"id": pa.array([3, 4], pa.int64()), "p": ["a", "a"],
                                      "note": ["keep", "drop"]}), schema_mode="merge")
    result = table.delete("note = 'drop'")
    assert result.metrics["numDeletedRows"] == "1" and result.metrics["numReplans"] == "0"
    assert sorted(Table(memory_uri).to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]
    with pytest.raises(InvalidArgumentError, match="missing"):
        table.delete("missing = 1")  # a column no version has: the plan's own error
