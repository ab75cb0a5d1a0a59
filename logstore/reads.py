"""Reading the log: numbered versions, the newest one, and the files of ``_delta_log/`` the store does not coordinate.

A reader that passes an incomplete entry finishes it as anyone does (``logstore/recovery.py``); one whose
content is lost stops before it (``logstore/stuck.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from logstore.base import LogFile
from logstore.entry_store import _FILE_NAME, CommitEntry, file_name
from logstore.errors import (
    ArgumentTypeError,
    DynacommitError,
    InvalidArgumentError,
    ObjectNotFound,
    TableNotFoundError,
    VersionNotFoundError,
)
from logstore.steps import STUCK_OUTCOMES, operation

log = logging.getLogger(__name__)

SIDECARS = "_sidecars"
"""The one directory of ``_delta_log/`` whose files ``read_file``/``write_file`` reach: V2 checkpoints keep
their file actions there (PROTOCOL.md, "Sidecar Files")."""


class Reads:
    """The read operations of :class:`logstore.external.ExternalLogStore`."""

    @operation("read_file")
    def read_file(self, name: str) -> bytes | None:
        """The bytes of ``_delta_log/{name}``, or None. InvalidArgumentError for a name with a slash."""
        try:
            return self.objects.get(self._file_key(name))
        except ObjectNotFound:
            return None

    @operation("read_file")
    def read_file_tagged(self, name: str) -> tuple[bytes, str] | None:
        """The bytes of ``_delta_log/{name}`` and their ETag, or None."""
        try:
            return self.objects.get_tagged(self._file_key(name))
        except ObjectNotFound:
            return None

    @operation("write_file")
    def write_file(self, name: str, body: bytes, *, if_absent: bool = False, if_match: str | None = None) -> bool:
        return self._write_file(name, body, if_absent, if_match)[0]

    @operation("write_file")
    def write_file_tagged(self, name: str, body: bytes, *, if_absent: bool = False,
                          if_match: str | None = None) -> tuple[bool, str | None]:
        return self._write_file(name, body, if_absent, if_match)

    def _write_file(self, name: str, body: bytes, if_absent: bool, if_match: str | None) -> tuple[bool, str | None]:
        key = self._file_key(name)
        self._check_flag(if_absent, "if_absent")
        if if_match is not None and not isinstance(if_match, str):
            raise ArgumentTypeError(f"if_match must be a tag (str) from read_file_tagged, got {if_match!r}")
        if if_match is not None and (not if_match or if_absent):
            raise InvalidArgumentError(f"if_match must be a non-empty tag from read_file_tagged and cannot go "
                                       f"with if_absent; got if_match={if_match!r}, if_absent={if_absent}")
        return self.objects.put_tagged(key, self._check_body(body, commit=False), if_absent=if_absent,
                                       if_match=if_match)

    @operation("delete_files")
    def delete_files(self, names: list[str]) -> None:
        self.objects.delete([self._file_key(name) for name in names])

    def list_files(self, *, start_after: str = "") -> Iterator[LogFile]:
        # Temp files live under `.tmp/` ("/" sorts just before "0", so ".tmp0" is past all of them and before
        # every version) or are named `_commit_<uuid>.json.tmp` (delta-rs).
        after = self.log_prefix + max(start_after, ".tmp0")
        for info in self.objects.list(self.log_prefix, start_after=after):
            name = info.key[len(self.log_prefix):]
            if "/" in name or name.endswith(".json.tmp"):
                continue
            yield LogFile(name, info.size, info.last_modified_ms)

    @operation("stat_file")
    def stat_file(self, name: str) -> LogFile | None:
        info = self.objects.head(self._file_key(name))
        return None if info is None else LogFile(name, info.size, info.last_modified_ms)

    def location(self, name: str = "") -> str:
        return f"{self.uri.scheme}://{self.uri.bucket}/{self.log_prefix}{name}"

    def _file_key(self, name: str) -> str:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"a file name in _delta_log/ must be a string, got {type(name).__name__}")
        directory, _, base = name.rpartition("/")
        if not base or base in (".", "..") or directory not in ("", SIDECARS):
            raise InvalidArgumentError(f"{name!r} is not the name of a file directly in _delta_log/ or in "
                                       f"_delta_log/{SIDECARS}/")
        return self.log_prefix + name

    # ----------------------------------------------------------------- contract
    # Each public operation runs under its own deadline (``timeout_seconds``), or an enclosing one if that
    # ends sooner: requests are not sent after it, loops stop at it (logstore/deadline.py).
    @operation("read")
    def read(self, version: int) -> bytes:
        self._check_version(version)
        try:
            return self.objects.get(self.commit_key(version))
        except ObjectNotFound:
            pass
        entry = self._get_entry(version)
        if entry is None:
            raise VersionNotFoundError(
                f"version {version} of table {self.table_path} does not exist"
            )
        outcome = self._finish_as_reader(entry)
        if outcome in STUCK_OUTCOMES:
            raise VersionNotFoundError(self._stuck_message(entry, outcome))
        try:
            return self.objects.get(self.commit_key(version))
        except ObjectNotFound:
            if outcome is None:
                raise VersionNotFoundError(
                    f"version {version} of table {self.table_path} is committed but not published yet (its "
                    f"writer died before writing {file_name(version)}), and this process may not publish it; a "
                    f"writer or `dynacommit recover {self.table_path} --execute` with write permissions does") from None
            # Log cleanup after a checkpoint deletes old commit files legitimately; whether the version is
            # still needed is the reader's call, so this is "not found", with the cause spelled out.
            raise VersionNotFoundError(
                f"version {version} of table {self.table_path} is marked complete in the external store but "
                f"_delta_log/{file_name(version)} is gone: it was deleted after the commit (log cleanup, or "
                f"behind the log's back)"
            ) from None

    @operation("list_from")
    def list_from(self, version: int) -> Iterator[int]:
        self._check_version(version)
        # Starting after the bare digits skips `.tmp/` (it sorts before them) and older versions. The
        # listing is read whole, within the operation's deadline.
        return iter(self._versions_after(self.log_prefix + f"{version:020d}"))

    @operation("latest_version")
    def latest_version(self, *, start: int = 0) -> int:
        """The newest version: one Query for the newest entry, then one LIST of ``_delta_log/`` after it.

        The external store's newest entry is a lower bound, not the answer: TTL deletes items in no set
        order, a person may delete one, and a writer that bypasses the external store (delta-rs >= 1.6.1,
        any plain conditional PUT of N.json) writes no entry at all. So the files after the newest entry's
        N.json are always listed (StartAfter skips ``.tmp/`` and everything older), and the highest version
        wins. Versions found above a live newest entry have no entry: that is warned about once per store,
        naming them. ``start`` is a version the caller knows exists (a checkpoint's): when the entries are
        all older than it (expired), the listing starts there. A newest entry that is stuck (see the module
        docstring) is marked, and counts as the version before it.
        """
        self._check_version(start, "start")
        entry = self._latest_entry()
        floor = -1  # the highest version known to exist
        if entry is not None:
            floor = entry.version
            if not entry.complete:
                outcome = self._finish_as_reader(entry)
                if outcome in STUCK_OUTCOMES:
                    self._warn_stuck(entry, outcome)
                    floor = entry.version - 1
                elif outcome is None and self.objects.head(self.commit_key(entry.version)) is None:
                    floor = entry.version - 1  # not published, and this process may not publish it
        if floor >= start:
            listed = self._versions_after(self.log_prefix + file_name(floor))
        else:
            listed = self._versions_after(self.log_prefix + f"{start:020d}")  # from start itself
            floor = max(floor, start if start > 0 else -1)
        if entry is not None:
            self._warn_unannounced(entry, [v for v in listed if v > entry.version])
        latest = max([floor, *listed])
        if latest < 0:
            raise TableNotFoundError(
                f"no table at {self.table_path}: no log entries under {self.log_prefix} and none in the "
                f"external store"
            )
        return latest

    def _versions_after(self, start_after: str) -> list[int]:
        """Versions of the commit files whose keys sort after ``start_after`` (one LIST, paged)."""
        found = []
        for info in self.objects.list(self.log_prefix, start_after=start_after):
            match = _FILE_NAME.match(info.key[len(self.log_prefix):])
            if match is not None:
                found.append(int(match.group(1)))
        return found

    def _warn_unannounced(self, newest: CommitEntry, versions: list[int]) -> None:
        """Warn (once per store) about commit files above the newest entry that have no entry. Not when the
        newest entry has expired: TTL then removes the newer ones too, in no set order."""
        expired = newest.complete and newest.expire_time is not None and newest.expire_time <= time.time()
        if not versions or expired or "unannounced" in self._warned:
            return
        # A commit that landed between the Query and the LIST has its entry: only versions still without
        # one are another writer's (a GetItem each, on this rare path only, for at most 20 of them).
        try:
            versions = [v for v in versions[:20] if self._get_entry(v) is None] + versions[20:]
        except DynacommitError:
            return  # not known: say nothing rather than something wrong
        if not versions:
            return
        self._warned.add("unannounced")
        shown = ", ".join(map(str, versions[:20])) + (", ..." if len(versions) > 20 else "")
        log.warning(
            "table %s: versions %s exist in %s but have no entry in the external store (its newest entry is "
            "version %d): written by a writer that bypasses DynamoDB (delta-rs >= 1.6.1, a plain conditional "
            "PUT of N.json), or whose entry was deleted. Writers that do not share the DynamoDB table are not "
            "coordinated with this one: make every writer of this table use the same DynamoDB table",
            self.table_path, shown, self.location(), newest.version)
