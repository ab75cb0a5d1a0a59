"""CPU per one-row append, ours and the servers', for each AWS client (logstore/lean.py or botocore).

    python -m tests.benchmarks.cpu_per_append [--server servers|moto] [--count 300] [--clients lean,botocore]
        [--signers botocore,awscrt]

Starts the servers once; for each client a child process (``DYNACOMMIT_AWS_CLIENT`` set) opens a long-lived
Table, appends 10 rows to warm up, then ``--count`` one-row appends while the parent reads the servers'
CPU from ``/proc``. ``--signers``: the lean client is run once per signer, ``botocore`` (its own) or
``awscrt`` (the AWS CRT's, ``tests/benchmarks/signing_cpu.py``'s ``CrtSigner``; not a dependency:
``pip install --target DIR awscrt`` and ``PYTHONPATH=.:DIR``). Prints one JSON line per run: our process's CPU (user + system, from
``resource.getrusage``) and the servers' per append, and the wall time per append (on a loaded machine
the CPU figures are the ones to trust).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def child(count: int) -> None:
    if os.environ.get("CPU_BENCH_SIGNER") == "awscrt":
        from logstore import lean
        from tests.benchmarks.signing_cpu import CrtSigner

        lean._Signer = CrtSigner
    from table import Table, write_table
    from tests.benchmarks.harness.workload import small_append

    options = json.loads(os.environ["CPU_BENCH_OPTIONS"])
    uri = f"{os.environ['CPU_BENCH_BASE']}/{uuid.uuid4().hex[:8]}"
    writer = Table.for_write(uri, storage_options=options)
    for seq in range(10):
        write_table(writer, small_append("cpu", seq))
    print("ready", flush=True)
    sys.stdin.readline()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    user0, system0, wall0 = usage.ru_utime, usage.ru_stime, time.perf_counter()
    for seq in range(count):
        write_table(writer, small_append("cpu", 100 + seq))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"user": usage.ru_utime - user0, "system": usage.ru_stime - system0,
                      "wall": time.perf_counter() - wall0}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.cpu_per_append")
    parser.add_argument("--server", choices=("servers", "moto"), default="servers")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--clients", default="lean,botocore")
    parser.add_argument("--signers", default="botocore", help="signers of the lean client: botocore,awscrt")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.count)
        return
    from tests.benchmarks.harness.driver import start_stack

    stack = start_stack(args.server)
    try:
        handle = stack._handle
        roots = ([handle.process.pid] if args.server == "moto"
                 else [handle.s3.process.pid, handle.dynamodb.process.pid])
        runs = [(client, signer) for client in args.clients.split(",")
                for signer in (args.signers.split(",") if client == "lean" else ["botocore"])]
        for client, signer in runs:
            env = dict(os.environ, DYNACOMMIT_AWS_CLIENT=client, CPU_BENCH_OPTIONS=json.dumps(stack.options),
                       CPU_BENCH_BASE=f"s3://{stack.bucket}/cpu", CPU_BENCH_SIGNER=signer)
            proc = subprocess.Popen([sys.executable, "-m", "tests.benchmarks.cpu_per_append", "--child",
                                     "--count", str(args.count)], env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None and proc.stdin is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"the {client} child failed before its run")
            pids = [p for root in roots for p in _descendants(root)]
            servers0 = _cpu_seconds(pids)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            result = json.loads(proc.stdout.readline())
            servers = _cpu_seconds(pids) - servers0
            proc.wait(60)
            load = os.getloadavg()[0]
            print(json.dumps({
                "server": args.server, "client": client, "signer": signer, "appends": args.count,
                "ours_cpu_ms_per_append": round((result["user"] + result["system"]) * 1000 / args.count, 2),
                "ours_system_cpu_ms_per_append": round(result["system"] * 1000 / args.count, 2),
                "servers_cpu_ms_per_append": round(servers * 1000 / args.count, 2),
                "wall_ms_per_append": round(result["wall"] * 1000 / args.count, 2),
                "load_average_1min": round(load, 2),
            }), flush=True)
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
