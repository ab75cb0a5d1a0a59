"""RESTORE (issue 25, item 3): the newest version holds what the target version held, in one commit.

The expected rows, schema and files of each restore are those of a time-travel read of the target version
(``Table(uri, version=N)``), a path read independently of the restore's own plan; the metrics are set
differences of the two versions' file lists.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from logstore.errors import InvalidArgumentError, VersionNotFoundError
from table import Table, write_table
from table.errors import DataFileMissingError
from table.log.actions import AddFile, RemoveFile
from table.log.snapshot import read_commit
from tests.support.dml_reference import rows_of
from tests.support.tables import with_rival


def rows(ids, p="a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids))})


def history_of_four(uri) -> None:
    write_table(uri, rows([1, 2]), partition_by=["p"])            # 0
    write_table(uri, rows([3], "b"))                               # 1
    Table(uri).delete("id = 1")                                    # 2: rewrites partition a
    write_table(uri, rows([7, 8], "c"), mode="overwrite")          # 3: removes everything


def paths(table: Table) -> set[str]:
    return {f.path for f in table.add_actions()}


@pytest.mark.parametrize("target", [0, 1, 2])
def test_restore_gives_the_rows_and_files_of_the_target_version(memory_uri, target):
    history_of_four(memory_uri)
    then = Table(memory_uri, version=target)
    now = Table(memory_uri)
    result = now.restore(target)
    assert result.version == 4 and now.version == 4
    after = Table(memory_uri)
    assert rows_of(after.to_pyarrow_table()) == rows_of(then.to_pyarrow_table())
    assert paths(after) == paths(then)
    restored, removed = paths(then) - paths(Table(memory_uri, version=3)), paths(Table(memory_uri, version=3)) - paths(then)
    m = result.metrics
    assert (m["numRestoredFiles"], m["numRemovedFiles"], m["numOfFilesAfterRestore"]) == (
        str(len(restored)), str(len(removed)), str(len(paths(then))))
    assert m["tableSizeAfterRestore"] == str(sum(f.size for f in then.add_actions()))
    entry = after.history(1)[0]
    assert entry.operation == "RESTORE" and entry.operation_parameters["version"] == str(target)
    actions = read_commit(after.log_store, 4)
    assert all(a.data_change for a in actions if isinstance(a, (AddFile, RemoveFile)))


def test_restoring_what_the_table_holds_commits_nothing(memory_uri):
    write_table(memory_uri, rows([1]))
    write_table(memory_uri, rows([1]), mode="overwrite")
    write_table(memory_uri, rows([2]))
    table = Table(memory_uri)
    table.delete("id = 2")  # version 3 holds the files of version 1 again
    result = table.restore(1)
    assert result.version == 3 and Table(memory_uri).version == 3


def test_restore_brings_back_the_schema_and_properties(memory_uri):
    write_table(memory_uri, rows([1]))
    write_table(memory_uri, pa.table({"id": [2], "p": ["a"], "extra": ["x"]}), schema_mode="merge")
    Table(memory_uri).alter.set_table_properties({"delta.appendOnly": "false"})
    Table(memory_uri).restore(0)
    after = Table(memory_uri)
    assert after.schema == Table(memory_uri, version=0).schema
    assert after.metadata().configuration == Table(memory_uri, version=0).metadata().configuration
    assert rows_of(after.to_pyarrow_table()) == rows_of(rows([1]))


def test_restore_by_timestamp_picks_the_version_time_travel_picks(memory_uri):
    write_table(memory_uri, rows([1]))
    write_table(memory_uri, rows([2]))
    moment = dt.datetime.fromtimestamp(Table(memory_uri).history()[0].timestamp / 1000, dt.timezone.utc)
    write_table(memory_uri, rows([3]))
    Table(memory_uri).restore(moment.isoformat())
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(
        Table(memory_uri, timestamp=moment).to_pyarrow_table())


def test_bad_targets_are_refused_naming_the_problem(memory_uri):
    write_table(memory_uri, rows([1]))
    with pytest.raises(InvalidArgumentError, match="newest version is 0"):
        Table(memory_uri).restore(5)
    with pytest.raises(InvalidArgumentError, match="versions start at 0"):
        Table(memory_uri).restore(-1)
    with pytest.raises(TypeError):
        Table(memory_uri).restore(None)
    with pytest.raises(VersionNotFoundError):
        Table(memory_uri).restore("1999-01-01T00:00:00Z")


def test_files_vacuumed_since_are_refused_or_left_out_on_request(memory_uri):
    write_table(memory_uri, rows([1, 2]))
    write_table(memory_uri, rows([3], "b"))
    write_table(memory_uri, rows([9]), mode="overwrite")
    table = Table(memory_uri)
    gone = table.vacuum(0, dry_run=False, enforce_retention_duration=False)
    assert len(gone) == 2
    with pytest.raises(DataFileMissingError, match="2 of its files are gone") as caught:
        table.restore(1)
    assert "ignore_missing_files=True" in str(caught.value)
    assert Table(memory_uri).version == 2  # nothing was committed
    result = table.restore(1, ignore_missing_files=True)
    assert result.metrics["numRestoredFiles"] == "0" and result.metrics["numRemovedFiles"] == "1"
    assert Table(memory_uri).to_pyarrow_table().num_rows == 0


@pytest.mark.parametrize("configuration", [None, {"delta.isolationLevel": "Serializable"}],
                         ids=["write-serializable", "serializable"])
def test_a_restore_racing_an_append_plans_again_and_holds_exactly_the_target(memory_uri, configuration):
    """RESTORE updates the metadata (as Delta's does), so a concurrent append conflicts with it at either
    isolation level: it is planned again on the newest version and removes the appended file too (the
    serial order: the append, then the restore). Delta's RESTORE fails instead of re-planning."""
    write_table(memory_uri, rows([1]), configuration=configuration)
    write_table(memory_uri, rows([2]))
    result = with_rival(lambda: write_table(memory_uri, rows([5])), lambda: Table(memory_uri).restore(0))
    assert result.metrics["numReplans"] == "1"
    assert rows_of(Table(memory_uri).to_pyarrow_table()) == rows_of(rows([1]))
    assert result.metrics["numRemovedFiles"] == "2"
