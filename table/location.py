"""Where a table is: its URI, storage options, log store and object store, opened once per handle.

A :class:`TableLocation` holds no version of the table: snapshots belong to the transactions that read
them (:mod:`table.transaction`) and to the handles users hold (:class:`table.table.Table`).
"""

from __future__ import annotations

import dataclasses

from logstore import LogStore, ObjectStore, StorageOptions, TableUri, open_log_store, open_object_store
from logstore.errors import InvalidArgumentError

__all__ = ["TableLocation"]


@dataclasses.dataclass(frozen=True, eq=False)
class TableLocation:
    """The stores of the table at ``uri``."""

    uri: TableUri
    storage_options: StorageOptions
    log_store: LogStore
    objects: ObjectStore

    @classmethod
    def open(cls, uri: str | TableUri, storage_options: dict[str, str] | StorageOptions | None = None
             ) -> TableLocation:
        """Raises ``ConfigurationError`` for a malformed URI or an unknown storage option."""
        parsed = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
        options = StorageOptions.resolve(storage_options)
        return cls(parsed, options, open_log_store(parsed, storage_options=options),
                   open_object_store(parsed, storage_options=options))

    @property
    def cache_key(self) -> tuple[str, StorageOptions]:
        return self.uri.table_path, self.storage_options

    def check_not_nested(self) -> None:
        """Refuse to create a table inside another table's directory (one with a ``_delta_log/`` above it):
        the outer table's ``vacuum`` would see the inner table's files as its own unreferenced files."""
        parts = self.uri.prefix.split("/") if self.uri.prefix else []
        for depth in range(len(parts)):
            ancestor = "/".join(parts[:depth])
            log_dir = f"{ancestor}/_delta_log/" if ancestor else "_delta_log/"
            if next(iter(self.objects.list(log_dir)), None) is not None:
                outer = f"{self.uri.scheme}://{self.uri.bucket}" + (f"/{ancestor}" if ancestor else "")
                raise InvalidArgumentError(
                    f"cannot create a table at {self.uri.table_path}: it lies inside the table at {outer} (which "
                    f"has a _delta_log/); write it outside that table's directory")
