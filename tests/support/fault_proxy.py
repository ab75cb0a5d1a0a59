"""A fault-injecting HTTP proxy in front of the local stack's moto server (S3 and DynamoDB).

Clients reach it by pointing ``AWS_ENDPOINT_URL`` at :meth:`FaultProxy.endpoint`; it forwards every request
to the upstream server and, for a share of them chosen by a seeded random draw, injects a fault instead
of (or on top of) forwarding. The faults are those the real services and networks produce:

=============== ============================================================================================
``500``         S3: ``500 InternalError`` XML; DynamoDB: ``500 InternalServerError`` JSON. Not forwarded.
``503``         S3: ``503 ServiceUnavailable`` XML; DynamoDB: ``503 ServiceUnavailable`` JSON. Not forwarded.
``throttle``    S3: ``503 SlowDown`` XML; DynamoDB: ``400`` JSON ``ProvisionedThroughputExceededException``
                or ``ThrottlingException`` (as the service answers). Not forwarded.
``drop_before`` the connection is closed without forwarding the request and without an answer.
``drop_after``  the request is forwarded and applied, its answer received, then the connection is closed
                without replying: a lost response (the write happened, the client cannot know).
``slow``        the request is forwarded after ``slow_seconds``.
``cut``         the request is forwarded and applied; the answer's status line and headers (with the whole
                body's ``Content-Length``) are sent, then half of the body, then the connection is closed: a
                response cut short (for an answer without a body, the same as ``drop_after``).
``denied``      S3: ``403 AccessDenied`` XML; DynamoDB: ``400 AccessDeniedException`` JSON, as for a caller
                whose IAM policy lacks the action. Not forwarded. Not a transient fault: never in
                :func:`mixed`'s default kinds.
=============== ============================================================================================

Each :class:`FaultRule` has its own rate and may be restricted to one service (``s3``, ``dynamodb``), one
operation (``PutItem``, ``PutObject``, ...) and requests whose path contains a string (one S3 key). A
request draws one number from a ``random.Random(seed)``; the rules that match it are walked in order, each
taking its rate of the unit interval. The draw sequence is deterministic for a seed; which request gets
which draw depends on arrival order.

DynamoDB requests are told apart by their ``X-Amz-Target`` header (``DynamoDB_20120810.PutItem``); S3
operations are derived from method, path and query. The proxy speaks HTTP/1.1 with keep-alive to both
sides, answers ``Expect: 100-continue`` itself (after deciding the fault: a ``drop_before`` closes
before the ``100``), reads chunked request bodies and forwards them with a ``Content-Length``. moto does
not check signatures, so the ``Host`` header goes upstream as received.

A proxy may listen on several ports, one per *label* (a writer process each, say): faults are drawn from
one plan and counted per label, and :meth:`FaultProxy.events` lists every injected fault with its label
and time, so a test can attribute faults to the commits that were running.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import random
import socket
import socketserver
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qs, urlsplit

from infra.processes import LOCAL_IP

__all__ = ["ALL_KINDS", "KINDS", "FaultEvent", "FaultProxy", "FaultRule", "ProxyStats", "mixed", "operation_of"]

KINDS = ("500", "503", "throttle", "drop_before", "drop_after", "slow", "cut")
"""The transient faults, :func:`mixed`'s default."""
ALL_KINDS = (*KINDS, "denied")
SERVICES = ("s3", "dynamodb")

_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "expect", "content-length",
})
_MAX_LINE = 65536


@dataclasses.dataclass(frozen=True)
class FaultRule:
    """Inject ``kind`` into ``rate`` (0..1) of the requests matching ``service`` and ``operation``
    (None: any), at most ``limit`` times (None: no limit)."""

    kind: str
    rate: float
    service: str | None = None
    operation: str | None = None
    limit: int | None = None
    path_contains: str | None = None
    """Only requests whose path (the S3 key, URL-encoded as sent) contains this."""

    def __post_init__(self):
        if self.kind not in ALL_KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {', '.join(ALL_KINDS)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate {self.rate!r} of {self.kind} is not within 0..1")
        if self.service is not None and self.service not in SERVICES:
            raise ValueError(f"service {self.service!r} is not one of {', '.join(SERVICES)}")

    def matches(self, service: str, operation: str, path: str = "") -> bool:
        return (self.service in (None, service)) and (self.operation in (None, operation)) and (
            self.path_contains is None or self.path_contains in path)


def mixed(total_rate: float, kinds: Sequence[str] = KINDS, *, service: str | None = None,
          operation: str | None = None) -> list[FaultRule]:
    """``total_rate`` of the requests faulted, split evenly over ``kinds``."""
    return [FaultRule(kind, total_rate / len(kinds), service, operation) for kind in kinds]


@dataclasses.dataclass(frozen=True)
class FaultEvent:
    """One injected fault: when (``time.monotonic()``, the same clock in every process of this machine),
    on which listener, on what request."""

    at: float
    label: str
    service: str
    operation: str
    kind: str


@dataclasses.dataclass(frozen=True)
class ProxyStats:
    """Counters since the proxy started (or :meth:`FaultProxy.reset_counters`)."""

    requests: Counter          # (service, operation) -> requests seen
    faults: Counter            # kind -> faults injected
    faults_by_operation: Counter  # (kind, service, operation) -> faults injected
    requests_by_label: Counter  # label -> requests seen
    forwarded: int             # requests whose answer came back from upstream
    upstream_errors: int       # requests the upstream server failed to answer (a harness problem)
    connections: int           # client connections accepted

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_faults(self) -> int:
        return sum(self.faults.values())

    def to_dict(self) -> dict:
        return {
            "requests": {f"{s}:{o}": n for (s, o), n in sorted(self.requests.items())},
            "faults": dict(sorted(self.faults.items())),
            "faults_by_operation": {f"{k} {s}:{o}": n for (k, s, o), n in sorted(self.faults_by_operation.items())},
            "requests_by_label": dict(sorted(self.requests_by_label.items())),
            "forwarded": self.forwarded,
            "upstream_errors": self.upstream_errors,
            "connections": self.connections,
        }


def operation_of(method: str, target: str, headers) -> tuple[str, str]:
    """``(service, operation)`` of a request: DynamoDB by its ``X-Amz-Target``, S3 by method, path, query."""
    amz_target = headers.get("X-Amz-Target")
    if amz_target:
        return "dynamodb", amz_target.rpartition(".")[2]
    split = urlsplit(target)
    query = parse_qs(split.query, keep_blank_values=True)
    parts = [p for p in split.path.split("/") if p]
    has_key = len(parts) >= 2
    if method == "GET":
        if "uploadId" in query:
            return "s3", "ListParts"
        if "uploads" in query:
            return "s3", "ListMultipartUploads"
        if not parts:
            return "s3", "ListBuckets"
        return "s3", "GetObject" if has_key else ("ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects")
    if method == "HEAD":
        return "s3", "HeadObject" if has_key else "HeadBucket"
    if method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            return "s3", "UploadPartCopy" if headers.get("x-amz-copy-source") else "UploadPart"
        if not has_key:
            return "s3", "CreateBucket" if not query else "PutBucketConfiguration"
        return "s3", "CopyObject" if headers.get("x-amz-copy-source") else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "s3", "CreateMultipartUpload"
        if "uploadId" in query:
            return "s3", "CompleteMultipartUpload"
        if "delete" in query:
            return "s3", "DeleteObjects"
        return "s3", "Post"
    if method == "DELETE":
        if "uploadId" in query:
            return "s3", "AbortMultipartUpload"
        return "s3", "DeleteObject" if has_key else "DeleteBucket"
    return "s3", method


class FaultProxy:
    """The proxy (module docstring). ``start()`` binds one free port per label on 127.0.0.1 and serves each
    from a thread; ``stop()`` closes the listeners and every open connection. Use as a context manager."""

    def __init__(self, upstream: str, *, seed: int = 0, slow_seconds: float = 0.2,
                 labels: Iterable[str] = ("main",)):
        parsed = urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = (parsed.hostname, parsed.port)
        self.slow_seconds = slow_seconds
        self.labels = tuple(labels)
        self._random = random.Random(seed)
        self._rules: tuple[FaultRule, ...] = ()
        self._used: list[int] = []
        self._lock = threading.Lock()
        self._servers: dict[str, socketserver.ThreadingTCPServer] = {}
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self.reset_counters()

    # --- configuration -------------------------------------------------------------------------
    def set_faults(self, rules: Iterable[FaultRule]) -> None:
        """Replace the fault rules (takes effect at the next request)."""
        rules = tuple(rules)
        with self._lock:
            self._rules = rules
            self._used = [0] * len(rules)

    def clear_faults(self) -> None:
        self.set_faults(())

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._random = random.Random(seed)

    def reset_counters(self) -> None:
        with self._lock:
            self._requests: Counter = Counter()
            self._faults: Counter = Counter()
            self._faults_by_operation: Counter = Counter()
            self._by_label: Counter = Counter()
            self._events: list[FaultEvent] = []
            self._forwarded = 0
            self._upstream_errors = 0
            self._accepted = 0

    # --- what happened -------------------------------------------------------------------------
    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(Counter(self._requests), Counter(self._faults), Counter(self._faults_by_operation),
                              Counter(self._by_label), self._forwarded, self._upstream_errors, self._accepted)

    def events(self) -> list[FaultEvent]:
        with self._lock:
            return list(self._events)

    # --- endpoints -----------------------------------------------------------------------------
    def endpoint(self, label: str | None = None) -> str:
        server = self._servers[label or self.labels[0]]
        return f"http://{LOCAL_IP}:{server.server_address[1]}"

    def storage_options(self, base: dict[str, str], label: str | None = None) -> dict[str, str]:
        """``base`` (the local stack's options) with both endpoints pointing at this proxy."""
        options = dict(base)
        options["AWS_ENDPOINT_URL"] = self.endpoint(label)
        options.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
        return options

    # --- life cycle ----------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        if self._servers:
            return self
        for label in self.labels:
            server = _Server((LOCAL_IP, 0), _Handler, proxy=self, label=label)
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                      name=f"fault-proxy-{label}", daemon=True)
            thread.start()
            self._servers[label] = server
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        servers, self._servers = self._servers, {}
        for server in servers.values():
            server.shutdown()
            server.server_close()
        with self._lock:
            connections, self._connections = set(self._connections), set()
        for conn in connections:
            _close(conn)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- used by the handlers ------------------------------------------------------------------
    def _decide(self, label: str, service: str, operation: str, path: str = "") -> str | None:
        with self._lock:
            self._requests[(service, operation)] += 1
            self._by_label[label] += 1
            draw = self._random.random()
            edge = 0.0
            kind = None
            for index, rule in enumerate(self._rules):
                if not rule.matches(service, operation, path) or (rule.limit is not None
                                                                  and self._used[index] >= rule.limit):
                    continue
                edge += rule.rate
                if draw < edge:
                    kind = rule.kind
                    self._used[index] += 1
                    break
            if kind is not None:
                self._faults[kind] += 1
                self._faults_by_operation[(kind, service, operation)] += 1
                self._events.append(FaultEvent(time.monotonic(), label, service, operation, kind))
            # A second draw picks between the two DynamoDB throttling answers; drawn always, so the
            # sequence of draws does not depend on which kind came out.
            variant = self._random.random()
        return "throttle_alt" if kind == "throttle" and variant >= 0.5 else kind

    def _count(self, *, forwarded: int = 0, upstream_errors: int = 0) -> None:
        with self._lock:
            self._forwarded += forwarded
            self._upstream_errors += upstream_errors

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
                self._accepted += 1
            else:
                self._connections.discard(conn)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # writers open many pooled connections at once

    def __init__(self, address, handler, *, proxy: FaultProxy, label: str):
        self.proxy = proxy
        self.label = label
        super().__init__(address, handler)


class _Drop(Exception):
    """Close the client connection without answering."""


class _Handler(socketserver.StreamRequestHandler):
    """One client connection: requests in a keep-alive loop."""

    server: _Server

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.proxy._track(self.connection, add=True)
        self.upstream: http.client.HTTPConnection | None = None

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        if self.upstream is not None:
            self.upstream.close()
        self.server.proxy._track(self.connection, add=False)

    def handle(self):
        try:
            while self._one_request():
                pass
        except (_Drop, OSError, http.client.HTTPException, ValueError):
            pass
        finally:
            _close(self.connection)

    def _one_request(self) -> bool:
        """Serve one request; False when the connection is to be closed."""
        line = self.rfile.readline(_MAX_LINE + 1)
        if not line:
            return False
        method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        headers = http.client.parse_headers(self.rfile)
        proxy, label = self.server.proxy, self.server.label
        service, operation = operation_of(method, target, headers)
        kind = proxy._decide(label, service, operation, urlsplit(target).path)
        expects = headers.get("Expect", "").lower() == "100-continue"
        if kind == "drop_before" and expects:
            raise _Drop  # before the client sent its body
        if expects:
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        body = self._read_body(headers)
        keep_alive = version == "HTTP/1.1" and headers.get("Connection", "").lower() != "close"
        if kind == "drop_before":
            raise _Drop
        if kind in ("500", "503", "throttle", "throttle_alt", "denied"):
            self._reply(*_error_answer(kind, service), keep_alive=keep_alive, head=method == "HEAD")
            return keep_alive
        if kind == "slow":
            time.sleep(proxy.slow_seconds)
        status, reason, answer_headers, answer = self._forward(method, target, headers, body)
        if kind == "drop_after" or (kind == "cut" and (method == "HEAD" or not answer)):
            raise _Drop  # the request was applied; its answer is lost
        if kind == "cut":
            self._reply(status, reason, answer_headers, answer, keep_alive=False, head=False,
                        send=len(answer) // 2)
            raise _Drop  # the request was applied; its answer broke off half-way
        self._reply(status, reason, answer_headers, answer, keep_alive=keep_alive, head=method == "HEAD")
        return keep_alive

    def _read_body(self, headers) -> bytes:
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline(_MAX_LINE + 1)
                if not size_line:
                    raise _Drop
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self._read_exactly(size))
                self.rfile.readline(_MAX_LINE + 1)  # the CRLF after the chunk
        length = int(headers.get("Content-Length") or 0)
        return self._read_exactly(length) if length else b""

    def _read_exactly(self, size: int) -> bytes:
        data = self.rfile.read(size)
        if len(data) != size:
            raise _Drop
        return data

    def _forward(self, method: str, target: str, headers, body: bytes):
        proxy = self.server.proxy
        for attempt in range(2):  # once more on a fresh connection if the kept-alive one went stale
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=120)
            try:
                self.upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        self.upstream.putheader(name, value)
                if body or method in ("PUT", "POST"):
                    self.upstream.putheader("Content-Length", str(len(body)))
                self.upstream.endheaders(body or None)
                response = self.upstream.getresponse()
                answer = response.read()
                result = (response.status, response.reason, response.getheaders(), answer)
                if response.will_close:
                    self.upstream.close()
                    self.upstream = None
                proxy._count(forwarded=1)
                return result
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                if attempt == 1:
                    proxy._count(upstream_errors=1)
                    raise _Drop from None
        raise AssertionError("unreachable")

    def _reply(self, status: int, reason: str, headers, body: bytes, *, keep_alive: bool, head: bool,
               send: int | None = None) -> None:
        """Answer; ``send``: only that many bytes of the body go out (its full length is announced)."""
        lines = [f"HTTP/1.1 {status} {reason}"]
        length = None
        for name, value in headers:
            if name.lower() == "content-length":
                length = value
            elif name.lower() not in _HOP_BY_HOP:
                lines.append(f"{name}: {value}")
        if head:
            lines.append(f"Content-Length: {length if length is not None else 0}")
            body = b""
        elif status >= 200 and status not in (204, 304):
            lines.append(f"Content-Length: {len(body)}")
        lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body[:send])
        self.wfile.flush()


def _error_answer(kind: str, service: str) -> tuple[int, str, list[tuple[str, str]], bytes]:
    """The answer the real service gives for an injected ``kind``."""
    request_id = uuid.uuid4().hex.upper()
    if service == "dynamodb":
        status, reason, error_type, message = {
            "500": (500, "Internal Server Error", "com.amazonaws.dynamodb.v20120810#InternalServerError",
                    "Internal server error"),
            "503": (503, "Service Unavailable", "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
                    "Service is unavailable"),
            "throttle": (400, "Bad Request",
                         "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                         "The level of configured provisioned throughput for the table was exceeded. Consider "
                         "increasing your provisioning level with the UpdateTable API."),
            "throttle_alt": (400, "Bad Request", "com.amazon.coral.availability#ThrottlingException",
                             "Rate of requests exceeds the allowed throughput."),
            "denied": (400, "Bad Request", "com.amazon.coral.service#AccessDeniedException",
                       "User: arn:aws:sts::123456789012:assumed-role/reader is not authorized to perform this "
                       "action because no identity-based policy allows it"),
        }[kind]
        body = json.dumps({"__type": error_type, "message": message}).encode()
        return status, reason, [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", request_id)], body
    status, reason, code, message = {
        "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
        "503": (503, "Service Unavailable", "ServiceUnavailable", "Service is unable to handle request."),
        "throttle": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
        "throttle_alt": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
        "denied": (403, "Forbidden", "AccessDenied", "Access Denied"),
    }[kind]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>{request_id[:16]}</RequestId><HostId>{request_id}</HostId></Error>").encode()
    return status, reason, [("Content-Type", "application/xml"), ("x-amz-request-id", request_id[:16])], body


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass
