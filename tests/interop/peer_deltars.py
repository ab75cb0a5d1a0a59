"""The delta-rs side of the interop tests, run as a subprocess with the peer interpreter.

The peer interpreter (``$DYNACOMMIT_PEER_PYTHON``, built by ``make peer``) has ``deltalake==1.6.0``, the
last delta-rs with the DynamoDB log store, and pyarrow; nothing of this project is importable there, so
this script uses only those two and the standard library.

Usage: ``python peer_deltars.py COMMAND 'JSON'`` where JSON holds ``uri``, ``options`` (delta-rs storage
options, ``AWS_S3_LOCKING_PROVIDER=dynamodb`` included by the caller) and the command's own keys.
The result is printed as one JSON object on the last line of stdout; exit code 0 unless the command
itself could not run (a failed append is reported in the JSON, not by the exit code).

Commands:
  version  {}                              -> {"version": N}
  append   {"writer": W, "count": K,       -> {"committed": [tag, ...], "failed": [{"tag", "error"}],
            "max_commit_retries": R?,          "seconds": S}
            "start": I?}                   each append writes one row {writer: W, seq: i, tag: "W-%05d" % i}
                                           and puts "dynacommit_marker": tag into commitInfo
  load     {"version": V?}                 -> {"version", "files": [relative paths], "rows": [...],
                                               "history_markers": [...], "num_files"}
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def cmd_version(arg: dict) -> dict:
    from deltalake import DeltaTable

    dt = DeltaTable(arg["uri"], storage_options=arg["options"])
    return {"version": dt.version()}


def cmd_append(arg: dict) -> dict:
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    schema = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("tag", pa.string())])
    writer = arg["writer"]
    start = int(arg.get("start", 0))
    committed: list[str] = []
    failed: list[dict] = []
    table = None  # a long-lived writer: the DeltaTable is kept and brought up to date by each append
    t0 = time.monotonic()
    for seq in range(start, start + int(arg["count"])):
        tag = f"{writer}-{seq:05d}"
        data = pa.table({"writer": [writer], "seq": [seq], "tag": [tag]}, schema=schema)
        props = CommitProperties(custom_metadata={"dynacommit_marker": tag},
                                 max_commit_retries=arg.get("max_commit_retries"))
        try:
            if table is None and DeltaTable.is_deltatable(arg["uri"], storage_options=arg["options"]):
                table = DeltaTable(arg["uri"], storage_options=arg["options"])
            write_deltalake(table if table is not None else arg["uri"], data, mode="append",
                            storage_options=arg["options"], commit_properties=props)
        except Exception as exc:  # reported to the test, which decides what it means
            failed.append({"tag": tag, "error": f"{type(exc).__name__}: {exc}"})
            table = None
        else:
            committed.append(tag)
    return {"committed": committed, "failed": failed, "seconds": round(time.monotonic() - t0, 3)}


def cmd_load(arg: dict) -> dict:
    from deltalake import DeltaTable

    dt = DeltaTable(arg["uri"], version=arg.get("version"), storage_options=arg["options"])
    adds = dt.get_add_actions(flatten=True)
    paths = sorted(str(p) for p in adds.column("path").to_pylist())
    rows = dt.to_pyarrow_table().to_pylist()
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
    markers = [h.get("dynacommit_marker") for h in dt.history()]
    return {"version": dt.version(), "files": paths, "num_files": len(paths), "rows": rows,
            "history_markers": markers}


COMMANDS = {"version": cmd_version, "append": cmd_append, "load": cmd_load}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in COMMANDS:
        print(f"usage: {argv[0]} {{{'|'.join(COMMANDS)}}} JSON", file=sys.stderr)
        return 2
    arg = json.loads(argv[2])
    import deltalake

    try:
        result = COMMANDS[argv[1]](arg)
        code = 0
    except Exception as exc:
        traceback.print_exc()
        result, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
    result["deltalake_version"] = deltalake.__version__
    print(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # delta-rs 1.6.0 can abort while its runtime's threads are torn down at interpreter exit ("terminate
    # called without an active exception"), after the result above is printed: the answer is given, so the
    # process ends here, without that teardown.
    os._exit(status)
