"""One SparkSession for the application (and the tests)."""

from __future__ import annotations

import logging
import os
import sys
import threading


#: Spark Connect sessions of this process, by URL (their artifacts are added once)
_CONNECT: dict[str, object] = {}
_CONNECT_LOCK = threading.Lock()


def get_spark(master: str | None = None, app_name: str = "delta-maint"):
    """Get or create the SparkSession. Under spark-submit the submitted master and conf win.

    A Spark Connect URL (``master`` ``sc://...`` or ``$SPARK_REMOTE``) gives a Spark Connect session
    with the application's modules and environment added (:func:`.connect_tasks.connect_session`).
    """
    from airflow_delta_maint.app.runners.connect_tasks import connect_session, remote_url

    url = remote_url(master)
    if url:
        with _CONNECT_LOCK:
            if url not in _CONNECT:
                _CONNECT[url] = connect_session(url)
            return _CONNECT[url]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master and not _submitted():
        builder = builder.master(master)
    builder = (builder
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.python.worker.reuse", "true")
               .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _submitted() -> bool:
    """True when running inside spark-submit, whose launcher passes the JVM gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_master(master: str | None = None) -> str:
    """The master of the job's SparkSession, without starting one: the running session's, else (under
    spark-submit, whose JVM is already up) the submitted one, else ``master`` or ``local[*]``."""
    from airflow_delta_maint.app.runners.connect_tasks import remote_url

    url = remote_url(master)
    if url:
        return url
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return str(active.sparkContext.master)
    if _submitted():
        SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts no SparkContext
        return SparkConf().get("spark.master", "local[*]") or "local[*]"
    return master or "local[*]"


def start_in_background(master: str | None = None) -> threading.Thread:
    """Start the SparkSession in a thread, so it comes up while the driver reads the log and plans.

    The job's own :func:`get_spark` call then waits for it (the builder's lock) and gets the same
    session; a failure here is left for that call to report.
    """

    def start() -> None:
        try:
            get_spark(master)
        except Exception:
            logging.getLogger("delta_maint").debug("SparkSession start in the background failed", exc_info=True)

    thread = threading.Thread(target=start, name="spark-session-start", daemon=True)
    thread.start()
    return thread
