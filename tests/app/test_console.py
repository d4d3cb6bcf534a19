"""What ``delta-maint`` shows: its result, not Spark's start-up chatter, unless ``--verbose``; and the session it
starts itself (outside spark-submit) configured for the chosen engine as the operators' submissions are."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.app.cli import build_parser
from airflow_delta_maint.app.console import LOG4J2_FILE, QUIET_LOG4J2
from airflow_delta_maint.app.engines import DEFAULT_PACKAGE, DELTA_CATALOG, DELTA_EXTENSION
from airflow_delta_maint.app.engines.delta_spark_jars import IVY_SETTINGS
from airflow_delta_maint.app.job_definitions import JOBS as JOB_MODULES
from airflow_delta_maint.app.spark_session import session_conf
from airflow_delta_maint.delta.log.snapshot import Snapshot

BIN = Path(sys.executable).parent
JAVA_OPTIONS = "spark.driver.extraJavaOptions"

#: what a SparkSession's start prints unless told otherwise (the hostname lines only where the machine's name
#: resolves to a loopback address; pyspark's FutureWarning only with a pandas newer than it supports)
BANNER = ("Using Spark's default log4j profile", 'Setting default log level to "WARN"')
HOSTNAME = "resolves to a loopback address"
FUTURE_WARNING = "FutureWarning: PySpark does not yet fully support pandas"
NATIVE_LIBRARY = "Unable to load native-hadoop library"


# -- the session's configuration (no Spark) -------------------------------------------------------------
def _log4j_file(options: str) -> Path:
    (option,) = [o for o in options.split() if o.startswith("-Dlog4j2.configurationFile=")]
    return Path(urlparse(option.split("=", 1)[1]).path)


def test_a_quiet_session_gets_the_quiet_log4j_configuration(tmp_path):
    conf = session_conf({}, delta_spark=False, quiet=True, cache_dir=tmp_path)
    assert set(conf) == {JAVA_OPTIONS}
    path = _log4j_file(conf[JAVA_OPTIONS])
    assert path == tmp_path / LOG4J2_FILE and path.read_text() == QUIET_LOG4J2
    assert session_conf({}, delta_spark=False, quiet=False, cache_dir=tmp_path) == {}


def test_the_users_java_options_stay_and_their_log4j_configuration_wins(tmp_path):
    conf = session_conf({JAVA_OPTIONS: "-Xss4m", "spark.driver.memory": "2g"}, delta_spark=False, quiet=True,
                        cache_dir=tmp_path)
    assert conf["spark.driver.memory"] == "2g"
    assert conf[JAVA_OPTIONS].startswith("-Xss4m -Dlog4j2.configurationFile=")
    own = {JAVA_OPTIONS: "-Dlog4j2.configurationFile=/etc/spark/log4j2.properties"}
    assert session_conf(own, delta_spark=False, quiet=True, cache_dir=tmp_path) == own


def test_an_unwritable_cache_folder_costs_the_quiet_start_only(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert session_conf({}, delta_spark=False, quiet=True, cache_dir=blocked / "cache") == {}


def test_the_delta_spark_engine_gets_what_the_hook_adds(tmp_path):
    conf = session_conf({}, delta_spark=True, quiet=False, cache_dir=tmp_path)
    assert conf == {"spark.jars.packages": DEFAULT_PACKAGE, "spark.sql.extensions": DELTA_EXTENSION,
                    "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
                    "spark.jars.ivySettings": str(tmp_path / "ivysettings-maven-central.xml")}
    assert (tmp_path / "ivysettings-maven-central.xml").read_text() == IVY_SETTINGS
    # the user's packages stay beside delta-spark's; packages or Ivy settings naming their own win
    conf = session_conf({"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0",
                         "spark.sql.extensions": "com.example.Extension"}, delta_spark=True, quiet=False,
                        cache_dir=tmp_path)
    assert conf["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:3.5.0,{DEFAULT_PACKAGE}"
    assert conf["spark.sql.extensions"] == f"com.example.Extension,{DELTA_EXTENSION}"
    own = {"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0", "spark.jars.ivySettings": "/etc/ivy.xml"}
    conf = session_conf(own, delta_spark=True, quiet=False, cache_dir=tmp_path)
    assert conf["spark.jars.packages"] == own["spark.jars.packages"]
    assert conf["spark.jars.ivySettings"] == "/etc/ivy.xml"
    assert session_conf({}, delta_spark=False, quiet=False, cache_dir=tmp_path) == {}


def test_every_command_that_starts_spark_takes_verbose_and_conf():
    parser = build_parser()
    for command in [*JOB_MODULES, "fleet"]:
        args = parser.parse_args([command, "x", "--verbose", "--conf", "spark.driver.memory=2g", "--conf",
                                  "spark.executor.extraJavaOptions=-Da=b"])
        assert args.verbose and args.conf == [("spark.driver.memory", "2g"),
                                              ("spark.executor.extraJavaOptions", "-Da=b")]
        assert not parser.parse_args([command, "x"]).verbose
    with pytest.raises(SystemExit):
        parser.parse_args(["optimize", "x", "--conf", "no-value"])


# -- a real run of the command line --------------------------------------------------------------------
def _table(path: Path) -> Path:
    for i in range(6):
        write_deltalake(str(path), pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
                                             "v": pa.array([f"v{i}"] * 10)}), mode="append")
    return path


def _rows(spark, path: Path) -> list[tuple]:
    files = [str(path / p) for p in Snapshot.load(str(path)).paths]
    return sorted(tuple(r) for r in spark.read.parquet(*files).collect())


def _delta_maint(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_GATEWAY") and k not in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run([str(BIN / "delta-maint"), *argv], env=env, capture_output=True, text=True, timeout=600)


def _hostname_is_loopback() -> bool:
    try:
        return socket.gethostbyname(socket.gethostname()).startswith("127.")
    except OSError:
        return False


def _pandas_too_new() -> bool:
    import pandas

    return int(pandas.__version__.split(".")[0]) >= 3


def test_the_command_line_prints_its_result_and_verbose_brings_sparks_output_back(spark, tmp_path):
    quiet_table, verbose_table = _table(tmp_path / "quiet"), _table(tmp_path / "verbose")
    rows = _rows(spark, quiet_table)
    assert rows == _rows(spark, verbose_table) and len(rows) == 60
    # --zorder-by: a Spark job with Python workers, so that every kind of start-up output has its chance
    done = _delta_maint("optimize", str(quiet_table), "--zorder-by", "id", "--master", "local[1]", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = done.stdout.splitlines()  # standard output: the result, nothing else
    metrics = json.loads(line)
    assert metrics["status"] == "committed" and metrics["numRemovedFiles"] == 6
    for chatter in (*BANNER, HOSTNAME, "Set SPARK_LOCAL_IP", FUTURE_WARNING, NATIVE_LIBRARY):
        assert chatter not in done.stderr, done.stderr[-4000:]
    assert "INFO delta_maint.optimize" in done.stderr  # the application's own log stays
    assert _rows(spark, quiet_table) == rows

    done = _delta_maint("optimize", str(verbose_table), "--zorder-by", "id", "--master", "local[1]", "--json",
                        "--verbose")
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["status"] == "committed"
    for chatter in BANNER:
        assert chatter in done.stderr, done.stderr[-4000:]
    if _hostname_is_loopback():
        assert HOSTNAME in done.stderr, done.stderr[-4000:]
    if _pandas_too_new():
        assert FUTURE_WARNING in done.stderr, done.stderr[-4000:]
    assert _rows(spark, verbose_table) == rows
