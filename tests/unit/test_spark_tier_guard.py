"""Under ``make test`` the Spark tier fails when pyspark cannot be imported, instead of being skipped
(issue 18): a broken install must never pass for a green suite. pyspark is hidden from a child pytest by
a package of the same name, first on its path, that refuses to import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collect_spark_tier(tmp_path: Path, *, required: bool) -> subprocess.CompletedProcess:
    hidden = tmp_path / "hidden"
    (hidden / "pyspark").mkdir(parents=True)
    (hidden / "pyspark" / "__init__.py").write_text('raise ModuleNotFoundError("No module named pyspark (hidden for this test)", name="pyspark")\n')
    env = {k: v for k, v in os.environ.items() if k != "DYNACOMMIT_REQUIRE_SPARK"}
    env["PYTHONPATH"] = os.pathsep.join([str(hidden), str(ROOT)])
    if required:
        env["DYNACOMMIT_REQUIRE_SPARK"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "tests/spark"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_without_pyspark_the_spark_tier_fails_under_make_test(tmp_path):
    done = collect_spark_tier(tmp_path, required=True)
    assert done.returncode not in (0, 5), done.stdout[-2000:]
    assert "the Spark tier needs pyspark" in done.stdout + done.stderr


def test_without_pyspark_the_spark_tier_is_left_out_elsewhere(tmp_path):
    done = collect_spark_tier(tmp_path, required=False)
    assert done.returncode == 5, done.stdout[-2000:] + done.stderr[-2000:]  # nothing collected, nothing failed
    assert "Spark tier left out" in done.stdout
