"""A job that fails for a reason of its environment says so in one line, with what to configure; the full
trace stays in the task's log. Real spark-submit runs (local master) with a broken environment each:
no Python at the executors' path, an executors' Python without the application's packages, no Python for
the driver, a jar built for a newer Java."""

from __future__ import annotations

import struct
import sys
import zipfile
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files, write_appends

from airflow_delta_maint.app.environment_errors import describe
from airflow_delta_maint.operators.maintenance import OptimizeOperator

pytestmark = pytest.mark.e2e

#: the driver runs this virtualenv's interpreter (as in client mode on a worker); only the executors' differs
DRIVER = {"spark.pyspark.driver.python": sys.executable}


def newer_java_jar(folder: Path) -> Path:
    """A jar holding one class compiled for Java 26 (class file version 70): what a jar built for a newer
    Java than the cluster's looks like to the JVM."""
    name = b"DeltaMaintNewerJava"
    body = struct.pack(">IHHH", 0xCAFEBABE, 0, 70, 5)
    body += b"\x07" + struct.pack(">H", 2) + b"\x01" + struct.pack(">H", len(name)) + name
    body += b"\x07" + struct.pack(">H", 4) + b"\x01" + struct.pack(">H", 16) + b"java/lang/Object"
    body += struct.pack(">HHHHHHH", 0x21, 1, 3, 0, 0, 0, 0)  # public class, no fields, methods, attributes
    jar = folder / "newer-java.jar"
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr("DeltaMaintNewerJava.class", body)
    return jar


def _fail(tmp_path: Path, conf: dict[str, str], capfd) -> tuple[str, str]:
    """Run OPTIMIZE with ``conf``; return the operator's error and the task's log output. The table is unchanged."""
    table = tmp_path / "table"
    write_appends(table, 3)
    before = log_files(table)
    op = OptimizeOperator(task_id="optimize", table_uri=str(table), conf=conf, skip_if_nothing_to_do=False)
    with pytest.raises(AirflowException) as info:
        op.execute(context={})
    out, err = capfd.readouterr()
    assert log_files(table) == before
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith("delta-maint optimize failed: environment error: ")
    return message, out + err


def test_executors_without_the_python_they_were_given(tmp_path, capfd):
    message, log = _fail(tmp_path, {**DRIVER, "spark.pyspark.python": "/nonexistent/bin/python3"}, capfd)
    assert "the executors cannot start Python /nonexistent/bin/python3 (No such file or directory)" in message
    assert "[delta_maint] python_env = ship" in message and "executor_python" in message
    # the whole trace is in the log, where the one line came from
    assert 'java.io.IOException: Cannot run program "/nonexistent/bin/python3"' in log
    assert "at org.apache.spark.api.python.PythonWorkerFactory" in log


def test_executors_python_without_the_packages(tmp_path, capfd):
    """This virtualenv's base interpreter: the same Python, none of the application's packages."""
    message, log = _fail(tmp_path, {**DRIVER, "spark.pyspark.python": sys._base_executable}, capfd)  # type: ignore[attr-defined]
    assert "the Python of the executors cannot import " in message
    module = message.split("cannot import ", 1)[1].split(":", 1)[0]
    assert module in ("numpy", "pyarrow", "obstore", "pyroaring")
    assert f"ModuleNotFoundError: No module named '{module}'" in log
    assert "python_env = ship" in message


def test_driver_without_its_python(tmp_path, capfd):
    message, log = _fail(tmp_path, {"spark.pyspark.driver.python": "/nonexistent/driver/python3"}, capfd)
    assert "Spark cannot start the driver's Python /nonexistent/driver/python3" in message
    assert "spark.pyspark.driver.python" in message
    assert "at org.apache.spark.deploy.PythonRunner" in log


def test_jar_built_for_a_newer_java(tmp_path, capfd):
    jar = newer_java_jar(tmp_path)
    message, log = _fail(tmp_path, {"spark.jars": str(jar), "spark.serializer": "DeltaMaintNewerJava"}, capfd)
    assert "a jar on Spark's classpath was built for Java 26" in message and "this JVM runs Java 17" in message
    assert "java.lang.UnsupportedClassVersionError: DeltaMaintNewerJava" in log


@pytest.mark.parametrize("text, expected", [
    ("java.lang.NoSuchMethodError: 'void org.apache.spark.sql.X.y()'\n\tat io.delta.Z",
     "a jar does not match the Spark it runs on (NoSuchMethodError: 'void org.apache.spark.sql.X.y()')"),
    ("Caused by: java.lang.ClassNotFoundException: io.delta.sql.DeltaSparkSessionExtension\n",
     "a class is missing from Spark's classpath (io.delta.sql.DeltaSparkSessionExtension)"),
    ("java.io.InvalidClassException: org.apache.spark.rdd.RDD; local class incompatible: stream classdesc",
     "InvalidClassException: org.apache.spark.rdd.RDD; local class incompatible"),
    ("py4j.protocol.Py4JError: org.apache.spark.api.python.PythonUtils.getX does not exist in the JVM",
     "PySpark's Python files and Spark's jars are of different releases"),
    ("[PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.12 than that in driver: 3.11, PySpark",
     "the executors run Python 3.12 and the driver Python 3.11"),
    ("Error from python worker:\n  delta-maint environment error: no Python 3.12 on node-1 (neither ...): install",
     "environment error: no Python 3.12 on node-1"),
    ("Lost task 0.0: java.io.IOException: Cannot run program \"./environment/bin/python\": error=2, No such file",
     "the executors found no ./environment/bin/python"),
])
def test_jar_and_version_mismatches_read_as_one_line(text, expected):
    """What the JVM and PySpark print for the mismatches no local run here can produce."""
    line = describe(text, "4.2.0")
    assert line is not None and expected in line and "\n" not in line


def test_other_failures_are_not_environment_errors():
    assert describe("delta-maint optimize failed: table path does not exist: /t") is None
    assert describe("org.apache.spark.SparkException: Job aborted due to stage failure: ValueError: bad row") is None


def test_pyarrow_imported_without_numpy_is_one_line():
    """A Spark Connect server's Python worker imports pyarrow before any task code runs; where numpy was
    missing then, pyarrow takes no numpy array for good: the first task says so in one line."""
    import subprocess

    code = ("import sys\n"
            "sys.modules['numpy'] = None  # not importable while pyarrow loads\n"
            "import pyarrow\n"
            "del sys.modules['numpy']\n"
            "from airflow_delta_maint.app.runners.connect_tasks import _check_pyarrow_takes_numpy\n"
            "_check_pyarrow_takes_numpy()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert describe(done.stderr) == (
        "environment error: the Python workers' pyarrow was imported without numpy, so it takes no numpy arrays: "
        "install numpy beside pyarrow in the interpreter the Spark Connect server runs its Python workers with "
        "(its PYSPARK_PYTHON)")
    fine = subprocess.run([sys.executable, "-c", code.replace("sys.modules['numpy'] = None", "pass").replace(
        "del sys.modules['numpy']", "pass")], capture_output=True, text=True, timeout=120)
    assert fine.returncode == 0, fine.stderr
