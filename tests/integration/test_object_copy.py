"""``ObjectStore.copy_from`` (what a deep clone copies with): server-side on S3 (CopyObject, and UploadPartCopy
ranges above the single-copy limit, shrunk here so that a small object takes that path), through the process
from another store; a missing source object is ObjectNotFound."""

from __future__ import annotations

import os

import pytest

from logstore import open_object_store, s3
from logstore.errors import ObjectNotFound
from logstore.objects import MemoryObjectStore


def test_s3_copies_server_side_in_one_request_or_in_parts(s3_uri, storage_options, monkeypatch):
    store = open_object_store(s3_uri, storage_options=storage_options)
    prefix = s3_uri.split("/", 3)[3]
    body = os.urandom(11 * 1024 * 1024 + 17)
    store.put(f"{prefix}/a.bin", body)
    store.copy_from(store, f"{prefix}/a.bin", f"{prefix}/one.bin", size=len(body))
    monkeypatch.setattr(s3, "_COPY_LIMIT", 1024)
    monkeypatch.setattr(s3, "_COPY_PART", 5 * 1024 * 1024)  # S3's smallest part: three parts here
    store.copy_from(store, f"{prefix}/a.bin", f"{prefix}/parts.bin", size=len(body))
    assert store.get(f"{prefix}/one.bin") == body and store.get(f"{prefix}/parts.bin") == body
    assert store.list_uploads(prefix) == []
    with pytest.raises(ObjectNotFound):
        store.copy_from(store, f"{prefix}/missing.bin", f"{prefix}/never.bin", size=10)
    assert store.head(f"{prefix}/never.bin") is None


def test_a_copy_from_another_kind_of_store_passes_through_the_process(s3_uri, storage_options):
    store = open_object_store(s3_uri, storage_options=storage_options)
    prefix = s3_uri.split("/", 3)[3]
    memory = MemoryObjectStore()
    memory.put("x/y.bin", b"bytes")
    store.copy_from(memory, "x/y.bin", f"{prefix}/y.bin")
    assert store.get(f"{prefix}/y.bin") == b"bytes"
