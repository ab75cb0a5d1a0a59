"""RESTORE against deltalake's (issue 25, item 3): on two tables that deltalake built with the same history,
deltalake restores one and we restore the other; the rows, the file counts and Delta's metrics agree, and
deltalake reads the table we restored. The CLI restores only with ``--execute``."""

from __future__ import annotations

import json

import deltalake
import pyarrow as pa

from table import Table
from table.cli import main
from tests.support.dml_reference import rows_of
from tests.support.fault_harness import deltalake_options


def build(uri: str, options: dict[str, str]) -> None:
    """Versions 0-3: two appends, a delete, an append (deltalake writes every one)."""
    deltalake.write_deltalake(uri, pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"]}), partition_by=["p"],
                              storage_options=options)
    deltalake.write_deltalake(uri, pa.table({"id": [4], "p": ["b"]}), mode="append", storage_options=options)
    deltalake.DeltaTable(uri, storage_options=options).delete("id = 1")
    deltalake.write_deltalake(uri, pa.table({"id": [5], "p": ["c"]}), mode="append", storage_options=options)


def test_our_restore_does_what_deltalakes_does_and_deltalake_reads_it(s3_uri, storage_options):
    options = deltalake_options(storage_options)
    ours_uri, theirs_uri = s3_uri + "-ours", s3_uri + "-theirs"
    build(ours_uri, options)
    build(theirs_uri, options)
    their_metrics = deltalake.DeltaTable(theirs_uri, storage_options=options).restore(1)
    result = Table(ours_uri, storage_options=storage_options).restore(1)
    assert result.version == 4
    assert (int(result.metrics["numRestoredFiles"]), int(result.metrics["numRemovedFiles"])) == (
        their_metrics["numRestoredFile"], their_metrics["numRemovedFile"])
    ours_read = deltalake.DeltaTable(ours_uri, storage_options=options)
    theirs_read = deltalake.DeltaTable(theirs_uri, storage_options=options)
    assert ours_read.version() == theirs_read.version() == 4
    assert rows_of(pa.table(ours_read.to_pyarrow_table()).select(["id", "p"])) == rows_of(
        pa.table(theirs_read.to_pyarrow_table()).select(["id", "p"])) == rows_of(
        pa.table({"id": [1, 2, 3, 4], "p": ["a", "a", "b", "b"]}))
    assert len(ours_read.file_uris()) == len(theirs_read.file_uris())
    assert ours_read.history(1)[0]["operation"] == "RESTORE"


def test_the_cli_restores_only_with_execute(s3_uri, storage_options, capsys):
    options = deltalake_options(storage_options)
    build(s3_uri, options)
    flags = [arg for key, value in storage_options.items() for arg in ("--option", f"{key}={value}")]
    assert main(["restore", s3_uri, "--version", "0", "--json", *flags]) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[0])
    assert plan["dryRun"] is True and plan["targetVersion"] == 0 and plan["version"] == 3
    assert Table(s3_uri, storage_options=storage_options).version == 3
    assert main(["restore", s3_uri, "--version", "0", "--execute", "--json", *flags]) == 0
    done = json.loads(capsys.readouterr().out.splitlines()[0])
    assert done["committed"] is True and done["version"] == 4
    assert done["metrics"]["numRestoredFiles"] == str(len(plan["restoredFiles"]))
    assert rows_of(Table(s3_uri, storage_options=storage_options).to_pyarrow_table().select(["id", "p"])) == rows_of(
        pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"]}))
    assert main(["restore", s3_uri, "--json", *flags]) != 0
    assert "give --version N or --timestamp WHEN" in capsys.readouterr().err
