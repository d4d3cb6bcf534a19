"""Option values as operators receive them, the engine of a run, and the jobs the application offers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_bool", "available_jobs", "refuse_unknown_engine", "job_options", "resolve_engine"]

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.job_definitions import JOBS
from airflow_delta_maint.delta.option_values import as_bool
from airflow_delta_maint.hooks.provider_config import configured_engine


def available_jobs() -> list[str]:
    """The jobs the bundled application offers."""
    return list(JOBS)


def _flag(args: list[str], option: str, value: Any) -> None:
    if value is None or value == "":
        return
    if isinstance(value, bool):
        if value:
            args.append(option)
        return
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    args += [option, str(value)]


def job_options(options: Mapping[str, Any] | None) -> list[str]:
    """A job's options as command-line arguments: each name's flag (``--`` and the name with dashes), then its
    value; a True value gives the flag alone (False and None are left out, lists comma-joined)."""
    args: list[str] = []
    for key, value in (options or {}).items():
        _flag(args, "--" + str(key).replace("_", "-"), value)
    return args


def resolve_engine(engine: str | None) -> str:
    """The engine of a run: ``engine``, else ``[delta_maint] engine``, else native (see
    :func:`~airflow_delta_maint.hooks.provider_config.configured_engine`); an unknown one raises AirflowException."""
    try:
        return configured_engine(engine)
    except ValueError as exc:
        raise AirflowException(str(exc)) from None


def refuse_unknown_engine(engine: str | None) -> None:
    """Refuse an unknown ``engine`` when an operator is built; a templated one is checked once rendered."""
    if engine is not None and "{{" not in str(engine):
        resolve_engine(engine)
