"""The environment of Spark's Python workers: Arrow allocates with the C library's allocator in the
tasks of both runners (``mapPartitions`` and ``mapInArrow``) unless the user chose otherwise, in the
session's conf, the submission's conf or the environment."""

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
    assert spark_session.worker_env_conf() == {KEY: "system"}
    assert spark_session.worker_env_conf({KEY: "jemalloc"}) == {}
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")  # the JVM and its workers inherit it
    assert spark_session.worker_env_conf() == {}
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
    # under spark-submit the submitted conf is the JVM's system properties
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "0")  # as spark-submit's launcher sets it; the test's JVM is up
    system = spark.sparkContext._jvm.System
    ours = system.clearProperty(KEY)  # this test session's own, as its launch passed it
    try:
        assert spark_session.worker_env_conf() == {KEY: "system"}
        system.setProperty(KEY, "jemalloc")
        assert spark_session.worker_env_conf() == {}
    finally:
        system.clearProperty(KEY) if ours is None else system.setProperty(KEY, ours)
