"""The deployable files in infra/ must say what the code expects (docs that drift cause stale rows)."""

from __future__ import annotations

import json
from pathlib import Path

from logstore.admin import BILLING_MODE, TTL_ATTRIBUTE
from logstore.dynamodb import ATTRIBUTE_DEFINITIONS, KEY_SCHEMA

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_cloudformation_table_matches_the_code():
    template = json.loads((INFRA / "dynamodb-table.json").read_text())
    props = template["Resources"]["CommitTable"]["Properties"]
    assert props["KeySchema"] == KEY_SCHEMA
    assert props["AttributeDefinitions"] == ATTRIBUTE_DEFINITIONS
    assert props["BillingMode"] == BILLING_MODE
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert template["Parameters"]["TableName"]["Default"] == "delta_log"


def test_iam_policy_grants_every_dynamodb_call_the_log_store_makes():
    policy = json.loads((INFRA / "iam-policy.json").read_text())
    granted = {a for s in policy["Statement"] for a in s["Action"]}
    source = "".join(p.read_text() for p in (INFRA.parent / "logstore").glob("*.py"))
    import re

    used = {f"dynamodb:{m}" for m in re.findall(r'"dynamodb:(\w+)"', source)}
    used |= {f"s3:{m}" for m in re.findall(r'"s3:(\w+)"', source)}
    # S3 API names that map to differently named IAM actions
    iam_name = {"s3:HeadObject": "s3:GetObject", "s3:DeleteObjects": "s3:DeleteObject",
                "s3:ListObjectsV2": "s3:ListBucket", "s3:CreateMultipartUpload": "s3:PutObject",
                "s3:UploadPart": "s3:PutObject", "s3:CompleteMultipartUpload": "s3:PutObject",
                "s3:ListMultipartUploads": "s3:ListBucketMultipartUploads", "s3:HeadBucket": "s3:ListBucket",
                "s3:CreateBucket": None,
                # a copy is authorized as s3:GetObject of the source and s3:PutObject of the copy (both granted)
                "s3:CopyObject": "s3:PutObject", "s3:UploadPartCopy": "s3:PutObject",
                # a transaction is authorized item by item: PutItem, UpdateItem and (the probe) ConditionCheckItem
                "dynamodb:TransactWriteItems": "dynamodb:ConditionCheckItem"}
    needed = {iam_name.get(a, a) for a in used} - {None}
    assert needed <= granted, needed - granted


def test_lifecycle_rules_abort_uploads_and_expire_only_temp_files():
    rules = json.loads((INFRA / "s3-lifecycle.json").read_text())["Rules"]
    aborts = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    expiries = [r for r in rules if "Expiration" in r]
    assert aborts and aborts[0]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] >= 7
    assert all(r["Filter"]["Prefix"].endswith("_delta_log/.tmp/") for r in expiries)
