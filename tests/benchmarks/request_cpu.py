"""Client CPU per request of the candidate HTTP paths for the hot S3 and DynamoDB requests.

    python -m tests.benchmarks.request_cpu [--server servers|moto] [--count 300] [--rounds 3]

Against the same running servers, one after another and in ``--rounds`` alternating rounds, each
candidate sends ``--count`` of each request (PutObject of 1 KiB, GetObject of it, DynamoDB GetItem); the
figure is this process's CPU (``time.process_time``, user + system) per request, best round:

- ``botocore``: the boto3 clients the project used (standard retries, the before-send hook);
- ``botocore-signer``: botocore's own ``SigV4Auth``/``S3SigV4Auth`` on an ``AWSRequest``, sent over a
  reused urllib3 pool;
- ``lean``: logstore/lean.py (SigV4 with the signing key cached, urllib3 pool);
- ``obstore`` (S3 only; the Rust object_store through its Python binding) and ``awscrt`` (the AWS CRT's
  signer and HTTP client), when importable: neither is a dependency of the project
  (``pip install --target DIR obstore awscrt`` and ``PYTHONPATH=DIR`` to include them).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid


def _candidates(stack, options) -> dict:
    import boto3
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import urllib3
    from botocore.config import Config

    from logstore import aws
    from logstore.options import StorageOptions

    resolved = StorageOptions.resolve(options)
    endpoint, ddb_endpoint = resolved.endpoint_url, resolved.dynamodb_endpoint_url
    creds = botocore.credentials.Credentials(resolved.access_key_id, resolved.secret_access_key)
    bucket, table = stack.bucket, options["DELTA_DYNAMO_TABLE_NAME"] if "DELTA_DYNAMO_TABLE_NAME" in options \
        else resolved.ddb_table_name
    key = f"cpu/{uuid.uuid4().hex}"
    body = os.urandom(1024)
    ddb_key = {"tablePath": {"S": "s3://cpu/none"}, "fileName": {"S": "00000000000000000000.json"}}
    found: dict = {}

    os.environ["DYNACOMMIT_AWS_CLIENT"] = "botocore"
    aws._clients.clear()
    s3b, ddbb = aws.s3_client(resolved), aws.dynamodb_client(resolved)
    found["botocore"] = {
        "put": lambda: s3b.put_object(Bucket=bucket, Key=key, Body=body),
        "get": lambda: s3b.get_object(Bucket=bucket, Key=key)["Body"].read(),
        "getitem": lambda: ddbb.get_item(TableName=table, Key=ddb_key, ConsistentRead=True),
    }
    os.environ["DYNACOMMIT_AWS_CLIENT"] = "lean"
    aws._clients.clear()
    s3l, ddbl = aws.s3_client(resolved), aws.dynamodb_client(resolved)
    found["lean"] = {
        "put": lambda: s3l.put_object(Bucket=bucket, Key=key, Body=body),
        "get": lambda: s3l.get_object(Bucket=bucket, Key=key)["Body"].read(),
        "getitem": lambda: ddbl.get_item(TableName=table, Key=ddb_key, ConsistentRead=True),
    }

    pool = urllib3.PoolManager(maxsize=4, retries=False)
    s3_signer = botocore.auth.S3SigV4Auth(creds, "s3", resolved.region)
    ddb_signer = botocore.auth.SigV4Auth(creds, "dynamodb", resolved.region)

    def signed(signer, method, url, data=b"", headers=None):
        request = botocore.awsrequest.AWSRequest(method=method, url=url, data=data, headers=headers or {})
        signer.add_auth(request)
        prepared = request.prepare()
        r = pool.urlopen(method, prepared.url, body=prepared.body, headers=dict(prepared.headers), retries=False)
        if r.status >= 300:
            raise RuntimeError(f"{method} {url}: {r.status} {r.data[:200]!r}")
        return r.data

    ddb_body = json.dumps({"TableName": table, "Key": ddb_key, "ConsistentRead": True}).encode()
    found["botocore-signer"] = {
        "put": lambda: signed(s3_signer, "PUT", f"{endpoint}/{bucket}/{key}", body),
        "get": lambda: signed(s3_signer, "GET", f"{endpoint}/{bucket}/{key}"),
        "getitem": lambda: signed(ddb_signer, "POST", ddb_endpoint + "/", ddb_body,
                                  {"Content-Type": "application/x-amz-json-1.0",
                                   "X-Amz-Target": "DynamoDB_20120810.GetItem"}),
    }
    try:
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=endpoint, region=resolved.region, access_key_id=resolved.access_key_id,
                        secret_access_key=resolved.secret_access_key, virtual_hosted_style_request=False,
                        client_options={"allow_http": True})
        found["obstore"] = {
            "put": lambda: obstore.put(store, key, body),
            "get": lambda: bytes(obstore.get(store, key).bytes()),
        }
    except ImportError:
        pass
    try:
        found.update(_awscrt(endpoint, ddb_endpoint, resolved, bucket, key, body, ddb_body))
    except ImportError:
        pass
    return found


def _awscrt(endpoint, ddb_endpoint, resolved, bucket, key, body, ddb_body) -> dict:
    from urllib.parse import urlsplit

    from awscrt import auth, http, io

    elg = io.EventLoopGroup(1)
    resolver = io.DefaultHostResolver(elg)
    bootstrap = io.ClientBootstrap(elg, resolver)
    provider = auth.AwsCredentialsProvider.new_static(resolved.access_key_id, resolved.secret_access_key)

    def connection(url):
        parts = urlsplit(url)
        return http.HttpClientConnection.new(host_name=parts.hostname, port=parts.port,
                                             bootstrap=bootstrap).result(10), parts.netloc

    conns = {"s3": connection(endpoint), "dynamodb": connection(ddb_endpoint)}

    def send(service, method, path, data, headers):
        import io as pyio

        conn, host = conns[service]
        if not conn.is_open():  # the server closed it (keep-alive limit): a new one
            conns[service] = connection(endpoint if service == "s3" else ddb_endpoint)
            conn, host = conns[service]
        request = http.HttpRequest(method, path, http.HttpHeaders([("host", host), *headers]),
                                   pyio.BytesIO(data) if data else None)
        if data:
            request.headers.add("content-length", str(len(data)))
        config = auth.AwsSigningConfig(
            algorithm=auth.AwsSigningAlgorithm.V4, signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
            credentials_provider=provider, region=resolved.region, service=service,
            signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256 if service == "s3"
            else auth.AwsSignedBodyHeaderType.NONE)
        auth.aws_sign_request(request, config).result(10)
        chunks: list[bytes] = []
        stream = conn.request(request, on_body=lambda chunk, **_: chunks.append(chunk))
        stream.activate()
        status = stream.completion_future.result(10)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status}")
        return b"".join(chunks)

    return {"awscrt": {
        "put": lambda: send("s3", "PUT", f"/{bucket}/{key}", body, []),
        "get": lambda: send("s3", "GET", f"/{bucket}/{key}", b"", []),
        "getitem": lambda: send("dynamodb", "POST", "/", ddb_body,
                                [("content-type", "application/x-amz-json-1.0"),
                                 ("x-amz-target", "DynamoDB_20120810.GetItem")]),
    }}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.request_cpu")
    parser.add_argument("--server", choices=("servers", "moto"), default="servers")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tests.benchmarks.harness.driver import start_stack

    stack = start_stack(args.server)
    try:
        candidates = _candidates(stack, stack.options)
        for fns in candidates.values():  # warm up: connections open, the object exists
            for fn in fns.values():
                fn()
        best: dict = {}
        for _ in range(args.rounds):
            for name, fns in candidates.items():
                for op, fn in fns.items():
                    start = time.process_time()
                    for _ in range(args.count):
                        fn()
                    spent = (time.process_time() - start) * 1000 / args.count
                    best[(name, op)] = min(best.get((name, op), spent), spent)
        for name, fns in candidates.items():
            print(json.dumps({"server": args.server, "candidate": name, "count": args.count,
                              **{f"{op}_cpu_ms": round(best[(name, op)], 3) for op in fns}}), flush=True)
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
