"""The moto server of the local stack, with DynamoDB requests applied one at a time, as DynamoDB applies
them: atomically and in isolation.

moto's server is threaded, and its ``TransactWriteItems`` is neither atomic nor isolated under concurrent
requests: it checks and applies the items one by one, and on a cancellation restores a copy of the whole
table taken when it began, which undoes every write other requests made meanwhile (a commit entry put,
an entry marked complete, a queued append). Amazon DynamoDB never does either. Every method of moto's
DynamoDB backend is therefore run under one lock here; S3 is moto's as it is.

That copy is also taken once per item of the transaction (each a whole copy of the same table, before any item
is applied), so a transaction cost moto the table's size times its items, a cost DynamoDB has nowhere and the
group commit's transactions (one item per append taken) paid the most of. Here each table is copied once per
transaction: the same copy, taken at the same point, so what a cancellation restores is unchanged
(``copy_each_table_once``).

    python -m infra.moto_server -H 127.0.0.1 -p PORT      (the arguments of ``python -m moto.server``)

``DYNACOMMIT_MOTO_PROFILE=FILE`` (for benchmarks) writes, when the server is stopped (SIGTERM), the CPU time
of its requests by kind (S3 method and key kind, DynamoDB operation) to ``FILE`` and a cProfile of its
DynamoDB backend (the serialized part) to ``FILE.pstats``.
"""

from __future__ import annotations

import collections
import cProfile
import functools
import inspect
import io
import os
import sys
import threading
import time


def copy_each_table_once() -> None:
    """Make moto's ``TransactWriteItems`` take its backup copy of each table once, not once per item: while
    a transaction runs (under the lock of :func:`serialize_dynamodb`, so one at a time), a deep copy of a
    table already copied for it returns that copy; every other copy is the standard library's."""
    import copy

    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    copies: dict[int, Table] | None = None

    def deepcopy(value, memo=None):
        if copies is None or not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in copies:
            copies[id(value)] = copy.deepcopy(value, memo)
        return copies[id(value)]

    models.copy = type(copy)("copy_each_table_once")
    models.copy.__dict__.update(vars(copy))
    models.copy.deepcopy = deepcopy
    transact = DynamoDBBackend.transact_write_items

    @functools.wraps(transact)
    def transact_write_items(self, transact_items):
        nonlocal copies
        copies = {}
        try:
            return transact(self, transact_items)
        finally:
            copies = None

    DynamoDBBackend.transact_write_items = transact_write_items


def serialize_dynamodb(profile: cProfile.Profile | None = None) -> None:
    """Run each public method of moto's DynamoDB backend under one process-wide lock (profiled by
    ``profile`` when given: one thread at a time holds the lock, so one profile serves them all)."""
    from moto.dynamodb.models import DynamoDBBackend

    copy_each_table_once()
    lock = threading.RLock()
    depth = threading.local()
    for name, method in list(vars(DynamoDBBackend).items()):
        if name.startswith("_") or not inspect.isfunction(method):
            continue

        def locked(*args, __method=method, **kwargs):
            with lock:
                if profile is None or getattr(depth, "n", 0):
                    return __method(*args, **kwargs)
                depth.n = 1
                profile.enable()
                try:
                    return __method(*args, **kwargs)
                finally:
                    profile.disable()
                    depth.n = 0

        setattr(DynamoDBBackend, name, functools.wraps(method)(locked))


def _request_kind(environ: dict) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        kind = "dynamodb " + target.rsplit(".", 1)[-1]
        body = environ.get("dynacommit.body", b"")
        if b"dynacommit-group:" in body:
            kind += " (queue" + (", projected)" if b"ProjectionExpression" in body else ")")
        return kind
    path, query = environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
    kind = ("delete" if "delete" in query else "list" if "list-type" in query or path.count("/") <= 1
            else "_delta_log/.tmp" if "/.tmp/" in path else "_delta_log" if "/_delta_log/" in path else "data")
    return f"s3 {environ.get('REQUEST_METHOD')} {kind}"


def profile_requests(out: str) -> None:
    """CPU time of each request by kind (thread time of its handler), and a cProfile of the DynamoDB
    backend, written to ``out`` and ``out.pstats`` on SIGTERM."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    profile = cProfile.Profile()
    serialize_dynamodb(profile)
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    guard = threading.Lock()
    call = DomainDispatcherApplication.__call__

    def timed(self, environ, start_response):
        started = time.thread_time()
        if environ.get("HTTP_X_AMZ_TARGET"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"], environ["dynacommit.body"] = io.BytesIO(body), body
        try:
            return call(self, environ, start_response)
        finally:
            spent = time.thread_time() - started
            with guard:
                entry = totals[_request_kind(environ)]
                entry[0] += 1
                entry[1] += spent

    DomainDispatcherApplication.__call__ = timed

    def dump(*_) -> None:
        with open(out, "w") as f:
            for kind, (n, seconds) in sorted(totals.items(), key=lambda i: -i[1][1]):
                f.write(f"{kind}\t{n}\t{seconds * 1e3:.0f} ms\t{seconds / n * 1e3:.2f} ms each\n")
        profile.dump_stats(out + ".pstats")
        sys.exit(0)

    import moto.server

    moto.server.signal_handler = dump  # moto's main installs its own handler for SIGTERM: ours instead


def main() -> None:
    out = os.environ.get("DYNACOMMIT_MOTO_PROFILE")
    if out:
        profile_requests(out)
    else:
        serialize_dynamodb()
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
