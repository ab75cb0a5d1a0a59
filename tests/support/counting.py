"""Counting wrappers around the real in-memory stores: tests count requests, the algorithms stay real."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Sequence

from logstore import ObjectInfo, ObjectStore, Part, StorageError, TableUri, UploadInfo
from logstore.memory import MemoryLogStore, memory_bucket
from logstore.objects import NewUpload


class CountingObjects(ObjectStore):
    """An object store passing every call to ``inner``, counting them by kind and GETs by key.

    ``refuse_put(key)`` returning True makes that PUT fail as an S3 error would (a failing bucket).
    """

    def __init__(self, inner: ObjectStore, *, refuse_put: Callable[[str], bool] | None = None):
        self.inner = inner
        self.bucket = inner.bucket
        self.refuse_put = refuse_put
        self.calls: collections.Counter[str] = collections.Counter()
        self.got: list[str] = []

    def get(self, key: str) -> bytes:
        self.calls["get"] += 1
        self.got.append(key)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self.calls["head"] += 1
        return self.inner.head(key)

    def put(self, key: str, body: bytes, *, if_absent: bool = False) -> bool:
        if self.refuse_put is not None and self.refuse_put(key):
            raise StorageError(f"s3:PutObject {key}: access denied", operation="s3:PutObject")
        self.calls["put"] += 1
        return self.inner.put(key, body, if_absent=if_absent)

    def delete(self, keys: Sequence[str]) -> None:
        self.calls["delete"] += 1
        self.inner.delete(keys)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        self.calls["list"] += 1
        return self.inner.list(prefix, start_after=start_after)

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
    """The in-memory log store (real algorithm) over :class:`CountingObjects`, counting entry calls."""

    def __init__(self, uri: str | TableUri, *, refuse_put: Callable[[str], bool] | None = None):
        parsed = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
        super().__init__(parsed, CountingObjects(memory_bucket(parsed.bucket), refuse_put=refuse_put))  # type: ignore[arg-type]
        self.entry_calls: collections.Counter[str] = collections.Counter()

    def _latest_entry(self):
        self.entry_calls["latest"] += 1
        return super()._latest_entry()

    def _get_entry(self, version: int):
        self.entry_calls["get"] += 1
        return super()._get_entry(version)

    def _put_entry(self, entry):
        self.entry_calls["put"] += 1
        return super()._put_entry(entry)

    def commit_reads(self) -> list[str]:
        """Keys of the commit files read so far (temp files excluded)."""
        return [k for k in self.objects.got if k.endswith(".json") and "/.tmp/" not in k]
