"""A task's Python CPU on its way back to the driver: measured in the process the task ran in (another process
here, as a Spark Python worker is), none when that process is the driver's own, and added up where the driver
takes the tasks' results or an accumulator's value."""

from __future__ import annotations

import multiprocessing
import pickle
import time

import pytest

from airflow_delta_maint.app.runners.store_call_tasks import (TASKS_CPU, TaskCalls, TaskCallsParam, count_into,
                                                              process_token, spark_task_calls, take_task_calls,
                                                              with_task_calls)
from airflow_delta_maint.delta.storage.store_calls import PROCESS_CALLS, StoreCalls, counting, empty_counts

BURN_S = 0.3


def _burn(items):
    """A slice that spends about BURN_S of CPU and makes one store call per item."""
    end = time.process_time() + BURN_S
    n = 0
    while time.process_time() < end:
        n += 1
    for item in items:
        PROCESS_CALLS.add("get", nbytes=item)
        yield item + 1


def _run_pickled(payload: bytes) -> list:
    """In a process of its own (a Python worker, as Spark's): the slice function as the driver pickled it."""
    return list(pickle.loads(payload)(iter([1, 2])))


def _in_another_process(payload: bytes) -> list:
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(_run_pickled, (payload,))


def test_a_slice_in_another_process_reports_that_process_s_cpu():
    results = _in_another_process(pickle.dumps(with_task_calls(_burn)))
    assert results[:2] == [2, 3] and isinstance(results[2], TaskCalls)
    assert BURN_S * 0.9 <= results[2].cpu_s < BURN_S + 5.0  # the loop, and what else the worker did meanwhile
    assert results[2].counts["get"] == {"calls": 2, "bytes": 3, "objects": 0}


def test_a_slice_in_the_driver_s_own_process_reports_no_cpu():
    results = list(pickle.loads(pickle.dumps(with_task_calls(_burn)))(iter([1])))
    assert results[0] == 2 and results[1].cpu_s == 0.0  # already in this process's own CPU


def test_the_driver_adds_the_tasks_cpu_to_the_process_total_and_the_calls_to_the_job():
    before = TASKS_CPU.total()
    job = StoreCalls()
    counts = empty_counts()
    counts["put"]["calls"] = 1
    with counting(job):
        assert take_task_calls([7, TaskCalls(counts, 1.25), 8, TaskCalls(empty_counts(), 0.5)]) == [7, 8]
    assert TASKS_CPU.total() - before == pytest.approx(1.75)
    assert job.counts()["put"]["calls"] == 1


class _Context:
    """A stand-in for a SparkContext's ``accumulator`` (Spark's own merges with the same param)."""

    class Accumulator:
        def __init__(self, value, param) -> None:
            self.param, self.value = param, param.zero(value)

        def add(self, term) -> None:
            self.value = self.param.addInPlace(self.value, term)

    def accumulator(self, value, param):
        return self.Accumulator(value, param)


def test_an_accumulator_sums_the_tasks_cpu_and_brings_it_to_the_process_total():
    param = TaskCallsParam()
    merged = param.addInPlace(param.zero(TaskCalls(empty_counts())), TaskCalls(empty_counts(), 0.25))
    merged = param.addInPlace(merged, pickle.loads(pickle.dumps(TaskCalls(empty_counts(), 0.5))))
    assert merged.cpu_s == pytest.approx(0.75)
    before = TASKS_CPU.total()
    with spark_task_calls(_Context()) as acc:
        acc.add(TaskCalls(empty_counts(), 2.0))
        assert list(count_into(_burn, acc)(iter([1]))) == [2]  # in this process: no CPU of its own
    assert TASKS_CPU.total() - before == pytest.approx(2.0)


def test_a_forked_process_gets_a_token_of_its_own():
    mine = process_token()
    with multiprocessing.get_context("fork").Pool(1) as pool:  # the child starts with this process's memory
        assert pool.apply(process_token) != mine
    assert process_token() == mine
