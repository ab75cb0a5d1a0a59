"""A script run with the virtualenv's python, not through ``make``, works with Spark (issue 27, item 7).

The Makefile exports PYSPARK_PYTHON; a user running ``.venv/bin/python my_job.py`` does not, and Spark's
Python workers then ran ``python3`` from PATH, which lacks dynacommit: "No module named
'spark_integration'". Here PATH starts with a ``python3`` that is the virtualenv's base interpreter
(without the virtualenv's packages), PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON are unset, and the script
builds its own ``local[1]`` session: the write and the read work, and a session whose workers are pointed
at an interpreter without dynacommit is refused with an error that says what to set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_a_script_outside_make_writes_and_reads_with_a_local_session(local_stack, tmp_path):
    assert sys.prefix != sys.base_prefix, "the suite runs in the virtualenv `make venv` builds"
    base = sys._base_executable  # the interpreter the virtualenv was made from, without its packages
    probe = subprocess.run([base, "-c", "import spark_integration"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the base interpreter must lack dynacommit for this test to mean anything"
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "python3").symlink_to(base)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    env.update(local_stack.storage_options(), PATH=f"{shadow}{os.pathsep}{env.get('PATH', '')}")
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    uri = f"s3://{local_stack.bucket}/outside-make/{uuid.uuid4().hex[:12]}"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "spark" / "outside_make_app.py"), uri, base],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [1, 2, 3]
    assert result["refused"] is not None and result["refused"].startswith("ConfigurationError")
    assert "PYSPARK_PYTHON" in result["refused"] and sys.executable in result["refused"]
