"""DeltaMaintHook: the spark-submit command, the --py-files bundle, conf and environment, fast failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_delta_maint.app import package_bundle
from airflow_delta_maint.hooks.delta_maint import APPLICATION, DeltaMaintHook, build_package_zip, pyspark_home


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", **fields}))


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def _confs(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")


def test_local_master_command(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_local", host="local[*]")
    hook = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path)
    cmd = hook.build_command("optimize", "/data/t", ["--zorder-by", "a,b"], "/tmp/m.json", {"AWS_REGION": "eu"})
    assert Path(cmd[0]).name == "spark-submit" and os.path.isabs(cmd[0])
    assert _value(cmd, "--master") == "local[*]"
    assert "--deploy-mode" not in cmd
    assert _value(cmd, "--name") == "delta-maint"
    app = cmd.index(str(APPLICATION))
    assert cmd[app + 1:] == ["optimize", "/data/t", "--zorder-by", "a,b", "--json", "--metrics-out", "/tmp/m.json",
                             "--storage-option", "AWS_REGION=eu"]
    py_files = _value(cmd, "--py-files")
    assert Path(py_files).parent == tmp_path and py_files.endswith(".zip")
    assert _confs(cmd)["spark.pyspark.python"] == sys.executable
    assert hook.is_local_master and not hook.is_cluster_mode


def test_standalone_master_command(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_cluster", host="spark://10.1.2.3", port=7077,
          extra={"deploy-mode": "client"})
    hook = DeltaMaintHook(conn_id="spark_cluster", cache_dir=tmp_path, conf={"spark.executor.memory": "2g"},
                          executor_cores=2, python_env="off")  # shipping the Python: tests/airflow/hooks/test_python_env.py
    cmd = hook.build_command("vacuum", "s3://b/t", ["--retention-hours", "24"], "/tmp/m.json")
    assert _value(cmd, "--master") == "spark://10.1.2.3:7077"
    assert _value(cmd, "--deploy-mode") == "client"
    assert _value(cmd, "--executor-cores") == "2"
    assert _confs(cmd)["spark.executor.memory"] == "2g"
    assert cmd[cmd.index(str(APPLICATION)) + 1:][:4] == ["vacuum", "s3://b/t", "--retention-hours", "24"]


def test_user_python_is_kept(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_local", host="local[2]")
    hook = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path, conf={"spark.pyspark.python": "/opt/py/bin/python"})
    assert _confs(hook.build_command("inspect", "/t"))["spark.pyspark.python"] == "/opt/py/bin/python"
    assert hook.submit_env()["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    hook = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path, env_vars={"PYSPARK_PYTHON": "/usr/bin/python3"})
    assert "spark.pyspark.python" not in _confs(hook.build_command("inspect", "/t"))
    assert hook.submit_env()["PYSPARK_PYTHON"] == "/usr/bin/python3"


def test_spark_home_defaults_to_pyspark(monkeypatch, tmp_path):
    imported_before = "pyspark" in sys.modules  # by other tests in this process
    _conn(monkeypatch, "spark_local", host="local[2]")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    env = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path).submit_env()
    assert env["SPARK_HOME"] == pyspark_home()
    assert Path(env["SPARK_HOME"], "bin", "spark-submit").exists()
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path).submit_env()["SPARK_HOME"] == "/opt/spark"
    assert imported_before or "pyspark" not in sys.modules  # the Airflow side never imports pyspark


def test_package_zip_is_built_once_and_complete(tmp_path, monkeypatch):
    first = build_package_zip(tmp_path)
    mtime = os.stat(first).st_mtime_ns
    written: list[str] = []
    monkeypatch.setattr(package_bundle, "_write_entry", lambda zf, arcname, data: written.append(arcname))
    assert build_package_zip(tmp_path) == first
    assert written == []  # the second call wrote no entry: nothing was zipped again
    assert os.stat(first).st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [Path(first).name]
    with zipfile.ZipFile(first) as zf:
        names = zf.namelist()
    assert "airflow_delta_maint/__init__.py" in names
    assert "airflow_delta_maint/app/main.py" in names
    assert "airflow_delta_maint/delta/log/history.py" in names
    assert not [n for n in names if "__pycache__" in n or "/tests/" in n]
    sources = {n for n in names if n.endswith(".py")}
    assert {n for n in names if n.endswith(".pyc")} == {n + "c" for n in sources}
    # a fresh interpreter imports the bundled bytecode instead of compiling the source
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import airflow_delta_maint.delta.errors as m; print(m.__file__)", first],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    assert probe.stdout.strip() == f"{first}/airflow_delta_maint/delta/errors.pyc"
    from airflow_delta_maint import __version__

    assert Path(first).name.startswith(f"airflow_delta_maint-{__version__}-")
    # a bundle of older content is removed once it is a day old, a recent one is kept
    stale, recent = tmp_path / "airflow_delta_maint-0.0.1-aaaa.zip", tmp_path / "airflow_delta_maint-0.0.1-bbbb.zip"
    stale.write_bytes(b"x")
    recent.write_bytes(b"x")
    os.utime(stale, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    os.unlink(first)
    assert build_package_zip(tmp_path) == first
    assert not stale.exists() and recent.exists()


def test_cluster_mode_needs_metrics_uri(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_yarn", host="yarn", extra={"deploy-mode": "cluster"})
    hook = DeltaMaintHook(conn_id="spark_yarn", cache_dir=tmp_path, env_vars={"TZ": "UTC"})
    with pytest.raises(AirflowException, match="metrics_uri"):
        hook.new_metrics_location("optimize")
    hook = DeltaMaintHook(conn_id="spark_yarn", cache_dir=tmp_path, metrics_uri="s3://bucket/metrics/",
                          env_vars={"TZ": "UTC"}, python_env="off")
    uri = hook.new_metrics_location("optimize")
    assert uri.startswith("s3://bucket/metrics/delta-maint-optimize-") and uri.endswith(".json")
    cmd = hook.build_command("optimize", "s3://b/t", [], uri)
    assert _value(cmd, "--deploy-mode") == "cluster"
    assert _confs(cmd)["spark.yarn.appMasterEnv.TZ"] == "UTC"
    assert _value(cmd, "--metrics-out") == uri


def test_client_mode_metrics_are_local_and_fresh(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_local", host="local[2]")
    hook = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path)
    a, b = hook.new_metrics_location("inspect"), hook.new_metrics_location("inspect")
    assert a != b and os.path.isabs(a) and os.path.isdir(os.path.dirname(a))


def test_standalone_cluster_mode_is_refused(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_sa", host="spark://10.1.2.3", port=7077, extra={"deploy-mode": "cluster"})
    with pytest.raises(AirflowException, match="cluster deploy mode"):
        DeltaMaintHook(conn_id="spark_sa", cache_dir=tmp_path)


def test_missing_connection_is_a_clear_error():
    with pytest.raises(AirflowNotFoundException, match="'no_such_spark' is not defined"):
        DeltaMaintHook(conn_id="no_such_spark")


def test_unreachable_master_fails_fast(monkeypatch, tmp_path, small_table):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _conn(monkeypatch, "spark_gone", host="spark://127.0.0.1", port=port)
    hook = DeltaMaintHook(conn_id="spark_gone", cache_dir=tmp_path)
    attempts = []
    connect = socket.create_connection

    def probe(address, *args, **kwargs):
        attempts.append(address)
        return connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", probe)
    with pytest.raises(AirflowException, match=f"spark://127.0.0.1:{port} is unreachable .*refused"):
        hook.run_job("inspect", str(small_table))
    # one refused connection and the answer: no retry loop, no wait for a timeout
    assert attempts == [("127.0.0.1", port)]
    assert hook._submit_sp is None  # spark-submit never started
