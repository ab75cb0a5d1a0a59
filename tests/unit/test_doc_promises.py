"""What README.md, the user guide and the operations guide promise a user who acts on them is what the code
does (issue 27, item 8). Each test reads the claim from the doc's text and checks it against the code or
against behaviour, so a change of behaviour fails here instead of silently making a doc false:

- the command line: every command the README lists exists with exactly the flags shown; the commands the
  operations guide calls dry runs unless ``--execute`` are exactly those that change something; the exit
  statuses it lists are the command's;
- defaults: every default the guides state (storage options, retention, ages, sizes) is the code's;
- errors: every error of the operations guide's table is raised in the situation its row describes (run
  here on in-memory tables), or is pinned by a named fault or Spark test that raises it;
- conflict rules: what the user guide says about an overwrite racing an append, a delete or a schema change,
  at each isolation level, is what a race made at will does;
- refusals: every feature the user guide's feature table marks refused for writes (or reads) is refused
  with ``UnsupportedFeatureError`` naming it; the operations it says an append-only table refuses are
  refused before anything is written, those it allows commit, and a refusal only the commit can know
  carries the sentence it quotes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from logstore import StorageOptions, open_log_store
from logstore.deadline import DEFAULT_TIMEOUT_SECONDS
from logstore.external import DEFAULT_EXPIRE_SECONDS
from logstore.sweep import DEFAULT_SWEEP_AGE_SECONDS
from table import CommitConflictError, Table, write_table
from table.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNEXPECTED
from table.cli.args import build_parser
from table.cli.commands import COMMANDS, GROUPS
from table.log import properties
from table.log.commit import IsolationLevel
from table.maintenance.vacuum import MIN_RETENTION_HOURS
from table.operations.optimize import DEFAULT_TARGET_SIZE
from table.table import forget_snapshots
from tests.support.tables import with_rival
from tests.unit.test_docs import ROOT, section

README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
GUIDE = ROOT / "docs" / "user-guide.md"


def prose(path: Path, heading: str | None = None) -> str:
    """The text of ``path`` (or of one of its sections) with line breaks folded, for sentence matching."""
    text = section(path, heading) if heading else path.read_text()
    return " ".join(text.split())


# --- the command line --------------------------------------------------------------------------------


def readme_commands() -> dict[str, set[str]]:
    block = README.read_text().split("## Command line", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    documented = {}
    for line in block.splitlines():
        usage = line.split("#")[0].replace("[", " ").replace("]", " ").split()
        words = [w for w in usage[1:] if w.islower() and not w.startswith("-")]
        documented[" ".join(words)] = {w for w in usage if w.startswith("--")}
    return documented


def test_every_command_the_readme_lists_exists_with_the_flags_shown():
    """Every changing command also takes --dry-run, which the block leaves out and the paragraph under it
    names; every other flag shown is the command's, and every flag of the command is shown."""
    documented = readme_commands()
    assert set(documented) == {c.name for c in COMMANDS}
    for command in COMMANDS:
        assert documented[command.name] | ({"--dry-run"} if command.changes else set()) == command.flags, command.name
    assert "with `--dry-run`, the same" in prose(README, "## Command line")


def test_the_readme_shows_execute_on_exactly_the_commands_that_change_something():
    documented = readme_commands()
    assert {name for name, flags in documented.items() if "--execute" in flags} == {c.name for c in COMMANDS if c.changes}


def required(command) -> list[str]:
    """The arguments ``command`` cannot go without, with placeholder values."""
    argv = []
    for argument in command.args:
        if argument.flags == ("uri",) and argument.options.get("nargs") != "?":
            argv.append("s3://bucket/table")
        elif argument.options.get("required"):
            argv += [argument.flags[0], "x"]
    return argv


def test_execute_and_dry_run_parse_on_every_changing_command_and_never_together(capsys):
    parser = build_parser(COMMANDS, GROUPS, description="")
    for command in COMMANDS:
        if command.changes:
            argv = [*command.name.split(), *required(command)]
            assert parser.parse_args(argv).execute is False
            assert parser.parse_args([*argv, "--execute"]).execute is True
            assert parser.parse_args([*argv, "--dry-run"]).execute is False
            with pytest.raises(SystemExit):
                parser.parse_args([*argv, "--execute", "--dry-run"])
            assert "not allowed with argument" in capsys.readouterr().err


def _listed(text: str) -> set[str]:
    return set(re.findall(r"`([a-z][a-z-]*(?: [a-z]+)?)`", text))


def test_the_operations_guide_names_the_dry_run_commands_and_those_that_acted_before():
    bullet = prose(OPERATIONS, "## Command line").split("**Dry runs.**", 1)[1].split("- **", 1)[0]
    changing = bullet.split("(", 1)[1].split(")", 1)[0]
    assert _listed(changing) == {c.name for c in COMMANDS if c.changes}
    before = bullet.split("`--execute` finishes it.", 1)[1].split("used to act", 1)[0]
    assert _listed(before) == {c.name for c in COMMANDS if c.acted_by_default}
    readme = prose(README, "## Command line").split("acted at once before", 1)[0].rsplit("otherwise make.", 1)[1]
    assert _listed(readme) == {c.name for c in COMMANDS if c.acted_by_default}


def test_the_exit_statuses_the_operations_guide_lists_are_the_commands():
    bullet = prose(OPERATIONS, "## Command line").split("**Exit status.**", 1)[1].split("- **", 1)[0]
    stated = {int(n) for n in re.findall(r"(?:^|; )(\d+) ", bullet.strip())}
    assert stated == {EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_UNEXPECTED, EXIT_INTERRUPTED}


# --- defaults ----------------------------------------------------------------------------------------


def test_the_storage_option_defaults_in_the_operations_guide_are_the_codes(monkeypatch):
    for key in ("DELTA_DYNAMO_TABLE_NAME", "DYNACOMMIT_TIMEOUT_SECONDS", "DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS",
                "DYNACOMMIT_COMMIT_ACK", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(key, raising=False)
    rows = {}
    for line in section(OPERATIONS, "## Deploying").splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1].strip("`")
    resolved = StorageOptions.resolve({})
    assert rows["DELTA_DYNAMO_TABLE_NAME"] == resolved.ddb_table_name
    assert float(rows["DYNACOMMIT_TIMEOUT_SECONDS"]) == (resolved.timeout_seconds or DEFAULT_TIMEOUT_SECONDS)
    assert float(rows["DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS"]) == resolved.stuck_entry_grace_seconds
    assert rows["DYNACOMMIT_COMMIT_ACK"] == resolved.commit_ack
    assert rows["AWS_ALLOW_HTTP"] == "false" and not resolved.allow_http


def _default(command: str, flag: str):
    parser = build_parser(COMMANDS, GROUPS, description="")
    return getattr(parser.parse_args([*command.split(), "s3://bucket/table"]), flag.lstrip("-").replace("-", "_"))


def test_the_maintenance_defaults_the_operations_guide_states_are_the_codes():
    text = prose(OPERATIONS, "## TTL, items and cleanup")
    hours = re.search(r"`delta.deletedFileRetentionDuration` \((\d+) hours", text)
    assert float(hours.group(1)) == MIN_RETENTION_HOURS == properties.DEFAULT_TOMBSTONE_RETENTION_MS / 3_600_000
    assert _default("vacuum", "--retention-hours") is None  # the table's property decides
    days = re.search(r"`delta.logRetentionDuration` \((\d+) days unless set\)", text)
    assert int(days.group(1)) * 86_400_000 == properties.DEFAULT_LOG_RETENTION_MS
    abort = re.search(r"abort older than (\d+) h by default", text)
    assert float(abort.group(1)) == _default("uploads abort", "--older-than-hours")
    assert "older than an hour, `--temp-age-hours`" in text
    assert _default("recover", "--temp-age-hours") == 1.0 == DEFAULT_SWEEP_AGE_SECONDS / 3600
    target = re.search(r"`--target-size` \(the table's `delta.targetFileSize`\s+unless given, else (\d+) MiB\)", text)
    assert int(target.group(1)) * 2**20 == DEFAULT_TARGET_SIZE
    assert _default("optimize", "--target-size") is None  # the table's property decides
    expire = re.search(r"Items get `expireTime` = completion \+ 1 day", text)
    assert expire and DEFAULT_EXPIRE_SECONDS == 86_400


def test_the_stream_and_table_defaults_the_user_guide_states_are_the_codes():
    from spark_integration.options import DELTA_STREAM_DEFAULT_MAX_FILES

    text = prose(GUIDE)
    assert int(re.search(r"`maxFilesPerTrigger` \(default (\d+)\)", text).group(1)) == DELTA_STREAM_DEFAULT_MAX_FILES
    isolation = re.search(r"`delta.isolationLevel` \(`Serializable` or `(\w+)`, the default\)", text).group(1)
    assert IsolationLevel.of({}).value == isolation


# --- errors: raised in the situation their row describes ----------------------------------------------


def data(days=("a", "b"), n=(1, 2)) -> pa.Table:
    return pa.table({"day": pa.array(list(days)), "n": pa.array(list(n), pa.int64())})


def made(uri: str, **kwargs) -> str:
    write_table(uri, data(), partition_by=["day"], **kwargs)
    return uri


def _raw_commit(uri: str, version: int, body: bytes) -> None:
    open_log_store(uri).write(version, body)


def _deleted_from_s3(uri: str) -> Table:
    from logstore.external import PUBLISHED

    store = open_log_store(made(uri))
    PUBLISHED.wait_all()  # the commit's entry is marked complete just after write_table returned
    store.objects.delete([o.key for o in store.objects.list(store.uri.key(""))])
    forget_snapshots()
    return Table(uri)


def _data_file_gone(uri: str) -> pa.Table:
    table = Table(made(uri))
    table.objects.delete([table.uri.key(table.snapshot.files[0].path)])
    return Table(uri).to_pyarrow_table()


def _data_file_garbage(uri: str) -> pa.Table:
    table = Table(made(uri))
    add = table.snapshot.files[0]
    table.objects.put(table.uri.key(add.path), b"\0" * add.size)
    return Table(uri).to_pyarrow_table()


def _overwrite_racing_a_delete(uri: str):
    made(uri)
    return with_rival(lambda: Table(uri).delete("day = 'a'"),
                      lambda: write_table(uri, data(["a"], [9]), mode="overwrite", partition_overwrite="dynamic"))


def _feature_table(uri: str, *, writer: list[str], reader: list[str] | None = None,
                   column_metadata: dict | None = None) -> str:
    """A table created by a raw commit: a ``long`` column ``n`` (with ``column_metadata``), writer version 7
    listing ``writer``, and reader version 3 listing ``reader`` if given."""
    _raw_commit(uri, 0, _feature_commit(writer=writer, reader=reader, column_metadata=column_metadata))
    return uri


def _feature_commit(*, writer: list[str], reader: list[str] | None = None, column_metadata: dict | None = None,
                    configuration: dict[str, str] | None = None) -> bytes:
    """The body of :func:`_feature_table`'s commit, with table properties ``configuration``."""
    protocol = {"minReaderVersion": 3 if reader else 1, "minWriterVersion": 7, "writerFeatures": writer,
                **({"readerFeatures": reader} if reader else {})}
    schema = json.dumps({"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": True,
                                                       "metadata": column_metadata or {}}]})
    body = "\n".join(json.dumps(a) for a in (
        {"commitInfo": {"operation": "CREATE TABLE"}}, {"protocol": protocol},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": schema,
                      "partitionColumns": [], "configuration": configuration or {}, "createdTime": 0}})) + "\n"
    return body.encode()


SCENARIOS = {
    "InvalidArgumentError": lambda uri: write_table(uri, data(), mode="sideways"),
    "ArgumentTypeError": lambda uri: write_table(uri, data(), partition_by="day"),
    "ConfigurationError": lambda uri: Table("gs://bucket/table"),
    "VersionExistsError": lambda uri: [_raw_commit(uri, 0, b'{"commitInfo":{}}\n') for _ in range(2)],
    "TableNotFoundError": lambda uri: Table(uri),
    "VersionNotFoundError": lambda uri: Table(made(uri), version=7),
    "TableExistsError": lambda uri: write_table(made(uri), data(), mode="error"),
    "ReadOnlySnapshotError": lambda uri: (made(uri), write_table(Table(uri, version=0), data())),
    "AppendOnlyError": lambda uri: Table(made(uri, configuration={"delta.appendOnly": "true"})).delete("n = 1"),
    "SchemaMismatchError": lambda uri: write_table(made(uri), pa.table({"day": ["a"], "n": ["one"]})),
    "UnsupportedTypeError": lambda uri: write_table(uri, pa.table({"t": pa.array([1], pa.time32("s"))})),
    "MergeCardinalityError": lambda uri: Table(made(uri)).merge(data(["a", "a"], [1, 1]), "target.n = source.n")
    .when_matched_update_all().execute(),
    "CommitConflictError": _overwrite_racing_a_delete,
    "CorruptLogError": lambda uri: (_raw_commit(uri, 0, b"this is not json\n"), Table(uri)),
    "CorruptDataError": _data_file_garbage,
    "DataFileMissingError": _data_file_gone,
    "UnsupportedFeatureError": lambda uri: write_table(_feature_table(uri, writer=["someFutureFeature"]),
                                                       pa.table({"n": pa.array([1], pa.int64())})),
}
"""Each error of the operations guide's table, made to happen as its row says (on an in-memory table)."""

COVERED_ELSEWHERE = {
    "AccessDeniedError": "tests/faults/test_lean_client.py",
    "StorageError": "tests/integration/test_table_reliability.py",
    "ThrottledError": "tests/unit/logstore/test_aws_errors.py",
    "AmbiguousError": "tests/faults/test_fault_proxy.py",
    "DeadlineExceededError": "tests/unit/logstore/test_deadlines.py",
    "CommitTimeoutError": "tests/unit/table/test_transaction.py",
    "CommitStateUnknownError": "tests/faults/test_fault_suite.py",
    "PendingSetError": "tests/unit/table/test_staging.py",
    "ChangeCommitError": "tests/spark/test_spark_datasource_units.py",
    "SparkJobError": "tests/spark/test_spark_task_failures.py",
    "ConstraintViolationError": "tests/unit/table/test_constraints.py",
}
"""Errors that need faults, a deadline or Spark to happen, and the test that makes each happen."""


def error_rows() -> list[str]:
    table = section(OPERATIONS, "## Errors")
    return [re.match(r"\| `(\w+)`", line).group(1) for line in table.splitlines() if re.match(r"\| `\w+`", line)]


def test_every_error_in_the_operations_guide_is_made_to_happen_by_a_test():
    rows = error_rows()
    assert set(rows) == set(SCENARIOS) | set(COVERED_ELSEWHERE)
    for name, path in COVERED_ELSEWHERE.items():
        assert re.search(rf"\b{name}\b", (ROOT / path).read_text()), f"{path} does not raise {name}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_error_is_raised_in_the_situation_its_row_describes(name, memory_uri):
    import table as package

    with pytest.raises(getattr(package, name)) as raised:
        SCENARIOS[name](memory_uri)
    assert type(raised.value).__name__ == name, f"{type(raised.value).__name__}: {raised.value}"


def test_a_table_deleted_from_s3_is_the_configuration_error_the_guide_describes(memory_uri):
    """The operations guide: reading a table whose S3 files were deleted while its items remain fails with a
    ConfigurationError that says so and names ``dynacommit drop-table URI --execute``."""
    text = prose(OPERATIONS, "## TTL, items and cleanup")
    assert "fails with a `ConfigurationError` that says the table was deleted from S3" in text
    import table as package

    with pytest.raises(package.ConfigurationError) as raised:
        _deleted_from_s3(memory_uri)
    assert "was deleted from S3" in str(raised.value)
    assert f"dynacommit drop-table {memory_uri} --execute" in str(raised.value)


# --- conflict rules -----------------------------------------------------------------------------------


def race(uri: str, rival, *, isolation: str | None):
    write_table(uri, data(), partition_by=["day"],
                configuration={"delta.isolationLevel": isolation} if isolation else None)
    try:
        with_rival(rival, lambda: write_table(uri, data(["a"], [9]), mode="overwrite", partition_overwrite="dynamic"))
    except CommitConflictError as conflict:
        return conflict.kind.value
    return "lands"


def test_an_overwrite_racing_an_append_behaves_as_the_user_guide_says(memory_uri):
    text = prose(GUIDE, "## Spark: batch")
    lands = re.search(r"an overwrite of a partition someone appended to meanwhile \*\*lands\*\* under the default "
                      r"isolation level, `(\w+)`", text)
    fails = re.search(r"fails with `CommitConflictError` \(`(\w+)`, naming the winning commit\) under "
                      r"`delta.isolationLevel=(\w+)`", text)
    assert lands and fails, "the user guide no longer states the rule this test checks"
    assert lands.group(1) == IsolationLevel.of({}).value
    append = lambda uri: lambda: write_table(uri, data(["a"], [5]))  # noqa: E731
    assert race(memory_uri, append(memory_uri), isolation=None) == "lands"
    assert sorted(Table(memory_uri).to_pyarrow_table().to_pylist(), key=lambda r: (r["day"], r["n"])) == [
        {"day": "a", "n": 5}, {"day": "a", "n": 9}, {"day": "b", "n": 2}]  # the append is ordered after
    other = memory_uri + "-serializable"
    assert race(other, append(other), isolation=fails.group(2)) == fails.group(1)


@pytest.mark.parametrize("isolation", [None, "Serializable"])
def test_an_overwrite_racing_a_removal_or_a_schema_change_fails_as_the_user_guide_says(memory_uri, isolation):
    text = prose(GUIDE, "## Spark: batch")
    removal = re.search(r"at either level an overwrite fails when a concurrent commit removed a file it replaces "
                        r"\([^:]*: `(\w+)` or `(\w+)`\) or changed the schema \(`(\w+)`\)", text)
    assert removal, "the user guide no longer states the rule this test checks"
    deleting = race(memory_uri, lambda: Table(memory_uri).delete("day = 'a'"), isolation=isolation)
    assert deleting in removal.group(1, 2)
    other = memory_uri + "-schema"
    widened = pa.table({"day": ["b"], "n": pa.array([3], pa.int64()), "note": ["new column"]})
    assert race(other, lambda: write_table(other, widened, schema_mode="merge"), isolation=isolation) == removal.group(3)


# --- refusals -----------------------------------------------------------------------------------------


def feature_rows() -> list[tuple[list[str], str, str]]:
    """(features, read cell, our-writes cell) of each row of the user guide's feature table."""
    found = []
    for line in section(GUIDE, "## Delta features: read, written, refused").splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`"):
            found.append((re.findall(r"`([\w-]+)`", cells[0]), cells[1], cells[2]))
    return found


REFUSED_FOR_WRITES = sorted(f for features, _, ours in feature_rows()
                            if ours.startswith("refused") and not ours.startswith("refused once") for f in features)
REFUSED_FOR_READS = sorted(f for features, read, _ in feature_rows() if read.startswith("refused") for f in features)


def test_the_feature_table_lists_refusals():
    assert "catalogManaged" in REFUSED_FOR_WRITES
    assert "catalogManaged" in REFUSED_FOR_READS


@pytest.mark.parametrize("feature", REFUSED_FOR_WRITES)
def test_every_feature_the_user_guide_refuses_for_writes_is_refused(feature, memory_uri):
    from table.errors import UnsupportedFeatureError
    from table.log.protocol import READER_FEATURES, REFUSED

    reader = [feature] if feature in READER_FEATURES or feature in REFUSED_FOR_READS else None
    _feature_table(memory_uri, writer=[feature], reader=reader)
    assert feature in REFUSED
    with pytest.raises(UnsupportedFeatureError) as refused:
        write_table(memory_uri, pa.table({"n": pa.array([1], pa.int64())}))
    assert refused.value.feature == feature


@pytest.mark.parametrize("feature", REFUSED_FOR_READS)
def test_every_feature_the_user_guide_refuses_for_reads_is_refused(feature, memory_uri):
    from table.errors import UnsupportedFeatureError

    _feature_table(memory_uri, writer=[feature], reader=[feature])
    with pytest.raises(UnsupportedFeatureError) as refused:
        Table(memory_uri).to_pyarrow_table()
    assert refused.value.feature == feature


# --- refused before any data moves --------------------------------------------------------------------


def objects_under(uri: str) -> set[str]:
    table = Table(uri)
    return {o.key for o in table.objects.list(table.uri.key(""))}


def test_the_append_only_refusals_the_user_guide_lists_come_before_any_upload(memory_uri):
    """The user guide lists what an append-only table refuses and what it allows; each listed operation is
    refused with AppendOnlyError and leaves no object behind (tests/integration/test_refusals_before_upload.py
    looks at object versions too), each allowed one commits."""
    text = prose(GUIDE, "### Refused before any data moves")
    refused = re.search(r"\(`AppendOnlyError`\): an overwrite, DELETE, UPDATE, and a MERGE with a clause that "
                        r"updates or deletes, even when no row would in the end match", text)
    allowed = re.search(r"Appends, a MERGE whose clauses only insert, and OPTIMIZE \(it changes no rows\) are "
                        r"allowed", text)
    assert refused and allowed, "the user guide no longer states the rule this test checks"
    from table import AppendOnlyError

    uri = made(memory_uri, configuration={"delta.appendOnly": "true"})
    write_table(uri, data(["a"], [3]))
    refusals = {
        "overwrite": lambda t: write_table(t, data(), mode="overwrite"),
        "DELETE": lambda t: t.delete("n = 1"),
        "DELETE matching nothing": lambda t: t.delete("n = 99"),
        "UPDATE": lambda t: t.update({"n": "n + 10"}, predicate="n = 1"),
        "MERGE update": lambda t: t.merge(data(["a"], [1]), "target.n = source.n")
        .when_matched_update_all().execute(),
        "MERGE delete": lambda t: t.merge(data(["a"], [1]), "target.n = source.n").when_matched_delete().execute(),
    }
    for name, operation in refusals.items():
        before = objects_under(uri)
        with pytest.raises(AppendOnlyError, match="nothing was written"):
            operation(Table(uri))
        assert objects_under(uri) == before, name
    assert Table(uri).version == 1
    table = Table(uri)
    assert table.merge(data(["b"], [7]), "target.n = source.n").when_not_matched_insert_all().execute().version == 2
    assert table.optimize().version == 3
    assert sorted(Table(uri).to_pyarrow_table()["n"].to_pylist()) == [1, 2, 3, 7]


def test_a_refusal_only_the_commit_knows_says_what_the_user_guide_quotes(memory_uri):
    """Another writer creates the table with a CHECK constraint while our write stages: the commit refuses,
    the job deletes its staged file, and the message carries the sentence the user guide quotes."""
    text = prose(GUIDE, "### Refused before any data moves")
    quoted = re.search(r'the error says so \("The N file\(s\) (this job staged for the commit were deleted again)"',
                       text)
    assert quoted, "the user guide no longer quotes the message this test checks"
    from table import UnsupportedFeatureError

    ours = Table.for_write(memory_uri)
    body = _feature_commit(writer=["someFutureFeature"])
    with pytest.raises(UnsupportedFeatureError) as raised:
        with_rival(lambda: _raw_commit(memory_uri, 0, body),
                   lambda: write_table(ours, pa.table({"n": pa.array([1], pa.int64())})))
    assert f"The 1 file(s) {quoted.group(1)}." in str(raised.value)
    assert "nothing was written" not in str(raised.value)
    assert {k for k in objects_under(memory_uri) if "/_delta_log/" not in k} == set()
