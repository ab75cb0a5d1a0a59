"""A counting layer around the real in-memory stores: every request of the algorithm is recorded with its
start and end on one logical clock, so tests can count requests and work out how many happen in sequence.
The algorithm itself stays the real one."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from logstore import ObjectInfo, ObjectStore, Part, TableUri, UploadInfo
from logstore.memory import MemoryLogStore, memory_bucket


@dataclass(frozen=True)
class Span:
    """One request: its kind (``head``, ``put_entry``...), and ticks of the logical clock at start and end."""

    kind: str
    start: int
    end: int


class Recorder:
    """Records spans; ``delay`` seconds of simulated service time per request make overlaps visible."""

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.calls: list[str] = []
        self.spans: list[Span] = []
        self._clock = itertools.count()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
            self.spans.clear()

    def run(self, kind: str, fn, *args, **kwargs):
        with self._lock:
            self.calls.append(kind)
            start = next(self._clock)
        try:
            if self.delay:
                time.sleep(self.delay)
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self.spans.append(Span(kind, start, next(self._clock)))

    def sequential_round_trips(self) -> int:
        """The longest chain of requests each of which started after the previous one ended: the number of
        round trips a caller waits for one after another (requests that overlap count once)."""
        spans = sorted(self.spans, key=lambda s: s.start)
        depth: dict[int, int] = {}
        for i, span in enumerate(spans):
            before = [depth[j] for j in range(i) if spans[j].end < span.start]
            depth[i] = 1 + max(before, default=0)
        return max(depth.values(), default=0)


class CountingObjects(ObjectStore):
    """An object store passing every call to ``inner`` through a :class:`Recorder`."""

    def __init__(self, inner: ObjectStore, recorder: Recorder):
        self.inner = inner
        self.bucket = inner.bucket
        self.recorder = recorder

    def get(self, key: str) -> bytes:
        return self.recorder.run("get", self.inner.get, key)

    def head(self, key: str) -> ObjectInfo | None:
        return self.recorder.run("head", self.inner.head, key)

    def put(self, key: str, body: bytes, *, if_absent: bool = False) -> bool:
        return self.recorder.run("put", self.inner.put, key, body, if_absent=if_absent)

    def delete(self, keys: Sequence[str]) -> None:
        self.recorder.run("delete", self.inner.delete, keys)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        return iter(self.recorder.run("list", lambda: list(self.inner.list(prefix, start_after=start_after))))

    def create_upload(self, key: str) -> str:
        return self.inner.create_upload(key)

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        return self.inner.upload_part(key, upload_id, number, body)

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> None:
        self.inner.complete_upload(key, upload_id, parts)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.inner.abort_upload(key, upload_id)

    def list_uploads(self, prefix: str) -> list[UploadInfo]:
        return self.inner.list_uploads(prefix)


class CountingStore(MemoryLogStore):
    """The in-memory log store (real algorithm) with every object and entry request recorded."""

    recorder: Recorder

    @classmethod
    def open(cls, uri: str, *, delay: float = 0.0, **kwargs) -> CountingStore:
        parsed = TableUri.parse(uri)
        recorder = Recorder(delay)
        store = cls(parsed, CountingObjects(memory_bucket(parsed.bucket), recorder), **kwargs)  # type: ignore[arg-type]
        store.recorder = recorder
        return store

    @property
    def calls(self) -> list[str]:
        return self.recorder.calls

    def _put_entry(self, entry):
        return self.recorder.run("put_entry", super()._put_entry, entry)

    def _get_entry(self, version):
        return self.recorder.run("get_entry", super()._get_entry, version)

    def _latest_entry(self):
        return self.recorder.run("latest_entry", super()._latest_entry)

    def _complete_entry(self, version, expire_time):
        return self.recorder.run("complete_entry", super()._complete_entry, version, expire_time)

    def _mark_stuck(self, entry, since):
        return self.recorder.run("mark_stuck", super()._mark_stuck, entry, since)

    def _abandon_entry(self, entry):
        return self.recorder.run("abandon_entry", super()._abandon_entry, entry)
