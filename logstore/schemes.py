"""Table URI schemes served by other stores than S3 and DynamoDB, registered by the process that uses them.

``s3://`` and ``s3a://`` are built in. :func:`register_scheme` adds another scheme: ``open_log_store`` and
``open_object_store`` (and so every ``Table``, ``write_table`` and reader) then build the stores of a
``scheme://bucket/path`` URI with the factories given. The test suite registers its in-process stack this
way (``tests/support/memory.py``); nothing is registered by the package itself.

A log store a factory returns must keep the contract of ``logstore/base.py``; the usual way is an
:class:`~logstore.external.ExternalLogStore` whose entry hooks (``logstore/entry_store.py``) are the
backend's, over an :class:`~logstore.objects.ObjectStore`. Readers read the data files of such a table
through its object store.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    from logstore.base import LogStore
    from logstore.objects import ObjectStore
    from logstore.options import StorageOptions, TableUri

BUILT_IN = ("s3", "s3a")
_NAME = re.compile(r"^[a-z][a-z0-9+.-]*$")


@dataclass(frozen=True)
class Scheme:
    """How the stores of a registered scheme's tables are built."""

    name: str
    log_store: Callable[[TableUri, StorageOptions], LogStore]
    object_store: Callable[[TableUri, StorageOptions], ObjectStore]


_lock = threading.Lock()
_registered: dict[str, Scheme] = {}


def register_scheme(scheme: str, *, log_store: Callable[[TableUri, StorageOptions], LogStore],
                    object_store: Callable[[TableUri, StorageOptions], ObjectStore]) -> None:
    """Serve ``scheme://bucket/path`` URIs in this process: ``log_store(uri, options)`` builds the log store of
    a table and ``object_store(uri, options)`` the store of its bucket's objects (``uri`` a parsed
    :class:`~logstore.options.TableUri`, ``options`` the resolved :class:`~logstore.options.StorageOptions`).
    Registering a scheme again replaces its factories. ``s3`` and ``s3a`` cannot be replaced."""
    if not isinstance(scheme, str):
        raise ArgumentTypeError(f"scheme must be a string such as 'memory', got {type(scheme).__name__}")
    if not _NAME.match(scheme) or scheme in BUILT_IN:
        raise InvalidArgumentError(
            f"scheme {scheme!r} cannot be registered: a scheme is lowercase letters, digits, '+', '.' or '-', "
            f"starting with a letter, and {' and '.join(BUILT_IN)} are built in")
    for name, factory in (("log_store", log_store), ("object_store", object_store)):
        if not callable(factory):
            raise ArgumentTypeError(f"{name} must be a function of (uri, options), got {factory!r}")
    with _lock:
        _registered[scheme] = Scheme(scheme, log_store, object_store)


def registered(scheme: str) -> Scheme | None:
    """The registration of ``scheme``, or None (built-in or unknown)."""
    with _lock:
        return _registered.get(scheme)
