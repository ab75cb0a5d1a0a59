"""A pyarrow filesystem for tests that opens through another one and records what was opened, and by
which thread (reads that must not open a file, reads that must fetch on their own pool); optionally, the
first opening of each file gives an empty body, as a read whose response broke off can."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["OpeningRecorder"]


class OpeningRecorder(pafs.FileSystemHandler):
    """Wrap with ``pafs.PyFileSystem(OpeningRecorder(inner))``; read-only."""

    def __init__(self, inner: pafs.FileSystem, *, first_read_empty: bool = False):
        self.inner = inner
        self.first_read_empty = first_read_empty
        self.opened: list[str] = []   # paths, in the order opened
        self.threads: list[str] = []  # the name of the thread that opened each
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.opened.clear()
            self.threads.clear()

    def opened_by(self, thread_prefix: str) -> list[str]:
        """The paths opened by threads whose name starts with ``thread_prefix``."""
        with self._lock:
            return [p for p, t in zip(self.opened, self.threads) if t.startswith(thread_prefix)]

    def __eq__(self, other):
        return other is self

    def __ne__(self, other):
        return other is not self

    def get_type_name(self):
        return "opening-recorder"

    def normalize_path(self, path):
        return self.inner.normalize_path(path)

    def get_file_info(self, paths):
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.inner.get_file_info(selector)

    def open_input_file(self, path):
        with self._lock:
            first = path not in self.opened
            self.opened.append(path)
            self.threads.append(threading.current_thread().name)
        if first and self.first_read_empty:
            return pa.BufferReader(b"")
        return self.inner.open_input_file(path)

    def open_input_stream(self, path):
        return self.open_input_file(path)

    def _read_only(self, *args, **kwargs):
        raise OSError("the recording filesystem is read-only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = _read_only
    move = copy_file = open_output_stream = open_append_stream = _read_only
