"""What Spark tasks spend, brought back to the driver: their store calls, added to the job's, and their Python CPU.

A task's storages are unpickled in an executor's Python worker, outside any job's counting block, so they
count into that process's :data:`~airflow_delta_maint.delta.storage.store_calls.PROCESS_CALLS`. A Python
worker runs one task at a time, so what that counter gained while the task's function ran is the task's; so
is the CPU the worker process spent meanwhile (``time.process_time()``: every thread of the worker, the
reading of the task's input and the writing of its results included). Two ways back to the driver, both
carrying a :class:`TaskCalls`:

- :func:`spark_task_calls` and :func:`count_into`: a Spark accumulator (classic Spark, any RDD stage);
- :func:`with_task_calls` and :func:`take_task_calls`: the slice's last result (Spark Connect and the
  DataFrame tasks, whose results come back as rows), taken out of the results on the driver.

On the driver the store calls go to the counter of the job that started the Spark job, and the CPU to
:data:`TASKS_CPU`, this process's total of its tasks' Python CPU (a run takes what it gained, as it takes its
own ``process_time``). A task that fails and is run again reports only the run that succeeded. A wrapped
function that runs in the driver's own process (on a thread of it) reports no CPU: that CPU is already the
driver's. Tasks that run on threads of the driver (local execution) are not wrapped at all: they share the
job's storages and count into the job's counter directly. No pyspark import here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, TypeVar

from airflow_delta_maint.delta.storage.store_calls import (PROCESS_CALLS, StoreCallCounts, current_calls,
                                                             empty_counts, merge_counts)

__all__ = ["TASKS_CPU", "TaskCalls", "TaskCallsParam", "TaskCpu", "count_into", "process_token", "spark_task_calls",
           "spent_since", "take_task_calls", "task_mark", "with_task_calls"]

T = TypeVar("T")
R = TypeVar("R")


class TaskCalls:
    """What one task (or slice) spent: its store calls and its Python worker's CPU-seconds."""

    __slots__ = ("counts", "cpu_s")

    def __init__(self, counts: StoreCallCounts, cpu_s: float = 0.0) -> None:
        self.counts = counts
        self.cpu_s = cpu_s

    def __reduce__(self) -> tuple[Any, ...]:
        return TaskCalls, (self.counts, self.cpu_s)

    def __repr__(self) -> str:
        return f"TaskCalls(cpu_s={self.cpu_s:.3f}, calls={sum(c['calls'] for c in self.counts.values())})"


class TaskCallsParam:
    """A Spark ``AccumulatorParam`` of :class:`TaskCalls` (duck-typed: pyspark is not imported here)."""

    def zero(self, value: TaskCalls) -> TaskCalls:
        return TaskCalls(empty_counts())

    def addInPlace(self, value1: TaskCalls, value2: TaskCalls) -> TaskCalls:  # noqa: N802 - Spark's name
        merge_counts(value1.counts, value2.counts)
        value1.cpu_s += value2.cpu_s
        return value1


class TaskCpu:
    """A thread-safe running total of CPU-seconds."""

    __slots__ = ("_lock", "_total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self._total += seconds

    def total(self) -> float:
        with self._lock:
            return self._total


#: the Python CPU of every Spark task this process started, as the tasks reported it when they ended
TASKS_CPU = TaskCpu()

_PROCESS: list[Any] = [None, None]  # (pid, token): a fresh token after a fork


def process_token() -> str:
    """An id of this process, unlike any other process's (a forked child gets its own)."""
    if _PROCESS[0] != os.getpid():
        _PROCESS[:] = [os.getpid(), f"{os.getpid()}-{uuid.uuid4().hex}"]
    return str(_PROCESS[1])


def task_mark() -> tuple[StoreCallCounts, float]:
    """Where this process's store calls and CPU stand, at a task's start."""
    return PROCESS_CALLS.counts(), time.process_time()


def spent_since(mark: tuple[StoreCallCounts, float], driver: str) -> TaskCalls:
    """What this process spent since ``mark``; no CPU when this process is the ``driver`` (its CPU is the
    driver's own)."""
    calls, cpu = mark
    return TaskCalls(PROCESS_CALLS.since(calls), 0.0 if process_token() == driver else time.process_time() - cpu)


def _bring_back(spent: TaskCalls) -> None:
    """A task's spending on the driver: its store calls to this thread's job, its CPU to :data:`TASKS_CPU`."""
    current_calls().merge(spent.counts)
    TASKS_CPU.add(spent.cpu_s)


@contextlib.contextmanager
def spark_task_calls(sc: Any) -> Iterator[Any]:
    """An accumulator for what the Spark tasks started inside the block spend (wrap their functions with
    :func:`count_into`); when the block ends, its store calls go to the counter of this thread's job and its
    CPU to :data:`TASKS_CPU`."""
    accumulator = sc.accumulator(TaskCalls(empty_counts()), TaskCallsParam())
    try:
        yield accumulator
    finally:
        _bring_back(accumulator.value)


def count_into(fn: Callable[[Iterator[T]], Iterable[R]], accumulator: Any) -> Callable[[Iterator[T]], Iterator[R]]:
    """``fn`` (a partition's function) adding what it spent (store calls, CPU) to ``accumulator``.

    (A partial of a module-level function: pickled by reference, it reads the executor's own
    ``PROCESS_CALLS``, not a copy of the driver's.)"""
    return functools.partial(_counted_into, fn, accumulator, process_token())


def _counted_into(fn: Callable[[Iterator[T]], Iterable[R]], accumulator: Any, driver: str,
                  items: Iterator[T]) -> Iterator[R]:
    mark = task_mark()
    try:
        yield from fn(items)
    finally:
        accumulator.add(spent_since(mark, driver))


def with_task_calls(fn: Callable[[Iterator[T]], Iterable[R]]) -> Callable[[Iterator[T]], Iterator[Any]]:
    """``fn`` (a slice's function) yielding, after its results, a :class:`TaskCalls` of what it spent."""
    return functools.partial(_with_calls, fn, process_token())


def _with_calls(fn: Callable[[Iterator[T]], Iterable[R]], driver: str, items: Iterator[T]) -> Iterator[Any]:
    mark = task_mark()
    yield from fn(items)
    yield spent_since(mark, driver)


def take_task_calls(results: Iterable[Any]) -> list[Any]:
    """``results`` without the :class:`TaskCalls` among them, whose store calls go to the counter of this
    thread's job and whose CPU to :data:`TASKS_CPU`."""
    out = []
    for result in results:
        if isinstance(result, TaskCalls):
            _bring_back(result)
        else:
            out.append(result)
    return out
