"""The log store contract and recovery suites of tests/unit/logstore, run on SeaweedFS + dynalite.

The test functions are not copied: every test of those modules that takes the ``store`` or
``open_store`` fixture is collected here again and gets this folder's fixtures (conftest.py). Tests
that build their own in-memory store or inspect classes have nothing to learn from a server and stay
in the unit tier. tests/ has no ``__init__.py`` files, so the modules are imported by path, through
the import system: under pytest its assertion rewriting applies, and a module the unit tier already
imported is reused.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

UNIT_LOGSTORE = Path(__file__).resolve().parent.parent / "unit" / "logstore"
SUITES = ("test_contract", "test_recovery", "test_stuck_entries", "test_stale_reads", "test_temp_sweep", "test_deadlines")
STORE_FIXTURES = {"store", "open_store"}

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def import_suite(name: str) -> ModuleType:
    """``tests/unit/logstore/<name>.py`` as pytest's default (prepend) import mode names it."""
    path = UNIT_LOGSTORE / f"{name}.py"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(loaded.__file__ or "").resolve() == path:
        return loaded
    if loaded is not None:
        raise RuntimeError(f"module name {name!r} is taken by {loaded.__file__}, not {path}")
    spec = None
    for finder in sys.meta_path:  # pytest's assertion-rewriting finder comes first when present
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec(name, [str(UNIT_LOGSTORE)]) if find_spec else None
        if spec is not None:
            break
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def store_tests(module: ModuleType) -> dict[str, object]:
    """The module's test functions that run against a ``store``/``open_store`` fixture."""
    return {
        name: fn for name, fn in vars(module).items()
        if name.startswith("test_") and inspect.isfunction(fn)
        and STORE_FIXTURES & set(inspect.signature(fn).parameters)
    }


def _collect() -> dict[str, object]:
    found: dict[str, object] = {}
    for suite in SUITES:
        tests = store_tests(import_suite(suite))
        clash = found.keys() & tests.keys()
        if clash:
            raise RuntimeError(f"{suite} repeats test names {sorted(clash)} of another suite")
        found.update(tests)
    return found


REUSED = _collect()
globals().update(REUSED)


def test_the_reused_suites_are_not_empty():
    """Guards the re-collection itself: a rename in the unit tier must not silently empty this tier."""
    assert {"test_eight_threads_racing_write_each_body_exactly_once",
            "test_next_reader_finishes_an_entry_won_but_unfinished"} <= REUSED.keys()
    assert len(REUSED) >= 15
