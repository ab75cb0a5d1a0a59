"""The ``dynacommit`` command as a separate process, on a real pseudo-terminal and on pipes: what a
person at a terminal sees (tables, progress bars), what a pipe gets (plain text and log lines, no
control characters), ``python -m table.cli``, the console script, and a reader that goes away."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from importlib.metadata import entry_points
from pathlib import Path

import pyarrow as pa
import pytest

from table import Table, write_table
from table.cli import main

pytestmark = pytest.mark.slow  # each test starts the command as a process

ROOT = Path(__file__).resolve().parents[2]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "TERM": "xterm-256color"}


def command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "table.cli", *argv]


def run_on_terminal(argv: list[str], *, terminal: str) -> tuple[int, str, str]:
    """Run ``argv`` with ``terminal`` ("stdout" or "stderr") on a pseudo-terminal and the other stream on
    a pipe; returns the exit status, what the terminal showed and what the pipe got."""
    leader, follower = pty.openpty()
    on_pipe = subprocess.PIPE
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=environment(),
                               stdout=follower if terminal == "stdout" else on_pipe,
                               stderr=follower if terminal == "stderr" else on_pipe)
    os.close(follower)
    pipe = process.stderr if terminal == "stdout" else process.stdout
    piped: list[bytes] = []
    reader = threading.Thread(target=lambda: piped.append(pipe.read()))
    reader.start()
    shown = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every copy of the follower is closed, the process has exited
            break
        if not chunk:
            break
        shown.append(chunk)
    status = process.wait(timeout=120)
    reader.join(timeout=120)
    pipe.close()
    os.close(leader)
    return status, b"".join(shown).decode(), piped[0].decode()


@pytest.fixture
def s3_table(s3_uri, storage_options) -> str:
    write_table(s3_uri, pa.table({"x": [1, 2, 3], "p": ["a", "b", "a"]}), partition_by=["p"],
                storage_options=storage_options)
    return s3_uri


def orphans(uri: str, options: dict[str, str], count: int) -> Table:
    table = Table(uri, storage_options=options)
    for i in range(count):
        table.objects.put(table.uri.key(f"part-orphan-{i:04d}.parquet"), b"not referenced")
    return table


def test_a_terminal_gets_a_table_and_a_pipe_gets_plain_text(s3_table, storage_options):
    status, shown, err = run_on_terminal(command("history", s3_table, *flags(storage_options)), terminal="stdout")
    assert status == 0 and err == ""
    assert "\x1b[" in shown and "─" in shown  # styled header, rule under it
    piped = subprocess.run(command("history", s3_table, *flags(storage_options)), env=environment(),
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout.splitlines()[0].split() == ["version", "timestamp", "operation", "attempts", "parameters",
                                                    "metrics"]
    assert not CONTROL.search(piped.stdout) and "─" not in piped.stdout


def test_progress_is_a_bar_on_a_terminal_and_log_lines_on_a_pipe(s3_table, storage_options):
    table = orphans(s3_table, storage_options, 3)
    vacuum = command("vacuum", s3_table, "--retention-hours", "0", "--force", "--execute", *flags(storage_options))
    status, shown, out = run_on_terminal(vacuum, terminal="stderr")
    assert status == 0 and "deleted 3 file(s)" in out
    assert "deleting files" in shown and "3/3" in shown and "\x1b[" in shown  # a drawn, finished bar
    assert "table.progress" not in shown  # no log lines where the bar is
    assert list(table.objects.list(table.uri.key("part-orphan"))) == []
    orphans(s3_table, storage_options, 2)
    piped = subprocess.run(vacuum, env=environment(), capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "deleted 2 file(s)" in piped.stdout
    lines = piped.stderr.splitlines()
    assert len(lines) == 2 and lines[0].endswith("INFO table.progress: deleting files: started, 0/2 (0%)")
    assert " INFO table.progress: deleting files: done, 2/2 (100%) in " in lines[1]
    assert not CONTROL.search(piped.stderr) and not CONTROL.search(piped.stdout)


def test_python_m_and_the_console_script_run_main():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "dynacommit"]
    assert script.value == "table.cli:main" and script.load() is main
    shown = subprocess.run(command("--help"), env=environment(), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: dynacommit")
    wrong = subprocess.run(command("show"), env=environment(), capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "the following arguments are required: uri" in wrong.stderr


def test_a_reader_that_goes_away_is_not_an_error(s3_table, storage_options):
    argv = command("history", s3_table, "--json", *flags(storage_options))
    process = subprocess.Popen(argv, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # gone before the command prints anything (`dynacommit history | head -0`)
    err = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_json_on_a_terminal_is_still_plain_json(s3_table, storage_options):
    status, shown, _ = run_on_terminal(command("show", s3_table, "--json", *flags(storage_options)),
                                       terminal="stdout")
    assert status == 0 and json.loads(shown)["version"] == 0
