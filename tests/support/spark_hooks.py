"""Test hooks of the Spark operations (``spark_integration._hooks``), installed for a block:

    with spark_hooks(task=FailFirstAttempt(tmp_path)):
        builder.execute()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from spark_integration import _hooks


@contextlib.contextmanager
def spark_hooks(*, task: Callable[[Any, Any], None] | None = None,
                staged: Callable[[], None] | None = None) -> Iterator[None]:
    """Run the Spark operations of the block with ``task`` in each rewrite task after it staged and
    ``staged`` on the driver before the commit (see ``spark_integration._hooks``)."""
    previous = _hooks.install(_hooks.Hooks(task=task, staged=staged))
    try:
        yield
    finally:
        _hooks.install(previous)
