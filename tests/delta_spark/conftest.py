"""delta-spark as the judge: one SparkSession with delta-spark's jars per pytest process.

These tests run in pytest processes of their own (``make test-delta-spark``): the rest of the suite
proves that our engine needs no Delta jars, so its session must not have them. Our jobs run in this
same session (``get_spark`` returns the active one), so one JVM serves both engines.

``make test-delta-spark`` runs them on two pytest-xdist workers with ``--dist loadscope``: each module's
tests stay on one worker (its fixtures are built once), and so does each matrix table's chain of jobs (a
test class per table, run in order). The tables delta-spark writes are built once per run, by whichever
worker first needs each one.
"""

from __future__ import annotations

import fcntl
import os

import pytest

from tests.delta_spark_session import CACHE, start_delta_spark


@pytest.fixture(scope="session")
def spark():
    """The test run's SparkSession, with delta-spark's extension and catalog (workers start theirs one at a
    time: Ivy resolves into one cache on the machine)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and "DeltaSparkSessionExtension" not in active.conf.get("spark.sql.extensions", ""):
        pytest.fail("tests/delta_spark needs a pytest process of its own (make test-delta-spark): "
                    "a SparkSession without delta-spark is already running")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        session = start_delta_spark(app_name="airflow-delta-maint-delta-spark-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def delta_tables(spark, tmp_path_factory):
    """Every table of ``tables.TABLES``, written once per run by delta-spark (each when first needed, shared by
    the run's workers); tests copy them before touching them."""
    from tests.delta_spark.tables import SharedTables

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "delta_spark_tables"
    return SharedTables(spark, root)
