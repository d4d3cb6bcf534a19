"""One SparkSession for the application (and the tests), and the configuration of the session the
command line starts itself."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path


#: The environment of Spark's Python workers, unless the submission or ``conf`` sets it: Arrow's
#: allocator is the C library's. Arrow's default, mimalloc, returns freed pages to the kernel at once,
#: and a rewrite task, which allocates and frees a file's worth of buffers for every file it reads
#: and writes, then faults them in again: a 900 MB OPTIMIZE on a warm two-core session took 4.4 to
#: 5.0 s with mimalloc and 3.7 to 3.9 s with the C library's, at a lower peak (docs/benchmarks.md).
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}

#: Spark Connect sessions of this process, by URL (their artifacts are added once)
_CONNECT: dict[str, object] = {}
_CONNECT_LOCK = threading.Lock()


def get_spark(master: str | None = None, app_name: str = "delta-maint", conf: Mapping[str, str] | None = None):
    """Get or create the SparkSession. Under spark-submit the submitted master and conf win.

    A Spark Connect URL (``master`` ``sc://...`` or ``$SPARK_REMOTE``) gives a Spark Connect session
    with the application's modules and environment added (:func:`.connect_tasks.connect_session`).
    ``conf`` (:func:`session_conf`) goes to a session this process starts itself, outside spark-submit.
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
    for key, value in default_conf(conf).items():
        builder = builder.config(key, value)
    if not _submitted():
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from airflow_delta_maint.app.runners.executor_cpu import warm_status_api

    warm_status_api(spark)  # where runs read their executors' CPU, when the UI is on
    return spark


def default_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a session this application starts gets unless someone chose otherwise: no UI, no
    console progress, 8 shuffle partitions, reused Python workers on this interpreter, and
    ``spark.executorEnv.*`` for :data:`WORKER_ENV`.

    A key that ``conf`` or the submission's conf (under spark-submit) sets is left out, and so is a
    worker variable that this process's environment sets: the user's choice wins.
    """
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.python.worker.reuse": "true",
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    defaults |= {f"spark.executorEnv.{name}": value for name, value in WORKER_ENV.items() if name not in os.environ}
    taken = set(conf or {})
    if _submitted():
        submitted = _submitted_conf()
        taken |= {key for key in defaults if submitted.contains(key)}
    return {key: value for key, value in defaults.items() if key not in taken}


def _submitted() -> bool:
    """True when running inside spark-submit, whose launcher passes the JVM gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_conf():
    """The submitted conf under spark-submit: its JVM's system properties (starts no SparkContext)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM
    return SparkConf()


def session_master(master: str | None = None) -> str:
    """The master of the job's SparkSession, without starting one: the running session's, else (under
    spark-submit, whose JVM is already up) the submitted one, else ``master`` or ``local[*]``."""
    from airflow_delta_maint.app.runners.connect_tasks import remote_url

    url = remote_url(master)
    if url:
        return url
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return str(active.sparkContext.master)
    if _submitted():
        return _submitted_conf().get("spark.master", "local[*]") or "local[*]"
    return master or "local[*]"


def start_in_background(master: str | None = None, conf: Mapping[str, str] | None = None) -> threading.Thread:
    """Start the SparkSession in a thread, so it comes up while the driver reads the log and plans.

    The job's own :func:`get_spark` call then waits for it (the builder's lock) and gets the same
    session; a failure here is left for that call to report.
    """

    def start() -> None:
        try:
            get_spark(master, conf=conf)
        except Exception:
            logging.getLogger("delta_maint").debug("SparkSession start in the background failed", exc_info=True)

    thread = threading.Thread(target=start, name="spark-session-start", daemon=True)
    thread.start()
    return thread


# -- the session the command line starts itself ----------------------------------------------------
def _spark_conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"Spark conf must be KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """``--conf K=V`` and ``--verbose``: the session a run outside spark-submit starts, and what it shows."""
    parser.add_argument("--conf", action="append", type=_spark_conf, default=[], metavar="K=V",
                        help="Spark configuration for the session a run outside spark-submit starts (repeatable), "
                             "e.g. spark.driver.memory=4g; under spark-submit its own --conf applies")
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's start-up output (log4j's banner, the hostname warning, pyspark's "
                             "FutureWarnings), which a run outside spark-submit otherwise leaves out")


def session_conf(conf: Mapping[str, str], *, delta_spark: bool, quiet: bool, cache_dir: Path) -> dict[str, str]:
    """The configuration of the session the command line starts itself: ``conf`` (``--conf``), plus
    for the delta-spark engine its packages, extension and catalog as the Airflow hook adds them
    (:func:`.engines.delta_spark_jars.add_delta_spark`), plus with ``quiet`` the driver JVM's quiet
    log4j configuration (:mod:`.console`). Ivy's settings and the log4j file go into ``cache_dir``."""
    out = dict(conf)
    if delta_spark:
        from .engines.delta_spark_jars import PACKAGES_KEY, add_delta_spark

        packages = add_delta_spark(out, None, None, cache_dir)
        if packages:
            out[PACKAGES_KEY] = packages
    key = "spark.driver.extraJavaOptions"
    if quiet and "log4j2.configurationFile" not in out.get(key, ""):  # the user's own log4j configuration wins
        from .console import quiet_java_options

        try:
            out[key] = " ".join(filter(None, [out.get(key, "").strip(), quiet_java_options(cache_dir)]))
        except OSError as exc:  # a cache folder we cannot write to costs the quiet start-up, not the run
            logging.getLogger("delta_maint").debug("no quiet log4j configuration in %s: %s", cache_dir, exc)
    return out
