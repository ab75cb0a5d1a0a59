"""A writer process for the multi-process race tests: commits N entries to one table, each with a unique
body, retrying at the next version whenever it loses a race. Prints one JSON line of figures."""

from __future__ import annotations

import json
import sys
import time

from logstore import TableNotFoundError, VersionExistsError, open_log_store


def main() -> None:
    uri, options_json, count, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = open_log_store(uri, storage_options=json.loads(options_json))
    lost = 0
    started = time.perf_counter()
    for i in range(count):
        body = json.dumps({"commitInfo": {"writer": tag, "i": i}}).encode() + b"\n"
        while True:
            try:
                version = store.latest_version() + 1
            except TableNotFoundError:
                version = 0
            try:
                store.write(version, body)
                break
            except VersionExistsError:
                lost += 1
    print(json.dumps({"writer": tag, "commits": count, "lost_races": lost,
                      "seconds": round(time.perf_counter() - started, 3)}))


if __name__ == "__main__":
    main()
