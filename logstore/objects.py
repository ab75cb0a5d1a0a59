"""Object storage seen by the log store and the table layer: one bucket, keys, bytes.

Two implementations share this interface: :class:`logstore.s3.S3ObjectStore` (boto3) and
:class:`MemoryObjectStore` (a dict, for unit tests of the real algorithms). Both give S3's guarantees:
read-after-write consistency, consistent listing in key order, ``put(if_absent=True)`` as an atomic
put-if-absent (S3 ``If-None-Match: *``), and multipart uploads that are invisible until completed.
"""

from __future__ import annotations

import abc
import hashlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from logstore import deadline, readonly
from logstore.errors import ObjectNotFound


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified_ms: int


@dataclass(frozen=True)
class UploadInfo:
    """An incomplete multipart upload."""

    key: str
    upload_id: str
    initiated_ms: int


@dataclass(frozen=True)
class NewUpload:
    """A multipart upload just started. ``retried`` is True when the request was sent more than once: an
    earlier attempt may have started another upload of the same key, which nobody will ever complete."""

    upload_id: str
    retried: bool = False


@dataclass(frozen=True)
class Part:
    number: int
    etag: str


class ObjectStore(abc.ABC):
    """Keys and bytes in one bucket. Missing keys raise :class:`ObjectNotFound` (a FileNotFoundError)."""

    bucket: str

    @abc.abstractmethod
    def get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and its entity tag (S3's ETag), for a later ``put(if_match=tag)``."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's info, or None when it does not exist."""

    @abc.abstractmethod
    def put(self, key: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        """Write ``body``. With ``if_absent`` the write is atomic put-if-absent and returns False when the
        key already exists (nothing written); with ``if_match`` it is an atomic compare-and-swap (S3
        ``If-Match``) and returns False when the object is not the one of that tag any more (changed or
        gone; nothing written). Otherwise it returns True."""

    def put_tagged(self, key: str, body: bytes, *, if_absent: bool = False,
                   if_match: str | None = None) -> tuple[bool, str | None]:
        """:meth:`put`, and the entity tag of the bytes written (what :meth:`get_tagged` would answer for
        them, for a later ``put(if_match=tag)``; None when nothing was written or the store named none)."""
        return self.put(key, body, if_absent=if_absent, if_match=if_match), None

    @abc.abstractmethod
    def delete(self, keys: Sequence[str]) -> None:
        """Delete keys; missing keys are fine."""

    @abc.abstractmethod
    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order, after ``start_after`` if given."""

    @abc.abstractmethod
    def create_upload(self, key: str) -> NewUpload:
        """Start a multipart upload of ``key``."""

    @abc.abstractmethod
    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        """Upload part ``number`` (1-based); returns its ETag."""

    @abc.abstractmethod
    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> None:
        """Make the upload visible as ``key``. Raises ObjectNotFound if the upload is gone."""

    @abc.abstractmethod
    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort the upload; an already finished or aborted upload is fine."""

    @abc.abstractmethod
    def list_uploads(self, prefix: str) -> list[UploadInfo]:
        """Incomplete multipart uploads whose key starts with ``prefix``."""

    def copy_from(self, source: ObjectStore, source_key: str, key: str, *, size: int | None = None) -> None:
        """Copy ``source``'s object ``source_key`` to ``key`` here (``size``: its size, when known). Here:
        through this process; a store that can copy server-side (S3's CopyObject, when ``source`` is reached
        with the same connection settings) does. Raises ObjectNotFound when the source object is gone."""
        self.put(key, source.get(source_key))


@dataclass
class _Upload:
    key: str
    initiated_ms: int
    parts: dict[int, tuple[str, bytes]] = field(default_factory=dict)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _etag(body: bytes) -> str:
    """The ETag S3 gives an object PUT in one piece: the MD5 of its bytes, quoted."""
    return '"' + hashlib.md5(body).hexdigest() + '"'  # noqa: S324 - S3's ETag, not a security hash


class MemoryObjectStore(ObjectStore):
    """A bucket in process memory, thread-safe, with S3's semantics (used by unit tests). Every request
    checks the current deadline first, as S3 requests do (logstore/deadline.py)."""

    def __init__(self, bucket: str = "memory"):
        self.bucket = bucket
        self._objects: dict[str, tuple[bytes, int]] = {}
        self._uploads: dict[str, _Upload] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes:
        deadline.check()
        with self._lock:
            try:
                return self._objects[key][0]
            except KeyError:
                raise ObjectNotFound(f"memory://{self.bucket}/{key} does not exist") from None

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        body = self.get(key)
        return body, _etag(body)

    def head(self, key: str) -> ObjectInfo | None:
        deadline.check()
        with self._lock:
            found = self._objects.get(key)
        return None if found is None else ObjectInfo(key, len(found[0]), found[1])

    def put(self, key: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        return self.put_tagged(key, body, if_absent=if_absent, if_match=if_match)[0]

    def put_tagged(self, key: str, body: bytes, *, if_absent: bool = False,
                   if_match: str | None = None) -> tuple[bool, str | None]:
        deadline.check()
        readonly.check("memory:PutObject")
        with self._lock:
            if if_absent and key in self._objects:
                return False, None
            if if_match is not None and (key not in self._objects or _etag(self._objects[key][0]) != if_match):
                return False, None
            self._objects[key] = (bytes(body), _now_ms())
            return True, _etag(body)

    def delete(self, keys: Sequence[str]) -> None:
        deadline.check()
        readonly.check("memory:DeleteObjects")
        with self._lock:
            for key in keys:
                self._objects.pop(key, None)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        deadline.check()
        with self._lock:
            items = sorted((k, len(v[0]), v[1]) for k, v in self._objects.items() if k.startswith(prefix))
        for key, size, modified in items:
            if start_after is None or key > start_after:
                yield ObjectInfo(key, size, modified)

    def create_upload(self, key: str) -> NewUpload:
        deadline.check()
        readonly.check("memory:CreateMultipartUpload")
        upload_id = uuid.uuid4().hex
        with self._lock:
            self._uploads[upload_id] = _Upload(key, _now_ms())
        return NewUpload(upload_id)

    def upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        deadline.check()
        readonly.check("memory:UploadPart")
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        with self._lock:
            upload = self._uploads.get(upload_id)
            if upload is None or upload.key != key:
                raise ObjectNotFound(f"upload {upload_id} of {key} does not exist")
            upload.parts[number] = (etag, bytes(body))
        return etag

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> None:
        deadline.check()
        readonly.check("memory:CompleteMultipartUpload")
        with self._lock:
            upload = self._uploads.get(upload_id)
            if upload is None or upload.key != key:
                raise ObjectNotFound(f"upload {upload_id} of {key} does not exist")
            chunks = []
            for part in parts:
                stored = upload.parts.get(part.number)
                if stored is None or stored[0] != part.etag:
                    raise ValueError(f"part {part.number} of upload {upload_id} does not match its ETag")
                chunks.append(stored[1])
            del self._uploads[upload_id]
            self._objects[key] = (b"".join(chunks), _now_ms())

    def abort_upload(self, key: str, upload_id: str) -> None:
        deadline.check()
        readonly.check("memory:AbortMultipartUpload")
        with self._lock:
            self._uploads.pop(upload_id, None)

    def list_uploads(self, prefix: str) -> list[UploadInfo]:
        deadline.check()
        with self._lock:
            return sorted(
                (UploadInfo(u.key, uid, u.initiated_ms) for uid, u in self._uploads.items()
                 if u.key.startswith(prefix)),
                key=lambda u: (u.key, u.upload_id),
            )
