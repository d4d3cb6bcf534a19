"""Log compaction: ``<x>.<y>.compacted.json`` files that stand in for the commits ``x..y``.

A reader that finds a compaction file may replay it instead of the commits it covers (see the
protocol's "Log Compaction Files" section). Its content is the action reconciliation of those
commits *alone*: the newest protocol and metaData, the newest txn per appId, the newest
domainMetadata per domain (tombstones with ``removed: true`` kept, since they must still cancel
a domain set before the window), every add not removed later in the window and every remove
(a remove may cancel an add from before the window). No commitInfo. Lines are in a fixed order,
so two writers of one window produce the same bytes.

Windows end at each multiple of the interval (table property ``delta.logCompactionInterval``,
else 5): ``y = k * interval``, ``x = max(y - interval + 1, last checkpoint + 1)``. Only published
commits are covered, a window never overlaps an existing compaction file and never reaches back
to or before a checkpoint. One run writes every window missing since the last checkpoint.

Files are created with put-if-absent: a file that is already there, or that a concurrent writer
created first, counts as done. Compaction files that end at or before the latest checkpoint and
are older than ``delta.logRetentionDuration`` are deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from airflow_delta_maint.delta.log.compaction_options import DEFAULT_MAX_WINDOW_BYTES, LogCompactionOptions, check_sizes
from airflow_delta_maint.delta.log.compaction_windows import (Window, compaction_interval, expired_compactions, plan_windows,
                                                              reconcile_window, render_window, window_bytes, write_window)
from airflow_delta_maint.delta.log.listing import (LogListing, build_segment, commit_key, list_log, parse_json_lines,
                                                   read_last_checkpoint_hint)
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.protocol.table_properties import (DEFAULT_LOG_COMPACTION_INTERVAL, LOG_COMPACTION_INTERVAL,
                                                                 LOG_RETENTION, TableProperties)
from airflow_delta_maint.delta.storage.store import Storage

__all__ = [
    "DEFAULT_INTERVAL", "DEFAULT_MAX_WINDOW_BYTES", "INTERVAL_PROPERTY",
    "RETENTION_PROPERTY", "Window", "compact_log", "compaction_interval", "expired_compactions",
    "nothing_to_do", "plan_windows", "windows_nothing_to_do", "reconcile_window", "render_window", "write_window",
]

INTERVAL_PROPERTY = LOG_COMPACTION_INTERVAL
RETENTION_PROPERTY = LOG_RETENTION
DEFAULT_INTERVAL = DEFAULT_LOG_COMPACTION_INTERVAL

log = logging.getLogger(__name__)


# -- the job --------------------------------------------------------------------------------------

def _retention_ms(configuration: Mapping[str, str]) -> int:
    return TableProperties(configuration).log_retention_ms


def _remove_distrusted(storage: Storage, snapshot: TableHeader) -> list[dict[str, Any]]:
    """Delete the compaction files the state found to disagree with their commits; returns them.

    Such a file misleads every reader that trusts it (other engines do); the commits it covers
    are all there, so removing it loses nothing.
    """
    distrusted = [d for d in snapshot.distrusted if d["file"].endswith(".compacted.json")]
    for d in distrusted:
        log.warning("%s: removing %s, which disagrees with the commits it covers: %s", storage.root, d["file"],
                    d["reason"])
    storage.delete_many([d["file"] for d in distrusted])
    return distrusted


def _checkpoint_if_due(snapshot: TableHeader, checkpoint_interval: int | None,
                       checkpoint_writer: Callable[[int], dict[str, Any]] | None,
                       now_ms: int) -> dict[str, Any] | None:
    """Write a checkpoint at the latest version when at least ``checkpoint_interval`` commits
    follow the last one; the writer's metrics, or None when none is due."""
    if checkpoint_interval is None:
        return None
    latest = snapshot.version
    base = snapshot.segment.checkpoint_version
    if latest - (base if base is not None else -1) < checkpoint_interval or base == latest:
        return None
    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint

    check_supported(snapshot.protocol, Operation.CHECKPOINT, snapshot.metadata)
    return checkpoint_writer(latest) if checkpoint_writer is not None else \
        write_checkpoint(snapshot.eager(), now_ms=now_ms)


@dataclass
class _WindowsRun:
    """The windows one run wrote, skipped or found already written, and what it read and wrote."""

    written: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    already: int = 0
    commits_read: int = 0
    actions_read: int = 0
    actions_out: int = 0
    bytes_out: int = 0

    def write(self, storage: Storage, listing: LogListing, window: Window, max_window_bytes: int) -> None:
        """Reconcile and write one missing window, or note why it is skipped (a commit missing,
        commit files over the size guard) or that a concurrent writer wrote it first."""
        size, gap = window_bytes(listing, window)
        if gap is not None:
            self.skipped.append({"start": window.start, "end": window.end, "reason": f"commit {gap} is missing"})
            return
        if size > max_window_bytes:
            self.skipped.append({"start": window.start, "end": window.end,
                                 "reason": f"commit files total {size} bytes, over max_window_bytes {max_window_bytes}"})
            return
        commits = [parse_json_lines(storage.read(commit_key(v)), commit_key(v))
                   for v in range(window.start, window.end + 1)]
        actions = reconcile_window(commits, storage.root)
        data = render_window(actions)
        self.commits_read += len(commits)
        self.actions_read += sum(1 for c in commits for a in c if "commitInfo" not in a)
        if write_window(storage, window, data):
            self.actions_out += len(actions)
            self.bytes_out += len(data)
            self.written.append({"start": window.start, "end": window.end, "numCommits": len(commits),
                                 "numActions": len(actions), "bytes": len(data)})
        else:
            self.already += 1

    def metrics(self) -> dict[str, Any]:
        """The windows' part of the job's metrics."""
        return {
            "windows_written": self.written,
            "windows_skipped": self.skipped,
            "numWindowsWritten": len(self.written),
            "numWindowsSkipped": len(self.skipped),
            "numWindowsAlreadyPresent": self.already,
            "numCommitsReconciled": self.commits_read,
            "numActionsReconciled": self.actions_read,
            "numActionsWritten": self.actions_out,
            "numBytesWritten": self.bytes_out,
        }


def compact_log(table: str | Storage, storage_options: Mapping[str, str] | None = None, *,
                interval: int | None = None, max_window_bytes: int = DEFAULT_MAX_WINDOW_BYTES,
                checkpoint_interval: int | None = None, now_ms: int | None = None,
                snapshot: TableHeader | None = None,
                checkpoint_writer: Callable[[int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write every missing compaction file since the last checkpoint, then clean up old ones.

    The job reads no file of the table: ``snapshot`` needs only the protocol, metadata, version,
    log segment and the compaction files found to disagree with their commits (a streamed state's
    shell will do; default: the loaded snapshot). ``checkpoint_writer(version)`` writes the
    checkpoint when one is due (default: ``write_checkpoint`` of that snapshot).

    Args:
        table: the table path or URI, or its Storage.
        storage_options: object-store options.
        interval: window length; default the table property ``delta.logCompactionInterval``, else 5.
        max_window_bytes: a window whose commit files total more is skipped and reported.
        checkpoint_interval: when given, first write a checkpoint at the latest version if at
            least this many commits follow the last one (windows then start after it).
        now_ms: the time (epoch ms) file ages are measured from; default: now.

    Returns:
        Metrics: ``status`` (``committed`` when anything was written or deleted, else
        ``skipped``), ``version_read``, ``version_committed`` (the checkpoint version or None),
        ``interval``, ``windows_written`` / ``windows_skipped`` (lists of ``{start, end, ...}``),
        ``numWindowsWritten``, ``numWindowsSkipped``, ``numWindowsAlreadyPresent``,
        ``numCommitsReconciled``, ``numActionsReconciled``, ``numActionsWritten``,
        ``numBytesWritten``, ``checkpoint`` (the checkpoint writer's metrics or None),
        ``numDistrustedFilesRemoved`` and ``distrustedFilesRemoved`` (compaction files that
        disagreed with their commits, each ``{file, reason}``), ``numFilesCleaned`` and
        ``filesCleaned``.

    Raises:
        UnsupportedFeatureError: the table uses a feature this job does not support.
        InvalidArgumentError: a bad interval, size limit or retention property.
    """
    check_sizes(max_window_bytes, checkpoint_interval)
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    snapshot = snapshot if snapshot is not None else Snapshot.load(storage)
    assert snapshot is not None
    check_supported(snapshot.protocol, Operation.COMPACT_LOG, snapshot.metadata)
    distrusted = _remove_distrusted(storage, snapshot)
    configuration = snapshot.metadata.configuration
    window_len = compaction_interval(configuration, interval)
    retention_ms = _retention_ms(configuration)
    checkpoint_metrics = _checkpoint_if_due(snapshot, checkpoint_interval, checkpoint_writer, now_ms)

    listing = list_log(storage)
    checkpoint_version = max((c.version for c in listing.checkpoints), default=None)
    missing, blocked = plan_windows(snapshot.version, checkpoint_version, window_len,
                                    ((c.start, c.end) for c in listing.compactions))
    run = _WindowsRun(skipped=[{"start": w.start, "end": w.end, "reason": f"overlaps existing compaction file {s}..{e}"}
                               for w, (s, e) in blocked])
    for window in missing:
        run.write(storage, listing, window, max_window_bytes)

    cleaned = [c.file.key for c in expired_compactions(listing.compactions, checkpoint_version, retention_ms, now_ms)]
    storage.delete_many(cleaned)
    checkpoint_written = checkpoint_metrics is not None and not checkpoint_metrics.get("already_existed")
    changed = bool(run.written) or checkpoint_written or bool(cleaned) or bool(distrusted)
    return {
        "status": "committed" if changed else "skipped",
        "version_read": snapshot.version,
        "version_committed": checkpoint_metrics["version"] if checkpoint_written and checkpoint_metrics else None,
        "interval": window_len,
        "max_window_bytes": max_window_bytes,
        "last_checkpoint_version": checkpoint_version,
        **run.metrics(),
        "checkpoint": checkpoint_metrics,
        "numDistrustedFilesRemoved": len(distrusted),
        "distrustedFilesRemoved": distrusted,
        "numFilesCleaned": len(cleaned),
        "filesCleaned": cleaned,
    }


# -- the cheap check ------------------------------------------------------------------------------

def _latest_configuration(storage: Storage, listing: LogListing, latest: int,
                          checkpoint_version: int | None) -> dict[str, str] | None:
    """The newest metaData's configuration, reading commits newest first, then the checkpoint.

    None when it cannot be found cheaply (then the caller decides conservatively).
    """
    segment = build_segment(storage, latest, listing=listing)
    for _, _, f in reversed(segment.replay):
        data = storage.read(f.key)
        if b'"metaData"' not in data:
            continue
        for action in reversed(parse_json_lines(data, f.key)):
            if action.get("metaData") is not None:
                return Metadata.from_action(action["metaData"]).configuration
    if segment.checkpoint is None:
        return None
    for f in segment.checkpoint.files:
        if f.key.endswith(".parquet"):
            # the metaData column alone, one row group at a time (remote files by byte ranges)
            from airflow_delta_maint.delta.log.checkpoint_read import other_actions

            for value in other_actions(storage, f.key, f.size, ("metaData",))["metaData"]:
                return {k: v for k, v in dict(value.get("configuration") or {}).items() if v is not None}
        else:
            for action in parse_json_lines(storage.read(f.key), f.key):
                if action.get("metaData") is not None:
                    return Metadata.from_action(action["metaData"]).configuration
    return None


def _distrusted(storage: Storage) -> bool:
    """Whether reading the latest state distrusts a derived log file, as ``Snapshot.load`` would
    say; streamed in bounded memory (the checkpoint's paths and deletion vectors, one row group at
    a time, see ``state_stream``), the whole snapshot loaded only when the stream cannot tell."""
    from airflow_delta_maint.delta.log.table_state import TableState, read_table

    def distrusts(state: TableState) -> bool:
        if not state.distrusted:
            for _ in state.scan([]):  # the stream checks the checkpoint as it reads it
                pass
        return bool(state.distrusted)

    return read_table(storage, distrusts, what="log compaction's check")


def nothing_to_do(table: str | Storage, storage_options: Mapping[str, str] | None,
                  options: LogCompactionOptions | None = None) -> str | None:
    """Why a compact-log run would do nothing, or None when it has work (cheap, no Spark): no
    compaction window is complete and missing (within the size guard), no checkpoint is due (see
    :func:`windows_nothing_to_do`) and, with ``cleanup_expired_log``, no expired log file waits. The
    one check the command line, the operators and the fleet all run."""
    options = options if options is not None else LogCompactionOptions()
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    reason = windows_nothing_to_do(storage, None, options)
    if reason and options.cleanup_expired_log:
        from airflow_delta_maint.delta.log.cleanup import plan_log_cleanup

        plan = plan_log_cleanup(storage)
        if plan.files or plan.checkpoint_to_write is not None:
            return None
        reason = f"{reason}; no expired log file to clean up" + (f" ({plan.reason})" if plan.reason else "")
    return reason


def windows_nothing_to_do(table: str | Storage, storage_options: Mapping[str, str] | None,
                          options: LogCompactionOptions | None = None) -> str | None:
    """Why no compaction window and no checkpoint is due, or None (cheap, no Spark).

    Lists the log from the last checkpoint and reads at most the newest metaData; when compaction
    files follow the checkpoint, the commits they cover are read too, so that one that disagrees
    with them (which the run removes) counts as work, and the checkpoint's paths and deletion
    vectors are streamed to check it (bounded memory, ``state_stream``). Cleaning up old compaction files is not
    considered: it happens on the next run that has work.

    Args:
        table: the table path or URI, or its Storage.
        storage_options: object-store options.
        options: the job's options (``interval``, ``max_window_bytes``, ``checkpoint_interval`` count here).
    """
    options = options if options is not None else LogCompactionOptions()
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    hint = read_last_checkpoint_hint(storage)
    listing = list_log(storage, hint) if hint is not None else None
    if listing is None or not any(c.version == hint for c in listing.checkpoints):
        listing = list_log(storage)
    if listing.latest_commit is None:
        return "the log has no commits after its last checkpoint"
    latest = listing.latest_commit
    checkpoint_version = max((c.version for c in listing.checkpoints), default=None)
    since = latest - (checkpoint_version if checkpoint_version is not None else -1)
    checkpoint_interval = options.checkpoint_interval
    if checkpoint_interval is not None and since >= checkpoint_interval and checkpoint_version != latest:
        return None
    if options.interval is not None:
        window_len = options.interval
    else:
        configuration = _latest_configuration(storage, listing, latest, checkpoint_version)
        if configuration is None:
            return None
        window_len = compaction_interval(configuration)
    max_bytes = options.max_window_bytes
    missing, _ = plan_windows(latest, checkpoint_version, window_len,
                              ((c.start, c.end) for c in listing.compactions))
    for window in missing:
        size, gap = window_bytes(listing, window)
        if gap is None and size <= max_bytes:
            return None
    if any(checkpoint_version is None or c.start > checkpoint_version for c in listing.compactions):
        # a compaction file that disagrees with its commits is work: the run removes it
        if _distrusted(storage):
            return None
    return (f"no log compaction window is due: {since} commits since the last checkpoint, "
            f"every window of {window_len} commits up to version {latest} is written or cannot be")

