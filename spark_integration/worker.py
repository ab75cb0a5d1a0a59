"""What every Python task of the Spark path does first in its worker process (``mapInArrow`` functions).

:func:`freeze_imports`: pyspark's reused Python worker runs a full ``gc.collect()`` after every task. Over the
hundred thousand objects that importing pyarrow, pyspark and this package creates, that collection took about
40 ms per task (measured in the MERGE's read and rewrite tasks, BENCHMARKS.md). Once per worker, the objects
alive at a task's start (the imports, mostly) are moved out of the collector's sight (``gc.freeze``): they
are still freed when nothing refers to them; only cycles among them stay, and those are module state that
lives as long as the process anyway.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_imports"]

_frozen = False


def freeze_imports() -> None:
    """Freeze the objects alive now, once per process (see the module docstring)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
