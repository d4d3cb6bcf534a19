"""Where the maintenance history goes, seen from Airflow: configuration and runs decided on the worker."""

from __future__ import annotations

from typing import Any, Mapping

from airflow_delta_maint.app.common_flags import HISTORY_URI
from airflow_delta_maint.app.run_history import record_run

from .provider_config import SECTION, get_option

#: the provider's configuration section and option (``[delta_maint] history_uri``)
CONFIG_SECTION = SECTION
CONFIG_OPTION = "history_uri"


def configured_history_uri(explicit: str | None = None) -> str | None:
    """The maintenance history location: ``explicit`` (an operator's ``history_uri``), else
    ``[delta_maint] history_uri`` (``AIRFLOW__DELTA_MAINT__HISTORY_URI``), else None (not recorded)."""
    if explicit is not None and str(explicit).strip():
        return str(explicit).strip()
    return get_option(CONFIG_OPTION)


def task_ids(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task instance's dag/run/task/map/try ids from an Airflow context."""
    ti = (context or {}).get("ti") or (context or {}).get("task_instance")
    if ti is None:
        return {}
    map_index = getattr(ti, "map_index", None)
    return {"dag_id": getattr(ti, "dag_id", None), "dag_run_id": getattr(ti, "run_id", None),
            "task_id": getattr(ti, "task_id", None),
            "map_index": map_index if map_index is not None and map_index >= 0 else None,
            "try_number": getattr(ti, "try_number", None)}


def record_on_worker(uri: str, metrics: Mapping[str, Any], context: Mapping[str, Any] | None) -> dict[str, Any]:
    """Record a run decided on the worker (a skip): one run log row; never raises (see ``record_run``)."""
    return record_run(uri, metrics, ids=task_ids(context))


def history_args(uri: str | None) -> list[str]:
    """The application's options that make it record the run at ``uri``."""
    return [HISTORY_URI, uri] if uri else []
