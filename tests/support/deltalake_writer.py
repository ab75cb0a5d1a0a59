"""A deltalake writer process for the mixed-writer races, in the fault workers' output format.

Runs under either interpreter: this project's (``deltalake`` 1.6.6, which commits ``N.json`` with an S3
conditional PUT and writes no DynamoDB item) or the peer's (``deltalake`` 1.6.0 with
``AWS_S3_LOCKING_PROVIDER=dynamodb``, the DynamoDB log store). Only deltalake, pyarrow and the standard
library are imported: nothing of this project exists in the peer interpreter.

``python deltalake_writer.py 'JSON'`` with ``uri``, ``options`` (delta-rs storage options), ``writer``,
``commits``: appends ``commits`` marker commits (the rows of ``fault_harness.marker_rows``, built here
again) and prints ``begin``/``end``/``done`` lines as ``fault_worker.py`` does.
"""

from __future__ import annotations

import json
import sys
import time

ROWS_PER_COMMIT = 3  # fault_harness.ROWS_PER_COMMIT


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    import deltalake
    import pyarrow as pa
    from deltalake import write_deltalake

    settings = json.loads(sys.argv[1])
    writer, uri, options = settings["writer"], settings["uri"], settings["options"]
    schema = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("row", pa.int64()), ("marker", pa.string())])
    for seq in range(int(settings.get("first_seq", 0)), int(settings.get("first_seq", 0)) + int(settings["commits"])):
        name = f"{writer}-{seq:04d}"
        rows = pa.table({"writer": [writer] * ROWS_PER_COMMIT, "seq": [seq] * ROWS_PER_COMMIT,
                         "row": list(range(ROWS_PER_COMMIT)), "marker": [name] * ROWS_PER_COMMIT}, schema=schema)
        emit(event="begin", writer=writer, seq=seq, marker=name, at=time.monotonic())
        try:
            write_deltalake(uri, rows, mode="append", storage_options=options)
            version = deltalake.DeltaTable(uri, storage_options=options).version()
        except Exception as exc:  # noqa: BLE001 - the parent judges every error
            emit(event="end", writer=writer, seq=seq, marker=name, at=time.monotonic(), ok=False,
                 error={"type": type(exc).__name__, "module": type(exc).__module__, "dynacommit": False,
                        "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc)[:600]})
        else:
            emit(event="end", writer=writer, seq=seq, marker=name, at=time.monotonic(), ok=True, version=version)
    emit(event="done", writer=writer, deltalake=deltalake.__version__)


if __name__ == "__main__":
    main()
