"""The jobs' command-line options as the operators build them, and the jobs the application offers."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Any

from airflow_delta_maint.app.jobs import JOB_MODULES


def available_jobs() -> list[str]:
    """The jobs the bundled application offers (registered and present), found without importing them."""
    found = []
    for name, module in JOB_MODULES.items():
        with contextlib.suppress(ModuleNotFoundError):
            if importlib.util.find_spec(module) is not None:
                found.append(name)
    return found


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


def _as_bool(value: Any) -> bool:
    """A flag that may arrive as a rendered template string ("True", "false", "1", ...)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
