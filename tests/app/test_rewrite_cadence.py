"""OPTIMIZE's groups rewritten on threads see the job's own context."""

from __future__ import annotations

import threading

from airflow_delta_maint.app.rewrite.rewrite_cadence import rewrite_and_commit
from airflow_delta_maint.app.settings import Settings, current, running
from airflow_delta_maint.delta.storage.store_calls import StoreCalls, counting, current_calls


def test_groups_on_threads_count_into_the_jobs_counter_under_its_settings():
    """Each group runs on a thread of its own, yet counts its store calls into the job's counter (where its Spark
    tasks' calls are merged) and reads the job's settings, not the process's."""
    calls, settings = StoreCalls(), Settings()
    seen: list[tuple[int, StoreCalls, object]] = []
    committed: list[int] = []

    def rewrite(n: int, bins: list) -> int:
        seen.append((threading.get_ident(), current_calls(), current()))
        current_calls().add("get", 1, 10)
        return n

    with running(settings), counting(calls):
        rewrite_and_commit([object()] * 3, [[0], [1], [2]], rewrite, lambda n, r: committed.append(r), lambda: 2)
    assert sorted(committed) == [0, 1, 2]
    assert {t for t, _, _ in seen} - {threading.get_ident()}, "the groups ran on other threads"
    assert all(c is calls and s is settings for _, c, s in seen), seen
    assert calls.counts()["get"] == {"calls": 3, "bytes": 10 * 3, "objects": 0}
