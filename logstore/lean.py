"""The lean request path: the hot S3 and DynamoDB requests built here, signed by botocore's SigV4 signer
and sent over one reused urllib3 pool per host, without botocore's per-request client machinery.

A botocore client spends about 2.5-3 ms of CPU on each request (building it from the service model, the
event hooks, the user-agent, parsing the answer through the model); its signer alone about 0.06 ms
(BENCHMARKS.md). The requests of the commit and of the reads are few and simple, so they are built here:

- S3: ``get_object``, ``head_object``, ``put_object`` (``IfNoneMatch`` / ``IfMatch``), ``delete_objects``,
  ``list_objects_v2``;
- DynamoDB: ``put_item``, ``get_item``, ``query``, ``update_item``, ``delete_item``,
  ``transact_write_items`` (the JSON protocol:
  the arguments are the request body as they are).

Every other method (``create_table``, ``create_bucket``, multipart uploads, ...) is the botocore client's
(:attr:`LeanClient.fallback`). The clients answer like botocore's: the same result dictionaries for the
fields the project reads, and the same exceptions (``botocore.exceptions.ClientError`` with ``Error``,
``ResponseMetadata.HTTPStatusCode`` / ``RetryAttempts`` and, for DynamoDB, the ``Item`` of
``ReturnValuesOnConditionCheckFailure=ALL_OLD``; ``EndpointConnectionError``, ``ReadTimeoutError``,
``ConnectionClosedError``, ...), so ``logstore.aws.call`` translates them exactly as before, retried flag
and ambiguity included. Retries follow botocore's standard mode (same attempts, same conditions, same
jittered backoff: ``logstore/retry.py``), and before every attempt the ``before`` hook runs
(``logstore.aws`` passes the one that checks the deadline and counts what is sent).

Credentials: static keys (and session token) from the storage options, else botocore's default chain,
resolved once; refreshable credentials (roles, SSO) are read frozen before each request, and botocore
refreshes them when they near expiry.

``DYNACOMMIT_AWS_CLIENT=botocore`` (environment, read when a client is built) sends everything through
botocore instead, for comparison.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import hashlib
import json
import logging
import os
import threading
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import botocore.auth
import botocore.awsrequest
import botocore.exceptions
import urllib3

from logstore import retry

log = logging.getLogger(__name__)

CLIENT_ENV = "DYNACOMMIT_AWS_CLIENT"
CLIENT_CHOICES = ("lean", "botocore")

_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_DDB_TARGET = "DynamoDB_20120810."
_DDB_CONTENT_TYPE = "application/x-amz-json-1.0"



def choice() -> str:
    """Which client ``DYNACOMMIT_AWS_CLIENT`` asks for (``lean``, the default, or ``botocore``)."""
    from logstore.errors import ConfigurationError

    raw = (os.environ.get(CLIENT_ENV) or "lean").strip().lower()
    if raw not in CLIENT_CHOICES:
        raise ConfigurationError(f"{CLIENT_ENV} must be one of {', '.join(CLIENT_CHOICES)}, got {raw!r}")
    return raw


def proxied(url: str) -> bool:
    """Whether the environment routes ``url`` through an HTTP proxy (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``NO_PROXY``): botocore honours those, the lean client does not, so such clients stay botocore's."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or "")


class _DayKeyMixin:
    """botocore's SigV4 with three repeats of each request's work left out, the algorithm unchanged:

    - the signing key (``AWS4`` + secret, then date, region, service, ``aws4_request``: four HMACs, by
      botocore's own ``_sign``) is derived once per day, not per request: a signer object belongs to one set
      of credentials, region and service (:class:`_Signer` makes a new one when the credentials change);
    - the headers to sign are selected once per request; botocore selects them twice (for the canonical
      request and again for the ``Authorization`` header), and between the two nothing changes them;
    - the payload hash is taken of the request's bytes as they are: botocore reaches them through
      ``AWSRequest.body``, which prepares a whole copy of the request (URL, headers, body) to hand back
      the same bytes (the lean client's bodies are always bytes).
    """

    _HEADERS = "dynacommit_headers_to_sign"
    _day_key: tuple[str, bytes] | None = None

    def add_auth(self, request):
        request.context.pop(self._HEADERS, None)  # a request signed again selects its headers again
        try:
            super().add_auth(request)
        finally:
            request.context.pop(self._HEADERS, None)

    def headers_to_sign(self, request):
        found = request.context.get(self._HEADERS)
        if found is None:
            found = super().headers_to_sign(request)
            request.context[self._HEADERS] = found
        return found

    def payload(self, request):
        data = request.data
        if (not isinstance(data, bytes) or self._is_streaming_checksum_payload(request)
                or not self._should_sha256_sign_payload(request)):
            return super().payload(request)
        return hashlib.sha256(data).hexdigest() if data else botocore.auth.EMPTY_SHA256_HASH

    def signature(self, string_to_sign, request):
        day = request.context["timestamp"][0:8]
        known = self._day_key
        if known is None or known[0] != day:
            key = self._sign(f"AWS4{self.credentials.secret_key}".encode(), day)
            for part in (self._region_name, self._service_name, "aws4_request"):
                key = self._sign(key, part)
            known = (day, key)
            self._day_key = known  # one assignment: threads signing at once see a whole pair
        return self._sign(known[1], string_to_sign, hex=True)


class _SigV4(_DayKeyMixin, botocore.auth.SigV4Auth):
    pass


class _S3SigV4(_DayKeyMixin, botocore.auth.S3SigV4Auth):
    pass


def host_header(url_base: str) -> str:
    """The ``Host`` a request to ``url_base`` (``scheme://host[:port]``) signs and sends: botocore's rule
    (lower case, the port only when it is not the scheme's default)."""
    return botocore.auth._host_from_url(url_base)


class _Signer:
    """SigV4 for one service and region, by botocore's signer (``SigV4Auth``; ``S3SigV4Auth`` for S3, which
    leaves the path as sent and sets ``x-amz-content-sha256``) on the request exactly as it is sent; the
    day's signing key kept (:class:`_DayKeyMixin`)."""

    def __init__(self, service: str, region: str, credentials_source: Callable[[], Any]):
        self.service = service
        self.region = region
        self._credentials = credentials_source
        self._kind = _S3SigV4 if service == "s3" else _SigV4
        self._signer: tuple[Any, botocore.auth.SigV4Auth] | None = None  # (credentials, signer)

    def _for(self, creds: Any) -> botocore.auth.SigV4Auth:
        found = self._signer
        if found is None or found[0] != creds:  # refreshed credentials: a signer (and day key) of their own
            found = (creds, self._kind(creds, self.service, self.region))
            self._signer = found
        return found[1]

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes | None, *,
             unsigned_payload: str | None = None, host: str | None = None) -> dict[str, str]:
        """The headers to send ``headers`` with, ``x-amz-date``, the session token and ``Authorization``
        added (``url`` as sent, already encoded). ``host``: the ``Host`` header to sign and send
        (:func:`host_header` of the URL's base, which the caller keeps); without it botocore signs the URL's
        host, which urllib3 sends. ``unsigned_payload`` names the checksum header that stands for the body
        over TLS (S3 only): the payload is then not hashed, as botocore's S3 client does."""
        creds = self._credentials()
        if creds is None or not creds.access_key or not creds.secret_key:
            raise botocore.exceptions.NoCredentialsError()
        if host is not None:
            headers = {**headers, "host": host}
        request = botocore.awsrequest.AWSRequest(method=method, url=url, headers=headers, data=body or b"")
        if unsigned_payload is not None:
            request.context["checksum"] = {"request_algorithm": {"in": "header", "name": unsigned_payload}}
            request.context["payload_signing_enabled"] = False
        self._for(creds).add_auth(request)
        return dict(request.headers.items())


_NO_RETRIES = urllib3.Retry(False, redirect=False)
"""What urllib3 makes of ``retries=False, redirect=False`` on every request (no retry, no redirect followed;
retries are :meth:`LeanClient._request`'s), made once: ``Retry`` objects are never changed, only copied."""


def _quote(value: str) -> str:
    return quote(value, safe="-_.~")


class _Response:
    __slots__ = ("status", "headers", "data", "attempt")

    def __init__(self, status: int, headers, data: bytes):
        self.status = status
        self.headers = headers
        self.data = data
        self.attempt = 1


class LeanClient:
    """Base of the two clients: endpoint, pool, signing, retries; unknown methods go to ``fallback``."""

    service = ""
    _backoff = retry.REQUEST_S3  # pauses after a failure other than throttling

    def __init__(self, *, endpoint: str, region: str, credentials_source: Callable[[], Any], fallback: Any,
                 before: Callable[[], None], total_attempts: int, read_timeout: float, max_connections: int = 32):
        parts = urlsplit(endpoint)
        self.endpoint = endpoint.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.netloc
        self.base_path = parts.path.rstrip("/")
        self.fallback = fallback
        self._before = before
        self.total_attempts = total_attempts
        self._signer = _Signer(self.service, region, credentials_source)
        self._pool_settings = {"maxsize": max_connections, "block": False, "retries": _NO_RETRIES,
                               "timeout": urllib3.Timeout(connect=10, read=read_timeout)}
        # One connection pool per host (the endpoint's, or a bucket's virtual host): looked up by the URL base
        # without the URL parsing and key building of urllib3's PoolManager on every request.
        self._pools: dict[str, urllib3.HTTPConnectionPool] = {}
        self._hosts: dict[str, str] = {}  # the Host header of each URL base
        self._pools_lock = threading.Lock()

    def _pool_for(self, url_base: str) -> urllib3.HTTPConnectionPool:
        found = self._pools.get(url_base)
        if found is None:
            with self._pools_lock:
                found = self._pools.get(url_base)
                if found is None:
                    found = urllib3.connection_from_url(url_base, **self._pool_settings)
                    self._pools[url_base] = found
        return found

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined here: the requests this client does not build itself.
        return getattr(self.fallback, name)

    def close(self) -> None:
        """Close this client's connections and its botocore client's."""
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        if self.fallback is not None:
            self.fallback.close()

    # one attempt -------------------------------------------------------------------------------------
    def _send(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes | None,
              unsigned_payload: str | None, url_base: str) -> _Response:
        target = f"{path}?{query}" if query else path
        host = self._hosts.get(url_base)
        if host is None:
            host = self._hosts.setdefault(url_base, host_header(url_base))
        signed = self._signer.sign(method, url_base + target, headers, body, unsigned_payload=unsigned_payload,
                                   host=host)
        try:
            r = self._pool_for(url_base).urlopen(method, target, body=body, headers=signed, redirect=False,
                                                 retries=_NO_RETRIES, preload_content=False, assert_same_host=False)
            try:
                # HEAD answers have a Content-Length but no body.
                data = b"" if method == "HEAD" else r.read()
            finally:
                r.release_conn()
        except urllib3.exceptions.ConnectTimeoutError as exc:
            raise botocore.exceptions.ConnectTimeoutError(endpoint_url=url_base, error=exc) from exc
        except urllib3.exceptions.NewConnectionError as exc:
            raise botocore.exceptions.EndpointConnectionError(endpoint_url=url_base, error=exc) from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=url_base, error=exc) from exc
        except urllib3.exceptions.SSLError as exc:
            raise botocore.exceptions.SSLError(endpoint_url=url_base, error=exc) from exc
        except urllib3.exceptions.ProxyError as exc:
            raise botocore.exceptions.ProxyConnectionError(proxy_url=url_base, error=exc) from exc
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.IncompleteRead,
                urllib3.exceptions.DecodeError, ConnectionError) as exc:
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=url_base, error=exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise botocore.exceptions.HTTPClientError(error=exc) from exc
        return _Response(r.status, r.headers, data)

    # an operation with botocore's standard-mode retries -------------------------------------------------
    def _request(self, operation: str, method: str, path: str, query: str, headers: dict[str, str],
                 body: bytes | None, url_base: str, *, unsigned_payload: str | None = None) -> _Response:
        attempt = 1
        while True:
            self._before()
            caught: Exception | None = None
            response: _Response | None = None
            try:
                response = self._send(method, path, query, headers, body, unsigned_payload, url_base)
            except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
                caught = exc
            code = ""
            if log.isEnabledFor(logging.DEBUG):  # never the headers: they carry the signature and token
                log.debug("%s %s%s%s (attempt %d): %s", method, url_base, path, f"?{query}" if query else "",
                          attempt, caught if response is None else response.status)
            if response is not None:
                if response.status < 300:
                    problem = self._check(response)
                    if problem is None:
                        response.attempt = attempt
                        return response
                    caught = problem
                else:
                    code = self._error_code(response)
            status = 0 if response is None else response.status
            policy = retry.REQUEST_THROTTLED if retry.is_throttle(code, status) else self._backoff
            if (caught is None and not retry.is_transient(code, status)) or attempt >= self.total_attempts:
                if caught is not None:
                    raise caught
                assert response is not None
                raise botocore.exceptions.ClientError(self._error_response(response, attempt), operation)
            # Cut at the deadline: the next attempt's ``before`` hook then raises the deadline's error.
            policy.wait(attempt, to_deadline=True)
            attempt += 1

    def _check(self, response: _Response) -> Exception | None:
        """A problem with a 2xx answer that makes it a failed attempt (DynamoDB: its CRC32)."""
        return None

    def _error_code(self, response: _Response) -> str:
        raise NotImplementedError

    def _error_response(self, response: _Response, attempt: int) -> dict:
        raise NotImplementedError

    @staticmethod
    def _metadata(response: _Response, attempt: int) -> dict:
        # urllib3's HTTPHeaderDict as it came: looked up by name in any case, as botocore's lower-cased dict
        # is; not copied on every request, as nothing of ours reads it
        return {"HTTPStatusCode": response.status, "RetryAttempts": attempt - 1, "HTTPHeaders": response.headers}


def _ms_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


def _http_time(text: str) -> dt.datetime:
    """An HTTP date (``Last-Modified``). The form every server sends (RFC 9110's IMF-fixdate, ``Sun, 06 Nov
    1994 08:49:37 GMT``) is read by position; any other form by the standard library's e-mail date parser."""
    if len(text) == 29 and text[3:5] == ", " and text.endswith(" GMT"):
        month = _MONTHS.get(text[8:11])
        if month is not None and text[7] == text[11] == text[16] == " " and text[19] == text[22] == ":":
            try:
                return dt.datetime(int(text[12:16]), month, int(text[5:7]), int(text[17:19]), int(text[20:22]),
                                   int(text[23:25]), tzinfo=dt.timezone.utc)
            except ValueError:
                pass
    from email.utils import parsedate_to_datetime

    return parsedate_to_datetime(text)


class _Body:
    """The ``Body`` of a GetObject answer, already read."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes):
        self._data = data

    def read(self, amt: int | None = None) -> bytes:
        data, self._data = self._data, b""
        return data

    def close(self) -> None:
        self._data = b""


class _Redirected(Exception):
    """S3 answered that the bucket lives in another region than the one signed for."""


_REDIRECT_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"})


def _falls_back(method):
    """Run ``method`` on the lean path unless the caller passes arguments it does not build, or the bucket
    turned out to live in another region (botocore follows S3's region redirects): then botocore's."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, **kwargs: Any) -> dict:
        if not self.redirected:
            try:
                return method(self, **kwargs)
            except _Redirected:
                self.redirected = True
            except _NotLean:
                pass
        return getattr(self.fallback, name)(**kwargs)

    return wrapper


class _NotLean(Exception):
    """Arguments the lean path does not build: the request goes to botocore."""


class LeanS3Client(LeanClient):
    """The S3 requests of the commit and the reads; path-style addressing when an endpoint is set."""

    service = "s3"
    _backoff = retry.REQUEST_S3

    def __init__(self, *, endpoint: str | None, region: str, **kwargs: Any):
        self.path_style = endpoint is not None
        self.redirected = False
        super().__init__(endpoint=endpoint or f"https://s3.{region}.amazonaws.com", region=region, **kwargs)

    def _where(self, bucket: str, key: str | None) -> tuple[str, str, str]:
        """(host, path, url base) of an object (or of the bucket when key is None)."""
        quoted = "" if key is None else quote(key, safe="/~")
        if self.path_style or "." in bucket or not _dns_compatible(bucket):
            path = f"{self.base_path}/{bucket}" + ("" if key is None else f"/{quoted}")
            return self.host, path, f"{self.scheme}://{self.host}"
        host = f"{bucket}.{self.host}"
        return host, "/" + quoted, f"{self.scheme}://{host}"

    def _s3(self, operation: str, method: str, bucket: str, key: str | None, *, query: str = "",
            headers: dict[str, str] | None = None, body: bytes | None = None) -> _Response:
        _, path, base = self._where(bucket, key)
        headers = headers or {}
        # Over TLS the body's integrity is its checksum header's (CRC32, or Content-MD5), as botocore's S3
        # client does; over plain HTTP the payload is signed.
        unsigned = None
        if body and self.scheme == "https":
            unsigned = "x-amz-checksum-crc32" if "x-amz-checksum-crc32" in headers else "content-md5"
        try:
            return self._request(operation, method, path, query, headers, body, base, unsigned_payload=unsigned)
        except botocore.exceptions.ClientError as exc:
            status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
            if not self.path_style and (status in (301, 307) or exc.response["Error"]["Code"] in _REDIRECT_CODES):
                raise _Redirected() from exc  # refused: nothing was applied
            raise

    def _error_code(self, response: _Response) -> str:
        return self._parse_error(response)[0]

    @staticmethod
    def _parse_error(response: _Response) -> tuple[str, str]:
        if response.data:
            try:
                root = ET.fromstring(response.data)
            except ET.ParseError:
                root = None
            if root is not None:
                return (root.findtext("Code") or root.findtext(f"{_S3_NS}Code") or "",
                        root.findtext("Message") or root.findtext(f"{_S3_NS}Message") or "")
        # No body (a HEAD) or none readable: botocore names the error by its status.
        return str(response.status), ""

    def _error_response(self, response: _Response, attempt: int) -> dict:
        code, message = self._parse_error(response)
        return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": self._metadata(response, attempt)}

    def _result(self, response: _Response) -> dict:
        return {"ResponseMetadata": self._metadata(response, response.attempt)}

    @_falls_back
    def get_object(self, *, Bucket: str, Key: str, **extra: Any) -> dict:
        if extra:
            raise _NotLean()
        r = self._s3("GetObject", "GET", Bucket, Key)
        result = self._result(r)
        result.update(Body=_Body(r.data), ETag=r.headers.get("ETag"), ContentLength=len(r.data))
        if r.headers.get("Last-Modified"):
            result["LastModified"] = _http_time(r.headers["Last-Modified"])
        return result

    @_falls_back
    def head_object(self, *, Bucket: str, Key: str, **extra: Any) -> dict:
        if extra:
            raise _NotLean()
        r = self._s3("HeadObject", "HEAD", Bucket, Key)
        result = self._result(r)
        result.update(ContentLength=int(r.headers.get("Content-Length", 0)), ETag=r.headers.get("ETag"),
                      LastModified=_http_time(r.headers["Last-Modified"]))
        return result

    @_falls_back
    def put_object(self, *, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str | None = None,
                   IfMatch: str | None = None, **extra: Any) -> dict:
        if extra or not isinstance(Body, (bytes, bytearray, memoryview)):
            raise _NotLean()
        body = bytes(Body)
        headers = {"content-length": str(len(body)),
                   "x-amz-checksum-crc32": base64.b64encode(binascii.crc32(body).to_bytes(4, "big")).decode()}
        if IfNoneMatch is not None:
            headers["if-none-match"] = IfNoneMatch
        if IfMatch is not None:
            headers["if-match"] = IfMatch
        r = self._s3("PutObject", "PUT", Bucket, Key, headers=headers, body=body)
        result = self._result(r)
        result["ETag"] = r.headers.get("ETag")
        return result

    @_falls_back
    def delete_objects(self, *, Bucket: str, Delete: dict, **extra: Any) -> dict:
        if extra:
            raise _NotLean()
        root = ET.Element("Delete", xmlns=_S3_NS[1:-1])
        if Delete.get("Quiet"):
            ET.SubElement(root, "Quiet").text = "true"
        for obj in Delete["Objects"]:
            ET.SubElement(ET.SubElement(root, "Object"), "Key").text = obj["Key"]
        body = ET.tostring(root, encoding="utf-8", xml_declaration=False)
        headers = {"content-length": str(len(body)), "content-type": "application/xml",
                   "content-md5": base64.b64encode(hashlib.md5(body).digest()).decode()}
        r = self._s3("DeleteObjects", "POST", Bucket, None, query="delete=", headers=headers, body=body)
        result = self._result(r)
        errors = []
        deleted = []
        if r.data:
            answer = ET.fromstring(r.data)
            for err in list(answer.iter(f"{_S3_NS}Error")) + list(answer.iter("Error")):
                errors.append({name: err.findtext(f"{_S3_NS}{name}") or err.findtext(name) or ""
                               for name in ("Key", "Code", "Message")})
            for done in list(answer.iter(f"{_S3_NS}Deleted")) + list(answer.iter("Deleted")):
                deleted.append({"Key": done.findtext(f"{_S3_NS}Key") or done.findtext("Key") or ""})
        if errors:
            result["Errors"] = errors
        if deleted:
            result["Deleted"] = deleted
        return result

    @_falls_back
    def list_objects_v2(self, *, Bucket: str, Prefix: str = "", StartAfter: str | None = None,
                        ContinuationToken: str | None = None, **extra: Any) -> dict:
        if extra:
            raise _NotLean()
        params = {"list-type": "2", "prefix": Prefix}
        if StartAfter is not None:
            params["start-after"] = StartAfter
        if ContinuationToken is not None:
            params["continuation-token"] = ContinuationToken
        query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))
        r = self._s3("ListObjectsV2", "GET", Bucket, None, query=query)
        result = self._result(r)
        answer = ET.fromstring(r.data)

        def text(node, name: str) -> str | None:
            found = node.find(f"{_S3_NS}{name}")
            if found is None:
                found = node.find(name)
            return None if found is None else (found.text or "")

        contents = []
        for item in list(answer.iter(f"{_S3_NS}Contents")) + list(answer.iter("Contents")):
            contents.append({"Key": text(item, "Key"), "Size": int(text(item, "Size") or 0),
                             "LastModified": _ms_time(text(item, "LastModified") or ""),
                             "ETag": text(item, "ETag")})
        if contents:
            result["Contents"] = contents
        result["IsTruncated"] = (text(answer, "IsTruncated") or "false").lower() == "true"
        token = text(answer, "NextContinuationToken")
        if token:
            result["NextContinuationToken"] = token
        return result


def _dns_compatible(bucket: str) -> bool:
    return (3 <= len(bucket) <= 63 and bucket.islower() and bucket[0].isalnum() and bucket[-1].isalnum()
            and all(c.isalnum() or c == "-" for c in bucket))


class LeanDynamoDBClient(LeanClient):
    """The DynamoDB requests of the commit (JSON protocol); the CRC32 of every answer is checked."""

    service = "dynamodb"
    _backoff = retry.REQUEST_DYNAMODB

    def __init__(self, *, endpoint: str | None, region: str, **kwargs: Any):
        super().__init__(endpoint=endpoint or f"https://dynamodb.{region}.amazonaws.com", region=region, **kwargs)

    def _call(self, action: str, params: dict) -> dict:
        body = json.dumps(params, separators=(",", ":")).encode()
        headers = {"content-type": _DDB_CONTENT_TYPE, "x-amz-target": _DDB_TARGET + action,
                   "content-length": str(len(body))}
        r = self._request(action, "POST", self.base_path or "/", "", headers, body, f"{self.scheme}://{self.host}")
        try:
            result = json.loads(r.data) if r.data else {}
        except ValueError as exc:
            raise botocore.exceptions.ResponseParserError(error=f"unreadable DynamoDB answer: {exc}") from exc
        result["ResponseMetadata"] = self._metadata(r, r.attempt)
        return result

    def _check(self, response: _Response) -> Exception | None:
        expected = response.headers.get("x-amz-crc32")
        if expected is None:
            return None  # servers that send none (dynalite)
        actual = binascii.crc32(response.data) & 0xFFFFFFFF
        if actual != int(expected):
            return botocore.exceptions.ChecksumError(checksum_type="crc32", expected_checksum=expected,
                                                     actual_checksum=actual)
        return None

    @staticmethod
    def _parse_error(response: _Response) -> tuple[str, str, dict]:
        try:
            parsed = json.loads(response.data) if response.data else {}
        except ValueError:
            parsed = {}
        if not isinstance(parsed, dict):
            parsed = {}
        code = str(parsed.get("__type") or response.headers.get("x-amzn-ErrorType") or "")
        code = code.rsplit("#", 1)[-1].split(":", 1)[0]
        message = parsed.get("message") or parsed.get("Message") or ""
        return code or str(response.status), message, parsed

    def _error_code(self, response: _Response) -> str:
        return self._parse_error(response)[0]

    def _error_response(self, response: _Response, attempt: int) -> dict:
        code, message, parsed = self._parse_error(response)
        answer = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": self._metadata(response, attempt)}
        if isinstance(parsed.get("Item"), dict):
            answer["Item"] = parsed["Item"]
        if isinstance(parsed.get("CancellationReasons"), list):
            answer["CancellationReasons"] = parsed["CancellationReasons"]
        return answer

    def put_item(self, **params: Any) -> dict:
        return self._call("PutItem", params)

    def get_item(self, **params: Any) -> dict:
        return self._call("GetItem", params)

    def query(self, **params: Any) -> dict:
        return self._call("Query", params)

    def update_item(self, **params: Any) -> dict:
        return self._call("UpdateItem", params)

    def delete_item(self, **params: Any) -> dict:
        return self._call("DeleteItem", params)

    def transact_write_items(self, **params: Any) -> dict:
        return self._call("TransactWriteItems", params)
