"""How many threads read a fleet's tables on the worker: many where each read waits on an object store, one where
every table is on local disk (there a read hardly waits, and more threads only take turns at the interpreter's
lock: on two cores eight threads spent 65% more CPU reading 200 small logs than two, and two spent 40 to 60% more
than one, and were slower too)."""

from __future__ import annotations

from collections.abc import Iterable

from airflow_delta_maint.delta.storage.store import normalize_table_uri

__all__ = ["reading_threads"]


def reading_threads(tables: Iterable[str], threads: int) -> int:
    """``threads``, or one when every one of ``tables`` is a local path."""
    if all(normalize_table_uri(t).startswith("file://") for t in tables):
        return 1
    return max(1, threads)
