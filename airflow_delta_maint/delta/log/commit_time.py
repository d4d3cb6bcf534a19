"""When each commit happened: the one reader of commit timestamps.

:func:`commit_info_time` and :func:`commit_time` give one commit's own time (in-commit timestamp,
else commitInfo's, else the file's): the newest commit's time of a state, the writers' cadence, the
last VACUUM's start. The times of a run of commits, which VACUUM and expired-log cleanup compare
with a cut-off (:func:`commit_times`, :func:`latest_commit_at_or_before`), follow the table's
setting: in-commit timestamps where the table has them (from their enablement version on, per
``delta.enableInCommitTimestamps``), else the commit files' modification times, each raised to
one millisecond past the previous commit's where it would be earlier or equal (as delta-spark's
history does, so times only grow).
"""

from __future__ import annotations

from typing import Any, Mapping

from airflow_delta_maint.delta.log.listing import LogListing, commit_key, list_log, parse_json_lines
from airflow_delta_maint.delta.protocol.table_properties import TableProperties
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["commit_info_time", "commit_time", "commit_times", "in_commit_timestamp", "latest_commit_at_or_before"]


def commit_info_time(info: Mapping[str, Any] | None) -> int | None:
    """The time a commitInfo gives its commit: the in-commit timestamp, else its ``timestamp``
    (None when it has neither as a number)."""
    if not info:
        return None
    when = info.get("inCommitTimestamp") or info.get("timestamp")
    return int(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None


def commit_time(storage: Storage, version: int, info: Mapping[str, Any] | None) -> int | None:
    """A commit's own time: its commitInfo's (``info``, see :func:`commit_info_time`), else the
    commit file's modification time; None when the commit is gone."""
    when = commit_info_time(info)
    if when is not None:
        return when
    try:
        return storage.head(commit_key(version)).mtime_ms
    except FileNotFoundError:
        return None


def in_commit_timestamp(storage: Storage, version: int) -> int | None:
    """The ``inCommitTimestamp`` of commit ``version`` (None when it has none or is gone)."""
    try:
        for action in parse_json_lines(storage.read(commit_key(version)), commit_key(version)):
            info = action.get("commitInfo")
            if info is not None:
                ts = info.get("inCommitTimestamp")
                return int(ts) if ts is not None else None
    except FileNotFoundError:
        return None
    return None


def commit_times(storage: Storage, listing: LogListing, configuration: Mapping[str, str],
                 until: int | None = None, stop_after_ms: int | None = None) -> dict[int, int]:
    """Each version's time in ms, for versions with a commit or checkpoint file (up to ``until``;
    with ``stop_after_ms``, up to the first version newer than that: times only grow).

    In-commit timestamps count from their enablement version on; earlier versions (and a commit
    without one) use the file's modification time (a checkpoint's where the commit is gone),
    raised to one ms past the previous version's time where it would be earlier or equal.
    """
    versions = set(listing.commits) | {c.version for c in listing.checkpoints}
    ict_from = TableProperties(configuration).ict_enablement_version
    out: dict[int, int] = {}
    previous: int | None = None
    for v in sorted(versions):
        if until is not None and v > until:
            break
        ts = None
        if ict_from is not None and v >= ict_from and v in listing.commits:
            ts = in_commit_timestamp(storage, v)
        if ts is None:
            if v in listing.commits:
                ts = listing.commits[v].mtime_ms
            else:
                ts = min(f.mtime_ms for c in listing.checkpoints if c.version == v for f in c.files)
            if previous is not None and ts <= previous:
                ts = previous + 1
        previous = ts if previous is None else max(previous, ts)
        out[v] = ts
        if stop_after_ms is not None and ts > stop_after_ms:
            break
    return out


def latest_commit_at_or_before(storage: Storage, cutoff_ms: int, configuration: Mapping[str, str] | None = None,
                               listing: LogListing | None = None) -> int | None:
    """The newest commit whose timestamp is at or before ``cutoff_ms`` (None when all are newer).

    Commit times are in-commit timestamps where the table has them enabled, else the commit
    files' modification times made strictly increasing, as delta-spark's history does.
    """
    listing = listing if listing is not None else list_log(storage)
    versions = sorted(listing.commits)
    if not versions:
        return None
    enablement = TableProperties(configuration or {}).ict_enablement_version
    if enablement is not None:
        start = enablement
        ict_versions = [v for v in versions if v >= start]
        if ict_versions:
            first = in_commit_timestamp(storage, ict_versions[0])
            if first is not None and first <= cutoff_ms:
                low, high = 0, len(ict_versions) - 1  # ict_versions[low] qualifies
                while low < high:
                    mid = (low + high + 1) // 2
                    ts = in_commit_timestamp(storage, ict_versions[mid])
                    if ts is not None and ts <= cutoff_ms:
                        low = mid
                    else:
                        high = mid - 1
                return ict_versions[low]
            versions = [v for v in versions if v < start]
    best = None
    previous = None
    for v in versions:
        ts = listing.commits[v].mtime_ms
        if previous is not None and ts <= previous:
            ts = previous + 1
        previous = ts
        if ts <= cutoff_ms:
            best = v
        else:
            break
    return best
