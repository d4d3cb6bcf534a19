"""Where a job's parallel work runs: as Spark tasks, or on threads of this process.

OPTIMIZE (bin-packing and ``target_files``) and VACUUM full hand their work out in *slices*:
a function over an iterator of items, the shape Spark's ``mapPartitions`` takes. :class:`SparkTasks`
runs each slice as a Spark task; :class:`LocalTasks` runs the very same functions on a thread pool
of this process, for runs too small to pay Spark's start (local execution). The functions are
pure pyarrow and storage work that releases the GIL while it reads, writes and waits, so threads
give the parallelism. No pyspark import here.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from airflow_delta_maint.delta import errors

from .store_call_tasks import count_into, spark_task_calls

T = TypeVar("T")
R = TypeVar("R")

#: threads of a local run at most, whatever the machine: each OPTIMIZE thread holds a row group
#: (128 MiB by default) being written and the next file being read, some 270 MiB (measured)
LOCAL_MAX_THREADS = 4
PROGRESS_EVERY_S = 5.0

log = logging.getLogger("delta_maint.tasks")


class Tasks(Protocol):
    """Runs slices of work and returns their results, in slice order."""

    #: how many slices run at once
    parallelism: int
    #: True when the slices run in this process (no Spark)
    local: bool

    def map_slices(self, fn: Callable[[Iterator[T]], Iterable[R]], items: Sequence[T], slices: int,
                   label: str) -> list[R]:
        """Split ``items`` into ``slices`` contiguous slices, run ``fn`` on each, and return
        everything the slices yielded, in order. A failure in any slice raises; the other slices
        have stopped (or finished) by then, so the caller may clean up what they wrote."""
        ...


def split_slices(items: Sequence[T], slices: int) -> list[list[T]]:
    """``items`` in ``slices`` contiguous slices of sizes at most one apart (as Spark's
    ``parallelize`` cuts a list); never an empty slice."""
    n = len(items)
    count = max(1, min(slices, n))
    return [list(items[i * n // count:(i + 1) * n // count]) for i in range(count)] if n else []


class LocalTasks:
    """Runs slices on a thread pool in this process."""

    local = True

    def __init__(self, threads: int | None = None):
        self.parallelism = max(1, threads or min(os.cpu_count() or 1, LOCAL_MAX_THREADS))

    def map_slices(self, fn: Callable[[Iterator[T]], Iterable[R]], items: Sequence[T], slices: int,
                   label: str) -> list[R]:
        parts = split_slices(items, slices)
        if not parts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.parallelism, len(parts)),
                                thread_name_prefix="delta-maint-task") as pool:
            futures: list[Future[list[R]]] = [pool.submit(_run_slice, fn, p) for p in parts]
            pending = set(futures)
            last = time.monotonic()
            try:
                while pending:
                    done, pending = wait(pending, timeout=PROGRESS_EVERY_S, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()  # the first failure raises at once
                    if time.monotonic() - last >= PROGRESS_EVERY_S:
                        last = time.monotonic()
                        log.info("%s: %d/%d tasks done", label, len(futures) - len(pending), len(futures))
            except BaseException:
                for f in pending:
                    f.cancel()
                raise  # leaving the pool waits for the slices still running
        return [r for f in futures for r in f.result()]


def _run_slice(fn: Callable[[Iterator[T]], Iterable[R]], part: list[T]) -> list[R]:
    return list(fn(iter(part)))


_WORKER_ERROR = re.compile(r"airflow_delta_maint\.delta\.errors\.(\w+): ([^\n]*)")


def raise_worker_error(exc: BaseException) -> None:
    """Re-raise a core error a Spark task raised as itself (one clear message); else return."""
    found = _WORKER_ERROR.findall(str(exc))
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, errors.DeltaError):
            raise cls(message) from None


class SparkTasks:
    """Runs each slice as a Spark task of one job, in a job group of its own (cancelled with the
    application), and logs the tasks' progress every few seconds."""

    local = False

    def __init__(self, spark: Any, description: str = "delta-maint"):
        self.sc = spark.sparkContext
        self.description = description
        self.parallelism = max(1, self.sc.defaultParallelism)

    def map_slices(self, fn: Callable[[Iterator[T]], Iterable[R]], items: Sequence[T], slices: int,
                   label: str) -> list[R]:
        items = list(items)
        if not items:
            return []
        group = f"delta-maint-{uuid.uuid4().hex[:8]}"
        self.sc.setJobGroup(group, f"{self.description}: {label}", interruptOnCancel=True)
        stop = threading.Event()
        watcher = threading.Thread(target=self._progress, args=(group, label, stop), daemon=True)
        watcher.start()
        try:
            with spark_task_calls(self.sc) as calls:  # the tasks' store calls, added to the job's
                return self.sc.parallelize(items, max(1, min(slices, len(items)))) \
                    .mapPartitions(count_into(fn, calls)).collect()
        except Exception as exc:
            raise_worker_error(exc)
            raise
        finally:
            stop.set()
            watcher.join(timeout=1)

    def _progress(self, group: str, label: str, stop: threading.Event) -> None:
        tracker = self.sc.statusTracker()
        while not stop.wait(PROGRESS_EVERY_S):
            done = total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else []):
                    stage = tracker.getStageInfo(stage_id)
                    if stage:
                        done += stage.numCompletedTasks
                        total += stage.numTasks
            if total:
                log.info("%s: %d/%d tasks done", label, done, total)
