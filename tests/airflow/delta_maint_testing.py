"""Helpers of the Airflow-side tests: small Delta tables, ``airflow dags test`` runs and their results."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCAL_SPARK = json.dumps({"conn_type": "spark", "host": "local[2]"})


def write_appends(path: Path, commits: int, partitions: int = 2, rows: int = 20, start: int = 0) -> None:
    """Append ``commits`` small commits (one file per partition each) with delta-rs."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(start, start + commits):
        ids = list(range(i * rows, (i + 1) * rows))
        table = pa.table({
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([f"p{j % partitions}" for j in range(rows)]),
            "value": pa.array([float(x) for x in ids]),
        })
        write_deltalake(str(path), table, mode="append", partition_by=["part"])


def log_files(path: Path) -> list[str]:
    """The names in the table's ``_delta_log`` (to prove a failed run changed nothing)."""
    return sorted(os.listdir(path / "_delta_log"))


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_SPARK_DEFAULT": LOCAL_SPARK,
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    env.update(extra)
    return env


def dags_test(home: Path, dag_id: str, conf: dict | None = None, timeout: float = 400,
              **env: str) -> subprocess.CompletedProcess:
    """Run ``airflow dags test`` in a subprocess (it runs the DAG's tasks in-process, without an executor)."""
    cmd = [str(BIN / "airflow"), "dags", "test", dag_id]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    return subprocess.run(cmd, env=airflow_env(home, **env), capture_output=True, text=True, timeout=timeout)


def task_results(home: Path, dag_id: str) -> tuple[str, dict[tuple[str, int], dict]]:
    """The latest run of ``dag_id``: its state, and per (task_id, map_index) the state and XCom value."""
    with sqlite3.connect(home / "airflow.db") as conn:
        run_id, state = conn.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)).fetchone()
        tis = conn.execute("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                           (dag_id, run_id)).fetchall()
        xcoms = dict(((t, m), v) for t, m, v in conn.execute(
            "SELECT task_id, map_index, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
            (dag_id, run_id)))
    out = {}
    for task_id, map_index, ti_state in tis:
        value = xcoms.get((task_id, map_index))
        while isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                break
        out[(task_id, map_index)] = {"state": ti_state, "value": value}
    return state, out


class ProcessSampler:
    """Notes the arguments and environment of every descendant of ``roots`` while it runs (a context
    manager: a thread samples every 50 ms until the ``with`` block ends).

    A process is read again whenever its arguments change: a child forks first and executes its program
    after (a Spark worker's executor goes through ``jspawnhelper``; spark-submit executes spark-class,
    which executes java), and a read in between must not stand for it.
    """

    def __init__(self, roots: list[int]):
        import threading

        self.roots = roots
        #: pid -> (arguments, environment) at the last read
        self.latest: dict[int, tuple[list[str], dict[str, str]]] = {}
        #: every argument list any descendant had, in the order read
        self.every_args: list[list[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ProcessSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            for root in self.roots:
                try:
                    children = psutil.Process(root).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                for p in children:
                    try:
                        cmdline = p.cmdline()
                        if p.pid in self.latest and self.latest[p.pid][0] == cmdline:
                            continue
                        self.latest[p.pid] = (cmdline, p.environ())
                        self.every_args.append(cmdline)
                    except (psutil.Error, OSError):
                        pass  # gone or changing under the read: the next round reads it again if it is still there
            self._stop.wait(0.05)


def stop_process_group(proc: subprocess.Popen) -> None:
    """Stop a process started in a session of its own, and every process it started, by its process id: TERM,
    then KILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
