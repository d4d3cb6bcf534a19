"""Cheap questions about a table's log: the latest version, the last checkpoint, compaction and
OPTIMIZE. Their cost grows with the commits since the last checkpoint (or the ones asked
about), never with the table's whole history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from airflow_delta_maint.delta.errors import NotADeltaTableError
from airflow_delta_maint.delta.log.commit_time import commit_info_time
from airflow_delta_maint.delta.log.listing import LOG_DIR, commit_key, list_log, read_last_checkpoint_hint
from airflow_delta_maint.delta.storage.store import Storage

_HEAD_BYTES = 64 * 1024
_TAIL = 1000


@dataclass(frozen=True)
class LogState:
    """Where a table's log stands, from a listing that starts at the last checkpoint."""

    latest_version: int
    last_checkpoint_version: int | None
    last_compaction_end: int | None  # end of the newest log compaction file after the checkpoint

    @property
    def commits_since_checkpoint(self) -> int:
        base = self.last_checkpoint_version if self.last_checkpoint_version is not None else -1
        return self.latest_version - base

    @property
    def commits_since_compaction(self) -> int:
        """Commits a reader must open one by one: after the newer of checkpoint and compaction."""
        ends = [v for v in (self.last_checkpoint_version, self.last_compaction_end) if v is not None]
        return self.latest_version - (max(ends) if ends else -1)


def gallop_latest(storage: Storage, known: int) -> int:
    """The latest commit at or above ``known`` (which exists), in O(log n) existence checks.

    Published commits above an existing one are contiguous, so an exponential probe followed by
    a binary search finds the last one.
    """
    step = 1
    while storage.exists(commit_key(known + step)):
        known += step
        step *= 2
    low, high = known, known + step  # low exists, high does not
    while high - low > 1:
        mid = (low + high) // 2
        if storage.exists(commit_key(mid)):
            low = mid
        else:
            high = mid
    return low


def log_state(storage: Storage) -> LogState:
    """Latest version, last checkpoint and last compaction, listing only the log's tail.

    With a ``_last_checkpoint`` hint the listing starts at the checkpoint. Without one, the
    latest commit is found by galloping existence checks from version 0 and the listing covers
    the last ``_TAIL`` versions, which holds any recent checkpoint or compaction file.
    """
    hint = read_last_checkpoint_hint(storage)
    if hint is not None:
        listing = list_log(storage, hint)
    else:
        top = gallop_latest(storage, 0) if storage.exists(commit_key(0)) else 0
        listing = list_log(storage, max(0, top - _TAIL))
    if not listing.commits and not listing.checkpoints:
        listing = list_log(storage, 0)
        if not listing.commits and not listing.checkpoints:
            raise NotADeltaTableError(f"not a Delta table (no commits in _delta_log): {storage.root}")
    latest = max([*listing.commits, *(c.version for c in listing.checkpoints)])
    checkpoint = max((c.version for c in listing.checkpoints), default=None)
    compaction = max((c.end for c in listing.compactions), default=None)
    return LogState(latest, checkpoint, compaction)


def latest_version_cheap(storage: Storage) -> tuple[int, int | None]:
    """The latest version and the ``_last_checkpoint`` version, without listing the log.

    Gallops existence checks upwards from the checkpoint the hint names (or from version 0), so
    the cost grows with the logarithm of the commits since that checkpoint, never with the
    size of ``_delta_log``. Falls back to :func:`log_state` when neither starting point exists.
    """
    hint = read_last_checkpoint_hint(storage)
    start = hint if hint is not None else 0
    if storage.exists(commit_key(start)):
        return gallop_latest(storage, start), hint
    state = log_state(storage)
    return state.latest_version, state.last_checkpoint_version


def read_commit_info_head(storage: Storage, version: int) -> dict | None:
    """The commitInfo of a commit, reading its first 64 KiB (the whole file only if needed)."""
    key = commit_key(version)
    try:
        data = storage.read_range(key, 0, _HEAD_BYTES)
    except FileNotFoundError:
        return None
    except Exception:  # some stores refuse a range past the end of a small object
        data = storage.read(key)
    lines = data.split(b"\n")
    complete = lines if len(data) < _HEAD_BYTES else lines[:-1]
    for line in complete:
        if b'"commitInfo"' in line:
            try:
                return json.loads(line).get("commitInfo")
            except ValueError:
                return None
    if len(data) >= _HEAD_BYTES:
        for line in storage.read(key).split(b"\n"):
            if b'"commitInfo"' in line:
                return json.loads(line).get("commitInfo")
    return None


def last_operation_version(storage: Storage, operations: Iterable[str], latest: int,
                           max_commits: int | None = None, stop_at: int = 0,
                           not_before_ms: int | None = None) -> int | None:
    """The newest version <= ``latest`` whose commitInfo operation is one of ``operations``.

    Scans backwards through at most ``max_commits`` commits (and not below ``stop_at``, nor past a commit
    whose commitInfo time is before ``not_before_ms``); returns None when none is found in that range or the
    older commits are gone.
    """
    wanted = {op.upper() for op in operations}
    lowest = max(stop_at, latest - max_commits + 1) if max_commits is not None else stop_at
    for version in range(latest, lowest - 1, -1):
        info = read_commit_info_head(storage, version)
        if info is None and not storage.exists(commit_key(version)):
            return None
        if info and str(info.get("operation", "")).upper() in wanted:
            return version
        when = commit_info_time(info)
        if not_before_ms is not None and when is not None and when < not_before_ms:
            return None
    return None


__all__ = ["LogState", "gallop_latest", "log_state", "latest_version_cheap", "last_operation_version", "read_commit_info_head", "LOG_DIR"]
