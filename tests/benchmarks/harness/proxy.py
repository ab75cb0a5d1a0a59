"""A counting HTTP proxy: every S3 and DynamoDB request of a worker passes through it and is recorded.

Run as its own process (``python -m tests.benchmarks.harness.proxy UPSTREAM [UPSTREAM ...]``): one
listener on a free 127.0.0.1 port per upstream endpoint, printed as one JSON line ``{"endpoints": [...]}``;
it serves until SIGTERM. Point a client's ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_DYNAMODB``) at a
listener instead of the server: the request is forwarded unchanged, ``Host`` header included, so
SigV4 signatures made for the proxy's address still verify upstream.

Each request is recorded as ``[start, end, service, op, status, log]``: epoch seconds when the request
had arrived and when the answer was sent, ``s3``/``dynamodb``, the operation (``PUT``, ``COPY``,
``CompleteMultipartUpload``, ``PutItem`` ...), the HTTP status, and whether it touched the table's log
(a ``_delta_log/`` key, or any DynamoDB call). ``GET /__bench__/records?reset=1`` on any listener
returns the records so far as JSON (and clears them); a bucket cannot be named ``__bench__``, so no S3
request can collide with it. Standard library only.

The proxy adds a little latency to every request; it is used where requests are counted, never where
latency is measured.
"""

from __future__ import annotations

import http.client
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

CONTROL = "/__bench__/records"
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "expect",
                         "proxy-authenticate", "proxy-authorization"})


class Recorder:
    def __init__(self):
        self._lock = threading.Lock()
        self._records: list[list] = []

    def add(self, record: list) -> None:
        with self._lock:
            self._records.append(record)

    def take(self, reset: bool) -> list[list]:
        with self._lock:
            records = list(self._records)
            if reset:
                self._records.clear()
        return records


def classify(method: str, path: str, headers) -> tuple[str, str, bool]:
    """``(service, operation, touches the log)`` of one request."""
    target = headers.get("X-Amz-Target")
    if target:
        return "dynamodb", target.rsplit(".", 1)[-1], True
    url = urlsplit(path)
    query = parse_qs(url.query, keep_blank_values=True)
    segments = unquote(url.path).lstrip("/").split("/", 1)
    key = segments[1] if len(segments) > 1 else ""
    log = "/_delta_log/" in "/" + key
    if method == "HEAD":
        op = "HEAD" if key else "HeadBucket"
    elif method == "GET":
        if "uploads" in query:
            op = "ListMultipartUploads"
        elif not key:
            op = "LIST"
            log = "_delta_log/" in (query.get("prefix", [""])[0] + query.get("start-after", [""])[0])
        elif "uploadId" in query:
            op = "ListParts"
        else:
            op = "GET"
    elif method == "PUT":
        if "partNumber" in query:
            op = "UploadPartCopy" if "x-amz-copy-source" in headers else "UploadPart"
        elif "x-amz-copy-source" in headers:
            op = "COPY"
        elif not key:
            op = "CreateBucket"
        else:
            op = "PUT"
    elif method == "POST":
        if "uploads" in query:
            op = "CreateMultipartUpload"
        elif "uploadId" in query:
            op = "CompleteMultipartUpload"
        elif "delete" in query:
            op = "DeleteObjects"
        else:
            op = "POST"
    elif method == "DELETE":
        op = "AbortMultipartUpload" if "uploadId" in query else "DELETE"
    else:
        op = method
    return "s3", op, log


def make_handler(upstream: str, recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _conn: http.client.HTTPConnection | None = None

        def log_message(self, format, *args):
            pass  # one line per request on stderr would cost more than the request

        def do_GET(self):
            if self.path.startswith(CONTROL):
                self._control()
            else:
                self._forward()

        def _control(self) -> None:
            reset = "reset=1" in self.path
            body = json.dumps(recorder.take(reset)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _read_body(self) -> bytes | None:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                raw = []
                while True:
                    line = self.rfile.readline()
                    raw.append(line)
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while True:
                            trailer = self.rfile.readline()
                            raw.append(trailer)
                            if trailer in (b"\r\n", b"\n", b""):
                                return b"".join(raw)
                    raw.append(self.rfile.read(size + 2))
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else None

        def _send_upstream(self, body: bytes | None) -> tuple[http.client.HTTPResponse, bytes]:
            for attempt in (1, 2):
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
                try:
                    self._conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP:
                            self._conn.putheader(name, value)
                    self._conn.endheaders(body)
                    response = self._conn.getresponse()
                    return response, response.read()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    # An idle keep-alive connection the server had closed: the request never reached it.
                    self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def _forward(self) -> None:
            started = time.time()
            body = self._read_body()
            response, data = self._send_upstream(body)
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                lower = name.lower()
                if lower in _HOP_BY_HOP or lower == "transfer-encoding":
                    continue
                if lower == "content-length" and self.command != "HEAD":
                    continue
                self.send_header(name, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD" and data:
                self.wfile.write(data)
            self.wfile.flush()
            service, op, log = classify(self.command, self.path, self.headers)
            recorder.add([started, time.time(), service, op, response.status, log])

    Handler.do_HEAD = Handler.do_PUT = Handler.do_POST = Handler.do_DELETE = Handler._forward
    return Handler


def main(upstreams: list[str]) -> None:
    recorder = Recorder()
    servers = []
    for upstream in upstreams:
        server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(upstream, recorder))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    print(json.dumps({"endpoints": [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    for server in servers:
        server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
