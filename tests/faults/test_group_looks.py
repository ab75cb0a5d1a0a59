"""A queued append's look at its own item is one conditional DeleteItem that deletes the item when a group
claimed it (issue 23): its answer lost through the fault proxy, the look sent again finds nothing, and the
append learns its version from the log. Against moto's DynamoDB; the table is read back by ``deltalake``
(an independent reader)."""

from __future__ import annotations

from collections import Counter

import deltalake

from logstore import open_log_store
from table import Table, write_table
from tests.integration.test_group_commit import hooked, rows  # noqa: F401 - hooked is a fixture
from tests.support.fault_proxy import FaultRule


def test_a_look_that_deleted_its_claimed_item_and_lost_the_answer_learns_its_version_from_the_log(
        s3_uri, storage_options, fault_proxy, hooked, caplog):
    """B loses version 1 to A and queues; right then C (another client, not through the proxy) wins version 2
    and takes B. B's look deletes its claimed item, and the proxy drops the answer after moto applied it: the
    SDK sends the look again, which finds nothing. B reads the versions after its snapshot and is committed at
    version 2, with its rows once; the queue is empty."""
    write_table(s3_uri, rows("creator"), storage_options=storage_options)
    proxied = fault_proxy.storage_options(storage_options)
    rivals = {
        "logstore.write.before_put_entry": lambda: write_table(Table(s3_uri, storage_options=storage_options),
                                                               rows("a")),
        "table.group.after_queued": lambda: write_table(Table(s3_uri, storage_options=storage_options), rows("c")),
    }
    results = {}

    def hook(name):
        run = rivals.pop(name, None)
        if run is not None:
            results[name] = run()
            if name == "table.group.after_queued":
                fault_proxy.set_faults([FaultRule("drop_after", 1.0, service="dynamodb", operation="DeleteItem",
                                                  limit=1)])

    hooked(hook)
    caplog.set_level("INFO", logger="table.log.group_member")
    b = write_table(Table(s3_uri, storage_options=proxied), rows("b"))
    hooked(None)
    dropped = [e for e in fault_proxy.events() if e.operation == "DeleteItem"]
    assert len(dropped) == 1 and dropped[0].kind == "drop_after"
    assert b.version == results["table.group.after_queued"].version == 2
    assert [r for r in caplog.records if "is gone before its outcome was learned" in r.getMessage()]
    peer = deltalake.DeltaTable(s3_uri, storage_options=storage_options)
    assert Counter(peer.to_pyarrow_table(columns=["writer"]).column("writer").to_pylist()) == {
        "creator": 2, "a": 2, "b": 2, "c": 2}
    assert peer.version() == 2
    store = open_log_store(s3_uri, storage_options=storage_options)
    store.wait_finished(10)
    assert store.queued() == []
