"""Recording a job run in the maintenance run log, without ever failing the job."""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Sequence

from airflow_delta_maint.delta.health.run_log import append_runs, run_record

log = logging.getLogger("delta_maint")

#: Airflow's own task-context variables (the task runner exports them; spark-submit inherits them)
AIRFLOW_ENV = {"dag_id": "AIRFLOW_CTX_DAG_ID", "dag_run_id": "AIRFLOW_CTX_DAG_RUN_ID",
               "task_id": "AIRFLOW_CTX_TASK_ID", "try_number": "AIRFLOW_CTX_TRY_NUMBER",
               "map_index": "AIRFLOW_CTX_MAP_INDEX"}


def airflow_ids(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Airflow task instance a run belongs to, from Airflow's ``AIRFLOW_CTX_*`` variables."""
    env = os.environ if environ is None else environ
    return {key: env.get(var) or None for key, var in AIRFLOW_ENV.items()}


def record_run(uri: str, metrics: Mapping[str, Any], *, storage_options: Mapping[str, str] | None = None,
               spark_app_id: str | None = None, ids: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Append one row for this run to the run log at ``uri``; never raises.

    Returns:
        What goes into the metrics under ``history``: ``{"uri", "written": True, "version"}``, or
        ``{"uri", "written": False, "error"}`` when the run log could not be written (logged).
    """
    return record_runs(uri, [metrics], storage_options=storage_options, spark_app_id=spark_app_id, ids=ids)


def record_runs(uri: str, runs: Sequence[Mapping[str, Any]], *, storage_options: Mapping[str, str] | None = None,
                spark_app_id: str | None = None, ids: Mapping[str, Any] | None = None,
                app_ids: Sequence[str | None] | None = None) -> dict[str, Any]:
    """:func:`record_run` for several runs, in one append (a fleet's tables: one commit to the history, not one a
    job). ``app_ids``: each run's Spark application, when they differ (else ``spark_app_id`` for all)."""
    try:
        found = dict(ids if ids is not None else airflow_ids())
        apps = list(app_ids) if app_ids is not None else [spark_app_id] * len(runs)
        rows = [run_record(metrics, spark_app_id=app, **found) for metrics, app in zip(runs, apps)]
        result = append_runs(uri, rows, storage_options)
    except Exception as exc:  # the maintenance itself has happened: report, do not fail
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        log.warning("could not record the run in the maintenance history %s: %s", uri, error)
        return {"uri": uri, "written": False, "error": error}
    log.info("recorded %d run(s) in the maintenance history %s (version %d)", len(rows), uri, result.version)
    return {"uri": uri, "written": True, "version": result.version}
