"""A run's CPU counted where it runs: a run in the worker's process has only its process's part; the run's Spark
jobs are picked out of the status API's answers by when they were submitted, and their executors' CPU summed;
the fleet's budget counts what a run measured outside its process."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.run_cpu import RunCpu, cpu_outside_process
from airflow_delta_maint.app.runners.executor_cpu import run_jobs, spark_time_ms, stages_cpu_ns
from airflow_delta_maint.app.runners.store_call_tasks import TASKS_CPU

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow"))
from delta_maint_testing import write_appends  # noqa: E402

# as Spark 4.2's status API writes them (fields trimmed)
JOBS = [
    {"jobId": 3, "submissionTime": "2026-11-28T17:45:02.500GMT", "stageIds": [5, 6], "status": "SUCCEEDED"},
    {"jobId": 2, "submissionTime": "2026-11-28T17:45:01.123GMT", "stageIds": [4], "status": "SUCCEEDED"},
    {"jobId": 1, "submissionTime": "2026-11-28T17:44:59.999GMT", "stageIds": [2, 3], "status": "SUCCEEDED"},
    {"jobId": 0, "stageIds": [0], "status": "UNKNOWN"},
]
STAGES = [
    {"stageId": 6, "attemptId": 0, "status": "SKIPPED", "executorCpuTime": 0, "executorDeserializeCpuTime": 0},
    {"stageId": 5, "attemptId": 1, "status": "COMPLETE", "executorCpuTime": 700_000_000,
     "executorDeserializeCpuTime": 20_000_000},
    {"stageId": 5, "attemptId": 0, "status": "FAILED", "executorCpuTime": 100_000_000,
     "executorDeserializeCpuTime": 0},
    {"stageId": 4, "attemptId": 0, "status": "COMPLETE", "executorCpuTime": 1_000_000_000},
    {"stageId": 3, "attemptId": 0, "status": "COMPLETE", "executorCpuTime": 9_000_000_000},
]


def test_the_run_s_jobs_are_those_submitted_while_it_ran():
    since = spark_time_ms("2026-11-28T17:45:00.000GMT")
    assert since == 1795887900000
    assert [j["jobId"] for j in run_jobs(JOBS, since, since + 10_000)] == [3, 2]
    assert [j["jobId"] for j in run_jobs(JOBS, since, since + 2_000)] == [2]


def test_every_attempt_of_the_run_s_stages_counts():
    ns, found = stages_cpu_ns(STAGES, {4, 5, 6, 7})
    assert ns == 1_820_000_000 and found == {4, 5, 6}  # stage 3 is another run's; 7 is no longer retained


def test_a_run_without_spark_has_only_its_process_s_part():
    cpu = RunCpu()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    measured = cpu.measure(None)
    assert set(measured) == {"cpu_s", "cpu_driver_s"}
    assert measured["cpu_s"] == measured["cpu_driver_s"] >= 0.05


def test_a_run_in_the_worker_s_process_reports_its_process_cpu_only(tmp_path):
    table = tmp_path / "t"
    write_appends(table, 6)
    tasks_before, started = TASKS_CPU.total(), time.process_time()
    code, metrics = run_in_process("optimize", str(table), [])
    spent = time.process_time() - started
    assert code == 0 and metrics["status"] == "committed" and metrics["numAddedFiles"] == 2
    assert "cpu_tasks_s" not in metrics and "cpu_executors_s" not in metrics and "cpu_missing" not in metrics
    # its parallel work ran on threads of this process: inside its process CPU, not counted again
    assert metrics["cpu_s"] == metrics["cpu_driver_s"] and TASKS_CPU.total() == tasks_before
    assert 0 < metrics["cpu_s"] <= spent + 0.001 and metrics["cpu_s"] >= spent - 0.25


def test_the_fleet_counts_what_a_run_measured_outside_its_process():
    assert cpu_outside_process({"cpu_s": 9.0, "cpu_driver_s": 1.0, "cpu_tasks_s": 6.0, "cpu_executors_s": 2.0}) == \
        pytest.approx(8.0)
    assert cpu_outside_process({"cpu_s": 1.0, "cpu_driver_s": 1.0}) == 0.0
