"""End to end: a real scheduler, dag-processor, triggerer and API server on SQLite run a DAG scheduled
on a Delta table's asset watcher; delta-rs appends commits; the DAG runs once per crossing, never in a
loop, and a restarted triggerer does not fire again for the same commits."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from delta_maint_testing import BIN, airflow_env, stop_process_group, write_appends

pytestmark = pytest.mark.e2e

DAG_ID = "delta_maint_table_events"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runs(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id", (DAG_ID,)).fetchall()


def _events(db: Path) -> list[dict]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT extra FROM asset_event ORDER BY id").fetchall()
    return [json.loads(extra)["payload"] for (extra,) in rows]


def _recorded(db: Path) -> list[list[dict]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT x.value FROM xcom x JOIN dag_run r ON x.run_id = r.run_id AND x.dag_id = r.dag_id "
                            "WHERE x.dag_id = ? AND x.key = 'return_value' ORDER BY r.id", (DAG_ID,)).fetchall()
    out = []
    for (value,) in rows:
        while isinstance(value, (str, bytes)):
            value = json.loads(value)
        out.append(value)
    return out


def _wait(condition, timeout: float, what: str, procs: dict) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for name, proc in procs.items():
            assert proc.poll() is None, f"airflow {name} exited with {proc.returncode}"
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _logged(log: Path, *lines: str):
    """A condition: the component's log holds each of ``lines``."""
    def condition() -> bool:
        text = log.read_text(errors="replace") if log.exists() else ""
        return all(line in text for line in lines)
    return condition


def _start(home: Path, env: dict, name: str, *args: str, log_name: str | None = None) -> subprocess.Popen:
    log = open(home / (log_name or f"{name}.log"), "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([str(BIN / "airflow"), name, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop one component and the processes it started (its own session), by its process id."""
    stop_process_group(proc)


def test_dag_runs_once_per_crossing(tmp_path):
    table = tmp_path / "events"
    write_appends(table, 1)  # version 0: one commit, below the threshold of 3
    home = tmp_path / "home"
    (home / "dags").mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "dags_events" / f"{DAG_ID}.py", home / "dags")
    port = _free_port()
    env = airflow_env(
        home,
        DELTA_MAINT_EVENTS_TABLE=str(table),
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="2",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__API_AUTH__JWT_SECRET="delta-maint-events-test",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC="1",
    )
    migrated = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    db = home / "airflow.db"
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name in ("api-server", "dag-processor", "scheduler", "triggerer"):
            procs[name] = _start(home, env, name)

        def watching() -> bool:
            with sqlite3.connect(db) as conn:
                return bool(conn.execute("SELECT count(*) FROM trigger t JOIN job j ON t.triggerer_id = j.id "
                                         "WHERE t.classpath LIKE '%TableCommitsTrigger'").fetchone()[0])

        # the trigger logs each state it judged not due once: waiting for that line proves it has looked
        triggerer_log = home / "triggerer.log"
        _wait(watching, 150, "the triggerer to run the watcher", procs)
        _wait(_logged(triggerer_log, f"{table}: versions 0..0, 1 commit, waiting for 3"), 120,
              "the trigger to judge version 0", procs)
        assert _runs(db) == [] and _events(db) == []  # one commit: not due

        write_appends(table, 2, start=1)  # versions 1, 2: three commits, a crossing
        _wait(lambda: [s for _, s in _runs(db)] == ["success"], 120, "the first run", procs)
        # the condition stays true: the trigger looks again at version 2 and fires nothing more
        _wait(_logged(triggerer_log, f"{table}: latest version 2, no commits since the last event (version 2), "
                                     "waiting for 3"), 60, "the trigger to judge version 2 after its event", procs)
        assert len(_runs(db)) == 1
        assert _events(db) == [{"table_uri": str(table), "from_version": 0, "to_version": 2, "commits": 3}]

        write_appends(table, 2, start=3)  # versions 3, 4: two commits since the event, not due
        _wait(_logged(triggerer_log, f"{table}: versions 3..4, 2 commits since the last event (version 2), "
                                     "waiting for 3"), 60, "the trigger to judge version 4", procs)
        assert len(_runs(db)) == 1 and len(_events(db)) == 1
        write_appends(table, 1, start=5)  # version 5: the second crossing
        _wait(lambda: [s for _, s in _runs(db)] == ["success", "success"], 120, "the second run", procs)

        _stop(procs.pop("triggerer"))  # a restarted triggerer remembers the last version it fired for
        restarted_log = home / "triggerer-restarted.log"
        procs["triggerer"] = _start(home, env, "triggerer", log_name=restarted_log.name)
        _wait(_logged(restarted_log, f"{table}: last event fired for version 5",
                      f"{table}: latest version 5, no commits since the last event (version 5), waiting for 3"),
              120, "the restarted triggerer to judge version 5", procs)
        assert len(_runs(db)) == 2
        second = {"table_uri": str(table), "from_version": 3, "to_version": 5, "commits": 3}
        assert _events(db)[1:] == [second]
        recorded = _recorded(db)
        assert recorded[-1] == [{"from_trigger": True, "payload": second}]
    finally:
        for proc in procs.values():
            _stop(proc)
