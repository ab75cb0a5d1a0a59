"""The moto server of the local stack, with DynamoDB requests applied one at a time, as DynamoDB applies
them: atomically and in isolation.

moto's server is threaded, and its ``TransactWriteItems`` is neither atomic nor isolated under concurrent
requests: it checks and applies the items one by one, and on a cancellation restores a copy of the whole
table taken when it began, which undoes every write other requests made meanwhile (a commit entry put,
an entry marked complete, a queued append). Amazon DynamoDB never does either. Every method of moto's
DynamoDB backend is therefore run under one lock here; S3 is moto's as it is.

    python -m infra.moto_server -H 127.0.0.1 -p PORT      (the arguments of ``python -m moto.server``)
"""

from __future__ import annotations

import functools
import inspect
import threading


def serialize_dynamodb() -> None:
    """Run each public method of moto's DynamoDB backend under one process-wide lock."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name, method in list(vars(DynamoDBBackend).items()):
        if name.startswith("_") or not inspect.isfunction(method):
            continue

        def locked(*args, __method=method, **kwargs):
            with lock:
                return __method(*args, **kwargs)

        setattr(DynamoDBBackend, name, functools.wraps(method)(locked))


def main() -> None:
    serialize_dynamodb()
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
