"""The settings of the sessions the application starts. A key the session's conf or the submission's
conf sets wins over every default, and so does a worker variable the environment sets. Arrow allocates
with the C library's allocator in the tasks of both runners (``mapPartitions`` and ``mapInArrow``)."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta_maint.app import spark_session
from airflow_delta_maint.app.runners.connect_tasks import DataFrameTasks
from airflow_delta_maint.app.runners.tasks import SparkTasks

KEY = "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL"


def test_python_workers_allocate_with_the_c_library(spark):
    def _pool(part):  # defined here: pickled by value, as the jobs' functions are
        for _ in part:
            yield pa.default_memory_pool().backend_name

    assert spark.sparkContext.getConf().get(KEY) == "system"
    assert SparkTasks(spark).map_slices(_pool, [1, 2], 2, "pool") == ["system", "system"]
    assert DataFrameTasks(spark, "pool").map_slices(_pool, [1, 2], 2, "pool") == ["system", "system"]
    # the driver's own allocator is left as it is
    assert pa.default_memory_pool().backend_name == pa.mimalloc_memory_pool().backend_name


def test_the_users_choice_wins(spark, monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    assert spark_session.default_conf()[KEY] == "system"
    assert spark_session.default_conf()["spark.sql.shuffle.partitions"] == "8"
    chosen = spark_session.default_conf({KEY: "jemalloc", "spark.sql.shuffle.partitions": "200"})
    assert KEY not in chosen and "spark.sql.shuffle.partitions" not in chosen and chosen["spark.ui.enabled"] == "false"
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")  # the JVM and its workers inherit it
    assert KEY not in spark_session.default_conf()
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
    # under spark-submit the submitted conf is the JVM's system properties, and each submitted key wins
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "0")  # as spark-submit's launcher sets it; the test's JVM is up
    system = spark.sparkContext._jvm.System
    submitted = {KEY: "jemalloc", "spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "200"}
    # this test session's own, as its launch passed them
    ours = {key: system.clearProperty(key) for key in [*submitted, "spark.python.worker.reuse"]}
    try:
        assert {key: spark_session.default_conf().get(key) for key in submitted} == {
            KEY: "system", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"}
        for key, value in submitted.items():
            system.setProperty(key, value)
        left = spark_session.default_conf()
        assert [key for key in submitted if key in left] == []
        assert left["spark.python.worker.reuse"] == "true"  # what the submission leaves unset keeps its default
    finally:
        for key, value in ours.items():
            system.clearProperty(key) if value is None else system.setProperty(key, value)
