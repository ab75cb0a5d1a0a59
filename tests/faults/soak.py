"""``make soak``: writers and readers on the local stack through the fault proxy, with random ``kill -9``s.

8 writer processes append marker commits and 2 reader processes read the table in a loop, all through the
fault proxy injecting faults of every kind into 2% of the requests; every few seconds a random writer is
killed with SIGKILL and a new one started in its place. After ``--minutes`` (10 by default) the writers
finish the commit they are in, the faults stop, and the DynamoDB items are read as they were left (no
entry but the newest may be incomplete, stuck or without ``expireTime``); then a fault-free reader audits
the table (as the fault suite does: ``tests/support/fault_harness.py``). Totals are printed; the exit
status is 1 on any lost or duplicated commit, untyped error, definite failure that landed anyway, error
told to a reader, torn read, item left unfinished or broken invariant. CI runs it for 1 minute
(``tests/faults/test_soak.py``).

    .venv/bin/python tests/faults/soak.py --minutes 10     # what `make soak` runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
for _key in [k for k in os.environ if k.startswith("AWS_")] + ["DELTA_DYNAMO_TABLE_NAME", "DYNACOMMIT_FAILPOINTS"]:
    os.environ.pop(_key, None)  # never reach real AWS, never inherit armed failpoints

from infra.local_stack import LocalStack  # noqa: E402
from table import write_table  # noqa: E402
from tests.support.fault_harness import (  # noqa: E402
    audit,
    child_env,
    item_problems,
    judge,
    marker,
    marker_rows,
    parse_records,
    table_items,
    worker_command,
)
from tests.support.fault_proxy import FaultProxy, mixed  # noqa: E402

FINISH_SECONDS = 240


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long writers and readers run (default 10)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--fault-rate", type=float, default=0.02, help="share of requests faulted (default 0.02)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(4.0, 15.0), metavar=("MIN", "MAX"),
                        help="seconds between two kills, drawn uniformly (default 4 15)")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--json-out", help="also write the totals, failures included, to this file")
    args = parser.parse_args(argv)
    if not (args.minutes > 0 and args.writers > 0 and args.readers >= 0 and 0 <= args.fault_rate <= 1):
        parser.error("--minutes and --writers must be positive, --readers >= 0, --fault-rate within 0..1")
    started = time.monotonic()
    with LocalStack(bucket="dynacommit-soak") as stack, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        slots = [f"w{n}" for n in range(args.writers)]
        with FaultProxy(stack.endpoint, seed=args.seed, labels=[*slots, "readers"], slow_seconds=0.2) as proxy:
            totals = Soak(args, stack, proxy, slots, tmp).run()
    totals["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(totals, indent=1))
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(totals, out, indent=1)
    failures = totals.pop("failures")
    if failures:
        print("SOAK FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("SOAK OK: nothing lost, nothing duplicated, every error typed, every invariant kept")
    return 0


class Soak:
    def __init__(self, args, stack: LocalStack, proxy: FaultProxy, slots: list[str], tmp: str):
        self.args, self.stack, self.proxy, self.slots, self.tmp = args, stack, proxy, slots, tmp
        self.random = random.Random(args.seed)
        self.uri = f"s3://{stack.bucket}/soak/table"
        self.direct = stack.storage_options()
        self.writers: dict[str, tuple[subprocess.Popen, str]] = {}   # slot -> (process, output path)
        self.outputs: list[str] = []
        self.readers: list[tuple[subprocess.Popen, str]] = []
        self.kills = 0
        self.incarnations = Counter()

    def run(self) -> dict:
        write_table(self.uri, marker_rows("init", 0), storage_options=self.direct)
        self.proxy.set_faults(mixed(self.args.fault_rate))
        self.until = time.monotonic() + self.args.minutes * 60
        for slot in self.slots:
            self.start_writer(slot)
        for n in range(self.args.readers):
            self.start_reader(n)
        self.kill_until_the_end()
        self.wait_for_everyone()
        self.proxy.clear_faults()
        return self.totals()

    def start_writer(self, slot: str) -> None:
        self.incarnations[slot] += 1
        writer = f"{slot}k{self.incarnations[slot]}"
        path = os.path.join(self.tmp, f"{writer}.out")
        settings = {"uri": self.uri, "options": self.proxy.storage_options(self.direct, slot), "writer": writer,
                    "until": self.until, "reuse_table": self.incarnations[slot] % 2 == 0}
        with open(path, "w") as out, open(os.path.join(self.tmp, f"{writer}.err"), "w") as err:
            process = subprocess.Popen(worker_command("writer", settings), stdout=out, stderr=err, env=child_env(),
                                       start_new_session=True)
        self.writers[slot] = (process, path)
        self.outputs.append(path)

    def start_reader(self, n: int) -> None:
        path = os.path.join(self.tmp, f"reader{n}.out")
        settings = {"uri": self.uri, "options": self.proxy.storage_options(self.direct, "readers"),
                    "until": self.until, "pause": 1.0}
        with open(path, "w") as out, open(os.path.join(self.tmp, f"reader{n}.err"), "w") as err:
            self.readers.append((subprocess.Popen(worker_command("reader", settings), stdout=out, stderr=err,
                                                  env=child_env(), start_new_session=True), path))

    def kill_until_the_end(self) -> None:
        low, high = self.args.kill_every
        while True:
            pause = self.random.uniform(low, high)
            if time.monotonic() + pause >= self.until:
                break
            time.sleep(pause)
            slot = self.random.choice(self.slots)
            process, _ = self.writers[slot]
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)  # this writer's own PID, which this script started
                process.wait()
                self.kills += 1
            self.start_writer(slot)
        time.sleep(max(0.0, self.until - time.monotonic()))

    def wait_for_everyone(self) -> None:
        deadline = time.monotonic() + FINISH_SECONDS
        for process, _ in [*self.writers.values(), *self.readers]:
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def totals(self) -> dict:
        records, unfinished = [], []
        for path in self.outputs:
            with open(path) as handle:
                found, done = parse_records(handle.read())
            records += found
        for slot, (process, path) in self.writers.items():
            if process.returncode not in (0, -signal.SIGKILL):
                unfinished.append(f"writer {slot} ({path}) exited with {process.returncode}")
        reads, read_errors, torn, backwards, samples = 0, Counter(), [], [], {}
        for process, path in self.readers:
            last = -1
            with open(path) as handle:
                for line in handle:
                    event = json.loads(line)
                    if event["event"] != "read":
                        continue
                    reads += 1
                    if not event["ok"]:
                        error = event["error"]
                        name = error["type"] if error["dynacommit"] else f"untyped {error['type']}"
                        read_errors[name] += 1
                        samples.setdefault(f"reader {name}", error["message"][:300])
                        continue
                    torn += event["duplicated"] + event["partial"]
                    if event["version"] < last:
                        backwards.append(f"{path}: version {event['version']} after {last}")
                    last = event["version"]
            if process.returncode != 0:
                unfinished.append(f"reader {path} exited with {process.returncode}")
        from logstore import open_log_store

        left = table_items(open_log_store(self.uri, storage_options=self.direct))  # before any reader finishes one
        unfinished_items = item_problems(left, except_newest=True)
        found = audit(self.uri, self.direct)
        verdict = judge(records, found, expected_elsewhere=[marker("init", 0)])
        versions = found.marker_versions()
        in_flight = [r for r in records if r.ok is None]
        latencies = [r.end - r.begin for r in records if r.ok]
        for record in records:
            if record.error is not None:
                samples.setdefault(f"writer {record.error_type}", record.error["message"][:300])
        stats = self.proxy.stats()
        failures = [*unfinished, *verdict.failures, *found.problems()]
        failures += [f"left by the writers: {p}" for p in unfinished_items]
        failures += [f"readers were told errors: {dict(read_errors)}"] if read_errors else []
        failures += [f"readers saw torn or doubled commits: {sorted(set(torn))[:10]}"] if torn else []
        failures += backwards
        failures += [f"readers got untyped errors: {dict(read_errors)}"] if any(
            k.startswith("untyped") for k in read_errors) else []
        return {
            "minutes": self.args.minutes, "writers": self.args.writers, "readers": self.args.readers,
            "fault_rate": self.args.fault_rate, "seed": self.args.seed,
            "commits_attempted": verdict.attempted, "commits_acknowledged": verdict.acknowledged,
            "commits_landed": verdict.landed, "lost": len(verdict.lost), "duplicated": len(verdict.duplicated),
            "kills": self.kills,
            "killed_in_flight": len(in_flight),
            "killed_in_flight_landed": sum(1 for r in in_flight if versions.get(r.marker)),
            "writer_errors_by_class": dict(verdict.errors_by_type),
            "untyped_errors": len(verdict.untyped_errors),
            "commit_state_unknown_then_landed": verdict.unknown_landed,
            "commit_state_unknown_then_absent": verdict.unknown_absent,
            "max_commit_seconds": round(max(latencies), 2) if latencies else None,
            "reads": reads, "reader_errors_by_class": dict(read_errors),
            "items": len(left), "items_unfinished_before_the_audit": len(unfinished_items),
            "latest_version": found.latest,
            "requests": stats.total_requests, "faults": dict(stats.faults),
            "error_samples": samples,
            "failures": failures,
        }


if __name__ == "__main__":
    raise SystemExit(main())
