"""Model-based test of the log store algorithm: writers and recoverers interleaved step by step.

Writers (``latest_version() + 1``, ``write``, again on ``VersionExistsError``), recoverers
(``recover()``), and the two sides of group commit run as threads against the in-memory log store
(``memory://``: the real algorithm of ``logstore/`` over dicts, whose entry table answers transactions as
DynamoDB does): members queue an append (``queue_append``), look at their item (``look``) a few times and
then withdraw it (``withdraw``), as ``table.log.group_member`` does; leaders write their bytes with the
waiting members' in one version, claiming them in the same transaction (``write(..., group=...)``). A failpoint hook makes every failpoint hit of an actor thread stop
and wait, so the hypothesis state machine decides which actor takes its next step and how: go on, crash
there (``FailpointCrash``: the process dies, nothing after it runs) or lose the answer there
(``FailpointError``, an ``AmbiguousError``). Reads run in the machine's own thread, unstopped, between any
two steps. After every step the raw state (entries and objects, read without side effects) must hold:

- no gap below the newest complete version: every version up to it has an entry and its ``N.json``;
- an entry marked complete has its ``N.json``;
- every line of an ``N.json`` is the bytes (one line) of one writer or member, and no one's bytes are in
  two versions;
- every acknowledged write is readable with its bytes (in ``N.json``, or in the temp file of its
  still-incomplete entry, which any reader finishes); a member is acknowledged at the version its claimed
  item names, and a withdrawn member's bytes are in no version and no entry's temp file;
- a read sees the acknowledged bytes at their versions, and nothing no writer or member wrote.

At the end every actor runs to completion, recovery runs, and every acknowledged write must read back.
The run is bounded (``SETTINGS``) to stay well under a minute.
"""

from __future__ import annotations

import threading
import time
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
from logstore.errors import DynacommitError, GroupChanged
from logstore.external import file_name
from logstore.group import GroupClaim, QueuedAppend
from table.log.group import MEMBER_CLAIMED, MEMBER_QUEUED, MEMBER_WITHDRAWING
from tests.support.fault_harness import install_harness_seams

SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
MAX_ACTORS = 3
SETTLE_SECONDS = 20.0
FINISH_STEPS = 400
STATS: Counter = Counter()
MEMBER_LOOKS = 6
"""Looks at its item a member makes (each after a step of its own) before it withdraws."""
GROUP_MAX = 3
"""Waiting members a leader takes at most."""


def next_version(store) -> int:
    """The version after the table's latest (0 for no table)."""
    try:
        return store.latest_version() + 1
    except TableNotFoundError:
        return 0


def lines(body: bytes) -> list[bytes]:
    """The one-line bodies a version's bytes are made of (a leader's and its members')."""
    return body.splitlines(keepends=True)


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
        self.bodies: dict[bytes, str] = {}          # every body a writer or member was given -> its actor
        self.acknowledged: dict[bytes, int] = {}    # body -> version its write returned (or its claim named)
        self.withdrawn: set[bytes] = set()          # members' bodies withdrawn: never to land
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
        if actor.kind in ("writer", "leader") and actor.error is None:
            self.acknowledged[actor.body] = actor.result
        if actor.kind == "member" and actor.error is None:
            outcome, version = actor.result
            if outcome == "claimed":
                self.acknowledged[actor.body] = version
            elif outcome == "withdrawn":
                self.withdrawn.add(actor.body)
            STATS[f"members {outcome}"] += 1
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
        body = self._new_body("writer")
        uri = self.uri

        def work():
            store = open_log_store(uri)
            while True:
                version = next_version(store)
                try:
                    store.write(version, body)
                    return version
                except VersionExistsError:
                    STATS["lost_races"] += 1

        self._start_writing("writer", work, body)
        STATS["writes_started"] += 1

    def _start_writing(self, kind: str, work, body: bytes) -> None:
        actor = Actor(kind, "", work, self.gate)
        actor.body = body
        self._start_actor(actor)

    def _new_body(self, kind: str) -> bytes:
        name = f"{kind[0]}{len(self.bodies)}"
        body = f'{{"commitInfo":{{"{kind}":"{name}","nonce":"{uuid.uuid4().hex}"}}}}\n'.encode()
        self.bodies[body] = name
        return body

    @precondition(lambda self: self._live() < MAX_ACTORS)
    @rule()
    def start_member(self):
        """An append queued for group commit: it looks at its item after each step of its own, is committed
        at the version a claim names, and withdraws after MEMBER_LOOKS looks (a claim seen then commits it
        all the same). A look that finds no item (a lost answer of a look that deleted it) leaves its outcome
        to the log, as the table layer settles it: not acknowledged here."""
        body = self._new_body("member")
        uri, member_id = self.uri, f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"

        def work():
            store = open_log_store(uri)
            now = int(time.time())
            store.queue_append(QueuedAppend(store.table_path, member_id, body.decode(), "", now + 600, now + 3600))
            failpoints.hit(MEMBER_QUEUED)
            for _ in range(MEMBER_LOOKS):
                found = store.look(member_id)
                if found is None:
                    return "gone", None
                if not found.waiting:
                    failpoints.hit(MEMBER_CLAIMED)
                    return "claimed", found.claimed_by
                failpoints.hit(MEMBER_QUEUED)  # a step before the next look
            failpoints.hit(MEMBER_WITHDRAWING)
            found = store.withdraw(member_id)
            if found is None:
                return "withdrawn", None
            return "claimed", found.claimed_by

        self._start_writing("member", work, body)
        STATS["members_started"] += 1

    @precondition(lambda self: self._live() < MAX_ACTORS)
    @rule()
    def start_leader(self):
        """A writer that takes the waiting members (GROUP_MAX at most) into its version, claiming them in the
        transaction that wins it; again at the next version on VersionExistsError, with the queue read again
        on GroupChanged (a member claimed or withdrawn meanwhile)."""
        body = self._new_body("leader")
        uri = self.uri

        def work():
            store = open_log_store(uri)
            while True:
                version = next_version(store)
                waiting = [i for i in store.queued() if i.waiting][:GROUP_MAX]
                merged = body + b"".join(i.body.encode() for i in waiting)
                claim = GroupClaim(None, tuple(i.member_id for i in waiting), int(time.time()))
                try:
                    store.write(version, merged, group=claim if waiting else None)
                    if waiting:
                        STATS["groups_won"] += 1
                    return version
                except VersionExistsError:
                    STATS["lost_races"] += 1
                except GroupChanged:
                    STATS["groups_changed"] += 1

        self._start_writing("leader", work, body)
        STATS["leaders_started"] += 1

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
            for body in lines(reader.read(version)):
                assert body in self.bodies, f"version {version} holds bytes nobody wrote: {body!r}"
                assert body not in seen, f"one writer's bytes are in versions {seen[body]} and {version}"
                assert body not in self.withdrawn, f"a withdrawn member's bytes are in version {version}"
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
        for version, final in finals.items():
            for body in lines(final):
                assert body in self.bodies, f"{file_name(version)} holds bytes nobody wrote: {body!r}"
                assert body not in owners, f"one writer's bytes are in versions {owners[body]} and {version}"
                owners[body] = version
        pending = {v: lines(self._temp(e) or b"") for v, e in entries.items() if not e.complete and v not in finals}
        for body in self.withdrawn:
            assert body not in owners, f"a withdrawn member's bytes are in version {owners[body]}"
            assert not [v for v, held in pending.items() if body in held], (
                f"a withdrawn member's bytes are in the temp file of incomplete entry {pending}")
        for body, version in self.acknowledged.items():
            readable = body in lines(finals.get(version, b"")) or (
                version in entries and not entries[version].complete
                and body in lines(self._temp(entries[version]) or b""))
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
    assert STATS["groups_won"] > 0, f"no leader ever claimed a queued member: group commit went unchecked. {figures}"


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
