"""Client CPU per SigV4 signature of the hot requests, for each candidate signer; no server needed.

    python -m tests.benchmarks.signing_cpu [--count 5000] [--rounds 5]

Each candidate signs ``--count`` of each request (a DynamoDB PutItem of a commit entry, an S3 PutObject of
1 KiB over plain HTTP, whose payload is hashed, and an S3 GetObject) and hands back the headers to send,
in ``--rounds`` alternating rounds; the figure is this process's CPU (``time.process_time``) per
signature, best round:

- ``lean``: the signing step of logstore/lean.py as it is in this checkout (``_Signer.sign``: botocore's
  signer since the request layer was redone; before, a hand-written one with a different signature);
- ``botocore``: botocore's ``SigV4Auth`` / ``S3SigV4Auth`` on an ``AWSRequest``, used directly;
- ``awscrt``: the AWS CRT's signer (``awscrt.auth.aws_sign_request`` on an ``awscrt.http.HttpRequest``),
  when importable (not a dependency: ``pip install --target DIR awscrt`` and ``PYTHONPATH=DIR``).
"""

from __future__ import annotations

import argparse
import json
import time

ACCESS_KEY, SECRET_KEY, REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1"
DDB_BODY = json.dumps({
    "TableName": "delta_log", "ConditionExpression": "attribute_not_exists(fileName)",
    "Item": {"tablePath": {"S": "s3://bucket/tables/events"}, "fileName": {"S": "00000000000000000042.json"},
             "tempPath": {"S": ".tmp/00000000000000000042.json.6f1c2d7e-2b7a-4c55-9d1e-3f7c5b8a9e10"},
             "complete": {"S": "false"}, "commitTime": {"N": "1764290000000"}}}, separators=(",", ":")).encode()
S3_BODY = bytes(range(256)) * 4
KEY = "tables/events/_delta_log/.tmp/00000000000000000042.json.6f1c2d7e"


def _requests() -> dict:
    """name: (service, method, url, headers, body)."""
    return {
        "ddb_putitem": ("dynamodb", "POST", "http://127.0.0.1:8000/",
                        {"content-type": "application/x-amz-json-1.0", "x-amz-target": "DynamoDB_20120810.PutItem",
                         "content-length": str(len(DDB_BODY))}, DDB_BODY),
        "s3_put": ("s3", "PUT", f"http://127.0.0.1:8333/bucket/{KEY}",
                   {"content-length": str(len(S3_BODY)), "if-none-match": "*",
                    "x-amz-checksum-crc32": "AAAAAA=="}, S3_BODY),
        "s3_get": ("s3", "GET", f"http://127.0.0.1:8333/bucket/{KEY}", {}, b""),
    }


def _lean() -> dict:
    import botocore.credentials

    from logstore import lean

    creds = botocore.credentials.ReadOnlyCredentials(ACCESS_KEY, SECRET_KEY, None)
    signers = {service: lean._Signer(service, REGION, lambda: creds) for service in ("s3", "dynamodb")}

    def sign(service, method, url, headers, body):
        return signers[service].sign(method, url, headers, body)

    return {"lean": sign}


def _botocore() -> dict:
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    creds = botocore.credentials.Credentials(ACCESS_KEY, SECRET_KEY)
    signers = {"s3": botocore.auth.S3SigV4Auth(creds, "s3", REGION),
               "dynamodb": botocore.auth.SigV4Auth(creds, "dynamodb", REGION)}

    def sign(service, method, url, headers, body):
        request = botocore.awsrequest.AWSRequest(method=method, url=url, headers=headers, data=body)
        signers[service].add_auth(request)
        return dict(request.headers.items())

    return {"botocore": sign}


class CrtSigner:
    """The AWS CRT's SigV4 signer behind the interface of logstore/lean.py's ``_Signer``: what
    ``tests.benchmarks.cpu_per_append --signers awscrt`` puts in its place to measure a whole append with it."""

    def __init__(self, service: str, region: str, credentials_source):
        from awscrt import auth

        self._auth = auth
        self.service = service
        self.region = region
        self._credentials = credentials_source
        self._configs: dict = {}

    def _config(self, creds, unsigned: bool):
        auth = self._auth
        key = (creds, unsigned)
        found = self._configs.get(key)
        if found is None:
            provider = auth.AwsCredentialsProvider.new_static(creds.access_key, creds.secret_key, creds.token)
            s3 = self.service == "s3"
            found = auth.AwsSigningConfig(
                algorithm=auth.AwsSigningAlgorithm.V4, signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
                credentials_provider=provider, region=self.region, service=self.service,
                use_double_uri_encode=not s3, should_normalize_uri_path=not s3,
                signed_body_value=auth.AwsSignedBodyValue.UNSIGNED_PAYLOAD if unsigned else None,
                signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256 if s3
                else auth.AwsSignedBodyHeaderType.NONE)
            self._configs = {key: found}
        return found

    def sign(self, method, url, headers, body, *, unsigned_payload=None):
        import io
        from urllib.parse import urlsplit

        from awscrt import http

        creds = self._credentials()
        parts = urlsplit(url)
        request = http.HttpRequest(method, parts.path + (f"?{parts.query}" if parts.query else ""),
                                   http.HttpHeaders([("host", parts.netloc), *headers.items()]),
                                   io.BytesIO(body) if body else None)
        self._auth.aws_sign_request(request, self._config(creds, unsigned_payload is not None)).result()
        return {k: v for k, v in request.headers if k != "host"}


def _awscrt() -> dict:
    import botocore.credentials

    creds = botocore.credentials.ReadOnlyCredentials(ACCESS_KEY, SECRET_KEY, None)
    signers = {service: CrtSigner(service, REGION, lambda: creds) for service in ("s3", "dynamodb")}

    def sign(service, method, url, headers, body):
        return signers[service].sign(method, url, headers, body)

    return {"awscrt": sign}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.signing_cpu")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    candidates = {**_lean(), **_botocore()}
    try:
        candidates.update(_awscrt())
    except ImportError:
        pass
    requests = _requests()
    for sign in candidates.values():  # warm up, and check that each names the same headers
        for request in requests.values():
            assert "authorization" in {k.lower() for k in sign(*request)}
    best: dict = {}
    for _ in range(args.rounds):
        for name, sign in candidates.items():
            for op, request in requests.items():
                start = time.process_time()
                for _ in range(args.count):
                    sign(*request)
                spent = (time.process_time() - start) * 1e6 / args.count
                best[(name, op)] = min(best.get((name, op), spent), spent)
    for name in candidates:
        print(json.dumps({"candidate": name, "count": args.count,
                          **{f"{op}_cpu_us": round(best[(name, op)], 1) for op in requests}}), flush=True)


if __name__ == "__main__":
    main()
