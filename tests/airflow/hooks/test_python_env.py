"""The application's packed Python environment: what it holds, that it runs on another interpreter of
the same version, that it is built once, and how the hook ships it (``--archives ENV#environment``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.hooks import python_env
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.python_env import (
    EXECUTOR_PYTHON,
    EnvTarget,
    build_python_env,
    expand_platforms,
    read_manifest,
    runtime_packages,
)

THIS_PYTHON = "%d.%d" % sys.version_info[:2]


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", **fields}))


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def _confs(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """The environment for this worker's Python, built into a fresh cache folder (timed; gzip level 1,
    which no test depends on, for a quicker build)."""
    cache = tmp_path_factory.mktemp("env_cache")
    env = build_python_env(cache, compresslevel=1)
    assert env.build_s > 0
    return cache, env


@pytest.fixture(scope="module")
def unpacked(packed, tmp_path_factory) -> Path:
    """The archive unpacked the way Spark does for ``--archives`` (the tar command keeps modes and links)."""
    dest = tmp_path_factory.mktemp("unpacked") / "environment"
    dest.mkdir()
    subprocess.run(["tar", "-xzf", str(packed[1].path), "-C", str(dest)], check=True)
    return dest


# -- what the archive holds -------------------------------------------------------------------
def test_environment_holds_exactly_the_runtime_packages(packed, unpacked):
    cache, env = packed
    assert env.packages == runtime_packages()
    assert set(env.packages) >= {"pyarrow", "numpy", "obstore", "pyroaring"}
    assert not set(env.packages) & {"pyspark", "pyspark-client", "apache-airflow", "psutil", "matplotlib", "py4j"}
    root = unpacked
    site = root / "site-packages"
    dists = {p.name.split("-")[0].lower().replace("_", "-") for p in site.glob("*.dist-info")}
    assert dists == set(env.packages)
    manifest = read_manifest(env.path)
    assert manifest["python"] == THIS_PYTHON and manifest["packages"] == env.packages
    assert not [p for p in site.rglob("tests") if p.is_dir()]
    assert not list(site.rglob("*.pyx")) and not list(site.rglob("RECORD"))
    assert (root / "bin" / "python").stat().st_mode & 0o111
    # the worker's bytecode comes along: the executors do not compile pyarrow's modules again
    assert (site / "pyarrow" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").exists()
    size = env.path.stat().st_size
    print(f"packed environment: {size / 2**20:.1f} MiB, built in {env.build_s:.1f} s, {env.packages}")
    assert size < 150 * 2**20


def test_launcher_runs_another_interpreter_of_the_version_with_the_packages(unpacked, tmp_path):
    """A Python with none of the packages (this virtualenv's base interpreter) imports them all from the
    archive; no Python of the version: one line that says what to do, exit 127."""
    root = unpacked
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / f"python{THIS_PYTHON}").symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    probe = ("import sys, pyarrow, pyarrow.parquet, numpy, obstore, pyroaring; "
             "print(sys.executable); print(pyarrow.__file__); print(obstore.__file__)")
    base = subprocess.run([sys._base_executable, "-c", "import pyarrow"], capture_output=True,  # type: ignore[attr-defined]
                          text=True)
    assert base.returncode != 0  # the bare interpreter has no pyarrow of its own
    run = subprocess.run([str(root / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                         env={"PATH": f"{bare}:/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    executable, pyarrow_file, obstore_file = run.stdout.split()
    assert Path(executable).resolve() == Path(sys._base_executable).resolve()  # type: ignore[attr-defined]
    assert pyarrow_file.startswith(str(root.resolve())) and obstore_file.startswith(str(root.resolve()))

    missing = subprocess.run([str(root / "bin" / "python"), "-c", "print(1)"], capture_output=True, text=True,
                             env={"PATH": str(tmp_path / "nothing")})
    assert missing.returncode == 127
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"delta-maint environment error: no Python {THIS_PYTHON}")
    assert "python_env_python_version" in lines[0]


def test_environment_is_built_once(packed, monkeypatch):
    """A second call finds the archive: nothing is staged or packed, nothing in the cache folder changes."""
    cache, env = packed
    staged: list[str] = []
    for name in ("_stage_installed", "_stage_with_pip", "_write_archive"):
        monkeypatch.setattr(python_env, name, lambda *a, _name=name, **k: staged.append(_name))
    before = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    again = build_python_env(cache)
    assert again.path == env.path and again.build_s == 0.0
    assert staged == []
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == before
    assert sorted(p.name for p in cache.glob("*.tar.gz")) == [env.path.name]


def test_concurrent_builds_build_once(tmp_path):
    """Two workers sharing one cache folder: one builds, the other waits for it and ships the same file."""
    code = ("import json, sys; from airflow_delta_maint.hooks.python_env import build_python_env; "
            "e = build_python_env(sys.argv[1], roots=('pyroaring',)); print(json.dumps([str(e.path), e.build_s]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert len({path for path, _ in results}) == 1
    assert sorted(build_s > 0 for _, build_s in results) == [False, False, True]
    with tarfile.open(results[0][0]) as tar:
        names = tar.getnames()
    assert "bin/python" in names and any(n.startswith("site-packages/pyroaring") for n in names)
    assert not any(n.startswith("site-packages/numpy") for n in names)


@pytest.mark.services  # pip fetches the other version's wheels from the package index
def test_environment_for_another_python_version(tmp_path):
    """Another Python version: the same package versions as wheels for that version, through pip."""
    other = "3.12" if THIS_PYTHON != "3.12" else "3.11"
    target = EnvTarget.parse(other, "manylinux_2_28_x86_64")
    env = build_python_env(tmp_path, target, compresslevel=1)
    assert env.packages == runtime_packages(target) and env.target.python == other
    tag = f"cpython-{other.replace('.', '')}"
    with tarfile.open(env.path) as tar:
        names = tar.getnames()
        launcher = tar.extractfile("bin/python").read().decode()  # type: ignore[union-attr]
    assert any(n.startswith("site-packages/pyarrow/lib.") and tag in n for n in names)
    assert any(n.startswith("site-packages/pyroaring") and tag in n for n in names)
    assert not any(f"cpython-{THIS_PYTHON.replace('.', '')}" in n for n in names)
    assert f"python{other}" in launcher and read_manifest(env.path)["platform"] == "manylinux_2_28_x86_64"


def test_expand_platforms():
    tags = expand_platforms(["manylinux_2_28_x86_64"])
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_29_x86_64" not in tags
    assert expand_platforms(["macosx_11_0_arm64"]) == ["macosx_11_0_arm64"]


# -- what the hook does ---------------------------------------------------------------------------
def test_cluster_master_ships_the_environment(monkeypatch, packed):
    cache, env = packed
    _conn(monkeypatch, "spark_cluster", host="spark://10.1.2.3", port=7077)
    hook = DeltaMaintHook(conn_id="spark_cluster", cache_dir=cache, archives="extra.zip#extra")
    assert hook.python_plan.mode == "ship"
    cmd = hook.build_command("optimize", "s3://b/t")
    assert _value(cmd, "--archives") == f"{env.path}#environment,extra.zip#extra"
    confs = _confs(cmd)
    assert confs["spark.pyspark.python"] == EXECUTOR_PYTHON == "./environment/bin/python"
    assert confs["spark.pyspark.driver.python"] == sys.executable  # client mode: the driver runs here
    assert hook.submit_env()["PYSPARK_PYTHON"] == EXECUTOR_PYTHON
    hook.build_command("optimize", "s3://b/t")  # a second run: the same archive, nothing rebuilt
    assert _value(hook._build_spark_submit_command("app.py"), "--archives").count("#environment") == 1


def test_yarn_cluster_mode_runs_the_driver_in_the_environment(monkeypatch):
    _conn(monkeypatch, "spark_yarn", host="yarn", extra={"deploy-mode": "cluster"})
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__PYTHON_ENV_URI", "hdfs:///apps/delta-maint/env.tar.gz")
    hook = DeltaMaintHook(conn_id="spark_yarn", metrics_uri="s3://b/m")
    cmd = hook.build_command("vacuum", "s3://b/t", [], "s3://b/m/x.json")
    assert _value(cmd, "--archives") == "hdfs:///apps/delta-maint/env.tar.gz#environment"
    assert _confs(cmd)["spark.pyspark.driver.python"] == _confs(cmd)["spark.pyspark.python"] == EXECUTOR_PYTHON


def test_local_master_keeps_the_worker_python(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_local", host="local[2]")
    hook = DeltaMaintHook(conn_id="spark_local", cache_dir=tmp_path)
    cmd = hook.build_command("inspect", "/t")
    assert hook.python_plan.mode == "worker" and "--archives" not in cmd
    assert _confs(cmd)["spark.pyspark.python"] == sys.executable
    with pytest.raises(AirflowException, match="'ship' is for clusters"):
        DeltaMaintHook(conn_id="spark_local", python_env="ship")


def test_shipping_off_and_a_named_interpreter(monkeypatch, tmp_path):
    _conn(monkeypatch, "spark_cluster", host="spark://10.1.2.3", port=7077)
    # the deployment's image has its own interpreter
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__EXECUTOR_PYTHON", "/opt/venv/bin/python")
    hook = DeltaMaintHook(conn_id="spark_cluster", cache_dir=tmp_path)
    cmd = hook.build_command("inspect", "s3://b/t")
    assert hook.python_plan.mode == "off" and "--archives" not in cmd
    assert _confs(cmd)["spark.pyspark.python"] == "/opt/venv/bin/python"
    assert list(tmp_path.glob("*.tar.gz")) == []
    monkeypatch.delenv("AIRFLOW__DELTA_MAINT__EXECUTOR_PYTHON")
    # conf naming an interpreter, or shipping turned off: nothing shipped, nothing set
    hook = DeltaMaintHook(conn_id="spark_cluster", cache_dir=tmp_path, conf={"spark.pyspark.python": "python3"})
    assert hook.python_plan.mode == "off" and _confs(hook.build_command("inspect", "t"))["spark.pyspark.python"] == "python3"
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__PYTHON_ENV", "off")
    cmd = DeltaMaintHook(conn_id="spark_cluster", cache_dir=tmp_path).build_command("inspect", "t")
    assert "--archives" not in cmd and "spark.pyspark.python" not in _confs(cmd)
    # the operator's choice wins over the setting; contradictions are refused
    assert DeltaMaintHook(conn_id="spark_cluster", python_env="worker").python_plan.conf == {
        "spark.pyspark.python": sys.executable}
    with pytest.raises(AirflowException, match="names another interpreter"):
        DeltaMaintHook(conn_id="spark_cluster", python_env="ship", env_vars={"PYSPARK_PYTHON": "/x/python"})
    with pytest.raises(AirflowException, match="python_env must be one of"):
        DeltaMaintHook(conn_id="spark_cluster", python_env="conda")


def test_cli_builds_ahead_of_time(packed, capsys):
    cache, env = packed
    assert python_env.main(["build", "--out", str(cache)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["archive"] == str(env.path) and out["build_s"] == 0
    assert out["spark"] == {"--archives": f"{env.path}#environment", "spark.pyspark.python": EXECUTOR_PYTHON}
    assert python_env.main(["build", "--out", str(cache), "--python", "three"]) == 2
    assert "must look like 3.11" in capsys.readouterr().err
    assert os.path.exists(env.path)
