"""The jobs' runners, and running one parsed job.

Each job is defined once in :mod:`airflow_delta_maint.app.job_definitions` (its name, options, engines,
where it runs); its runner here defines:

- ``run(args, ctx) -> dict``: does the work and returns the job's metrics (merged into the
  common metrics object); raises ``DeltaError`` for bad input, before anything is written;
- optionally ``options_from(params)`` (its typed options), ``nothing_to_do(table, storage_options,
  options)`` (the check without Spark) and ``format_human(metrics)``.

:func:`execute_job` runs one of them the same way for every caller: the command line
(:mod:`~airflow_delta_maint.app.cli`), a run in the Airflow worker's process
(:mod:`~airflow_delta_maint.app.execution`) and a fleet (:mod:`~airflow_delta_maint.app.fleet`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.storage.store_calls import counting

from ..context import JobContext
from ..environment_errors import ERROR_TYPE, describe
from ..metrics import base_metrics, finish
from ..run_cpu import RunCpu
from ..run_history import record_run
from ..settings import running

log = logging.getLogger("delta_maint")


def execute_job(job: str, module: Any, args: argparse.Namespace, ctx: JobContext,
                expect: Mapping[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """Run one parsed job on ``ctx.table``; never raises for the job's own failure.

    Returns (exit code, metrics): 0, 2 for bad input or a refused table (``DeltaError``), 1 for an
    unexpected error; a failed run's metrics carry ``status: failed`` and ``error``. The run is
    appended to the maintenance history when ``args.history_uri`` is set. ``expect``: what a plan expected of
    the run (``predicted_cpu_s``, ...), recorded beside what it measured (``cpu_s`` and its parts,
    :mod:`..run_cpu`).
    """
    metrics = base_metrics(job, ctx.table)
    cpu = RunCpu()
    if getattr(args, "engine", None) is not None:  # the jobs that take engine say which one ran
        metrics["engine"] = str(args.engine).strip().lower()
    code = 0
    try:
        # the job's settings, also for helpers that get no context; the storages it opens count into its counter
        with running(ctx.settings), counting(ctx.store_calls):
            metrics.update(module.run(args, ctx))
    except DeltaError as exc:
        metrics.update(status="failed", error=str(exc), error_type=type(exc).__name__)
        log.debug("%s failed: %s", job, exc)  # reported once, by the caller
        code = 2
    except Exception as exc:  # unexpected: still report it, then fail loudly
        problem = environment_problem(exc)
        if problem:  # one line that says what to configure; the whole trace goes to the log
            metrics.update(status="failed", error=problem, error_type=ERROR_TYPE)
            log.exception("%s failed: %s", job, problem)
        else:
            metrics.update(status="failed", error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__)
            log.exception("%s failed", job)
        code = 1
    if metrics.get("version_read") is None:
        metrics["version_read"] = ctx.version_read
    # the run's CPU: this process's (every thread), its Spark tasks' Python workers', its executors' JVM
    metrics.update(cpu.measure(ctx.started_spark))
    metrics.update(expect or {})
    metrics["storeCalls"] = ctx.store_calls.counts()
    metrics.update(planned_again(getattr(args, "seen_version", None), metrics.get("version_read")))
    finish(metrics)
    if getattr(args, "history_uri", None):  # never fails the run: a failure is logged and reported under "history"
        spark = ctx.started_spark
        metrics["history"] = record_run(args.history_uri, metrics, spark_app_id=application_id(spark))
    return code, metrics


def planned_again(seen: int | None, read: int | None) -> dict[str, Any]:
    """``version_checked`` (the version the submitting task's check saw) and ``replanned`` (the run read a newer
    one: a commit came in between, so it planned again rather than on what the check saw); nothing when the
    run was not submitted after a check."""
    if seen is None:
        return {}
    replanned = read is not None and read != seen
    if replanned:
        log.info("the table moved from version %s (the task's check) to %s: planned again on %s", seen, read, read)
    return {"version_checked": seen, "replanned": replanned}


def refused(job: str, table: str, exc: DeltaError) -> tuple[int, dict[str, Any]]:
    """(2, the metrics of a run refused before it started), e.g. for a setting it cannot take."""
    metrics = base_metrics(job, table)
    metrics.update(status="failed", error=str(exc), error_type=type(exc).__name__)
    return 2, finish(metrics)


def environment_problem(exc: BaseException) -> str | None:
    """One line when ``exc`` failed for a reason of the environment (see :mod:`..environment_errors`)."""
    pyspark = sys.modules.get("pyspark")
    text = "".join(traceback.format_exception(exc))
    return describe(text, getattr(pyspark, "__version__", None))


def application_id(spark: Any) -> str | None:
    """The Spark application's id (classic: the SparkContext's; Spark Connect: the server's ``spark.app.id``)."""
    if spark is None:
        return None
    try:
        from airflow_delta_maint.app.runners.connect_tasks import is_connect

        return spark.conf.get("spark.app.id", None) if is_connect(spark) else spark.sparkContext.applicationId
    except Exception:  # noqa: BLE001 - the id is a detail of the history record
        return None
