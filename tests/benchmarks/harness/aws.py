"""Plain boto3 clients for the harness's own set-up and single-request timings, built from the same
delta-rs style options dict the workers get. Deliberately not the project's clients: the harness must
keep working whatever the code under measurement does with its clients."""

from __future__ import annotations

import boto3
from botocore.config import Config


def s3(options: dict[str, str]):
    return boto3.client(
        "s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name=options.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"], aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3},
                      max_pool_connections=32),
    )


def dynamodb(options: dict[str, str]):
    return boto3.client(
        "dynamodb", endpoint_url=options.get("AWS_ENDPOINT_URL_DYNAMODB") or options["AWS_ENDPOINT_URL"],
        region_name=options.get("AWS_REGION", "us-east-1"), aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
        config=Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=32),
    )
