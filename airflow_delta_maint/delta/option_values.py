"""Option values as they arrive from a command line, a rendered template or Python."""

from __future__ import annotations

from typing import Any


def as_bool(value: Any) -> bool:
    """A flag that may arrive as text ("True", "false", "1", "on", ...) or as a Python value."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
