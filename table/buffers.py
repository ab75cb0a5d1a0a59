"""Bytes handed to Arrow to read as a file (checkpoints, small data files read whole)."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["arrow_buffer"]


def arrow_buffer(body: bytes) -> pa.Buffer:
    """``body`` copied into memory of Arrow's own, for Arrow to read as a file.

    Never ``pa.py_buffer(body)`` for that: a buffer over a Python object needs the GIL to let it go, and a
    dataset scan can drop its last reference on one of Arrow's threads after the read returned. When that
    happens while the interpreter is shutting down, the thread cannot take the GIL, is ended inside a
    C++ destructor, and the process aborts (``terminate called without an active exception``, exit status
    -6) after it did its work. The copy costs about 60 us per MiB; the files read whole are at most 1 MiB.
    """
    buffer = pa.allocate_buffer(len(body))
    memoryview(buffer).cast("B")[:] = body
    return buffer
