"""CommitIntervalSensor in poke, reschedule and deferrable modes, in-process and in a real DAG run."""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import subprocess
import threading
import time

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from delta_maint_testing import BIN, airflow_env, task_results, write_appends

from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from airflow_delta_maint.triggers.commit_interval import CommitIntervalTrigger


def test_template_fields():
    assert set(CommitIntervalSensor.template_fields) >= {"table_uri", "min_commits", "since", "since_version",
                                                         "storage_options"}


def counting_pokes(sensor: CommitIntervalSensor) -> list:
    """The sensor's pokes, each recorded with its answer (or its error) as it returns."""
    pokes: list = []
    poke = sensor.poke

    def recorded(context):
        try:
            answer = poke(context)
        except Exception as exc:
            pokes.append(exc)
            raise
        pokes.append(answer)
        return answer

    sensor.poke = recorded  # type: ignore[method-assign]
    return pokes


def test_poke_mode_waits_for_commits(small_table):
    """The commits are written only after two pokes came back empty: the sensor waited for them."""
    sensor = CommitIntervalSensor(task_id="wait", table_uri=str(small_table), min_commits=2, since="version",
                                  since_version="5", poke_interval=0.05, timeout=60)
    pokes = counting_pokes(sensor)
    written = threading.Event()

    def writer() -> None:
        deadline = time.monotonic() + 60
        while len(pokes) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        write_appends(small_table, 2, start=6)
        written.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        seen = sensor.execute(context={})
    finally:
        thread.join()
    assert seen == {"from_version": 6, "to_version": 7, "commits": 2}
    assert written.is_set()
    assert [p.is_done for p in pokes[:2]] == [False, False] and pokes[-1].is_done
    assert pokes[0].xcom_value == {"from_version": 6, "to_version": 5, "commits": 0}


def test_deferrable_mode_runs_the_trigger_and_resumes(small_table):
    sensor = CommitIntervalSensor(task_id="wait", table_uri=str(small_table), min_commits=8, deferrable=True,
                                  poke_interval=0.2, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context={})
    assert deferred.value.method_name == "execute_complete"
    # what the triggerer does: rebuild the trigger from its serialized form and run it
    path, kwargs = deferred.value.trigger.serialize()
    module, _, name = path.rpartition(".")
    trigger = getattr(importlib.import_module(module), name)(**kwargs)
    assert isinstance(trigger, CommitIntervalTrigger) and trigger.min_commits == 8

    async def wait_for_event():
        return await asyncio.wait_for(anext(trigger.run()), timeout=60)

    writer = threading.Timer(0.3, write_appends, args=(small_table, 2), kwargs={"start": 6})
    writer.start()
    try:
        event = asyncio.run(wait_for_event())
    finally:
        writer.join()
    seen = sensor.execute_complete(context={}, event=event.payload)
    assert seen == {"from_version": 0, "to_version": 7, "commits": 8}


def test_deferrable_mode_returns_at_once_when_enough(small_table):
    sensor = CommitIntervalSensor(task_id="wait", table_uri=str(small_table), min_commits=3, deferrable=True)
    assert sensor.execute(context={}) == {"from_version": 3, "to_version": 5, "commits": 3}


def test_trigger_error_fails_the_task():
    sensor = CommitIntervalSensor(task_id="wait", table_uri="/x", min_commits=1, deferrable=True)
    with pytest.raises(AirflowException, match="table path does not exist"):
        sensor.execute_complete(context={}, event={"status": "error", "message": "/x: table path does not exist"})


def test_missing_table_fails_at_once(tmp_path):
    """The first poke's error ends the task: no second poke, no wait for the timeout."""
    sensor = CommitIntervalSensor(task_id="wait", table_uri=str(tmp_path / "gone"), min_commits=1, timeout=600)
    pokes = counting_pokes(sensor)
    with pytest.raises(AirflowException, match="table path does not exist"):
        sensor.execute(context={})
    assert len(pokes) == 1 and isinstance(pokes[0], AirflowException)


def test_bad_arguments(small_table):
    with pytest.raises(ValueError, match="since must be one of"):
        CommitIntervalSensor(task_id="wait", table_uri="/t", min_commits=1, since="monday")
    sensor = CommitIntervalSensor(task_id="wait", table_uri=str(small_table), min_commits=1, since="version")
    with pytest.raises(AirflowException, match="needs since_version"):
        sensor.execute(context={})


def _ti_state(home, task_id: str) -> str | None:
    try:
        with sqlite3.connect(home / "airflow.db", timeout=10) as conn:
            row = conn.execute(
                "SELECT state FROM task_instance WHERE dag_id = 'delta_maint_sensor_modes' AND task_id = ? "
                "ORDER BY rowid DESC LIMIT 1", (task_id,)).fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def _wait_for_state(home, proc, task_id: str, states: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _ti_state(home, task_id) in states:
            return
        if proc.poll() is not None:
            raise AssertionError(f"airflow dags test ended before {task_id} was {states}")
        time.sleep(0.2)
    raise AssertionError(f"{task_id} never reached {states}")


@pytest.mark.e2e
def test_three_modes_in_a_dag_run(airflow_home, small_table):
    """A real ``airflow dags test``: each sensor waits until the test writes the commit it needs."""
    env = airflow_env(airflow_home, DELTA_MAINT_TEST_TABLE=str(small_table))
    proc = subprocess.Popen([str(BIN / "airflow"), "dags", "test", "delta_maint_sensor_modes"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        _wait_for_state(airflow_home, proc, "poke", {"running"})
        empty = f"{small_table}: 0 commits since version (versions 6..5); waiting for 1"
        deadline = time.monotonic() + 120
        while sum(empty in line for line in lines) < 2:  # a few pokes come back empty
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-4000:]
            time.sleep(0.2)
        write_appends(small_table, 1, start=6)
        _wait_for_state(airflow_home, proc, "reschedule", {"up_for_reschedule"})
        write_appends(small_table, 1, start=7)
        # dag.test runs the trigger in line (the task instance is not stored as deferred meanwhile)
        deadline = time.monotonic() + 120
        while not any("running trigger in line" in line for line in lines) and time.monotonic() < deadline:
            assert proc.poll() is None, "".join(lines)[-4000:]
            time.sleep(0.2)
        assert _ti_state(airflow_home, "deferrable") not in ("success", "failed")
        write_appends(small_table, 1, start=8)
        proc.wait(timeout=180)
        reader.join(timeout=10)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    state, results = task_results(airflow_home, "delta_maint_sensor_modes")
    assert state == "success", out[-4000:]
    assert results[("poke", -1)]["value"] == {"from_version": 6, "to_version": 6, "commits": 1}
    assert results[("reschedule", -1)]["value"] == {"from_version": 6, "to_version": 7, "commits": 2}
    assert results[("deferrable", -1)]["value"] == {"from_version": 6, "to_version": 8, "commits": 3}
