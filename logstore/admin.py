"""Setting up and checking the shared DynamoDB table (``dynacommit create-ddb-table`` and ``doctor``).

The table's shape is fixed by the protocol: HASH ``tablePath`` (S), RANGE ``fileName`` (S), TTL on
``expireTime``. On-demand billing is what we create and recommend: provisioned 5/5 capacity (delta-spark's
auto-create) throttles under concurrent writers and VACUUM (delta-io/delta#3423).

Both return data (:class:`SetupReport`, a list of :class:`Finding`) with a ``to_dict()`` JSON form; the
``dynacommit`` command renders it.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from logstore.aws import ObjectNotFound, call, dynamodb_client, s3_client
from logstore.dynamodb import (
    ATTR_EXPIRE_TIME,
    ATTRIBUTE_DEFINITIONS,
    KEY_SCHEMA,
    key_schema_problems,
)
from logstore.errors import ConfigurationError, StorageError
from logstore.options import StorageOptions, TableUri

BILLING_MODE = "PAY_PER_REQUEST"
TTL_ATTRIBUTE = ATTR_EXPIRE_TIME


class Severity(enum.Enum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    """One check of :func:`doctor`: how it went, what was checked, and what to do about it."""

    severity: Severity
    check: str
    message: str

    def __str__(self) -> str:
        return f"[{self.severity.value}] {self.check}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity.value, "check": self.check, "message": self.message}


@dataclass
class SetupReport:
    """What :func:`create_ddb_table` found and did (with ``dry_run``: what it would do)."""

    table_name: str
    created: bool = False
    """False: the table already existed (with the right keys); in a dry run, whether it would be created."""
    billing_mode: str = BILLING_MODE
    """``PAY_PER_REQUEST`` or ``PROVISIONED`` (of an existing table: as it is, never changed)."""
    ttl_enabled: bool = False
    """TTL on ``expireTime`` is on (in a dry run: would be on)."""
    ttl_was_enabled: bool = False
    """TTL was on before (nothing to change)."""
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"tableName": self.table_name, "dryRun": self.dry_run, "created": self.created,
                "billingMode": self.billing_mode, "ttlEnabled": self.ttl_enabled,
                "ttlWasEnabled": self.ttl_was_enabled, "ttlAttribute": TTL_ATTRIBUTE, "notes": list(self.notes)}


def create_ddb_table(options: StorageOptions, *, wait_seconds: float = 120.0, dry_run: bool = False) -> SetupReport:
    """Create the DynamoDB table if missing, wait until ACTIVE, enable TTL. Idempotent. ``dry_run``: only
    read what exists and report what would be done.

    An existing table with the wrong key schema is an error (nothing is changed). A server that cannot
    set TTL is reported in ``notes`` and the setup continues: without TTL, items simply stay.
    """
    client = dynamodb_client(options)
    name = options.ddb_table_name
    report = SetupReport(name, dry_run=dry_run)
    try:
        description = call("dynamodb:DescribeTable", client.describe_table, where=name, TableName=name)["Table"]
    except ConfigurationError:
        description = None
    if dry_run:
        return _planned(client, report, description)
    if description is None:
        try:
            call("dynamodb:CreateTable", client.create_table, where=name, TableName=name,
                 KeySchema=KEY_SCHEMA, AttributeDefinitions=ATTRIBUTE_DEFINITIONS, BillingMode=BILLING_MODE)
            report.created = True
        except StorageError as exc:
            if exc.code != "ResourceInUseException":  # created by a concurrent caller: fine
                raise
    else:
        wrong = key_schema_problems(description)
        if wrong:
            raise ConfigurationError(f"DynamoDB table {name} exists with the wrong keys: {'; '.join(wrong)}. "
                                     f"Use another DELTA_DYNAMO_TABLE_NAME or recreate it")
        report.billing_mode = _billing_mode(description)
    _wait_active(client, name, wait_seconds)
    try:
        ttl = call("dynamodb:DescribeTimeToLive", client.describe_time_to_live, where=name, TableName=name)
        status = ttl["TimeToLiveDescription"]
        if _ttl_on(status):
            report.ttl_enabled = report.ttl_was_enabled = True
        else:
            call("dynamodb:UpdateTimeToLive", client.update_time_to_live, where=name, TableName=name,
                 TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE})
            report.ttl_enabled = True
    except (StorageError, ConfigurationError) as exc:
        report.notes.append(
            f"could not enable TTL on {TTL_ATTRIBUTE} ({exc}); the table works without it, but completed "
            f"entries are never removed: enable TTL on attribute {TTL_ATTRIBUTE} when the server allows"
        )
    return report


def _planned(client, report: SetupReport, description: dict | None) -> SetupReport:
    """The dry run of :func:`create_ddb_table`: what exists, and what would be created or enabled."""
    name = report.table_name
    report.ttl_enabled = True
    if description is None:
        report.created = True
        return report
    wrong = key_schema_problems(description)
    if wrong:
        raise ConfigurationError(f"DynamoDB table {name} exists with the wrong keys: {'; '.join(wrong)}. "
                                 f"Use another DELTA_DYNAMO_TABLE_NAME or recreate it")
    report.billing_mode = _billing_mode(description)
    try:
        status = call("dynamodb:DescribeTimeToLive", client.describe_time_to_live, where=name, TableName=name)
        report.ttl_was_enabled = _ttl_on(status["TimeToLiveDescription"])
    except (StorageError, ConfigurationError) as exc:
        report.notes.append(f"cannot read the TTL setting ({exc}); --execute tries to enable it")
    return report


def _ttl_on(status: dict) -> bool:
    return status.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and status.get("AttributeName") == TTL_ATTRIBUTE


def _billing_mode(description: dict) -> str:
    # DescribeTable omits BillingModeSummary for tables created provisioned and never switched.
    return (description.get("BillingModeSummary") or {}).get("BillingMode", "PROVISIONED")


def _wait_active(client, name: str, wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    while True:
        status = call("dynamodb:DescribeTable", client.describe_table, where=name, TableName=name)["Table"]
        if status.get("TableStatus") == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise StorageError(f"DynamoDB table {name} is still {status.get('TableStatus')} after "
                               f"{wait_seconds:.0f}s; run the command again later", operation="DescribeTable",
                               retryable=True)
        time.sleep(1.0)


def uri_spellings(uri: TableUri) -> list[str]:
    """Other ways writers may spell the same table's ``tablePath``; each is a separate partition."""
    others = {f"{scheme}://{uri.bucket}" + (f"/{uri.prefix}" if uri.prefix else "")
              for scheme in ("s3", "s3a", "s3n")}
    encoded = quote(uri.prefix, safe="/")
    for scheme in ("s3", "s3a"):
        others.add(f"{scheme}://{uri.bucket}/{encoded}" if encoded else f"{scheme}://{uri.bucket}")
        others.add(f"{scheme}://{uri.bucket}/{uri.prefix}/" if uri.prefix else f"{scheme}://{uri.bucket}/")
    others.discard(uri.table_path)
    return sorted(others)


def doctor(options: StorageOptions, uri: TableUri | None = None) -> list[Finding]:
    """Check the DynamoDB table (and the table's bucket and URI spelling if ``uri`` is given)."""
    findings: list[Finding] = []
    client = dynamodb_client(options)
    name = options.ddb_table_name
    try:
        table = call("dynamodb:DescribeTable", client.describe_table, where=name, TableName=name)["Table"]
    except (ConfigurationError, StorageError) as exc:
        return [Finding(Severity.ERROR, "table", f"{exc}")]
    problems = key_schema_problems(table)
    findings.extend(Finding(Severity.ERROR, "key schema", p) for p in problems)
    if not problems:
        findings.append(Finding(Severity.OK, "key schema", "tablePath (S, HASH) + fileName (S, RANGE)"))
    if _billing_mode(table) == BILLING_MODE:
        findings.append(Finding(Severity.OK, "billing", "on-demand (PAY_PER_REQUEST)"))
    else:
        tp = table.get("ProvisionedThroughput", {})
        findings.append(Finding(
            Severity.WARNING, "billing",
            f"provisioned ({tp.get('ReadCapacityUnits')} RCU / {tp.get('WriteCapacityUnits')} WCU): concurrent "
            f"writers and recovery can be throttled; switch to on-demand: aws dynamodb update-table "
            f"--table-name {name} --billing-mode PAY_PER_REQUEST",
        ))
    try:
        ttl = call("dynamodb:DescribeTimeToLive", client.describe_time_to_live, where=name,
                   TableName=name)["TimeToLiveDescription"]
        if _ttl_on(ttl):
            findings.append(Finding(Severity.OK, "ttl", f"enabled on {TTL_ATTRIBUTE}"))
        else:
            findings.append(Finding(
                Severity.WARNING, "ttl",
                f"TTL is {ttl.get('TimeToLiveStatus', 'DISABLED')} (attribute {ttl.get('AttributeName')!r}); "
                f"completed entries pile up forever; run `dynacommit create-ddb-table --execute` to enable it on "
                f"{TTL_ATTRIBUTE}",
            ))
    except (ConfigurationError, StorageError) as exc:
        findings.append(Finding(Severity.WARNING, "ttl", f"cannot read the TTL setting: {exc}"))
    if uri is not None:
        findings.extend(_check_table_uri(options, client, uri))
    return findings


def _check_table_uri(options: StorageOptions, client, uri: TableUri) -> list[Finding]:
    findings = []
    s3 = s3_client(options)
    try:
        call("s3:HeadBucket", s3.head_bucket, where=uri.table_path, Bucket=uri.bucket)
        findings.append(Finding(Severity.OK, "bucket", f"{uri.bucket} is reachable"))
    except (ConfigurationError, StorageError, ObjectNotFound) as exc:
        findings.append(Finding(Severity.ERROR, "bucket", f"bucket {uri.bucket}: {exc}"))
    for other in uri_spellings(uri):
        response = call("dynamodb:Query", client.query, where=other, TableName=options.ddb_table_name,
                        KeyConditionExpression="tablePath = :tp", ExpressionAttributeValues={":tp": {"S": other}},
                        Limit=1, ConsistentRead=True)
        if response.get("Items"):
            findings.append(Finding(
                Severity.WARNING, "uri spelling",
                f"the DynamoDB table also holds entries under tablePath {other!r}: writers spelling the table "
                f"that way do NOT coordinate with writers using {uri.table_path!r}; make every writer use one "
                f"spelling",
            ))
    return findings
