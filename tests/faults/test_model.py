"""Model-based test of the log store algorithm: writers and recoverers interleaved step by step.

Writers (``latest_version() + 1``, ``write``, again on ``VersionExistsError``) and recoverers
(``recover()``) run as threads against the in-memory log store (``memory://``: the real algorithm of
``logstore/external.py`` over dicts). A failpoint hook makes every failpoint hit of an actor thread stop
and wait, so the hypothesis state machine decides which actor takes its next step and how: go on, crash
there (``FailpointCrash``: the process dies, nothing after it runs) or lose the answer there
(``FailpointError``, an ``AmbiguousError``). Reads run in the machine's own thread, unstopped, between any
two steps. After every step the raw state (entries and objects, read without side effects) must hold:

- no gap below the newest complete version: every version up to it has an entry and its ``N.json``;
- an entry marked complete has its ``N.json``;
- every ``N.json`` holds the bytes of one writer, and no writer's bytes are in two versions;
- every acknowledged write is readable with exactly its bytes (``N.json``, or the temp file of its
  still-incomplete entry, which any reader finishes);
- a read sees exactly the acknowledged bytes at their versions, and nothing no writer wrote.

At the end every actor runs to completion, recovery runs, and every acknowledged write must read back.
The run is bounded (``SETTINGS``) to stay well under a minute.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from logstore import TableNotFoundError, VersionExistsError, failpoints, open_log_store
from logstore.aws import ObjectNotFound
from logstore.errors import DynacommitError
from logstore.external import file_name
from tests.support.fault_harness import install_harness_seams

SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
MAX_ACTORS = 3
SETTLE_SECONDS = 20.0
FINISH_STEPS = 400
STATS: Counter = Counter()


class Actor:
    """A thread running ``work``; at each failpoint hit it parks until told ``go``, ``crash`` or ``lose``."""

    def __init__(self, kind: str, name: str, work, gate: threading.Condition):
        self.kind, self.name, self.work, self.gate = kind, name, work, gate
        self.state = "running"      # running | parked | done
        self.at: str | None = None  # the failpoint it is parked at
        self.command: str | None = None
        self.result = None
        self.error: BaseException | None = None
        self.body: bytes | None = None  # a writer's commit
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # noqa: BLE001 - crashes and errors are outcomes the model judges
            self.error = exc
        with self.gate:
            self.state = "done"
            self.gate.notify_all()

    def park(self, name: str) -> None:
        """Called by the hook in this actor's thread."""
        with self.gate:
            self.state, self.at = "parked", name
            self.gate.notify_all()
            while self.command is None:
                self.gate.wait()
            command, self.command = self.command, None
            self.state = "running"
        STATS["failpoint_stops"] += 1
        if command == "crash":
            raise failpoints.FailpointCrash(name)
        if command == "lose":
            raise failpoints.FailpointError(name)


class LogStoreModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.uri = f"memory://model-{uuid.uuid4().hex[:10]}/t"
        self.store = open_log_store(self.uri)
        self.gate = threading.Condition()
        self.actors: list[Actor] = []
        self.by_thread: dict[int, Actor] = {}
        self.bodies: dict[bytes, str] = {}          # every body a writer was given -> its writer
        self.acknowledged: dict[bytes, int] = {}    # body -> version its write returned
        failpoints.set_hook(self._hook)

    # --- actors ----------------------------------------------------------------------------------
    def _hook(self, name: str) -> None:
        with self.gate:  # _start_actor registers the thread under the same lock
            actor = self.by_thread.get(threading.get_ident())
        # Thread idents are reused: once an actor's thread has ended, a thread of the log store's pool can
        # get its ident. Only the actor's own thread parks (a pool thread parked as a finished actor was never
        # told to go on, and the commits waiting on that pool blocked under load).
        if actor is not None and actor.thread is threading.current_thread():
            actor.park(name)

    def _settle(self, actor: Actor) -> None:
        """Wait until ``actor`` is parked at a failpoint or done."""
        with self.gate:
            if not self.gate.wait_for(lambda: actor.state != "running", timeout=SETTLE_SECONDS):
                raise AssertionError(f"{actor.name} neither reached a failpoint nor finished within "
                                     f"{SETTLE_SECONDS}s (last at {actor.at}): blocked?")
        if actor.state == "done":
            self._finished(actor)

    def _command(self, actor: Actor, command: str) -> None:
        with self.gate:
            actor.command = command
            actor.state = "running"
            self.gate.notify_all()
        self._settle(actor)

    def _finished(self, actor: Actor) -> None:
        if actor.kind == "writer" and actor.error is None:
            self.acknowledged[actor.body] = actor.result
        if actor.error is not None and not isinstance(actor.error, (DynacommitError, failpoints.FailpointCrash)):
            raise AssertionError(f"{actor.name} raised an untyped error: {type(actor.error).__name__}: {actor.error}")

    def _parked(self) -> list[Actor]:
        return [a for a in self.actors if a.state == "parked"]

    def _live(self) -> int:
        return sum(1 for a in self.actors if a.state != "done")

    # --- rules -----------------------------------------------------------------------------------
    @precondition(lambda self: self._live() < MAX_ACTORS)
    @rule()
    def start_writer(self):
        body = f'{{"commitInfo":{{"writer":"w{len(self.bodies)}","nonce":"{uuid.uuid4().hex}"}}}}\n'.encode()
        self.bodies[body] = f"w{len(self.bodies)}"
        uri = self.uri

        def work():
            store = open_log_store(uri)
            while True:
                try:
                    version = store.latest_version() + 1
                except TableNotFoundError:
                    version = 0
                try:
                    store.write(version, body)
                    return version
                except VersionExistsError:
                    STATS["lost_races"] += 1

        actor = Actor("writer", "", work, self.gate)
        actor.body = body
        self._start_actor(actor)
        STATS["writes_started"] += 1

    @precondition(lambda self: self._live() < MAX_ACTORS)
    @rule()
    def start_recoverer(self):
        uri = self.uri
        self._start_actor(Actor("recoverer", "", lambda: open_log_store(uri).recover(), self.gate))
        STATS["recoveries_started"] += 1

    def _start_actor(self, actor: Actor) -> None:
        actor.name = f"{actor.kind}-{len(self.actors)}"
        self.actors.append(actor)
        with self.gate:
            actor.thread.start()
            self.by_thread[actor.thread.ident] = actor
        self._settle(actor)

    @precondition(lambda self: bool(self._parked()))
    @rule(pick=st.integers(min_value=0, max_value=MAX_ACTORS - 1))
    def advance(self, pick):
        parked = self._parked()
        self._command(parked[pick % len(parked)], "go")
        STATS["advances"] += 1

    @precondition(lambda self: bool(self._parked()))
    @rule(pick=st.integers(min_value=0, max_value=MAX_ACTORS - 1))
    def crash(self, pick):
        parked = self._parked()
        actor = parked[pick % len(parked)]
        STATS[f"crash at {actor.at}"] += 1
        STATS["crashes"] += 1
        self._command(actor, "crash")

    @precondition(lambda self: bool(self._parked()))
    @rule(pick=st.integers(min_value=0, max_value=MAX_ACTORS - 1))
    def lose_response(self, pick):
        parked = self._parked()
        actor = parked[pick % len(parked)]
        STATS[f"lost response at {actor.at}"] += 1
        STATS["lost_responses"] += 1
        self._command(actor, "lose")

    @rule()
    def read(self):
        """A reader between two steps: every version it can read is one writer's bytes, acknowledged
        ones exactly."""
        reader = open_log_store(self.uri)
        try:
            latest = reader.latest_version()
        except TableNotFoundError:
            assert not self.acknowledged, f"no table found, yet writes were acknowledged: {self.acknowledged}"
            return
        seen: dict[bytes, int] = {}
        for version in range(latest + 1):
            body = reader.read(version)
            assert body in self.bodies, f"version {version} holds bytes no writer wrote: {body!r}"
            assert body not in seen, f"one writer's bytes are in versions {seen[body]} and {version}"
            seen[body] = version
        for body, version in self.acknowledged.items():
            if version <= latest:
                assert seen.get(body) == version, f"acknowledged write at {version} reads as {seen.get(body)}"
        STATS["reads"] += 1

    # --- invariants on the raw state --------------------------------------------------------------
    def _raw(self) -> tuple[dict, dict[int, bytes]]:
        entries = {e.version: e for e in self.store.entries.entries(self.store.table_path)}
        finals = {}
        for info in self.store.objects.list(self.store.log_prefix):
            name = info.key[len(self.store.log_prefix):]
            if "/" not in name and name.endswith(".json"):
                finals[int(name[:20])] = self.store.objects.get(info.key)
        return entries, finals

    def _temp(self, entry) -> bytes | None:
        try:
            return self.store.objects.get(self.store.temp_key(entry.temp_path))
        except ObjectNotFound:
            return None

    @invariant()
    def log_is_whole(self):
        entries, finals = self._raw()
        complete = [v for v, e in entries.items() if e.complete]
        newest = max(complete, default=-1)
        for version in range(newest + 1):
            assert version in entries and version in finals, (
                f"gap below the newest complete version {newest}: version {version} has entry "
                f"{entries.get(version)} and {file_name(version)} {'present' if version in finals else 'absent'}")
        for version in complete:
            assert version in finals, f"entry {version} is marked complete but {file_name(version)} is absent"
        owners: dict[bytes, int] = {}
        for version, body in finals.items():
            assert body in self.bodies, f"{file_name(version)} holds bytes no writer wrote: {body!r}"
            assert body not in owners, f"one writer's bytes are in versions {owners[body]} and {version}"
            owners[body] = version
        for body, version in self.acknowledged.items():
            readable = finals.get(version) == body or (
                version in entries and not entries[version].complete and self._temp(entries[version]) == body)
            assert readable, (f"acknowledged write at version {version} is not readable: entry "
                              f"{entries.get(version)}, {file_name(version)} = {finals.get(version)!r}")

    # --- the end ---------------------------------------------------------------------------------
    def teardown(self):
        try:
            self._finish_everyone()
        finally:
            with self.gate:
                for actor in self.actors:
                    if actor.state == "parked":
                        actor.command = "crash"  # unwind a thread left parked by a failed example
                self.gate.notify_all()
            failpoints.set_hook(None)

    def _finish_everyone(self):
        for _ in range(FINISH_STEPS):
            parked = self._parked()
            if not parked:
                break
            self._command(parked[0], "go")
        assert not self._parked(), f"actors still parked after {FINISH_STEPS} steps"
        for actor in self.actors:
            actor.thread.join(timeout=SETTLE_SECONDS)
        failpoints.set_hook(None)
        final = open_log_store(self.uri)
        final.recover()
        self.read()
        entries, finals = self._raw()
        stuck = [e for e in entries.values() if e.version not in finals]
        assert not stuck, f"entries nobody can finish after every actor ended and recovery ran: {stuck}"
        STATS["examples"] += 1


def run_model() -> dict[str, int]:
    STATS.clear()
    run_state_machine_as_test(LogStoreModel, settings=SETTINGS)
    return dict(sorted(STATS.items()))


def test_interleaved_writers_recoverers_crashes_and_lost_responses_keep_the_log_invariants():
    figures = run_model()
    print(f"\nMODEL {figures}")
    assert STATS["failpoint_stops"] > 0, (
        "no failpoint of the log store was ever hit: writers and recoverers ran each in one piece, so the model "
        f"could not interleave, crash or lose anything (issue 7: failpoints at every step). Figures: {figures}")
    assert STATS["crashes"] > 0 and STATS["lost_responses"] > 0, figures


def test_the_model_interleaves_on_the_harness_seams_too():
    """The same machine with the harness's own failpoints after each one-side-effect step of the algorithm
    (tests/support/fault_harness.py): proves the machinery interleaves, crashes and loses answers, and
    checks the algorithm at those cuts whatever failpoints the product declares."""
    undo = install_harness_seams(declare=False)
    try:
        figures = run_model()
    finally:
        undo()
    print(f"\nMODEL-HARNESS {figures}")
    assert figures.get("crashes", 0) > 0 and figures.get("lost_responses", 0) > 0, figures
