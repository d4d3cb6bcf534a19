"""A task's store calls on their way back to the driver: as the last result of a slice, or through an accumulator
(here a stand-in with Spark's ``add``); both only what the task's function added to the process's counter."""

from __future__ import annotations

import pickle

from airflow_delta_maint.app.runners.store_call_tasks import (TaskCalls, TaskCallsParam, count_into,
                                                              take_task_calls, with_task_calls)
from airflow_delta_maint.delta.storage.store_calls import PROCESS_CALLS, StoreCalls, counting, empty_counts


def _reads(items):
    for item in items:
        PROCESS_CALLS.add("get", nbytes=item)
        yield item * 2


def test_slice_results_carry_the_calls_and_the_driver_takes_them_out():
    PROCESS_CALLS.add("head")  # before the task: not its call
    results = list(pickle.loads(pickle.dumps(with_task_calls(_reads)))(iter([1, 2, 3])))
    assert results[:3] == [2, 4, 6] and isinstance(results[3], TaskCalls)
    marker = pickle.loads(pickle.dumps(results[3]))
    assert marker.counts["get"] == {"calls": 3, "bytes": 6, "objects": 0} and marker.counts["head"]["calls"] == 0
    job = StoreCalls()
    with counting(job):
        assert take_task_calls(results + [results[3]]) == [2, 4, 6]
    assert job.counts()["get"] == {"calls": 6, "bytes": 12, "objects": 0}


class _Accumulator:
    def __init__(self) -> None:
        self.param = TaskCallsParam()
        self.value = self.param.zero(TaskCalls(empty_counts()))

    def add(self, term) -> None:
        self.value = self.param.addInPlace(self.value, term)


def test_an_accumulator_gets_each_task_s_calls_even_when_it_fails():
    acc = _Accumulator()
    task = count_into(_reads, acc)
    assert list(task(iter([5]))) == [10]

    def failing(items):
        PROCESS_CALLS.add("put", nbytes=9)
        raise RuntimeError("boom")
        yield  # pragma: no cover

    try:
        list(count_into(failing, acc)(iter([])))
    except RuntimeError:
        pass
    assert acc.value.counts["get"] == {"calls": 1, "bytes": 5, "objects": 0}
    assert acc.value.counts["put"] == {"calls": 1, "bytes": 9, "objects": 0}
    assert acc.value.cpu_s == 0.0  # the functions ran in this process: their CPU is this process's own
