"""The maintenance jobs against a Spark Connect server (connection type ``spark_connect``).

The server is started from the pyspark install on 127.0.0.1 (``SparkConnectServer``, local[2]) with an
authentication token, and its executors run a bare Python that has pyarrow and numpy only (as every Spark
Connect server's must, for ``mapInArrow``): obstore and pyroaring reach the tasks in the environment the
session adds with ``addArtifacts``, the application's modules as a zip.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files, write_appends
from deltalake import DeltaTable

from airflow_delta_maint.hooks.delta_maint import pyspark_home
from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CONN_ID = "spark_connect_test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_python(folder: Path) -> Path:
    """A virtualenv of this one's base interpreter holding pyarrow and numpy only (linked from this install)."""
    import numpy
    import pyarrow

    venv = folder / "server-python"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # type: ignore[attr-defined]
    site = next((venv / "lib").glob("python*/site-packages"))
    for module in (pyarrow, numpy):
        source = Path(module.__file__).parent
        (site / source.name).symlink_to(source)
        for dist in source.parent.glob(f"{source.name}-*.dist-info"):
            (site / dist.name).symlink_to(dist)
        for libs in source.parent.glob(f"{source.name}.libs"):  # the wheel's vendored shared libraries
            (site / libs.name).symlink_to(libs)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """(port, token, log file) of a Spark Connect server on 127.0.0.1, its event log beside the log file;
    stopped by its process id."""
    work = tmp_path_factory.mktemp("spark_connect")
    python = bare_python(work)
    probe = subprocess.run([str(python), "-c", "import pyarrow; import obstore"], capture_output=True, text=True)
    assert "No module named 'obstore'" in probe.stderr  # the server's Python lacks the application's packages
    port, token = _free_port(), secrets.token_hex(16)
    log = work / "server.log"
    events = work / "events"
    events.mkdir()
    env = dict(os.environ, SPARK_HOME=pyspark_home(), PYSPARK_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_CONNECT_AUTHENTICATE_TOKEN=token)
    for key in ("PYSPARK_DRIVER_PYTHON", "SPARK_REMOTE"):
        env.pop(key, None)
    with open(log, "w") as out:
        proc = subprocess.Popen([str(Path(pyspark_home()) / "bin" / "spark-submit"), "--class",
                                 "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
                                 "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                                 "--conf", f"spark.connect.grpc.binding.port={port}",
                                 "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
                                 "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield port, token, log
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)


@pytest.fixture
def connect_conn(connect_server, monkeypatch):
    port, token, _ = connect_server
    # localhost: pyspark sends a token without TLS to a local server only
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": port, "password": token}))
    return token


def rows(path: Path) -> list[tuple[int, float]]:
    out = []
    for uri in DeltaTable(str(path)).file_uris():
        t = pq.read_table(uri.removeprefix("file://"), columns=["id", "value"])
        out += list(zip(t.column("id").to_pylist(), t.column("value").to_pylist()))
    return sorted(out)


def test_jobs_through_spark_connect(connect_server, connect_conn, tmp_path, capfd):
    _, token, server_log = connect_server
    table = tmp_path / "events"
    write_appends(table, 6)  # 12 small files in 2 partitions
    before = rows(table)
    op = OptimizeOperator(task_id="optimize", table_uri=str(table), conn_id=CONN_ID)
    metrics = op.execute(context={})
    assert metrics["status"] == "committed" and metrics["version_read"] == 5 and metrics["version_committed"] == 6
    assert metrics["numRemovedFiles"] == 12 and metrics["numAddedFiles"] == 2 and metrics["operation"] == "optimize"
    assert rows(table) == before
    assert DeltaTable(str(table)).history(1)[0]["operation"] == "OPTIMIZE"

    # no spark-submit: a client process with the URL (and its token) in its environment only
    runner = op._hook._connect
    assert runner is not None and op._hook._submit_sp is None
    command = runner.command("optimize", str(table), [], "/tmp/m.json", {})
    assert command[0] == sys.executable and not any(token in part for part in command)
    out = capfd.readouterr()
    log = out.out + out.err
    assert "Spark Connect session at sc://localhost:" in log and "environment delta-maint-python-" in log
    assert token not in log and token not in server_log.read_text(errors="replace")
    # nor in the XCom value, the rendered fields, or the server's event log (the Spark UI's environment page)
    assert token not in json.dumps(metrics)
    assert not [f for f in op.template_fields if token in repr(getattr(op, f, None))]
    event_logs = [f for f in (server_log.parent / "events").rglob("*") if f.is_file()]
    assert event_logs and not [e for e in event_logs if token in e.read_text(errors="replace")]
    # the server ran the tasks: DataFrame jobs of the session
    assert "Spark Connect - session_id" in server_log.read_text(errors="replace")

    # Z-order: the rows shuffled with mapInArrow and groupBy().applyInArrow, as Spark Connect offers
    write_appends(table, 6, start=6)  # 12 more small files
    before = rows(table)
    zorder = OptimizeOperator(task_id="zorder", table_uri=str(table), conn_id=CONN_ID, zorder_by=["value"],
                              target_file_size=3_000).execute(context={})
    assert zorder["status"] == "committed" and zorder["numRemovedFiles"] == 14, zorder
    assert zorder["numAddedFiles"] > 2, zorder
    assert rows(table) == before
    # the tasks' Python CPU comes back with their results; the server's task metrics are not the client's to read
    for run in (metrics, zorder):
        assert run["cpu_tasks_s"] > 0 and run["cpu_s"] >= run["cpu_driver_s"] + run["cpu_tasks_s"] - 0.001, run
        assert "cpu_executors_s" not in run and "Spark Connect" in run["cpu_missing"]["cpu_executors_s"]

    vacuum = VacuumOperator(task_id="vacuum", table_uri=str(table), conn_id=CONN_ID, retention_hours=0,
                            ignore_retention_check=True).execute(context={})
    assert vacuum["status"] == "committed" and vacuum["numFilesDeleted"] == 26
    assert rows(table) == before


def test_spark_connect_failures_are_one_line(connect_server, connect_conn, monkeypatch, tmp_path):
    port, _, _ = connect_server
    table = tmp_path / "events"
    write_appends(table, 3)
    before = log_files(table)

    # a wrong token: the server refuses the session
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": port, "password": "not-the-token"}))
    with pytest.raises(AirflowException) as info:
        OptimizeOperator(task_id="o", table_uri=str(table), conn_id=CONN_ID).execute({})
    message = str(info.value)
    assert len(message.splitlines()) == 1 and "the Spark Connect server refused the session (UNAUTHENTICATED" in message

    # no server: at once
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": _free_port()}))
    attempts, launched = [], []
    connect, popen = socket.create_connection, subprocess.Popen

    def probe(address, *args, **kwargs):
        attempts.append(address)
        return connect(address, *args, **kwargs)

    def launch(*args, **kwargs):
        launched.append(args)
        return popen(*args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", probe)
    monkeypatch.setattr(subprocess, "Popen", launch)
    with pytest.raises(AirflowException, match="the Spark Connect server localhost:[0-9]+ is unreachable .*refused"):
        OptimizeOperator(task_id="o", table_uri=str(table), conn_id=CONN_ID).execute({})
    # one refused connection and the answer: no retry, no client process that would retry for minutes
    assert len(attempts) == 1 and attempts[0][0] == "localhost"
    assert launched == []
    assert log_files(table) == before
