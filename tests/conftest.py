"""Shared fixtures: the conformance corpus, table copies, one SparkSession per test session; the tiers
(markers given from what a test uses) and the Hypothesis profiles."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.hypothesis_profiles import CI_SEED, load_profile
from tests.tiers import mark_tiers, tier_guard

REPO = Path(__file__).resolve().parents[1]
# Real tables written by delta-spark and delta-rs (see tests/data/conformance/README.md);
# DELTA_MAINT_CORPUS points the tests at another copy.
CORPUS = Path(os.environ.get("DELTA_MAINT_CORPUS", REPO / "tests" / "data" / "conformance")).resolve()

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
logging.getLogger("py4j").setLevel(logging.WARNING)  # py4j logs while the interpreter shuts down
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
HYPOTHESIS_PROFILE = load_profile(REPO)


def load_manifest() -> list[dict]:
    """Every corpus table with what delta-rs 1.6.0 made of it."""
    with open(CORPUS / "manifest.json") as fh:
        return json.load(fh)["tables"]


def corpus_path(name: str) -> Path:
    return CORPUS / "tables" / name


# Every corpus table whose snapshot has files with deletion vectors, with (live rows, a value
# column, the values the tables' own DELETE predicates removed), taken from their commit history.
CORPUS_DV_TABLES = {
    "golden/dv-partitioned-with-checkpoint": (35, "col1", [26, 28]),
    "rs/table-with-dv-small": (8, "value", [0, 9]),
    "rs/table_with_deletion_logs": (98, "id", [12, 89]),
    "spark/table-with-dv-large": (1993, "value", [0, 180, 250, 300, 300, 350, 700, 900, 1353, 1567, 1800]),
    "spark/table-with-dv-small": (8, "value", [0, 9]),
    # DELETE ... WHERE id % 10 = 3 OR id >= 200 on ids [0, 250): the files of ids >= 200 went whole
    "spark44/iceberg-compat-v3": (180, "id", list(range(3, 200, 10))),
}

# delta-spark's test suites wrote the spark/ tables' DV files with a test-only name prefix that the
# log does not name; the protocol places them at "deletion_vector_<uuid>.bin".
SPARK_TEST_PREFIX = "test%dv%prefix-"


def restore_dv_file_names(path: Path) -> None:
    """In a copied table, move prefixed DV files to the names the protocol gives them."""
    for f in os.listdir(path):
        if f.startswith(SPARK_TEST_PREFIX):
            os.rename(path / f, path / f[len(SPARK_TEST_PREFIX):])


@pytest.fixture(scope="session")
def manifest() -> list[dict]:
    if not (CORPUS / "manifest.json").exists():
        raise FileNotFoundError(f"conformance corpus not found at {CORPUS} (set DELTA_MAINT_CORPUS)")
    return load_manifest()


@pytest.fixture
def copy_table(tmp_path):
    """Copy a corpus table into a temporary folder and return the copy's path."""

    def _copy(name: str) -> Path:
        dest = tmp_path / name.replace("/", "__")
        shutil.copytree(corpus_path(name), dest)
        return dest

    return _copy


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test run."""
    from airflow_delta_maint.app.spark_session import get_spark

    session = get_spark(master="local[2]", app_name="airflow-delta-maint-tests")
    yield session
    session.stop()


def pytest_ignore_collect(collection_path, config):
    """tests/delta_spark runs only when named (``make test-delta-spark``): its SparkSession has Delta jars.
    tests/airflow/cluster too (``make test-cluster``): it starts a namespaced cluster, as root; and tests/install
    (``make test-install``): it builds the wheel and installs it into fresh virtualenvs."""
    for folder in (REPO / "tests" / "delta_spark", REPO / "tests" / "airflow" / "cluster", REPO / "tests" / "install"):
        if collection_path == folder or folder in collection_path.parents:
            named = [Path(a.split("::")[0]).resolve() for a in config.args]
            if not any(p == folder or folder in p.parents for p in named):
                return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Under the ``ci`` Hypothesis profile every property test draws from one fixed seed."""
    if HYPOTHESIS_PROFILE == "ci" and config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(CI_SEED)


def pytest_collection_modifyitems(config, items):
    """Each test gets the tier markers of the fixtures and folders it uses (``tests/tiers.py``)."""
    mark_tiers(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """A fast-tier test whose fixtures start Spark, spark-submit or Airflow fails (``tests/tiers.py``)."""
    with tier_guard(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A fast-tier test that starts Spark, spark-submit or Airflow fails, naming the marker it lacks: the fast
    tier stays fast and its markers stay true."""
    with tier_guard(item):
        return (yield)
