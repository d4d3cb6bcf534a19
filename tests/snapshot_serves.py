"""Which tables the kept snapshots served: a job that started from another reader's read of the log."""

from __future__ import annotations

from typing import Any


def count_snapshot_serves(monkeypatch: Any) -> list[str]:
    """The root of each table whose kept snapshot served a reader, appended as it happens."""
    from airflow_delta_maint.delta.log import snapshot_cache

    served: list[str] = []
    real_get = snapshot_cache.SnapshotCache.get

    def counted(self: Any, storage: Any, *args: Any) -> Any:
        found = real_get(self, storage, *args)
        if found is not None:
            served.append(storage.root)
        return found

    monkeypatch.setattr(snapshot_cache.SnapshotCache, "get", counted)
    return served
