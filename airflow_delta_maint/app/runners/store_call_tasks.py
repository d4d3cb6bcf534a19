"""The store calls Spark tasks make, brought back to the driver and added to the job's.

A task's storages are unpickled in an executor's Python worker, outside any job's counting block, so they
count into that process's :data:`~airflow_delta_maint.delta.storage.store_calls.PROCESS_CALLS`. A Python
worker runs one task at a time, so what that counter gained while the task's function ran is the task's.
Two ways back to the driver:

- :func:`spark_task_calls` and :func:`count_into`: a Spark accumulator (classic Spark, any RDD stage); the
  driver adds its value to the counter of the job that started the Spark job;
- :func:`with_task_calls` and :func:`take_task_calls`: the counts as the last result of a slice (Spark Connect
  and the DataFrame tasks, whose results come back as rows), taken out of the results on the driver.

A task that fails and is run again reports only the run that succeeded. Tasks that run on threads of the
driver (local execution) share the job's storages and count into the job's counter directly. No pyspark
import here.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterable, Iterator, TypeVar

from airflow_delta_maint.delta.storage.store_calls import (PROCESS_CALLS, StoreCallCounts, current_calls,
                                                             empty_counts, merge_counts)

__all__ = ["StoreCallsParam", "TaskCalls", "count_into", "spark_task_calls", "take_task_calls", "with_task_calls"]

T = TypeVar("T")
R = TypeVar("R")


class StoreCallsParam:
    """A Spark ``AccumulatorParam`` of store call counts (duck-typed: pyspark is not imported here)."""

    def zero(self, value: StoreCallCounts) -> StoreCallCounts:
        return empty_counts()

    def addInPlace(self, value1: StoreCallCounts, value2: StoreCallCounts) -> StoreCallCounts:  # noqa: N802 - Spark's name
        return merge_counts(value1, value2)


@contextlib.contextmanager
def spark_task_calls(sc: Any) -> Iterator[Any]:
    """An accumulator for the store calls of the Spark tasks started inside the block (wrap their functions with
    :func:`count_into`); when the block ends, its value goes to the counter of this thread's job."""
    calls = current_calls()
    accumulator = sc.accumulator(empty_counts(), StoreCallsParam())
    try:
        yield accumulator
    finally:
        calls.merge(accumulator.value)


def count_into(fn: Callable[[Iterator[T]], Iterable[R]], accumulator: Any) -> Callable[[Iterator[T]], Iterator[R]]:
    """``fn`` (a partition's function) adding the store calls it made to ``accumulator``.

    (A partial of a module-level function: pickled by reference, it reads the executor's own
    ``PROCESS_CALLS``, not a copy of the driver's.)"""
    return functools.partial(_counted_into, fn, accumulator)


def _counted_into(fn: Callable[[Iterator[T]], Iterable[R]], accumulator: Any, items: Iterator[T]) -> Iterator[R]:
    before = PROCESS_CALLS.counts()
    try:
        yield from fn(items)
    finally:
        accumulator.add(PROCESS_CALLS.since(before))


class TaskCalls:
    """The store calls of one slice, sent back as its last result."""

    __slots__ = ("counts",)

    def __init__(self, counts: StoreCallCounts) -> None:
        self.counts = counts

    def __reduce__(self) -> tuple[Any, ...]:
        return TaskCalls, (self.counts,)


def with_task_calls(fn: Callable[[Iterator[T]], Iterable[R]]) -> Callable[[Iterator[T]], Iterator[Any]]:
    """``fn`` (a slice's function) yielding, after its results, a :class:`TaskCalls` of the store calls it made."""
    return functools.partial(_with_calls, fn)


def _with_calls(fn: Callable[[Iterator[T]], Iterable[R]], items: Iterator[T]) -> Iterator[Any]:
    before = PROCESS_CALLS.counts()
    yield from fn(items)
    yield TaskCalls(PROCESS_CALLS.since(before))


def take_task_calls(results: Iterable[Any]) -> list[Any]:
    """``results`` without the :class:`TaskCalls` among them, whose counts go to the counter of this thread's job."""
    calls = current_calls()
    out = []
    for result in results:
        if isinstance(result, TaskCalls):
            calls.merge(result.counts)
        else:
            out.append(result)
    return out
