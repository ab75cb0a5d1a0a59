"""A counting layer around the real in-memory stores: every request of the algorithm is counted and
recorded with its start and end on one logical clock, so tests can count requests and work out how many
happen one after another. The algorithms stay the real ones."""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from logstore import ObjectInfo, ObjectStore, Part, StorageError, TableUri, UploadInfo
from tests.support.memory import MemoryLogStore, memory_bucket
from logstore.objects import NewUpload


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
    """An object store passing every call to ``inner``: the log's requests (get, head, put, delete, list)
    are counted by kind in ``calls``, recorded by ``recorder``, and GETs listed by key in ``got``.

    ``refuse_put(key)`` returning True makes that PUT fail as an S3 error would (a failing bucket); the keys
    PUT are listed in ``put_keys``.
    """

    def __init__(self, inner: ObjectStore, recorder: Recorder | None = None, *,
                 refuse_put: Callable[[str], bool] | None = None):
        self.inner = inner
        self.bucket = inner.bucket
        self.recorder = recorder or Recorder()
        self.refuse_put = refuse_put
        self.calls: collections.Counter[str] = collections.Counter()
        self.got: list[str] = []
        self.put_keys: list[str] = []

    def _request(self, kind: str, fn, *args, **kwargs):
        self.calls[kind] += 1
        return self.recorder.run(kind, fn, *args, **kwargs)

    def get(self, key: str) -> bytes:
        self.got.append(key)
        return self._request("get", self.inner.get, key)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        self.got.append(key)
        return self._request("get", self.inner.get_tagged, key)

    def head(self, key: str) -> ObjectInfo | None:
        return self._request("head", self.inner.head, key)

    def put(self, key: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        if self.refuse_put is not None and self.refuse_put(key):
            raise StorageError(f"s3:PutObject {key}: access denied", operation="s3:PutObject")
        self.put_keys.append(key)
        return self._request("put", self.inner.put, key, body, if_absent=if_absent, if_match=if_match)

    def put_tagged(self, key: str, body: bytes, *, if_absent: bool = False,
                   if_match: str | None = None) -> tuple[bool, str | None]:
        if self.refuse_put is not None and self.refuse_put(key):
            raise StorageError(f"s3:PutObject {key}: access denied", operation="s3:PutObject")
        self.put_keys.append(key)
        return self._request("put", self.inner.put_tagged, key, body, if_absent=if_absent, if_match=if_match)

    def delete(self, keys: Sequence[str]) -> None:
        self._request("delete", self.inner.delete, keys)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        return iter(self._request("list", lambda: list(self.inner.list(prefix, start_after=start_after))))

    def create_upload(self, key: str) -> NewUpload:
        return self.inner.create_upload(key)

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        return self.inner.upload_part(key, upload_id, number, body)

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> None:
        self.inner.complete_upload(key, upload_id, parts)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.inner.abort_upload(key, upload_id)

    def list_uploads(self, prefix: str) -> list[UploadInfo]:
        return self.inner.list_uploads(prefix)


class CountingLogStore(MemoryLogStore):
    """The in-memory log store (real algorithm) over :class:`CountingObjects`; its entry requests are
    counted in ``entry_calls`` and recorded with the objects' on one :class:`Recorder`.

    ``delay``: simulated service time per request. ``objects``: share another store's counting objects.
    Other keyword arguments go to :class:`~tests.support.memory.MemoryLogStore`.
    """

    def __init__(self, uri: str | TableUri, objects: CountingObjects | None = None, *, delay: float = 0.0,
                 refuse_put: Callable[[str], bool] | None = None, **kwargs):
        parsed = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
        if objects is None:
            objects = CountingObjects(memory_bucket(parsed.bucket), Recorder(delay), refuse_put=refuse_put)
        super().__init__(parsed, objects, **kwargs)  # type: ignore[arg-type]
        self.recorder = objects.recorder
        self.entry_calls: collections.Counter[str] = collections.Counter()

    @property
    def calls(self) -> list[str]:
        """Every request so far, objects' and entries', in the order they were sent."""
        return self.recorder.calls

    def _entry_request(self, kind: str, fn, *args):
        self.entry_calls[kind] += 1
        return self.recorder.run(kind, fn, *args)

    def _put_entry(self, entry):
        return self._entry_request("put_entry", super()._put_entry, entry)

    def _get_entry(self, version):
        return self._entry_request("get_entry", super()._get_entry, version)

    def _latest_entry(self):
        return self._entry_request("latest_entry", super()._latest_entry)

    def _entries_from(self, version):
        return self._entry_request("entries_from", super()._entries_from, version)

    def _complete_entry(self, version, expire_time):
        return self._entry_request("complete_entry", super()._complete_entry, version, expire_time)

    def _mark_stuck(self, entry, since):
        return self._entry_request("mark_stuck", super()._mark_stuck, entry, since)

    def _abandon_entry(self, entry):
        return self._entry_request("abandon_entry", super()._abandon_entry, entry)

    def _mark_waiting(self, entry, since):
        return self._entry_request("mark_waiting", super()._mark_waiting, entry, since)

    def commit_reads(self) -> list[str]:
        """Keys of the commit files read so far (temp files excluded)."""
        return [k for k in self.objects.got if k.endswith(".json") and "/.tmp/" not in k]
