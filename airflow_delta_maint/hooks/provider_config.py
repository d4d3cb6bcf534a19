"""The provider's own Airflow configuration section, ``[delta_maint]``."""

from __future__ import annotations

SECTION = "delta_maint"


def get_option(option: str) -> str | None:
    """``[delta_maint] <option>`` (``AIRFLOW__DELTA_MAINT__<OPTION>``), stripped; None when unset or empty."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # pragma: no cover - Airflow without the task SDK's configuration
        from airflow.configuration import conf  # type: ignore[no-redef]
    value = conf.get(SECTION, option, fallback=None)
    return (str(value).strip() or None) if value is not None else None


def configured_execution(explicit: str | None, allowed: tuple[str, ...]) -> str:
    """Where a maintenance task runs: ``explicit`` (an operator's ``execution``), else
    ``[delta_maint] execution``, else ``"spark"``; a configured value outside ``allowed`` (a fleet
    has no ``"local"``) means ``"auto"`` for ``"local"`` and raises otherwise."""
    if explicit is not None and str(explicit).strip():
        return str(explicit).strip().lower()
    value = (get_option("execution") or "spark").lower()
    if value not in allowed and value == "local" and "auto" in allowed:
        return "auto"
    if value not in allowed:
        raise ValueError(f"[delta_maint] execution must be one of {', '.join(allowed)}, got {value!r}")
    return value


def configured_engine(explicit: str | None) -> str:
    """Who does a maintenance task's data work: ``explicit`` (an operator's ``engine``), else
    ``[delta_maint] engine``, else ``"native"``; an unknown name raises ``ValueError``."""
    from airflow_delta_maint.app.engines import ENGINES, normalize
    from airflow_delta_maint.delta.errors import InvalidArgumentError

    chosen = explicit if explicit is not None and str(explicit).strip() else get_option("engine")
    try:
        return normalize(chosen)
    except InvalidArgumentError:
        where = "engine" if explicit is not None and str(explicit).strip() else "[delta_maint] engine"
        raise ValueError(f"{where} must be one of {', '.join(ENGINES)}, got {chosen!r}") from None
