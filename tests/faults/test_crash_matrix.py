"""The crash matrix: a process is killed (SIGKILL) at each declared failpoint, then the next reader, the next
writer and ``dynacommit recover`` run, and the table must keep every invariant.

The matrix is data-driven: it imports every module of ``logstore``, ``table`` and ``spark_integration``
and takes :func:`logstore.failpoints.declared`, so a failpoint added anywhere joins it. :data:`SCENARIOS`
maps each failpoint name prefix to a scenario that reaches it in a child process; a failpoint no scenario
covers fails the matrix (new failpoints force coverage), and so does a scenario that ends without
reaching its failpoint.

After the kill, in turn: the next reader (``Table`` + all rows), the next writer (``write_table``) and
``python -m table.cli recover URI`` must succeed; then the audit (``tests/support/fault_harness.py``):
versions contiguous, the killed commit's marker rows all there or none, in one version at most, every
other commit exactly once, no file referenced by the log missing, every DynamoDB entry complete with its
``N.json``, the same rows through ``deltalake``. Each kill's outcome (the killed commit present or
absent) is printed (``-s``) for RELIABILITY.md.

``test_failpoints_mark_every_step_*`` (fast) check that failpoints exist at every step of commit,
recovery, checkpoint and job commit; the ``harness`` tests run the same machinery on failpoints the harness
adds itself (after each one-side-effect step of the log store algorithm), so the matrix is proven to kill,
recover and judge even where the product declares none.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import signal
import subprocess
import uuid
from collections.abc import Callable

import pytest

from logstore import failpoints, open_log_store
from logstore.external import PUBLISHED
from tests.support.memory import reset_memory
from table import Table, write_table
from tests.support.fault_harness import (
    HARNESS_SEAMS,
    ROWS_PER_COMMIT,
    Audit,
    audit,
    child_env,
    cli_command,
    marker,
    marker_counts,
    marker_rows,
    worker_command,
)

CHILD_TIMEOUT_SECONDS = 120
STUCK_AT = "logstore.write.after_put_entry"
"""Where a writer is killed to leave a won, unfinished entry behind (the name ``logstore/failpoints.py``
documents) for the recovery scenarios."""


def import_every_module() -> dict[str, str]:
    """Import every module that may declare failpoints; return them all."""
    import logstore
    import spark_integration
    import table

    for package in (logstore, table, spark_integration):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith(".__main__"):  # an entry point runs when imported
                importlib.import_module(module.name)
    return failpoints.declared()


DECLARED = import_every_module()


# --- scenarios --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Crash:
    """One kill: the table, what the killed process was doing, and what it had committed before."""

    uri: str
    options: dict[str, str]
    killed_marker: str | None        # the commit that may or may not have landed
    committed: list[str]             # markers committed before the kill, each must be there once
    tmp: object


@dataclasses.dataclass(frozen=True)
class Scenario:
    """``prepare`` builds the table (fault-free, in this process) and returns the child's command and the
    marker it commits; the child runs with the failpoint armed."""

    name: str
    prepare: Callable[[Crash], list[str]]
    also_armed: str = ""
    """More failpoints armed in the child (``name=action;...``), to bring it where the killing one is."""
    after_kill: tuple[tuple[str, str], ...] = ()
    """Storage options of the reader, writer and recovery after the kill (on top of the test's)."""


def _create(crash: Crash, commits: int, configuration: dict[str, str] | None = None) -> None:
    for seq in range(commits):
        write_table(crash.uri, marker_rows("setup", seq), storage_options=crash.options,
                    configuration=configuration if seq == 0 else None)
        crash.committed.append(marker("setup", seq))


def _writer_command(crash: Crash, **extra) -> list[str]:
    crash.killed_marker = marker("killed", 0)
    return worker_command("writer", {"uri": crash.uri, "options": crash.options, "writer": "killed", "commits": 1,
                                     **extra})


def _leave_stuck_entry(crash: Crash) -> None:
    """A writer killed right after it won its version: an incomplete entry with its temp file."""
    if STUCK_AT not in DECLARED:
        pytest.fail(f"the recovery scenarios need failpoint {STUCK_AT} to leave a won, unfinished commit behind; "
                    f"it is not declared (declared: {sorted(DECLARED)})")
    command = worker_command("writer", {"uri": crash.uri, "options": crash.options, "writer": "stuck",
                                        "commits": 1})
    run_killed(command, STUCK_AT, crash.tmp, "stuck")
    crash.killed_marker = marker("stuck", 0)


def prepare_write(crash: Crash) -> list[str]:
    _create(crash, 2)
    return _writer_command(crash)


def prepare_checkpoint_write(crash: Crash) -> list[str]:
    _create(crash, 3, {"delta.checkpointInterval": "3"})  # versions 0, 1, 2
    return _writer_command(crash)  # lands on version 3, a checkpoint version


def prepare_recover(crash: Crash) -> list[str]:
    _create(crash, 2)
    _leave_stuck_entry(crash)
    return cli_command("recover", crash.uri, "--execute", options=crash.options)


def prepare_lost_race(crash: Crash) -> list[str]:
    _create(crash, 2)
    crash.killed_marker = marker("killed", 0)
    # The child opens the table, then a rival commit of its own lands first: its append loses that version.
    return worker_command("writer", {"uri": crash.uri, "options": crash.options, "writer": "killed", "commits": 1,
                                     "reuse_table": True, "rival_first": True})


def prepare_race_at_put(crash: Crash) -> list[str]:
    _create(crash, 2)
    crash.killed_marker = marker("killed", 0)
    # A rival blind append wins the child's version between its check and its conditional put: the child's
    # put is refused with the rival's entry, and it keeps its temp file for the next version.
    return worker_command("writer", {"uri": crash.uri, "options": crash.options, "writer": "killed", "commits": 1,
                                     "reuse_table": True, "rival_at_put": True})


def prepare_group(crash: Crash, at_group: str | None = None) -> list[str]:
    """As :func:`prepare_race_at_put`; the append then queues for group commit (moto answers transactions)
    and makes a group attempt; ``at_group`` (tests/support/fault_worker.py) lets a rival win that attempt's
    version first: leading a group that takes the queued append, or changing the table's properties."""
    _create(crash, 2)
    crash.killed_marker = marker("killed", 0)
    return worker_command("writer", {"uri": crash.uri, "options": crash.options, "writer": "killed", "commits": 1,
                                     "reuse_table": True, "rival_at_put": True, "rival_at_group": at_group})


def prepare_abandon(crash: Crash) -> list[str]:
    """A won commit whose temp file is then deleted (a lifecycle rule, a person): its content is lost, and
    ``dynacommit recover`` (grace period 0) marks the entry stuck and abandons it."""
    _create(crash, 2)
    _leave_stuck_entry(crash)
    store = open_log_store(crash.uri, storage_options=crash.options)
    entry = store._latest_entry()
    store.objects.delete([store.temp_key(entry.temp_path)])
    return cli_command("recover", crash.uri, "--execute", options={**crash.options, "DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS": "0"})


def prepare_sweep(crash: Crash) -> list[str]:
    _create(crash, 2)
    store = open_log_store(crash.uri, storage_options=crash.options)
    store.objects.put(store.temp_key(".tmp/00000000000000000009.json.orphan"), b'{"commitInfo":{}}\n')
    return cli_command("recover", crash.uri, "--temp-age-hours", "0", "--execute", options=crash.options)


def prepare_read(crash: Crash) -> list[str]:
    _create(crash, 2)
    _leave_stuck_entry(crash)
    return worker_command("reader", {"uri": crash.uri, "options": crash.options, "until": 0, "once": True})


def prepare_vacuum(crash: Crash) -> list[str]:
    _create(crash, 2)
    write_table(crash.uri, marker_rows("setup", 2), mode="overwrite", storage_options=crash.options)
    crash.committed[:] = [marker("setup", 2)]  # the overwrite removed the others
    return cli_command("vacuum", crash.uri, "--retention-hours", "0", "--force", "--execute", options=crash.options)


WRITE = Scenario("write_table append", prepare_write)
CHECKPOINT_WRITE = Scenario("write_table landing on a checkpoint version", prepare_checkpoint_write)
RECOVER = Scenario(f"dynacommit recover after a writer killed at {STUCK_AT}", prepare_recover)
READ = Scenario(f"a reader loading the table after a writer killed at {STUCK_AT}", prepare_read)
VACUUM = Scenario("dynacommit vacuum --execute after an overwrite", prepare_vacuum)
LOST_ANSWER = Scenario("write_table whose entry put loses its answer", prepare_write,
                       also_armed="logstore.write.after_put_entry=raise")
LOST_RACE = Scenario("write_table losing its version to a rival", prepare_lost_race)
RACE_AT_PUT = Scenario("write_table losing its version at the conditional put to a blind append", prepare_race_at_put)
# A kill right after the entry is marked stuck leaves its grace period to run: the next writer waits it out
# (2 s here, 60 by default) before it may abandon the entry and take the version.
ABANDON = Scenario("dynacommit recover of a won commit whose temp file is gone", prepare_abandon,
                   after_kill=(("DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS", "2"),))
SWEEP = Scenario("dynacommit recover sweeping an orphan temp file", prepare_sweep)
GROUP = Scenario("write_table queued for group commit after losing its version, then leading a group",
                 prepare_group)
GROUP_CLAIMED = Scenario("write_table queued for group commit, taken by a rival's group",
                         lambda crash: prepare_group(crash, "append"))
GROUP_WITHDRAW = Scenario("write_table queued for group commit, withdrawing after a rival's metadata change",
                          lambda crash: prepare_group(crash, "alter"))

SCENARIOS: dict[str, Scenario] = {
    "logstore.write.": WRITE,
    "logstore.write.before_read_back": LOST_ANSWER,
    "logstore.write.after_keep_temp": RACE_AT_PUT,
    "logstore.write.before_reuse_temp": RACE_AT_PUT,
    "logstore.abandon.": ABANDON,
    "logstore.sweep.": SWEEP,
    "logstore.group.": GROUP,
    "table.group.": GROUP,
    "table.group.after_claimed": GROUP_CLAIMED,
    "table.group.before_withdraw": GROUP_WITHDRAW,
    "table.commit.after_lost_race": LOST_RACE,
    "logstore.commit.": WRITE,
    "logstore.publish.": WRITE,
    "logstore.recover.": RECOVER,
    "logstore.read.": READ,
    "logstore.latest.": READ,
    "table.commit.": WRITE,
    "table.transaction.": WRITE,
    "table.txn.": WRITE,
    "table.jobcommit.": WRITE,
    "table.write.": WRITE,
    "table.staging.": WRITE,
    "table.uploads.": WRITE,
    "table.checkpoint.": CHECKPOINT_WRITE,
    "table.vacuum.": VACUUM,
    "table.maintenance.": VACUUM,
    "harness.write.": WRITE,
}


def scenario_for(name: str) -> Scenario | None:
    """The scenario of the longest matching prefix."""
    matches = [p for p in SCENARIOS if name.startswith(p)]
    return SCENARIOS[max(matches, key=len)] if matches else None


# --- running a kill ---------------------------------------------------------------------------------


def run_killed(command: list[str], failpoint: str, tmp, tag: str, also_armed: str = "") -> subprocess.CompletedProcess:
    """Run ``command`` with ``failpoint`` armed to kill (and ``also_armed``); fail unless it died by SIGKILL
    there."""
    env = child_env({failpoints.ENV: ";".join(x for x in (f"{failpoint}=kill", also_armed) if x)})
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECONDS,
                              start_new_session=True, cwd=tmp)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{tag}: the process armed with {failpoint}=kill ran over {CHILD_TIMEOUT_SECONDS}s: "
                    f"{(exc.stderr or b'')[-2000:]!r}")
    if done.returncode != -signal.SIGKILL:
        how = "ended normally" if done.returncode == 0 else f"exited with {done.returncode}"
        pytest.fail(f"{tag}: the scenario never reached failpoint {failpoint}: the process {how} instead of being "
                    f"killed there.\nstdout: {done.stdout[-1500:]}\nstderr: {done.stderr[-2500:]}")
    return done


@dataclasses.dataclass
class KillResult:
    failpoint: str
    scenario: str
    outcome: str                     # present | absent | n/a
    problems: list[str]
    found: Audit


def kill_and_check(failpoint: str, scenario: Scenario, uri: str, options: dict[str, str], tmp) -> KillResult:
    """The whole matrix cell: prepare, kill at ``failpoint``, next reader, next writer, recover, audit."""
    crash = Crash(uri, options, None, [], tmp)
    command = scenario.prepare(crash)
    done = run_killed(command, failpoint, tmp, scenario.name, scenario.also_armed)
    for line in done.stdout.splitlines():  # commits the child itself acknowledged before it was killed
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "end" and event.get("ok") and event.get("marker") != crash.killed_marker:
            crash.committed.append(event["marker"])
    problems: list[str] = []
    options = {**options, **dict(scenario.after_kill)}
    try:
        rows = Table(uri, storage_options=options).to_pyarrow_table(columns=["marker"])
        if any(n % ROWS_PER_COMMIT for n in marker_counts(rows).values()):
            problems.append(f"the next reader read a torn commit: {dict(marker_counts(rows))}")
    except Exception as exc:  # noqa: BLE001 - every step is judged, the first failure must not hide the others
        problems.append(f"the next reader failed: {type(exc).__name__}: {exc}")
    try:
        write_table(uri, marker_rows("next", 0), storage_options=options)
        crash.committed.append(marker("next", 0))
    except Exception as exc:  # noqa: BLE001
        problems.append(f"the next writer failed: {type(exc).__name__}: {exc}")
    recovered = subprocess.run(cli_command("recover", uri, "--execute", options=options), env=child_env(), capture_output=True,
                               text=True, timeout=CHILD_TIMEOUT_SECONDS, cwd=tmp)
    if recovered.returncode != 0:
        problems.append(f"`dynacommit recover` exited with {recovered.returncode}: {recovered.stderr[-1500:]}")
    found = audit(uri, options)
    problems += found.problems()
    versions = found.marker_versions()
    for name in crash.committed:
        if len(versions.get(name, [])) != 1:
            problems.append(f"commit {name}, made before or after the kill, is in versions {versions.get(name, [])}")
    outcome = "n/a"
    if crash.killed_marker is not None:
        where = versions.get(crash.killed_marker, [])
        outcome = {0: "absent", 1: "present"}.get(len(where), f"in {len(where)} versions")
        if len(where) > 1:
            problems.append(f"the killed commit {crash.killed_marker} is in versions {where}")
    return KillResult(failpoint, scenario.name, outcome, problems, found)


OUTCOMES: dict[str, str] = {}


@pytest.fixture(scope="module")
def matrix_report():
    yield OUTCOMES
    if OUTCOMES:
        print("\nCRASH-MATRIX " + json.dumps(OUTCOMES, sort_keys=True))


@pytest.fixture
def fresh_uri(local_stack) -> str:
    return f"s3://{local_stack.bucket}/crash/{uuid.uuid4().hex[:12]}"


# --- the matrix -------------------------------------------------------------------------------------


def test_every_declared_failpoint_has_a_scenario():
    uncovered = sorted(name for name in DECLARED if scenario_for(name) is None)
    assert not uncovered, (f"failpoints without a crash scenario: {uncovered}; add their prefix to SCENARIOS in "
                           f"tests/faults/test_crash_matrix.py")


@pytest.mark.slow
@pytest.mark.parametrize("failpoint", sorted(DECLARED) or [pytest.param(None, id="none-declared")])
def test_killed_at_failpoint_the_table_keeps_every_invariant(failpoint, fresh_uri, storage_options, tmp_path,
                                                             matrix_report):
    assert failpoint is not None, ("no failpoint is declared by logstore, table or spark_integration: the crash "
                                   "matrix has nothing to kill (issue 7: failpoints at every step of commit, "
                                   "recovery, checkpoint and job commit)")
    scenario = scenario_for(failpoint)
    assert scenario is not None, f"failpoint {failpoint} has no scenario in SCENARIOS"
    result = kill_and_check(failpoint, scenario, fresh_uri, storage_options, tmp_path)
    matrix_report[failpoint] = result.outcome
    print(f"\nKILL {failpoint} [{scenario.name}]: killed commit {result.outcome}")
    assert not result.problems, f"killed at {failpoint} ({scenario.name}):\n" + "\n".join(result.problems)


# --- the same kills with the durable acknowledgement -------------------------------------------------


def prepare_durable_write(crash: Crash) -> list[str]:
    command = prepare_write(crash)
    PUBLISHED.wait_all(CHILD_TIMEOUT_SECONDS)  # the set-up's own background publishes are over
    return command


DURABLE_WRITE = Scenario("write_table append acknowledged at its DynamoDB entry", prepare_durable_write)


@pytest.mark.slow
# Only right after the acknowledgement: what the log holds at the publish's later failpoints (N.json with the
# temp file and an incomplete item, or a complete item) is what the default's kills at
# logstore.write.after_copy_to_final and logstore.recover.* leave, and those are in the matrix above.
@pytest.mark.parametrize("failpoint", ["logstore.recover.before_copy"])
def test_a_durable_writer_killed_after_its_acknowledgement_loses_and_doubles_nothing(
        failpoint, fresh_uri, storage_options, tmp_path):
    """``DYNACOMMIT_COMMIT_ACK=durable`` (writer, next reader, next writer and recover alike), the writer
    killed in the background publish right after its acknowledgement, nothing published: the commit is
    present once. Every step before the commit point is the same code in both modes, and the
    publish is recovery's, so the matrix above kills the rest (in ``recover`` and readers)."""
    options = {**storage_options, "DYNACOMMIT_COMMIT_ACK": "durable"}
    result = kill_and_check(failpoint, DURABLE_WRITE, fresh_uri, options, tmp_path)
    print(f"\nDURABLE-KILL {failpoint}: killed commit {result.outcome}")
    assert not result.problems, f"killed at {failpoint} (durable):\n" + "\n".join(result.problems)
    assert result.outcome == "present"


# --- the harness on its own failpoints --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seam,expected", [
    ("harness.write.after_put_temp", "absent"),
    ("harness.write.after_put_entry", "present"),
    ("harness.write.after_copy_to_final", "present"),
    ("harness.write.after_mark_complete", "present"),
])
def test_harness_kills_a_writer_after_each_log_store_step_and_judges_the_table(seam, expected, fresh_uri,
                                                                              storage_options, tmp_path):
    """The matrix machinery on the real algorithm, cut by the harness's own seams: before the commit point
    the commit is absent, after it present, and the table keeps every invariant either way."""
    assert seam in HARNESS_SEAMS
    scenario = Scenario("write_table append (harness seams)",
                        lambda crash: _with_seams(prepare_write(crash)))
    result = kill_and_check(seam, scenario, fresh_uri, storage_options, tmp_path)
    print(f"\nHARNESS-KILL {seam}: killed commit {result.outcome}")
    assert not result.problems, "\n".join(result.problems)
    assert result.outcome == expected
    # versions 0-1 set up, 2 the killed commit if it landed, then the next writer's
    assert result.found.latest == (3 if expected == "present" else 2)


def _with_seams(command: list[str]) -> list[str]:
    settings = json.loads(command[-1])
    settings["harness_seams"] = True
    return [*command[:-1], json.dumps(settings)]


@pytest.mark.slow
def test_harness_fails_a_scenario_that_never_reaches_its_failpoint(fresh_uri, storage_options, tmp_path):
    crash = Crash(fresh_uri, storage_options, None, [], tmp_path)
    command = _with_seams(prepare_write(crash))
    with pytest.raises(pytest.fail.Exception, match="never reached failpoint harness.write.nowhere"):
        run_killed(command, "harness.write.nowhere", tmp_path, "write")
    found = audit(fresh_uri, storage_options)
    assert not found.problems()
    assert found.marker_versions()[marker("killed", 0)] == [2]


@pytest.mark.slow
def test_harness_audit_catches_a_torn_and_a_doubled_commit(fresh_uri, storage_options):
    """The audit is not blind: a commit written twice (same marker at two versions) and a data file
    deleted behind the log's back are both reported."""
    write_table(fresh_uri, marker_rows("a", 0), storage_options=storage_options)
    write_table(fresh_uri, marker_rows("a", 1), storage_options=storage_options)
    write_table(fresh_uri, marker_rows("a", 1), storage_options=storage_options)
    table = Table(fresh_uri, storage_options=storage_options)
    victim = table.add_actions()[0]
    table.objects.delete([table.uri.key(victim.path)])
    problems = audit(fresh_uri, storage_options, with_deltalake=False).problems()
    assert any("a-0001 is in 2 versions [1, 2]" in p for p in problems), problems
    assert any("our reader failed to read the rows" in p for p in problems), problems
    assert any(f"missing: {victim.path}" in p for p in problems), problems


# --- failpoints at every step -----------------------------------------------------------------------


class Recorder:
    """A failpoint hook recording every hit."""

    def __init__(self):
        self.hits: list[str] = []

    def __call__(self, name: str) -> None:
        self.hits.append(name)

    def distinct(self, prefix: str) -> list[str]:
        return sorted({h for h in self.hits if h.startswith(prefix)})


@pytest.fixture
def recorder():
    hook = Recorder()
    failpoints.set_hook(hook)
    yield hook
    failpoints.set_hook(None)
    reset_memory()


def declared_with(prefix: str) -> list[str]:
    return sorted(name for name in DECLARED if name.startswith(prefix))


def test_the_steps_named_here_are_the_steps_of_the_code():
    """The step names the docstrings below use are those of logstore/external.py's and
    table/data/jobcommit.py's docstrings, where the protocol is written once."""
    import logstore.external
    import table.data.jobcommit

    for step in ("CHECK", "PREPARE", "COMMIT", "PUBLISH", "FINISH"):
        assert f"{step} " in logstore.external.__doc__, step
        assert step in test_every_declared_write_failpoint_is_passed_by_a_write_and_a_write_whose_answer_is_lost.__doc__
    for stage in ("validate", "complete", "commit", "finish"):
        assert f"**{stage}**" in table.data.jobcommit.__doc__, stage
        assert stage in test_every_declared_job_commit_and_checkpoint_failpoint_is_passed.__doc__


def test_every_declared_write_failpoint_is_passed_by_a_write_and_a_write_whose_answer_is_lost(recorder, memory_uri):
    """A write has five steps (CHECK, PREPARE, COMMIT, PUBLISH, FINISH: logstore/external.py) and a writer
    must be cuttable at each failpoint between them: a write passes every declared write failpoint, the
    read-back after an unclear commit point included (the second write's put loses its answer), and the
    temp file kept by a put refused to a rival and taken by the next version's write."""
    from logstore import VersionExistsError, open_log_store
    from logstore.external import CommitEntry

    store = open_log_store(memory_uri)
    store.write(0, b'{"commitInfo":{}}\n')
    with failpoints.armed({"logstore.write.after_put_entry": "raise@1"}):
        store.write(1, b'{"commitInfo":{}}\n')
    rival = CommitEntry(store.table_path, 2, ".tmp/00000000000000000002.json.rival", complete=False)
    store.objects.put(store.temp_key(rival.temp_path), b'{"commitInfo":{"rival":1}}\n')
    store.entries.claim(rival)
    with pytest.raises(VersionExistsError) as lost:
        store.write(2, b'{"commitInfo":{"n":2}}\n', keep_temp=True)
    store.write(3, b'{"commitInfo":{"n":2}}\n', temp=lost.value.kept)
    store.wait_finished()  # the UpdateItem marking the entry complete, sent after write returned
    assert recorder.distinct("logstore.write.") == declared_with("logstore.write.")
    assert len(declared_with("logstore.write.")) == 11


def test_every_declared_recovery_failpoint_is_passed(recorder, memory_uri):
    """Recovery copies the temp file to N.json, drops the temp file and marks the entry complete: a
    recoverer passes every declared recovery failpoint."""
    from logstore import open_log_store
    from logstore.external import CommitEntry

    store = open_log_store(memory_uri)
    store.write(0, b'{"commitInfo":{}}\n')
    store.objects.put(store.temp_key(".tmp/00000000000000000001.json.x"), b'{"commitInfo":{"n":1}}\n')
    store.entries.claim(CommitEntry(store.table_path, 1, ".tmp/00000000000000000001.json.x", complete=False))
    recorder.hits.clear()
    store.recover()
    assert recorder.distinct("logstore.recover.") == declared_with("logstore.recover.")


def test_every_declared_job_commit_and_checkpoint_failpoint_is_passed(recorder, memory_uri):
    """The job commit's stages (validate, complete, commit, finish: table/data/jobcommit.py) and a
    checkpoint's two writes (the parquet file, then the ``_last_checkpoint`` hint) pass every declared
    job-commit and checkpoint failpoint."""
    write_table(memory_uri, marker_rows("m", 0), configuration={"delta.checkpointInterval": "2"})
    write_table(memory_uri, marker_rows("m", 1))
    write_table(memory_uri, marker_rows("m", 2))
    assert recorder.distinct("table.jobcommit.") == declared_with("table.jobcommit.")
    assert recorder.distinct("table.checkpoint.") == declared_with("table.checkpoint.")
