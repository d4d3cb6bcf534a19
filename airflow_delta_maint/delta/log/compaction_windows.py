"""Log compaction windows: which ``<x>.<y>.compacted.json`` files are due, and what one holds.

The building blocks of :mod:`~airflow_delta_maint.delta.log.compaction` (which re-exports them):
the windows planned after the last checkpoint, a window's content (the reconciliation of its
commits alone, in a fixed order), its put-if-absent write, and the compaction files old enough
to clean up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from airflow_delta_maint.delta.errors import InconsistentStateError, InvalidArgumentError
from airflow_delta_maint.delta.log.compaction_options import window_length
from airflow_delta_maint.delta.log.listing import Compaction, LogListing, compaction_key
from airflow_delta_maint.delta.log.reconciliation import Replay, actions_problem
from airflow_delta_maint.delta.protocol.table_properties import TableProperties
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage
from airflow_delta_maint.delta.storage.write_once import put_once

__all__ = [
    "Window", "compaction_interval", "expired_compactions", "plan_windows", "reconcile_window",
    "render_window", "window_bytes", "write_window",
]


@dataclass(frozen=True, slots=True)
class Window:
    """The commit range ``[start, end]`` one compaction file covers."""

    start: int
    end: int

    @property
    def key(self) -> str:
        return compaction_key(self.start, self.end)


# -- planning -------------------------------------------------------------------------------------

def compaction_interval(configuration: Mapping[str, str], override: int | None = None) -> int:
    """The window length: ``override``, else the table property, else :data:`DEFAULT_INTERVAL`.

    Raises:
        InvalidArgumentError: the interval is not an integer of at least 2.
    """
    if override is None:
        return TableProperties(configuration).log_compaction_interval
    return window_length(override)


def plan_windows(latest: int, checkpoint_version: int | None, interval: int,
                 existing: Iterable[tuple[int, int]] = ()) -> tuple[list[Window], list[tuple[Window, tuple[int, int]]]]:
    """The windows to write after the last checkpoint, up to the latest published commit.

    Args:
        latest: the latest published commit version.
        checkpoint_version: the latest checkpoint's version (windows start after it), or None.
        interval: the window length (>= 2).
        existing: ``(start, end)`` of the compaction files already in the log.

    Returns:
        ``(missing, blocked)``: windows to write, ascending; and windows not written because
        they overlap an existing file of another range, each with that range. A window whose
        exact file exists is in neither. A window that would hold a single commit is not planned.
    """
    if interval < 2:
        raise InvalidArgumentError(f"invalid interval {interval}: a compaction window must span at least 2 commits")
    floor = checkpoint_version + 1 if checkpoint_version is not None else 0
    ranges = sorted(set(existing))
    missing: list[Window] = []
    blocked: list[tuple[Window, tuple[int, int]]] = []
    first = max(interval, -(-floor // interval) * interval)
    for end in range(first, latest + 1, interval):
        start = max(end - interval + 1, floor)
        if start >= end:
            continue
        if (start, end) in ranges:
            continue
        overlap = next(((s, e) for s, e in ranges if s <= end and e >= start), None)
        if overlap is not None:
            blocked.append((Window(start, end), overlap))
        else:
            missing.append(Window(start, end))
    return missing, blocked


# -- content --------------------------------------------------------------------------------------

def reconcile_window(commits: Iterable[Sequence[Mapping[str, Any]]], root: str = "") -> list[dict]:
    """Reconcile the actions of consecutive commits, oldest first, into a compaction's lines.

    Args:
        commits: each commit's actions, in version order.
        root: the table root, so that the spellings of one file path reconcile as one.

    Returns:
        The actions in a fixed order: protocol, metaData, txn (by appId), domainMetadata (by
        domain), remove (by path), add (by path). A file's newest action wins; removes and
        domain tombstones are kept.
    """
    replay = Replay(root=root)
    for n, actions in enumerate(commits):
        replay.apply_commit(actions, f"commit {n} of the window")
    protocol, metadata, txns, domains, files = (replay.protocol, replay.metadata, replay.txns, replay.domains,
                                                replay.files)
    out: list[dict] = []
    if protocol is not None:
        out.append({"protocol": protocol})
    if metadata is not None:
        out.append({"metaData": metadata})
    out.extend({"txn": txns[app]} for app in sorted(txns))
    out.extend({"domainMetadata": domains[d]} for d in sorted(domains))
    ordered = sorted(files.items(), key=lambda kv: (kv[1][0] != "remove", kv[0]))
    out.extend({kind: action} for _, (kind, action) in ordered)
    problem = actions_problem(out, root)
    if problem:  # cannot happen for a valid replay; never write it if it does
        raise InconsistentStateError(f"refusing to write a log compaction file that is not a reconciled state: {problem}")
    return out


def render_window(actions: Iterable[Mapping[str, Any]]) -> bytes:
    """Newline-delimited JSON of the actions, compact and UTF-8."""
    return b"".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for a in actions)


def write_window(storage: Storage, window: Window, data: bytes) -> bool:
    """Create the window's file with put-if-absent. False when it already exists (a no-op)."""
    try:
        put_once(storage, window.key, data)
        return True
    except AlreadyExistsError:
        return False


def expired_compactions(compactions: Iterable[Compaction], checkpoint_version: int | None,
                        retention_ms: int, now_ms: int) -> list[Compaction]:
    """Compaction files that end at or before the checkpoint and are older than the retention."""
    if checkpoint_version is None:
        return []
    return [c for c in compactions if c.end <= checkpoint_version and c.file.mtime_ms < now_ms - retention_ms]


def window_bytes(listing: LogListing, window: Window) -> tuple[int, int | None]:
    """Total size of the window's commit files, and the first missing commit (or None)."""
    total = 0
    for v in range(window.start, window.end + 1):
        f = listing.commits.get(v)
        if f is None:
            return total, v
        total += f.size
    return total, None
