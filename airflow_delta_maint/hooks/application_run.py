"""One run of the bundled maintenance application, as both ways of starting it see it (spark-submit in
:mod:`~airflow_delta_maint.hooks.delta_maint`, a Spark Connect client in
:mod:`~airflow_delta_maint.hooks.spark_connect`): its command line, and the metrics its driver writes back."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta_maint.app.common_flags import JSON, METRICS_OUT, STORAGE_OPTION
from airflow_delta_maint.app.metrics import read_metrics


def application_args(
    job: str,
    table_uri: str,
    job_args: Sequence[str] = (),
    metrics_out: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """
    The application's command line: the job, the table, the job's options, then JSON output, the metrics' URI and
    the storage options (:mod:`~airflow_delta_maint.app.common_flags`).

    :param job: the job name (``optimize``, ``vacuum``, ``compact-log``, ``inspect``).
    :param table_uri: the table's path or URI.
    :param job_args: the job's own options.
    :param metrics_out: where the driver writes the metrics JSON.
    :param storage_options: object-store options for the table.
    """
    args = [job, table_uri, *[str(a) for a in job_args], JSON]
    if metrics_out:
        args += [METRICS_OUT, metrics_out]
    for key, value in (storage_options or {}).items():
        args += [STORAGE_OPTION, f"{key}={value}"]
    return args


def try_read_metrics(uri: str, storage_options: Mapping[str, str]) -> dict[str, Any] | None:
    """
    The metrics a run's driver wrote to ``uri``, or None when there are none to read (missing, partly
    written, or the object store refused): the caller then says how the run failed.

    :param uri: the metrics file's path or URI.
    :param storage_options: object-store options for reading it.
    """
    try:
        return read_metrics(uri, storage_options)
    except (OSError, ValueError, json.JSONDecodeError):
        return None
    except Exception:  # object-store errors: the metrics are missing, not the job's failure
        return None
