"""URI schemes served by registered stores (logstore/schemes.py): what the test suite's memory:// uses."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from logstore import ConfigurationError, TableUri, open_log_store, open_object_store, register_scheme
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from logstore.objects import MemoryObjectStore
from table import Table, write_table
from tests.support.memory import MemoryEntryTable, MemoryLogStore


def test_an_unregistered_scheme_is_refused_naming_the_built_in_ones():
    with pytest.raises(ConfigurationError, match="'s3://bucket/path'"):
        TableUri.parse(f"nowhere{uuid.uuid4().hex[:6]}://b/t")


@pytest.mark.parametrize("name", ["s3", "s3a", "Memory", "9p", "", "with space"])
def test_built_in_and_malformed_scheme_names_cannot_be_registered(name):
    with pytest.raises(InvalidArgumentError, match="cannot be registered"):
        register_scheme(name, log_store=lambda u, o: None, object_store=lambda u, o: None)


def test_factories_must_be_callable():
    with pytest.raises(ArgumentTypeError, match="log_store"):
        register_scheme("bad-factory", log_store=None, object_store=lambda u, o: None)  # type: ignore[arg-type]


def test_a_registered_scheme_serves_log_stores_object_stores_and_tables():
    """A scheme of its own, over a bucket and an entry table of its own: tables written there are read back
    through its stores, and nothing lands in the memory:// scheme's registry."""
    scheme = f"twin{uuid.uuid4().hex[:6]}"
    bucket, entries = MemoryObjectStore("b"), MemoryEntryTable()
    built: list[str] = []

    def log_store(uri, options):
        built.append(uri.scheme)
        return MemoryLogStore(uri, bucket, entries, options=options)

    register_scheme(scheme, log_store=log_store, object_store=lambda uri, options: bucket)
    uri = f"{scheme}://b/t"
    data = pa.table({"id": [1, 2, 3]})
    write_table(uri, data)
    write_table(uri, pa.table({"id": [4]}), mode="append")
    assert open_object_store(uri) is bucket and isinstance(open_log_store(uri), MemoryLogStore)
    assert sorted(Table(uri).to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3, 4]
    assert [e.version for e in entries.entries(TableUri.parse(uri).table_path)] == [0, 1]
    assert built and set(built) == {scheme}
