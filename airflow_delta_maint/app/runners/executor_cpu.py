"""The executors' CPU time of the Spark jobs a run started, from Spark's task metrics.

Every Spark task measures the CPU its thread spent in the executor's JVM (``executorCpuTime``, and
``executorDeserializeCpuTime`` for deserializing the task), in nanoseconds; a stage holds its tasks' sums,
one entry per attempt. The status API of the application's UI serves them
(``/api/v1/applications/{id}/jobs`` and ``/stages``), so they are read there, with the standard library's
``urllib`` and no proxy (the UI is the driver's own). The run's jobs are those submitted between its start and
its end: one application runs one job at a time (the command line, a fleet's tables in turn), and every Spark
job of a run is submitted by that run, from whichever of its threads.

No route when the UI is off (``spark.ui.enabled=false``, the default of a session the application starts) or on
a Spark Connect session (the server's UI is not the client's to read): the seconds are then unknown, with the
reason, never 0. What a task's Python worker spends is not in these metrics (the JVM thread waits for the
worker meanwhile): :mod:`.store_call_tasks` brings it back.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

__all__ = ["ExecutorCpu", "executor_cpu", "run_jobs", "spark_time_ms", "stages_cpu_ns", "warm_status_api"]

#: how long one call of the status API may take (the first starts the API's web framework: 1.7 JVM CPU-s and
#: 3.6 s on two busy cores, so :func:`warm_status_api` makes it when the session starts)
API_TIMEOUT_S = 30.0
#: how long to wait for the status store to show the run's jobs ended (its listener runs behind the scheduler)
SETTLE_S = 5.0
#: the task metrics read, in nanoseconds
CPU_FIELDS = ("executorCpuTime", "executorDeserializeCpuTime")


@dataclass(frozen=True)
class ExecutorCpu:
    """The executors' CPU-seconds of a run's Spark jobs, or None with the reason they are not known."""

    seconds: float | None
    missing: str | None = None


def spark_time_ms(text: str) -> int:
    """Milliseconds since the epoch of a time as the status API writes it (``2026-11-28T17:45:01.123GMT``)."""
    return int(datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000)


def run_jobs(jobs: Iterable[Mapping[str, Any]], since_ms: int, until_ms: int) -> list[Mapping[str, Any]]:
    """The jobs (the status API's) submitted between ``since_ms`` and ``until_ms``."""
    return [j for j in jobs if j.get("submissionTime") and since_ms <= spark_time_ms(j["submissionTime"]) <= until_ms]


def stages_cpu_ns(stages: Iterable[Mapping[str, Any]], stage_ids: set[int]) -> tuple[int, set[int]]:
    """(the executors' CPU nanoseconds of every attempt of ``stage_ids``, the ids found) in the status API's
    stages."""
    total, found = 0, set()
    for stage in stages:
        if stage.get("stageId") in stage_ids:
            found.add(int(stage["stageId"]))
            total += sum(int(stage.get(f) or 0) for f in CPU_FIELDS)
    return total, found


def _get(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the driver's own UI: no proxy
    with opener.open(url, timeout=API_TIMEOUT_S) as response:
        return json.load(response)


def warm_status_api(spark: Any) -> None:
    """Make the status API's first call in a thread, while the run goes on (nothing when the UI is off)."""
    url = spark.sparkContext.uiWebUrl
    if url:
        def warm() -> None:
            with contextlib.suppress(OSError, ValueError):
                _get(f"{url.rstrip('/')}/api/v1/version")

        threading.Thread(target=warm, name="spark-status-api-warm", daemon=True).start()


def _settled_jobs(base: str, since_ms: int, until_ms: int) -> list[Mapping[str, Any]]:
    """The run's jobs, once the status store shows none of them running (or :data:`SETTLE_S` has passed)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        jobs = run_jobs(_get(f"{base}/jobs"), since_ms, until_ms)
        if all(j.get("status") != "RUNNING" for j in jobs) or time.monotonic() >= deadline:
            return jobs
        time.sleep(0.05)


def executor_cpu(spark: Any, since_ms: int, until_ms: int) -> ExecutorCpu:
    """The executors' CPU-seconds of the Spark jobs ``spark`` ran between ``since_ms`` and ``until_ms``
    (milliseconds since the epoch); never raises."""
    from .connect_tasks import is_connect

    if is_connect(spark):
        return ExecutorCpu(None, "a Spark Connect session: the server's task metrics are not served to its clients")
    try:
        sc = spark.sparkContext
        url, app_id = sc.uiWebUrl, sc.applicationId
    except Exception as exc:  # noqa: BLE001 - a stopped SparkContext: the measure is a detail of the metrics
        return ExecutorCpu(None, f"the SparkContext did not answer: {type(exc).__name__}"[:300])
    if not url:
        return ExecutorCpu(None, "the Spark UI is off (spark.ui.enabled=false): its status API serves the task metrics")
    base = f"{url.rstrip('/')}/api/v1/applications/{app_id}"
    try:
        stage_ids = {int(s) for j in _settled_jobs(base, since_ms, until_ms) for s in j.get("stageIds", ())}
        if not stage_ids:
            return ExecutorCpu(0.0)
        ns, found = stages_cpu_ns(_get(f"{base}/stages"), stage_ids)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # urllib's errors are OSErrors
        return ExecutorCpu(None, f"Spark's status API at {url} failed: {type(exc).__name__}: {exc}"[:300])
    lost = len(stage_ids - found)
    return ExecutorCpu(round(ns / 1e9, 3), f"{lost} of the run's stages no longer in the status store (spark.ui."
                       "retainedStages): their CPU is not counted" if lost else None)
