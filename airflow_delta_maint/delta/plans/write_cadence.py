"""Whether another writer is at work on a table, from the newest commits' times: OPTIMIZE's choice
between rewriting all its bins at once (a quiet table) and landing them unit by unit (a busy one).

A writer is *active* when it committed at least :data:`MIN_WRITER_COMMITS` times within the last
:data:`WINDOW_S` seconds, over at least :data:`MIN_SPAN_S` seconds, and its newest commit is younger
than :data:`SILENCE_FACTOR` times the usual interval between those commits: it is expected to commit
again while a run works. A burst of appends (a batch job's, seconds long), a writer that has
stopped (its newest commit already older than a few of its intervals) or one that commits once an
hour leaves the table quiet. Maintenance commits (OPTIMIZE,
VACUUM, REORG) are nobody's writes and are not counted.

Reads at most :data:`MAX_COMMITS_READ` commit heads, newest first, and stops at the first commit
older than the window: a quiet table costs one read.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from airflow_delta_maint.delta.log.commit_time import commit_time
from airflow_delta_maint.delta.log.history import read_commit_info_head
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["ENOUGH_WRITER_COMMITS", "MAINTENANCE_OPERATIONS", "MIN_SPAN_S", "MIN_WRITER_COMMITS", "WINDOW_S",
           "WriteCadence", "read_write_cadence"]

#: how far back the newest commits are looked at
WINDOW_S = 900.0
#: writer commits within the window that make a cadence (two intervals at least)
MIN_WRITER_COMMITS = 3
#: the writer commits counted must spread over this long: a burst is one batch job, not a cadence
MIN_SPAN_S = 30.0
#: a writer whose newest commit is older than this many of its usual intervals has stopped
SILENCE_FACTOR = 3.0
#: the usual interval is taken as at least this long (commit times are in milliseconds, bursts share them)
MIN_INTERVAL_S = 1.0
MAX_COMMITS_READ = 25
#: enough writer commits for a median interval: reading stops there
ENOUGH_WRITER_COMMITS = 8
#: commits that write no data of their own (ours and other engines' maintenance)
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "REORG", "COMPUTE STATS"})


@dataclass(frozen=True)
class WriteCadence:
    """What the newest commits say about the table's writers."""

    writer_commits: int  # in the window
    newest_age_s: float | None  # of the newest writer commit in the window
    interval_s: float | None  # median interval between the writer commits in the window
    active: bool
    span_s: float = 0.0  # from the oldest to the newest writer commit counted

    def reason(self) -> str:
        if self.active:
            return (f"{self.writer_commits} writer commits in the last {WINDOW_S / 60:g} minutes, about one every "
                    f"{self.interval_s:.1f} s, the newest {self.newest_age_s:.1f} s ago")
        if self.writer_commits < MIN_WRITER_COMMITS:
            return f"{self.writer_commits} writer commits in the last {WINDOW_S / 60:g} minutes"
        if self.span_s < MIN_SPAN_S:
            return (f"{self.writer_commits} writer commits within {self.span_s:.1f} s: one burst of writes, "
                    "not a writer at work")
        return (f"the writer's newest commit is {self.newest_age_s:.1f} s old, more than {SILENCE_FACTOR:g} of its "
                f"intervals ({self.interval_s:.1f} s)")

    def metrics(self) -> dict[str, Any]:
        return {"writerCommitsInWindow": self.writer_commits, "windowSeconds": WINDOW_S,
                "newestWriterCommitAgeSeconds": None if self.newest_age_s is None else round(self.newest_age_s, 3),
                "writerIntervalSeconds": None if self.interval_s is None else round(self.interval_s, 3)}


def _commit_time_ms(storage: Storage, version: int) -> tuple[int | None, str]:
    """A commit's time (:func:`~airflow_delta_maint.delta.log.commit_time.commit_time`) and its
    operation; (None, "") when the commit is gone."""
    info = read_commit_info_head(storage, version)
    when = commit_time(storage, version, info)
    return when, str((info or {}).get("operation") or "").upper() if when is not None else ""


def read_write_cadence(storage: Storage, latest: int, now_ms: int | None = None) -> WriteCadence:
    """The cadence of the writers' commits up to version ``latest`` (see the module docstring)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    times: list[int] = []
    for version in range(latest, max(-1, latest - MAX_COMMITS_READ), -1):
        when, operation = _commit_time_ms(storage, version)
        if when is None or now - when > WINDOW_S * 1000:
            break
        if operation not in MAINTENANCE_OPERATIONS:
            times.append(when)
            if len(times) >= ENOUGH_WRITER_COMMITS:
                break
    if len(times) < MIN_WRITER_COMMITS:
        newest = (now - max(times)) / 1000 if times else None
        return WriteCadence(len(times), newest, None, False)
    times.sort()
    interval = max(MIN_INTERVAL_S, statistics.median(b - a for a, b in zip(times, times[1:])) / 1000)
    newest_age = max(0.0, (now - times[-1]) / 1000)
    span = (times[-1] - times[0]) / 1000
    return WriteCadence(len(times), newest_age, interval,
                        span >= MIN_SPAN_S and newest_age <= SILENCE_FACTOR * interval, span)
