"""End to end with real Spark: a standalone cluster on 127.0.0.1, and killing a running job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files, write_appends
from deltalake import DeltaTable

from airflow_delta_maint.hooks.delta_maint import pyspark_home
from airflow_delta_maint.operators.maintenance import OptimizeOperator

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=20)
    for p in alive:
        p.kill()
    proc.wait(timeout=10)


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory):
    """A Spark standalone master and one worker on 127.0.0.1, from the pyspark install; stopped afterwards."""
    work = tmp_path_factory.mktemp("spark_standalone")
    env = dict(os.environ, SPARK_HOME=pyspark_home(), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(work),
               SPARK_WORKER_DIR=str(work / "work"), PYSPARK_PYTHON=sys.executable)
    spark_class = str(Path(pyspark_home()) / "bin" / "spark-class")
    port, ui = _free_port(), _free_port()
    master_log = open(work / "master.log", "w")
    worker_log = open(work / "worker.log", "w")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, stdout=master_log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    worker = None
    try:
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                   "--cores", "2", "--memory", "2g", "--host", "127.0.0.1",
                                   "--webui-port", str(_free_port())], env=env, stdout=worker_log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as response:
                    if json.load(response).get("aliveworkers", 0) >= 1:
                        break
            except (OSError, ValueError):  # not up yet; a UI still starting may answer with its HTML page
                pass
            assert time.monotonic() < deadline, (work / "master.log").read_text()[-3000:]
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
        master_log.close()
        worker_log.close()


def test_optimize_on_a_standalone_cluster(standalone_master, monkeypatch, tmp_path):
    host, port = standalone_master.rsplit(":", 1)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE",
                       json.dumps({"conn_type": "spark", "host": host, "port": int(port)}))
    table = tmp_path / "standalone"
    write_appends(table, 5)
    op = OptimizeOperator(task_id="optimize", table_uri=str(table), conn_id="spark_standalone",
                          conf={"spark.executor.memory": "1g"})
    metrics = op.execute(context={})
    assert op._hook.master == standalone_master
    assert op._hook.python_plan.mode == "ship"  # a cluster master gets the application's Python with the submission
    assert metrics["status"] == "committed" and metrics["version_committed"] == 5
    assert metrics["numRemovedFiles"] == 10 and metrics["numAddedFiles"] == 2
    ids = []
    for uri in DeltaTable(str(table)).file_uris():
        ids += pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(100))


def _python_driver(tree: list[psutil.Process]) -> bool:
    for p in tree:
        try:
            if p.name().startswith("python") and any(a.endswith("main.py") for a in p.cmdline()):
                return True
        except psutil.NoSuchProcess:
            pass
    return False


def _python_workers(tree: list[psutil.Process]) -> bool:
    for p in tree:
        try:
            if "pyspark.daemon" in " ".join(p.cmdline()):
                return True
        except psutil.NoSuchProcess:
            pass
    return False


def test_kill_leaves_no_spark_process(tmp_path):
    table = tmp_path / "kill"
    write_appends(table, 12)
    before = log_files(table)
    op = OptimizeOperator(task_id="optimize", table_uri=str(table), skip_if_nothing_to_do=False)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(context={})
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        # wait until the application's Python driver runs under the driver JVM
        deadline = time.monotonic() + 180
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline and runner.is_alive():
            hook = op._hook
            if hook is not None and hook._submit_sp is not None:
                try:
                    root = psutil.Process(hook._submit_sp.pid)
                    tree = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    tree = []
                if _python_driver(tree):
                    break
            time.sleep(0.2)
        assert _python_driver(tree) and runner.is_alive(), "the job never started"
        # then until Spark runs the job in Python workers (forked by pyspark.daemon)
        while time.monotonic() < deadline and runner.is_alive() and not _python_workers(tree):
            time.sleep(0.1)
            try:
                root = psutil.Process(op._hook._submit_sp.pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
        assert _python_workers(tree) and runner.is_alive(), "no Python worker ran"
    finally:
        op.on_kill()
    runner.join(timeout=60)
    assert not runner.is_alive()
    assert errors and isinstance(errors[0], AirflowException)
    assert _alive(tree) == []
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(table) in " ".join(p.info["cmdline"] or [])]
    assert _alive(leftovers) == []
    # killed before or after its commit: the table reads either way and holds the same rows
    assert log_files(table)[: len(before)] == before
    ids = []
    for uri in DeltaTable(str(table)).file_uris():
        ids += pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(240))
