"""What a job gets from the framework: the table, storage options, the settings, Spark on demand, a logger."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.storage.store_calls import StoreCalls

from .settings import Settings

if TYPE_CHECKING:
    from airflow_delta_maint.app.runners.tasks import Tasks


@dataclass
class JobContext:
    table: str
    storage_options: dict[str, str] = field(default_factory=dict)
    master: str | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("delta_maint"))
    #: the table version the job planned from, once it has read it (kept in failure metrics)
    version_read: int | None = None
    #: False when the job runs in the Airflow worker's process (local execution): parallel work runs
    #: on threads, and work only Spark can do (a shuffle) fails with a clear error
    spark_allowed: bool = True
    #: the application's settings, read from the environment by the entry point that made this context
    settings: Settings = field(default_factory=Settings)
    #: Spark configuration for the session this process starts itself (outside spark-submit): the
    #: command line's ``--conf``, the delta-spark engine's packages, its quiet log4j configuration
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: what the job asked the store for, on the driver and (added when they end) in its Spark tasks
    store_calls: StoreCalls = field(default_factory=StoreCalls)
    _spark: Any = None
    _storage: Storage | None = None

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            self._storage = Storage(self.table, self.storage_options, calls=self.store_calls)
        return self._storage

    def spark(self, what: str = "this run"):
        """The SparkSession, created on first use (inspect and dry runs never start Spark).

        Raises:
            InvalidArgumentError: under local execution, naming ``what`` needs Spark.
        """
        if self._spark is None:
            if not self.spark_allowed:
                from airflow_delta_maint.delta.errors import InvalidArgumentError

                raise InvalidArgumentError(
                    f"{what} of {self.table} needs Spark, which local execution does not start; "
                    "run it with execution 'spark'")
            from .spark_session import get_spark

            self._spark = get_spark(self.master, conf=self.spark_conf)
        return self._spark

    @property
    def started_spark(self) -> Any:
        """The SparkSession this run has started, or None (never starts one)."""
        return self._spark

    def session_master(self) -> str:
        """The master of the job's SparkSession (``local[*]`` by default), without starting one."""
        from .spark_session import session_master

        return session_master(self.master)

    def tasks(self, description: str, threads: int | None = None) -> Tasks:
        """Where the job's parallel work runs: Spark tasks, or (local execution) ``threads``
        threads of this process (default: the CPUs, at most four)."""
        from airflow_delta_maint.app.runners.connect_tasks import DataFrameTasks, classic_tasks_kind, is_connect
        from airflow_delta_maint.app.runners.tasks import LocalTasks, SparkTasks

        if not self.spark_allowed:
            return LocalTasks(threads)
        spark = self.spark()
        if is_connect(spark) or classic_tasks_kind() == "dataframe":  # Spark Connect has no RDDs
            return DataFrameTasks(spark, description)
        return SparkTasks(spark, description)

    @property
    def connect(self) -> bool:
        """True when the job's Spark is a Spark Connect server (no SparkContext, no RDDs)."""
        from airflow_delta_maint.app.runners.connect_tasks import remote_url

        return self.spark_allowed and remote_url(self.master) is not None
