"""delta-spark as the judge: one SparkSession with delta-spark's jars for this folder's test run.

These tests run in a pytest process of their own (``make test-delta-spark``): the rest of the suite
proves that our engine needs no Delta jars, so its session must not have them. Our jobs run in this
same session (``get_spark`` returns the active one), so one JVM serves both engines.
"""

from __future__ import annotations

import pytest

from tests.delta_spark_session import start_delta_spark


@pytest.fixture(scope="session")
def spark():
    """The test run's SparkSession, with delta-spark's extension and catalog."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and "DeltaSparkSessionExtension" not in active.conf.get("spark.sql.extensions", ""):
        pytest.fail("tests/delta_spark needs a pytest process of its own (make test-delta-spark): "
                    "a SparkSession without delta-spark is already running")
    session = start_delta_spark(app_name="airflow-delta-maint-delta-spark-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def delta_tables(spark, tmp_path_factory):
    """Every table of ``tables.TABLES``, written once by delta-spark; tests copy them before touching them."""
    from tests.delta_spark.tables import build_all

    return build_all(spark, tmp_path_factory.mktemp("delta_spark_tables"))
