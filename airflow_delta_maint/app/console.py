"""What the command line shows: its result and the application's log, not Spark's start-up chatter.

A SparkSession that ``delta-maint`` starts itself (outside spark-submit) prints, on every run, log4j's
banner ("Using Spark's default log4j profile", "Setting default log level"), the hostname warning
("Your hostname ... resolves to a loopback address"), Hadoop's native-library warning and pyspark's
``FutureWarning`` about the installed pandas. Unless ``--verbose`` is given, the command line
silences them:

- its driver JVM starts with a log4j2 configuration of its own (:data:`QUIET_LOG4J2`, written into the
  cache folder and passed as ``-Dlog4j2.configurationFile`` in ``spark.driver.extraJavaOptions``):
  warnings and errors as Spark's default shows them, without the banner, the hostname lines and the
  native-library line;
- pyspark's ``FutureWarning`` is ignored in the driver (:func:`silence_python_warnings`).

With or without ``--verbose``, the command's standard output carries its result only: the processes it
starts (Spark's JVM, which prints Ivy's ``:: loading settings ::`` there when it resolves delta-spark's
packages, and the Python workers) write their standard output to standard error
(:func:`children_print_to_stderr`).

Runs under spark-submit, as the Airflow operators launch them, and the application file the operators
run (``app/main.py``) keep Spark's output as it is: it is the task's log.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from airflow_delta_maint.app.text_files import write_text_once

__all__ = ["LOG4J2_FILE", "QUIET_LOG4J2", "children_print_to_stderr", "quiet_java_options", "quiet_log4j_file",
           "silence_python_warnings"]

LOG4J2_FILE = "log4j2-delta-maint-quiet.properties"

#: Spark's default log4j2 configuration (``org/apache/spark/log4j2-defaults.properties``) at level WARN,
#: as Spark sets it for a shell, less the start-up lines a command-line run has no use for
QUIET_LOG4J2 = """\
# delta-maint's command line: Spark's warnings and errors, without its start-up chatter (--verbose shows it)
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console

appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# "Your hostname, H, resolves to a loopback address: ...; using A instead" and "Set SPARK_LOCAL_IP if ..."
appender.console.filter.loopback.type = RegexFilter
appender.console.filter.loopback.regex = .*(resolves to a loopback address|Set SPARK_LOCAL_IP if you need).*
appender.console.filter.loopback.onMatch = DENY
appender.console.filter.loopback.onMismatch = NEUTRAL

# "Unable to load native-hadoop library for your platform": Hadoop's Java code is used instead
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
logger.parquet2.name = parquet.CorruptStatistics
logger.parquet2.level = error
"""


def quiet_log4j_file(folder: Path) -> Path:
    """:data:`QUIET_LOG4J2` written into ``folder`` (once, whole)."""
    return write_text_once(folder / LOG4J2_FILE, QUIET_LOG4J2)


def quiet_java_options(folder: Path) -> str:
    """The driver JVM's option that makes it use :data:`QUIET_LOG4J2` (written into ``folder``)."""
    return f"-Dlog4j2.configurationFile={quiet_log4j_file(folder).resolve().as_uri()}"


def silence_python_warnings() -> None:
    """Ignore pyspark's ``FutureWarning`` (a pandas newer than it supports) in this process, the driver."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\.|$)")


def children_print_to_stderr() -> None:
    """Point file descriptor 1, which the processes started from now on inherit, at standard error, and
    keep this process's ``sys.stdout`` on the original standard output. Only for a process that is the
    ``delta-maint`` command itself (it changes the process's descriptors)."""
    try:
        sys.stdout.flush()
        result = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError):  # no standard output or error to speak of: leave them as they are
        return
    sys.stdout = open(result, "w", buffering=1, encoding=sys.stdout.encoding, errors=sys.stdout.errors,
                      closefd=True)
