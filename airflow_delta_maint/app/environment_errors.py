"""Failures of the environment a job runs in, said in one line with what to configure.

A job that fails because of where it runs (no Python at the path Spark was given, a Python that
cannot import the application's packages, a Python or Java of another version, a jar built for
another Spark) surfaces as a Java stack trace of a hundred lines with the cause somewhere in its
middle. :func:`describe` finds the cause in such a text and returns one line that names it and the
setting that fixes it; the full trace stays in the log. Pure text work: used by the driver
(:mod:`~airflow_delta_maint.app.cli`) and by the Airflow side when spark-submit fails before the
driver could say anything. No pyspark import.
"""

from __future__ import annotations

import re

PREFIX = "environment error"
#: how a run's metrics name this kind of failure (``error_type``)
ERROR_TYPE = "SparkEnvironmentError"

_SHIP = ("ship the application's Python with the submission ([delta_maint] python_env = ship, the default "
         "for cluster masters) or name an interpreter the cluster's machines have ([delta_maint] "
         "executor_python, or spark.pyspark.python in conf)")
_MAX_DETAIL = 240

_LAUNCHER = re.compile(r"delta-maint environment error: ([^\n]+)")
_NO_PROGRAM = re.compile(r'Cannot run program "([^"]+)"(?: \(in directory "[^"]*"\))?: error=\d+, ([^\n]+)')
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_PY_VERSION = re.compile(r"Python in worker has different version:? ?(\S+) than that in driver:? ?([\d.]+)")
_CLASS_VERSION = re.compile(r"UnsupportedClassVersionError: (\S+) has been compiled by a more recent version of "
                            r"the Java Runtime \(class file version ([\d.]+)\), this version of the Java Runtime "
                            r"only recognizes class file versions up to ([\d.]+)")
_LINKAGE = re.compile(r"java\.lang\.(NoSuchMethodError|NoSuchFieldError|AbstractMethodError|"
                      r"IncompatibleClassChangeError|NoClassDefFoundError): ([^\n]+)")
_NO_CLASS = re.compile(r"java\.lang\.ClassNotFoundException: ([^\s]+)")
_SERIAL = re.compile(r"java\.io\.InvalidClassException: ([^;\n]+); local class incompatible")
_PY4J_MISSING = re.compile(r"Py4JError: (\S+) does not exist in the JVM")
_GRPC = re.compile(r"StatusCode\.(UNAUTHENTICATED|PERMISSION_DENIED|UNAVAILABLE)\s+details = \"([^\"]*)\"")
_NO_JAVA = re.compile(r"JAVA_HOME is not set|java: (?:command )?not found|Java gateway process exited before")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[:_MAX_DETAIL - 3] + "..."


def _java(class_file_version: str) -> str:
    try:
        return str(int(float(class_file_version)) - 44)
    except ValueError:
        return "?"


def _where(text: str, position: int) -> str:
    """``the executors`` when the cause sits in a failed Spark task's report, else ``the driver``."""
    before = text[:position]
    task = max(before.rfind("Lost task"), before.rfind("Error from python worker"),
               before.rfind("An exception was thrown from the Python worker"), before.rfind("PythonException"))
    return "the executors" if task >= 0 else "the driver"


def describe(text: str, spark_version: str | None = None) -> str | None:
    """
    One line for an environment failure found in ``text`` (an exception's text, a trace, a log), or None.

    :param text: what the failure printed.
    :param spark_version: the driver's Spark version, named in the advice about jars.
    :return: ``"environment error: <what failed, where>: <what to configure>"``, or None when the
        text shows no environment failure.
    """
    if not text:
        return None
    found = _LAUNCHER.search(text)
    if found:
        return f"{PREFIX}: {_short(found.group(1))}"
    found = _PY_VERSION.search(text)
    if found:
        worker, driver = found.group(1).rstrip(","), found.group(2).rstrip(".,")
        return (f"{PREFIX}: the executors run Python {worker} and the driver Python {driver} (PySpark needs one "
                f"minor version): build the shipped environment for the cluster's Python ([delta_maint] "
                f"python_env_python_version = {worker}) and run the driver on Python {worker}, or give the "
                f"executors a Python {driver}")
    found = _NO_PROGRAM.search(text)
    if found:
        program, reason = found.group(1), found.group(2).strip()
        where = _where(text, found.start())
        if "python" in program.rsplit("/", 1)[-1].lower():
            if where == "the driver":
                return (f"{PREFIX}: Spark cannot start the driver's Python {program} ({reason}): set "
                        "spark.pyspark.driver.python to an interpreter with the application installed (in client "
                        "deploy mode: on this worker)")
            if program.startswith("./environment/"):
                return (f"{PREFIX}: {where} found no {program} ({reason}): the shipped environment did not reach "
                        "them; the master must honour --archives (spark.archives), or set [delta_maint] "
                        "python_env = off with executor_python")
            return (f"{PREFIX}: {where} cannot start Python {program} ({reason}): that interpreter is not on "
                    f"the machines Spark runs on; {_SHIP}")
        return f"{PREFIX}: {where} cannot start {program} ({reason})"
    found = _NO_MODULE.search(text)
    if found:
        module = found.group(1)
        where = _where(text, found.start())
        return (f"{PREFIX}: the Python of {where} cannot import {module}: {_SHIP}; an interpreter the "
                f"deployment names must have {module.split('.')[0]} installed")
    found = _CLASS_VERSION.search(text)
    if found:
        cls, has, can = found.groups()
        return (f"{PREFIX}: a jar on Spark's classpath was built for Java {_java(has)} ({cls}, class file "
                f"version {has}) and this JVM runs Java {_java(can)}: use jars built for Java {_java(can)}, or "
                f"run Spark on Java {_java(has)} or later (JAVA_HOME)")
    spark = f"Spark {spark_version}" if spark_version else "this Spark release"
    jars = (f"every jar added with --packages, --jars or spark.jars (delta-spark's among them) must be built for "
            f"{spark} and its Scala version")
    found = _LINKAGE.search(text) or _SERIAL.search(text)
    if found:
        detail = f"{found.group(1)}: {found.group(2)}" if found.re is _LINKAGE else \
            f"InvalidClassException: {found.group(1)}; local class incompatible"
        return f"{PREFIX}: a jar does not match the Spark it runs on ({_short(detail)}): {jars}"
    found = _NO_CLASS.search(text)
    if found:
        return f"{PREFIX}: a class is missing from Spark's classpath ({found.group(1)}): {jars}"
    found = _PY4J_MISSING.search(text)
    if found:
        return (f"{PREFIX}: the JVM has no {found.group(1)}: PySpark's Python files and Spark's jars are of "
                "different releases (pyspark and pyspark-client must be one version, SPARK_HOME that release)")
    found = _GRPC.search(text)
    if found:
        status, details = found.groups()
        if status == "UNAVAILABLE":
            return (f"{PREFIX}: the Spark Connect server is unreachable ({_short(details)}): check the spark_connect "
                    "connection's host and port, and that the server runs")
        return (f"{PREFIX}: the Spark Connect server refused the session ({status}: {_short(details)}): the "
                "connection's token (its password) must be the one the server expects "
                "(spark.connect.authenticate.token), its user id one the server allows")
    found = _NO_JAVA.search(text)
    if found:
        return f"{PREFIX}: Spark cannot start its JVM ({found.group(0)}): install Java 17 or later and set JAVA_HOME"
    return None
