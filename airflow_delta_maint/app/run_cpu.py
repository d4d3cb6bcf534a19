"""The CPU a run spends, counted where it runs: its metrics' ``cpu_s`` and the parts it is made of.

- ``cpu_driver_s``: this process's CPU (``time.process_time()``, every thread): the Spark driver's Python, or
  the Airflow worker's process for a run there, whose parallel work runs on its threads and so is in it;
- ``cpu_tasks_s``: the Python CPU of the run's Spark tasks, each measured in its Python worker
  (:mod:`.runners.store_call_tasks`);
- ``cpu_executors_s``: the executors' JVM CPU of the run's Spark jobs, from Spark's task metrics
  (:mod:`.runners.executor_cpu`).

``cpu_s`` is their sum: what the cost model learns from and the budgets count. A run that started no Spark has
only the driver's part. A part that cannot be known is left out (not 0) and ``cpu_missing`` says why, by the
part's name. Not counted anywhere: the driver JVM's own work (scheduling, py4j, the status store) and a Python
worker's outside its tasks (its start, its imports).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .runners.store_call_tasks import TASKS_CPU

__all__ = ["CPU_PARTS", "RunCpu", "cpu_outside_process"]

#: the parts of ``cpu_s``, as the metrics name them
CPU_PARTS = ("cpu_driver_s", "cpu_tasks_s", "cpu_executors_s")


@dataclass
class RunCpu:
    """Where the counters stood when a run started."""

    process_s: float = field(default_factory=time.process_time)
    tasks_s: float = field(default_factory=TASKS_CPU.total)
    wall_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def measure(self, spark: Any | None) -> dict[str, Any]:
        """The run's ``cpu_s``, its parts and ``cpu_missing`` (when a part is unknown), now that it has ended;
        ``spark``: the session the run started, or None."""
        parts: dict[str, float] = {"cpu_driver_s": round(time.process_time() - self.process_s, 4)}
        missing: dict[str, str] = {}
        tasks = TASKS_CPU.total() - self.tasks_s
        if spark is not None or tasks > 0:
            parts["cpu_tasks_s"] = round(tasks, 4)
        if spark is not None:
            from .runners.executor_cpu import executor_cpu

            executors = executor_cpu(spark, self.wall_ms, int(time.time() * 1000))
            if executors.seconds is not None:
                parts["cpu_executors_s"] = executors.seconds
            if executors.missing:
                missing["cpu_executors_s"] = executors.missing
        out: dict[str, Any] = {"cpu_s": round(sum(parts.values()), 4), **parts}
        if missing:
            out["cpu_missing"] = missing
        return out


def cpu_outside_process(metrics: Mapping[str, Any]) -> float:
    """The CPU-seconds a run's metrics measured outside the process that ran it (its Spark tasks' and
    executors')."""
    return sum(float(metrics.get(part) or 0.0) for part in CPU_PARTS[1:])
