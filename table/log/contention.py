"""What a process knows of the contention on each table, for taking turns fairly when appends race
(:class:`Contention`), and the pauses it sets. With group commit nobody takes turns (a contended append
queues or leads a group, ``table.log.group``); the commit loop is ``table.log.transaction``."""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time

__all__ = ["BACKOFF_BASE_SECONDS", "BACKOFF_CAP_SECONDS", "CONTENDED_SECONDS", "Contention", "QUEUE_LENGTH",
           "QUEUE_SPREAD", "contention"]

BACKOFF_BASE_SECONDS = 0.01
BACKOFF_CAP_SECONDS = 0.25

CONTENDED_SECONDS = 10.0
"""A race this process lost on a table this recently means other writers are committing to it."""
QUEUE_LENGTH = 32
"""Lost races after which a commit retries at once (see :class:`Contention`)."""
QUEUE_SPREAD = 3.0
"""The pause after a first lost race, in rebases; it shrinks by ``1 / QUEUE_LENGTH`` of it per race lost."""


@dataclasses.dataclass
class Contention:
    """What this process knows of the contention on one table, for taking turns fairly.

    A race is won by whichever writer's conditional put for the next version arrives first. The writer
    that just won is always first to know the version after it, and without a rule it wins that one too:
    writers that lost wait, read the winners and prepare again while it goes on, and some lose until their
    deadline (issue 18: 5 of 480 commits of 16 writers). So, while the table is contended (this process
    lost a race on it in the last :data:`CONTENDED_SECONDS`):

    * a new commit waits, before its first attempt, about as long as reading the winners takes
      (``rebase_seconds``, measured), when a writer waits for the table: one that lost the version of this
      process's newest commit marked its entry (``waitingSince``), and the winner sees the mark when it
      marks the entry complete. A commit that reads the winners marks at its first loss; a blind append
      whose loss the winner's entry settles (it retries at once, with the bytes already in storage) marks
      only after ``logstore.writer.WAIT_MARK_LOSSES`` lost versions. On a store without marks, a race this
      process lost in the last :data:`CONTENDED_SECONDS` counts instead;
    * a commit that lost and reads the winners waits the less the more races it lost, nothing after
      :data:`QUEUE_LENGTH` of them: among the writers ready for a version, the one trying longest goes
      first. One whose loss the winner's entry settles does not wait (a pause would only leave the version
      to others), unless that entry carries the mark of a writer that lost more.

    Nothing changes for a writer alone on its table: it never loses a race, and nobody marks its entries.
    """

    lost_at: float = -math.inf
    rebase_seconds: float = 0.0
    commit_seconds: float = 0.0  # a first attempt that won: what a rebase is reckoned at before one is measured
    # when a group last committed a queued append of this process (group commit; a group of it alone too)
    taken_at: float = -math.inf
    taken_group: int = 0  # how many appends that group held

    def contended(self) -> bool:
        return time.monotonic() - self.lost_at < CONTENDED_SECONDS

    def measured(self, seconds: float) -> None:
        self.rebase_seconds = seconds if self.rebase_seconds == 0 else 0.7 * self.rebase_seconds + 0.3 * seconds

    def measured_commit(self, seconds: float) -> None:
        self.commit_seconds = seconds if self.commit_seconds == 0 else 0.7 * self.commit_seconds + 0.3 * seconds


_CONTENTION: collections.OrderedDict[str, Contention] = collections.OrderedDict()
_CONTENTION_LOCK = threading.Lock()
_CONTENTION_TABLES = 1024


def contention(table: str) -> Contention:
    with _CONTENTION_LOCK:
        found = _CONTENTION.get(table)
        if found is None:
            found = _CONTENTION[table] = Contention()
            while len(_CONTENTION) > _CONTENTION_TABLES:
                _CONTENTION.popitem(last=False)
        _CONTENTION.move_to_end(table)
        return found
