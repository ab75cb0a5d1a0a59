"""A table's entries as a whole (``logstore.entries``): the dry run of recovery says what recovery then does,
entry by entry, in every situation an unfinished entry can be in; the deleted-table error fires only when
``_delta_log/`` is empty; dropping a table's entries refuses a live one and leaves an entry that changed.

The expectation is the recovery algorithm itself (``LogStore.recover``), run right after the plan."""

from __future__ import annotations

import time

import pytest

from logstore import ConfigurationError, RecoveryOutcome, open_log_store
from logstore.entries import deleted_table_error, drop_entries, plan_recovery
from logstore.external import PUBLISHED, CommitEntry

BODY = b'{"commitInfo":{"operation":"WRITE"}}\n'
OTHER = b'{"commitInfo":{"operation":"DELETE"}}\n'


def unfinished(store, version: int, *, temp: bool, final: bytes | None, stuck_since: int | None = None) -> None:
    """Entry ``version`` incomplete, with its temp file (``temp``) and ``N.json`` holding ``final`` (or absent)."""
    path = f".tmp/{version:020d}.json.planned"
    if temp:
        store._put_temp(path, BODY)
    store._put_entry(CommitEntry(store.table_path, version, path, complete=False))
    if stuck_since is not None:
        assert store._mark_stuck(CommitEntry(store.table_path, version, path, complete=False), stuck_since)
    if final is not None:
        store.objects.put(store.commit_key(version), final)


SITUATIONS = {
    "temp file only": (dict(temp=True, final=None), {}, RecoveryOutcome.COPIED_AND_COMPLETED),
    "N.json only": (dict(temp=False, final=BODY), {}, RecoveryOutcome.COMPLETED),
    "both, the same bytes": (dict(temp=True, final=BODY), {}, RecoveryOutcome.COMPLETED),
    "both, other bytes": (dict(temp=True, final=OTHER), {}, RecoveryOutcome.SUPERSEDED),
    "neither, within the grace": (dict(temp=False, final=None), {}, RecoveryOutcome.STUCK_MARKED),
    "neither, no grace": (dict(temp=False, final=None), {"DYNACOMMIT_STUCK_ENTRY_GRACE_SECONDS": "0"},
                          RecoveryOutcome.ABANDONED),
    "stuck, past the grace": (dict(temp=False, final=None, stuck_since=int(time.time()) - 120), {},
                              RecoveryOutcome.ABANDONED),
}


@pytest.mark.parametrize("situation", sorted(SITUATIONS))
def test_the_plan_of_recovery_is_what_recovery_then_does(situation, table_uri, options):
    setup, extra_options, expected = SITUATIONS[situation]
    store = open_log_store(table_uri, storage_options={**(options or {}), **extra_options})
    store.write(0, BODY)
    PUBLISHED.wait_all()  # entry 0 is marked complete just after write returned
    unfinished(store, 1, **setup)
    (planned,) = plan_recovery(store)
    assert planned.version == 1 and planned.outcome is expected, planned
    assert store.recover(1) is planned.outcome
    after = plan_recovery(store)
    if expected is RecoveryOutcome.STUCK_MARKED:  # marked now, abandoned later
        assert [(p.outcome, p.action.startswith("leave the stuck entry")) for p in after] == [(expected, True)]
    else:
        assert after == []


def test_a_version_without_an_entry_has_nothing_to_recover(store):
    store.write(0, BODY)
    (planned,) = plan_recovery(store, 3)
    assert planned.outcome is RecoveryOutcome.NOTHING_TO_RECOVER and store.recover(3) is planned.outcome


def test_the_deleted_table_error_fires_only_when_the_log_is_empty(store):
    store.write(0, BODY)
    store.write(1, BODY)
    store.wait_finished()  # the temp files' DELETEs, sent on the pool after write returned
    assert deleted_table_error(store) is None  # a live table
    store.objects.delete([store.commit_key(0)])  # a commit gone (log cleanup, or a person): not deleted
    assert deleted_table_error(store) is None
    store.objects.delete([store.commit_key(1)])
    error = deleted_table_error(store)
    assert isinstance(error, ConfigurationError) and "holds 2 entries" in str(error)
    for entry in list(store._all_entries()):
        assert store._drop_entry(entry)
    assert deleted_table_error(store) is None  # nothing left at all: no table, not a deleted one


def test_drop_entries_refuses_a_live_table_and_leaves_an_entry_that_changed(store):
    store.write(0, BODY)
    store.wait_finished()
    with pytest.raises(ConfigurationError, match="is not deleted"):
        drop_entries(store, dry_run=True)
    store.objects.delete([store.commit_key(0)])
    planned = drop_entries(store)
    assert planned.dry_run and [e.version for e in planned.entries] == [0] and planned.dropped == ()
    entry = planned.entries[0]
    changed = CommitEntry(entry.table_path, entry.version, entry.temp_path, complete=not entry.complete)
    assert not store._drop_entry(changed)  # not as read: left alone
    done = drop_entries(store, dry_run=False)
    assert done.dropped == (0,) and list(store._all_entries()) == []
