"""The DynamoDB + S3 log store: :class:`ExternalLogStore` whose entries are items of a DynamoDB table.

Item schema (shared with Delta's ``S3DynamoDBLogStore`` and delta-rs <= 1.6.0; not ours to change):
``tablePath`` (S, HASH) table URI without trailing slash; ``fileName`` (S, RANGE) ``{N:020d}.json``;
``tempPath`` (S) relative to ``_delta_log/``; ``complete`` (S) ``"true"``/``"false"``; ``expireTime``
(N, epoch seconds) written only when the entry is marked complete, the table's TTL attribute.

Two attributes are ours, both only on incomplete entries: ``stuckSince`` (N, epoch seconds), set on an
entry whose content is lost (temp file and N.json both gone) until it is abandoned (see
``logstore/external.py``); and ``waitingSince`` (N, epoch seconds), set by a writer that lost the entry's
version, so that the writer that won learns, when it marks the entry complete, that others wait for the
table (taking turns, ``table.log.transaction``). Delta and
delta-rs ignore it: both read items attribute by attribute (``tempPath``, ``complete``, ``expireTime``:
Java's ``getS()``/``getN()`` on named attributes, delta-rs's ``extract_version_from_filename`` and
string lookups) and never reject an item for an attribute they do not know; Delta's unconditional PutItem
that marks an entry complete rewrites the whole item without it, and delta-rs's UpdateItem leaves it.
Marking complete here removes both.

A third is ours on every entry we write: ``commitSummary`` (S, at most 1 KiB, usually a few bytes), what
the commit is in short, written by the table layer (``table.log.summary``), so that a writer that loses the
version judges the winner from the item its refused PutItem returns (``ReturnValuesOnConditionCheckFailure=
ALL_OLD``) without reading ``N.json``. It stays when the entry is marked complete. Delta's recovery, whose
PutItem rewrites the item, drops it; items of Delta and delta-rs writers have none: a loser then reads
``N.json``, as before. Servers that do not return the item with the refusal (dynalite) are said so once per
process; the loser then reads the item with a GetItem, which returns the summary too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from logstore.aws import ConditionFailed, TransactionCanceled, call, dynamodb_client
from logstore.errors import AccessDeniedError, AmbiguousError, ConfigurationError, CorruptLogError, DynacommitError, StorageError
from logstore.external import (
    DEFAULT_EXPIRE_SECONDS,
    CommitEntry,
    ExternalLogStore,
    file_name,
    parse_file_name,
)
from logstore.group import (CLAIMED, EXPIRE_AFTER_CLAIM_UNTIL, WAITING, GroupChanged, GroupClaim, QueuedAppend,
                            queue_key)
from logstore.objects import ObjectStore
from logstore.options import StorageOptions, TableUri

ATTR_TABLE_PATH = "tablePath"
ATTR_FILE_NAME = "fileName"
ATTR_TEMP_PATH = "tempPath"
ATTR_COMPLETE = "complete"
ATTR_EXPIRE_TIME = "expireTime"
ATTR_STUCK_SINCE = "stuckSince"
ATTR_WAITING_SINCE = "waitingSince"
ATTR_SUMMARY = "commitSummary"
# queued appends (logstore/group.py), under tablePath = queue_key(table path), never the table's own
ATTR_GROUP_STATE = "groupState"
ATTR_CLAIMED_BY = "claimedBy"
ATTR_GROUP_BODY = "groupBody"
ATTR_GROUP_INFO = "groupInfo"
ATTR_CLAIM_UNTIL = "claimUntil"
ATTR_LEAD_AFTER = "leadAfter"
ATTR_CLAIMED_AT = "claimedAt"
ATTR_APPENDS_FROM = "appendsFrom"
#: Entries a writer that found its version taken reads at once (the winners since it looked).
ENTRIES_FROM_LIMIT = 32

log = logging.getLogger(__name__)
_NO_ITEM_WARNED: set[str] = set()
_NO_ITEM_LOCK = threading.Lock()
#: (endpoint, table) -> whether it answers TransactWriteItems, probed once per process
_TRANSACTIONS: dict[tuple, bool] = {}
_PROBE_KEY = {ATTR_TABLE_PATH: {"S": "dynacommit-group-probe"}, ATTR_FILE_NAME: {"S": "probe"}}

KEY_SCHEMA = [
    {"AttributeName": ATTR_TABLE_PATH, "KeyType": "HASH"},
    {"AttributeName": ATTR_FILE_NAME, "KeyType": "RANGE"},
]
ATTRIBUTE_DEFINITIONS = [
    {"AttributeName": ATTR_TABLE_PATH, "AttributeType": "S"},
    {"AttributeName": ATTR_FILE_NAME, "AttributeType": "S"},
]


def key_schema_problems(description: dict) -> list[str]:
    """What differs between a DescribeTable result and the protocol's key schema (empty if nothing)."""
    problems = []
    keys = {k["AttributeName"]: k["KeyType"] for k in description.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])}
    for expected in KEY_SCHEMA:
        attr, kind = expected["AttributeName"], expected["KeyType"]
        if keys.get(attr) != kind:
            problems.append(f"expected {attr} as {kind} key, found {keys.get(attr) or 'no such key'}")
        elif types.get(attr) != "S":
            problems.append(f"expected {attr} of type S, found {types.get(attr)}")
    extra = set(keys) - {k["AttributeName"] for k in KEY_SCHEMA}
    if extra:
        problems.append(f"unexpected key attributes {sorted(extra)} (the legacy delta-rs lock table?)")
    return problems


def entry_from_item(item: dict, *, table: str) -> CommitEntry:
    """Parse a DynamoDB item (low-level attribute-value form), naming what is wrong if it is malformed."""
    try:
        name = item[ATTR_FILE_NAME]["S"]
        table_path = item[ATTR_TABLE_PATH]["S"]
    except (KeyError, TypeError):
        raise CorruptLogError(f"table {table}: a DynamoDB item lacks the string keys tablePath/fileName: {item}") from None
    version = parse_file_name(name, table=table)
    temp = item.get(ATTR_TEMP_PATH, {}).get("S")
    complete = item.get(ATTR_COMPLETE, {}).get("S")
    if temp is None or complete not in ("true", "false"):
        raise CorruptLogError(
            f"table {table}: the DynamoDB item for {name} must have tempPath (S) and complete (S, 'true' or "
            f"'false'); found {item}. It was not written by Delta or dynacommit: delete it"
        )
    expire = item.get(ATTR_EXPIRE_TIME, {}).get("N")
    stuck = item.get(ATTR_STUCK_SINCE, {}).get("N")
    waiting = item.get(ATTR_WAITING_SINCE, {}).get("N")
    summary = item.get(ATTR_SUMMARY, {}).get("S")
    return CommitEntry(table_path, version, temp, complete == "true", int(expire) if expire else None,
                       int(stuck) if stuck else None, int(waiting) if waiting else None, summary)


def queued_from_item(item: dict, *, table: str) -> QueuedAppend:
    """Parse a queued append's item (logstore/group.py)."""
    try:
        claimed = item.get(ATTR_CLAIMED_BY, {}).get("N")
        return QueuedAppend(table, item[ATTR_FILE_NAME]["S"], item[ATTR_GROUP_BODY]["S"], item[ATTR_GROUP_INFO]["S"],
                            int(item[ATTR_CLAIM_UNTIL]["N"]), int(item[ATTR_EXPIRE_TIME]["N"]),
                            item[ATTR_GROUP_STATE]["S"], int(claimed) if claimed else None,
                            int(item[ATTR_LEAD_AFTER]["N"]) if ATTR_LEAD_AFTER in item else None,
                            int(item[ATTR_CLAIMED_AT]["N"]) if ATTR_CLAIMED_AT in item else None,
                            int(item[ATTR_APPENDS_FROM]["N"]) if ATTR_APPENDS_FROM in item else None)
    except (KeyError, TypeError, ValueError):
        raise CorruptLogError(f"table {table}: a queued append's DynamoDB item (tablePath {queue_key(table)!r}) "
                              f"lacks groupBody, groupInfo, groupState, claimUntil or expireTime: {item}; it was "
                              f"not written by dynacommit: delete it") from None


class DynamoDBLogStore(ExternalLogStore):
    """Entries in the DynamoDB table ``options.ddb_table_name``; objects in S3."""

    def __init__(self, uri: TableUri, objects: ObjectStore, options: StorageOptions, *,
                 expire_seconds: int = DEFAULT_EXPIRE_SECONDS, stuck_grace_seconds: float | None = None,
                 timeout_seconds: float | None = None):
        super().__init__(uri, objects, options=options, expire_seconds=expire_seconds,
                         stuck_grace_seconds=stuck_grace_seconds, timeout_seconds=timeout_seconds)
        self.ddb_table = options.ddb_table_name

    @property
    def client(self):
        """The process's shared DynamoDB client for these options (logstore/aws.py)."""
        return dynamodb_client(self.options)

    def _call(self, operation: str, fn, version: int | None = None, *, idempotent: bool = False, **kwargs):
        """One DynamoDB call (``idempotent``: a read, tried again while it fails transiently; see
        ``logstore.aws.call``); a ValidationException is checked against the table's key schema, because a
        table with other keys (e.g. delta-rs's legacy lock table) fails every call that way."""
        try:
            return call(operation, fn, where=self._where(version), idempotent=idempotent, TableName=self.ddb_table,
                        **kwargs)
        except StorageError as exc:
            if exc.code == "ValidationException":
                self._raise_if_wrong_schema(exc)
            raise

    def _raise_if_wrong_schema(self, cause: StorageError) -> None:
        try:
            description = call("dynamodb:DescribeTable", self.client.describe_table, where=self._where(),
                               TableName=self.ddb_table)["Table"]
        except (StorageError, ConfigurationError):
            return
        problems = key_schema_problems(description)
        if problems:
            raise ConfigurationError(
                f"DynamoDB table {self.ddb_table} has the wrong key schema for commit entries: "
                f"{'; '.join(problems)}. It needs partition key tablePath (S) and sort key fileName (S): "
                f"create one with `dynacommit create-ddb-table --execute` (and point DELTA_DYNAMO_TABLE_NAME at it); "
                f"`dynacommit doctor` shows the details"
            ) from cause

    def _key(self, version: int) -> dict:
        return {ATTR_TABLE_PATH: {"S": self.table_path}, ATTR_FILE_NAME: {"S": file_name(version)}}

    def _where(self, version: int | None = None) -> str:
        suffix = f" {file_name(version)}" if version is not None else ""
        return f"DynamoDB table {self.ddb_table}, tablePath {self.table_path}{suffix}"

    def _put_entry(self, entry: CommitEntry) -> None:
        item = {
            **self._key(entry.version),
            ATTR_TEMP_PATH: {"S": entry.temp_path},
            ATTR_COMPLETE: {"S": "false"},
        }
        if entry.summary is not None:
            item[ATTR_SUMMARY] = {"S": entry.summary}
        try:
            # ALL_OLD: a lost race learns who holds the version from the refusal itself, without a GetItem
            # (servers that ignore it, dynalite for one, answer without the item: the caller reads it then).
            self._call("dynamodb:PutItem", self.client.put_item, entry.version, Item=item,
                       ConditionExpression="attribute_not_exists(fileName)",
                       ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as failed:
            if failed.item:
                failed.owner = entry_from_item(failed.item, table=self.table_path)
            elif not failed.retried:
                self._say_no_item()
            raise

    def _say_no_item(self) -> None:
        """Once per process and endpoint: this DynamoDB did not return the item with a refused put."""
        endpoint = self.options.dynamodb_endpoint_url or self.options.region or "DynamoDB"
        with _NO_ITEM_LOCK:
            if endpoint in _NO_ITEM_WARNED:
                return
            _NO_ITEM_WARNED.add(endpoint)
        log.info("DynamoDB at %s returns no item with a failed conditional PutItem (it ignores "
                 "ReturnValuesOnConditionCheckFailure=ALL_OLD, as dynalite does): a writer that loses a version "
                 "reads the winning item with a GetItem, one request more per lost race", endpoint)

    def _get_entry(self, version: int) -> CommitEntry | None:
        response = self._call("dynamodb:GetItem", self.client.get_item, version, idempotent=True,
                              Key=self._key(version), ConsistentRead=True)
        item = response.get("Item")
        return None if item is None else entry_from_item(item, table=self.table_path)

    def _latest_entry(self) -> CommitEntry | None:
        response = self._call(
            "dynamodb:Query", self.client.query, idempotent=True, KeyConditionExpression="tablePath = :tp",
            ExpressionAttributeValues={":tp": {"S": self.table_path}},
            ScanIndexForward=False, Limit=1, ConsistentRead=True,
        )
        items = response.get("Items") or []
        return entry_from_item(items[0], table=self.table_path) if items else None

    def _entries_from(self, version: int) -> list[CommitEntry]:
        response = self._call(
            "dynamodb:Query", self.client.query, idempotent=True,
            KeyConditionExpression="tablePath = :tp AND fileName >= :fn",
            ExpressionAttributeValues={":tp": {"S": self.table_path}, ":fn": {"S": file_name(version)}},
            Limit=ENTRIES_FROM_LIMIT, ConsistentRead=True)
        return [entry_from_item(item, table=self.table_path) for item in response.get("Items") or []]

    def _incomplete_entries(self) -> Iterator[CommitEntry]:
        # The filter is applied after the read: the whole partition of the table is read (paged).
        return self._query_entries(FilterExpression="complete = :f",
                                   ExpressionAttributeValues={":tp": {"S": self.table_path}, ":f": {"S": "false"}})

    def _all_entries(self) -> Iterator[CommitEntry]:
        return self._query_entries(ExpressionAttributeValues={":tp": {"S": self.table_path}})

    def _query_entries(self, **conditions) -> Iterator[CommitEntry]:
        kwargs = {"KeyConditionExpression": "tablePath = :tp", "ConsistentRead": True, **conditions}
        while True:
            response = self._call("dynamodb:Query", self.client.query, idempotent=True, **kwargs)
            for item in response.get("Items") or []:
                yield entry_from_item(item, table=self.table_path)
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _complete_entry(self, version: int, expire_time: int) -> bool:
        try:
            response = self._call(
                "dynamodb:UpdateItem", self.client.update_item, version, Key=self._key(version),
                UpdateExpression="SET complete = :t, expireTime = :e REMOVE stuckSince, waitingSince",
                ConditionExpression="complete = :f",
                ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"}, ":e": {"N": str(expire_time)}},
                ReturnValues="ALL_OLD")
        except ConditionFailed:
            return False
        if ATTR_WAITING_SINCE in (response.get("Attributes") or {}):
            self.waited_on.add(version)
        return True

    def _mark_waiting(self, entry: CommitEntry, since: int) -> bool:
        try:
            self._call("dynamodb:UpdateItem", self.client.update_item, entry.version, Key=self._key(entry.version),
                       UpdateExpression="SET waitingSince = :now",
                       ConditionExpression="complete = :f AND attribute_not_exists(waitingSince)",
                       ExpressionAttributeValues={":now": {"N": str(since)}, ":f": {"S": "false"}})
        except ConditionFailed:
            return False
        return True

    def _mark_stuck(self, entry: CommitEntry, since: int) -> bool:
        try:
            self._call("dynamodb:UpdateItem", self.client.update_item, entry.version, Key=self._key(entry.version),
                       UpdateExpression="SET stuckSince = :now",
                       ConditionExpression="complete = :f AND tempPath = :tp AND attribute_not_exists(stuckSince)",
                       ExpressionAttributeValues={":now": {"N": str(since)}, ":f": {"S": "false"},
                                                  ":tp": {"S": entry.temp_path}})
        except ConditionFailed:
            return False
        return True

    def _drop_entry(self, entry: CommitEntry) -> bool:
        try:
            self._call("dynamodb:DeleteItem", self.client.delete_item, entry.version, Key=self._key(entry.version),
                       ConditionExpression="complete = :c AND tempPath = :tp",
                       ExpressionAttributeValues={":c": {"S": "true" if entry.complete else "false"},
                                                  ":tp": {"S": entry.temp_path}})
        except ConditionFailed:
            return False
        return True

    def _abandon_entry(self, entry: CommitEntry) -> bool:
        if entry.stuck_since is None:
            return False
        try:
            self._call("dynamodb:DeleteItem", self.client.delete_item, entry.version, Key=self._key(entry.version),
                       ConditionExpression="complete = :f AND tempPath = :tp AND stuckSince = :seen",
                       ExpressionAttributeValues={":f": {"S": "false"}, ":tp": {"S": entry.temp_path},
                                                  ":seen": {"N": str(entry.stuck_since)}})
        except ConditionFailed:
            return False
        return True

    # ----------------------------------------------------------------- group commit (logstore/group.py)
    def _transactions_supported(self) -> bool:
        """Whether this DynamoDB answers TransactWriteItems, probed once per process and table with a
        transaction of one ConditionCheck on an item nobody writes (it changes nothing). Where it does not
        (dynalite), said once: appends race for their versions as without group commit."""
        key = (self.options.dynamodb_endpoint_url, self.options.region, self.ddb_table)
        known = _TRANSACTIONS.get(key)
        if known is not None:
            return known
        try:
            self._call("dynamodb:TransactWriteItems", self._transact, TransactItems=[{"ConditionCheck": {
                "TableName": self.ddb_table, "Key": _PROBE_KEY,
                "ConditionExpression": "attribute_not_exists(fileName)"}}])
            answer = True
        except AccessDeniedError as exc:
            answer = False
            log.warning("group commit is off in this process: the credentials may not send TransactWriteItems to "
                        "DynamoDB table %s (%s); grant dynamodb:ConditionCheckItem besides PutItem and UpdateItem "
                        "(infra/iam-policy.json) to turn it on", self.ddb_table, exc)
        except (AmbiguousError, ConfigurationError):
            return False  # not known yet: race this time, ask again next time
        except (StorageError, TransactionCanceled, ConditionFailed) as exc:
            answer = False
            log.info("DynamoDB at %s (table %s) does not answer TransactWriteItems (%s): group commit is off "
                        "in this process; contended appends race for a version each (DYNACOMMIT_GROUP_COMMIT)",
                        self.options.dynamodb_endpoint_url or self.options.region, self.ddb_table, exc)
        _TRANSACTIONS[key] = answer
        return answer

    def _transact(self, **kwargs):
        kwargs.pop("TableName", None)  # _call adds it; TransactWriteItems names the table in each item
        return self.client.transact_write_items(**kwargs)

    def _queue_key(self, member_id: str) -> dict:
        return {ATTR_TABLE_PATH: {"S": queue_key(self.table_path)}, ATTR_FILE_NAME: {"S": member_id}}

    def _queue_put(self, item: QueuedAppend) -> None:
        self._call("dynamodb:PutItem", self.client.put_item, Item={
            **self._queue_key(item.member_id),
            ATTR_GROUP_STATE: {"S": WAITING}, ATTR_GROUP_BODY: {"S": item.body}, ATTR_GROUP_INFO: {"S": item.info},
            ATTR_CLAIM_UNTIL: {"N": str(item.claim_until)}, ATTR_EXPIRE_TIME: {"N": str(item.expire_time)}},
            ConditionExpression="attribute_not_exists(fileName)")

    def _queue_items(self) -> list[QueuedAppend]:
        kwargs = {"KeyConditionExpression": "tablePath = :q", "ConsistentRead": True,
                  "ExpressionAttributeValues": {":q": {"S": queue_key(self.table_path)}}}
        found: list[QueuedAppend] = []
        while True:
            response = self._call("dynamodb:Query", self.client.query, idempotent=True, **kwargs)
            found += [queued_from_item(i, table=self.table_path) for i in response.get("Items") or []]
            if "LastEvaluatedKey" not in response or len(found) >= 1000:
                return found
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _queue_get(self, member_id: str) -> QueuedAppend | None:
        response = self._call("dynamodb:GetItem", self.client.get_item, idempotent=True,
                              Key=self._queue_key(member_id), ConsistentRead=True)
        item = response.get("Item")
        return None if item is None else queued_from_item(item, table=self.table_path)

    def _queue_mark(self, member_id: str, version: int) -> bool:
        try:
            self._call("dynamodb:UpdateItem", self.client.update_item, Key=self._queue_key(member_id),
                       UpdateExpression="SET leadAfter = :v", ConditionExpression="groupState = :w",
                       ExpressionAttributeValues={":v": {"N": str(version)}, ":w": {"S": WAITING}})
        except ConditionFailed:
            return False
        return True

    def _queue_delete(self, member_id: str, state: str) -> bool:
        try:
            self._call("dynamodb:DeleteItem", self.client.delete_item, Key=self._queue_key(member_id),
                       ConditionExpression="groupState = :s", ExpressionAttributeValues={":s": {"S": state}})
        except ConditionFailed:
            return False
        return True

    def _queue_take_claimed(self, member_id: str) -> QueuedAppend | None:
        try:
            # Sent again while it fails transiently: a claimed item an earlier attempt deleted reads as gone,
            # and the caller settles a gone item from the log (table.log.group_member).
            response = self._call("dynamodb:DeleteItem", self.client.delete_item, idempotent=True,
                                  Key=self._queue_key(member_id),
                                  ConditionExpression="groupState = :c", ExpressionAttributeValues={
                                      ":c": {"S": CLAIMED}},
                                  ReturnValues="ALL_OLD", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as failed:
            return None if not failed.item else queued_from_item(failed.item, table=self.table_path)
        item = response.get("Attributes")
        return None if not item else queued_from_item(item, table=self.table_path)

    def _claim(self, member_id: str, version: int, now: int | None, claim: GroupClaim) -> dict:
        """The claim of one queued item in the group's transaction: a conditional Put that replaces the waiting
        item with its claimed form (the item layout: logstore/group.py). DynamoDB prices it as the UpdateItem
        that would set the same attributes (the larger of the two items); from then on the member's looks and
        the leaders' Queries read a few hundred bytes, not the append's body."""
        values = {":w": {"S": WAITING}}
        condition = "groupState = :w"
        if now is not None:
            condition += " AND claimUntil > :now"
            values[":now"] = {"N": str(now)}
        item = {**self._queue_key(member_id), ATTR_GROUP_STATE: {"S": CLAIMED}, ATTR_CLAIMED_BY: {"N": str(version)},
                ATTR_GROUP_BODY: {"S": ""}, ATTR_GROUP_INFO: {"S": ""}, ATTR_CLAIM_UNTIL: {"N": str(claim.now)},
                ATTR_EXPIRE_TIME: {"N": str(int(time.time()) + EXPIRE_AFTER_CLAIM_UNTIL)}}
        if claim.at_ms is not None:
            item[ATTR_CLAIMED_AT] = {"N": str(claim.at_ms)}
        if claim.appends_from is not None:
            item[ATTR_APPENDS_FROM] = {"N": str(claim.appends_from)}
        return {"Put": {"TableName": self.ddb_table, "Item": item, "ConditionExpression": condition,
                        "ExpressionAttributeValues": values}}

    def _put_entry_group(self, entry: CommitEntry, claim: GroupClaim) -> None:
        item = {**self._key(entry.version), ATTR_TEMP_PATH: {"S": entry.temp_path}, ATTR_COMPLETE: {"S": "false"}}
        if entry.summary is not None:
            item[ATTR_SUMMARY] = {"S": entry.summary}
        items = [{"Put": {"TableName": self.ddb_table, "Item": item,
                          "ConditionExpression": "attribute_not_exists(fileName)",
                          "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}]
        if claim.own is not None:
            items.append(self._claim(claim.own, entry.version, None, claim))
        items += [self._claim(m, entry.version, claim.now, claim) for m in claim.members]
        try:
            # The token makes the SDK's own retries of an applied transaction answer success (idempotent).
            self._call("dynamodb:TransactWriteItems", self._transact, entry.version, TransactItems=items,
                       ClientRequestToken=entry.temp_path.rsplit(".", 1)[-1][:36])
        except TransactionCanceled as canceled:
            raise self._refusal(entry, claim, canceled) from None

    def _refusal(self, entry: CommitEntry, claim: GroupClaim, canceled: TransactionCanceled) -> Exception:
        """What a canceled group transaction means: the version taken (ConditionFailed with its owner), an item
        not claimable (GroupChanged), or, without reasons, an unknown answer (AmbiguousError: read back)."""
        codes = [str((r or {}).get("Code") or "None") for r in canceled.reasons]
        ids = ([claim.own] if claim.own is not None else []) + list(claim.members)
        if len(codes) != 1 + len(ids):
            return AmbiguousError(f"dynamodb:TransactWriteItems on {self._where(entry.version)}: canceled without "
                                  f"its reasons ({canceled}); read back", operation="dynamodb:TransactWriteItems")
        own_bad = claim.own is not None and codes[1] != "None"
        bad = tuple(i for i, c in zip(ids, codes[1:]) if c != "None" and i != claim.own)
        if codes[0] == "ConditionalCheckFailed" and not own_bad:
            failed = ConditionFailed("dynamodb:TransactWriteItems", retried=canceled.retried,
                                     item=canceled.reasons[0].get("Item"))
            if failed.item:
                failed.owner = entry_from_item(failed.item, table=self.table_path)
            return failed
        if own_bad or bad or codes[0] != "None":
            return GroupChanged(f"dynamodb:TransactWriteItems on {self._where(entry.version)}: canceled "
                                f"({', '.join(codes)})", own=own_bad, members=bad, retried=canceled.retried)
        return AmbiguousError(f"dynamodb:TransactWriteItems on {self._where(entry.version)}: canceled ({codes})",
                              operation="dynamodb:TransactWriteItems")
