"""Expired log cleanup: which files of ``_delta_log`` may go, and deleting them.

The rules, as the protocol's "Metadata Cleanup" section states them:

- The cut-off is midnight UTC of the day ``now - delta.logRetentionDuration`` (default 30 days)
  falls on. A commit's time is its in-commit timestamp from the version in-commit timestamps
  were enabled at, else its file's modification time, raised where needed so that a later
  version never looks older than an earlier one.
- The *cut-off commit* is the newest commit at or before the cut-off; the *boundary* is the
  newest complete checkpoint at or before it (with ``keep_versions``: at or before the oldest
  version to keep). The boundary's checkpoint and commit and everything after them stay;
  commits, checkpoints (every part, V2 files), ``.crc`` files and Hadoop checksum companions of
  older versions go, and so do log compaction files that start at or before the boundary.
- With no checkpoint at or before the cut-off commit, a checkpoint of that version is written
  first (not in a dry run), unless the table's ``checkpointProtection`` forbids it.
- Sidecars (``_delta_log/_sidecars``) that no remaining V2 checkpoint names go once they are
  older than the cut-off and more than a day old, so a checkpoint being written keeps them.
- ``checkpointProtection``: cleanup that stops before
  ``delta.requireCheckpointProtectionBeforeVersion`` may not write a checkpoint (the
  protocol's exception a: no checkpoint written, none after the boundary erased); no
  checkpoint is ever written below that version.
- ``delta.enableExpiredLogCleanup=false`` turns cleanup off.

Files are deleted oldest version first, so an interrupted run leaves a log whose remaining
versions are still readable.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from airflow_delta_maint.delta.errors import InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.commit_time import commit_times
from airflow_delta_maint.delta.protocol.table_properties import (ENABLE_EXPIRED_LOG_CLEANUP, LOG_RETENTION, TableProperties,
                                                                 parse_interval_ms)
from airflow_delta_maint.delta.log.listing import LOG_DIR, Checkpoint, LogListing, list_log, parse_json_lines, parse_listing
from airflow_delta_maint.delta.log.checkpoint_read import sidecar_key
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.features import Operation, check_checkpoint_allowed, check_supported, checkpoint_protection_version
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

log = logging.getLogger("delta_maint.log_cleanup")

__all__ = [
    "DEFAULT_LOG_RETENTION_MS", "LogCleanupPlan", "cleanup_expired_log", "commit_times",
    "check_retention_hours", "log_retention_ms", "plan_log_cleanup", "retention_hours_of",
]

DEFAULT_LOG_RETENTION_MS = 30 * 86_400_000
RETENTION_PROPERTY = LOG_RETENTION
ENABLE_PROPERTY = ENABLE_EXPIRED_LOG_CLEANUP
_DAY_MS = 86_400_000
_CRC = re.compile(r"^(\d{20})\.crc$")
_VERSIONED = re.compile(r"^(\d{20})\.")


def retention_hours_of(interval: str) -> float:
    """An interval such as ``"interval 30 days"`` or ``"720 hours"`` in hours (the form ``retention_hours``
    once took).

    Raises:
        InvalidArgumentError: the interval is not valid.
    """
    try:
        return parse_interval_ms(interval) / 3_600_000
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"invalid log retention {interval!r}: {exc}") from None


def check_retention_hours(retention_hours: float | None) -> None:
    """Refuse a negative ``retention_hours`` (before the table is read)."""
    if retention_hours is not None and not retention_hours >= 0:
        raise InvalidArgumentError(f"retention_hours must not be negative, got {retention_hours:g}")


def log_retention_ms(configuration: dict[str, str], retention_hours: float | None = None) -> int:
    """The log retention in ms: ``retention_hours`` when given, else the table's ``delta.logRetentionDuration``,
    else 30 days.

    Raises:
        InvalidArgumentError: a negative ``retention_hours``.
    """
    if retention_hours is not None:
        check_retention_hours(retention_hours)
        return int(retention_hours * 3_600_000)
    return TableProperties(configuration).log_retention_ms


@dataclass
class LogCleanupPlan:
    """What one cleanup run does.

    Attributes:
        version: the latest version when planned.
        cutoff_ms: midnight UTC before ``now - retention``; log files of versions at or before it may go.
        cutoff_commit: the newest commit at or before the cut-off (None: none is that old).
        boundary: the checkpoint version everything older than is deleted (None: nothing to do).
        checkpoint_to_write: a checkpoint version to write first (no usable one exists).
        files: the log files to delete, oldest version first.
        reason: why nothing is deleted, when nothing is.
    """

    version: int
    now_ms: int
    retention_ms: int
    cutoff_ms: int
    cutoff_commit: int | None = None
    boundary: int | None = None
    checkpoint_to_write: int | None = None
    protected_before: int | None = None
    keep_versions: tuple[int, ...] = ()
    files: list[FileInfo] = field(default_factory=list)
    reason: str | None = None

    def counts(self) -> dict[str, int]:
        """How many commit, checkpoint, compaction, checksum and sidecar files the plan deletes."""
        out = {"numCommitFilesDeleted": 0, "numCheckpointFilesDeleted": 0, "numCompactionFilesDeleted": 0,
               "numChecksumFilesDeleted": 0, "numSidecarFilesDeleted": 0}
        for f in self.files:
            name = f.key[len(LOG_DIR):]
            if name.startswith("_sidecars/"):
                out["numSidecarFilesDeleted"] += 1
            elif name.startswith(".") or name.endswith(".crc"):
                out["numChecksumFilesDeleted"] += 1
            elif ".compacted." in name:
                out["numCompactionFilesDeleted"] += 1
            elif ".checkpoint." in name:
                out["numCheckpointFilesDeleted"] += 1
            else:
                out["numCommitFilesDeleted"] += 1
        return out


def _midnight(ms: int) -> int:
    return ms - ms % _DAY_MS


def _checkpoint_at_or_before(listing: LogListing, version: int) -> Checkpoint | None:
    found = None
    for c in listing.checkpoints:
        if c.version <= version:
            found = c
    return found


def _deletable(files: Iterable[FileInfo], boundary: int) -> list[tuple[int, FileInfo]]:
    """Log files (top level of ``_delta_log``) that belong to versions before ``boundary``:
    commits, checkpoints, version checksums, compaction files starting at or before it, and
    the Hadoop ``.name.crc`` companions of all of them."""
    listing = parse_listing(files)
    out: list[tuple[int, FileInfo]] = []
    for v, f in listing.commits.items():
        if v < boundary:
            out.append((v, f))
    for c in listing.checkpoints:
        if c.version < boundary:
            out.extend((c.version, f) for f in c.files)
    for comp in listing.compactions:
        if comp.start <= boundary:
            out.append((comp.start, comp.file))
    return out


def _new_plan(snapshot: TableHeader, retention_hours: float | None, now_ms: int | None,
              keep_versions: Iterable[int]) -> LogCleanupPlan:
    """The plan's clock, retention, cut-off, protection and versions to keep, checked."""
    configuration = dict(snapshot.metadata.configuration)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    retention_ms = log_retention_ms(configuration, retention_hours)
    plan = LogCleanupPlan(version=snapshot.version, now_ms=now, retention_ms=retention_ms,
                          cutoff_ms=_midnight(now - retention_ms),
                          protected_before=checkpoint_protection_version(snapshot.protocol, snapshot.metadata))
    keep = tuple(sorted(set(int(v) for v in keep_versions)))
    plan.keep_versions = keep
    if keep and (keep[0] < 0 or keep[-1] > snapshot.version):
        raise InvalidArgumentError(f"versions to keep must be between 0 and {snapshot.version}, got {list(keep)}")
    return plan


def _oldest_version_to_keep(plan: LogCleanupPlan, listing: LogListing, cutoff_commit: int) -> int:
    """The version the boundary must be at or before: the cut-off commit, or the oldest version
    to keep when that is older.

    Raises:
        InvalidArgumentError: a version to keep is no longer readable.
    """
    target = cutoff_commit
    keep = plan.keep_versions
    if keep:
        earliest = _earliest_readable(listing)
        if keep[0] < earliest:
            raise InvalidArgumentError(
                f"version {keep[0]} cannot be kept readable: the log starts at version {earliest} "
                "(earlier versions were cleaned up)")
        target = min(target, keep[0])
    return target


def _choose_boundary(plan: LogCleanupPlan, listing: LogListing, target: int) -> int | None:
    """The boundary checkpoint at or before ``target``, or ``target`` itself with a checkpoint to
    write first; None (with the plan's reason) when checkpointProtection forbids writing one."""
    checkpoint = _checkpoint_at_or_before(listing, target)
    if checkpoint is not None:
        return checkpoint.version
    protected = plan.protected_before
    if protected is not None and target < protected:
        plan.reason = (f"no checkpoint at or before version {target}, and checkpointProtection forbids writing "
                       f"one before version {protected} (delta.requireCheckpointProtectionBeforeVersion)")
        return None
    plan.checkpoint_to_write = target
    return target


def _log_files_before(entries: list[FileInfo], boundary: int) -> list[FileInfo]:
    """The log files of versions before ``boundary`` with their version checksums and Hadoop
    checksum companions, oldest version first."""
    files = _deletable(entries, boundary)
    present = {f.key for f in entries}
    companions = []
    for _, f in files:
        folder, _, name = f.key.rpartition("/")
        crc = f"{folder}/.{name}.crc"
        if crc in present:
            companions.append(crc)
    for f in entries:  # version checksums: <v>.crc and their companions
        name = f.key[len(LOG_DIR):]
        m = _CRC.match(name)
        if m and int(m.group(1)) < boundary:
            files.append((int(m.group(1)), f))
            crc = f"{LOG_DIR}.{name}.crc"
            if crc in present:
                companions.append(crc)
    by_key = {f.key: f for f in entries}
    for key in companions:
        m = _VERSIONED.match(key[len(LOG_DIR) + 1:])
        files.append((int(m.group(1)) if m else boundary, by_key[key]))
    files.sort(key=lambda item: (item[0], item[1].key))
    return [f for _, f in files]


def plan_log_cleanup(storage: Storage, *, retention_hours: float | None = None, now_ms: int | None = None,
                     keep_versions: Iterable[int] = (), snapshot: TableHeader | None = None) -> LogCleanupPlan:
    """Decide which log files may go (nothing is written or deleted).

    Args:
        storage: the table's storage.
        retention_hours: the log retention in hours, overriding ``delta.logRetentionDuration``.
        now_ms: the clock (default: now).
        keep_versions: versions that must stay readable: the boundary is at or before the oldest.
        snapshot: the latest snapshot, when already loaded.

    Raises:
        InvalidArgumentError: a bad retention, or a version to keep that is newer than the table
            or no longer readable.
        UnsupportedFeatureError: the table uses a feature cleanup does not support.
    """
    snapshot = snapshot if snapshot is not None else Snapshot.load(storage, paths_only=True)
    check_supported(snapshot.protocol, Operation.CLEANUP_LOG, snapshot.metadata)
    plan = _new_plan(snapshot, retention_hours, now_ms, keep_versions)
    if not snapshot.metadata.properties.expired_log_cleanup:
        plan.reason = f"expired log cleanup is turned off ({ENABLE_PROPERTY}=false)"
        return plan

    entries = list(storage.list_from(LOG_DIR))
    listing = parse_listing(entries)
    times = commit_times(storage, listing, dict(snapshot.metadata.configuration), until=snapshot.version,
                         stop_after_ms=plan.cutoff_ms)
    old = [v for v, ts in times.items() if ts <= plan.cutoff_ms and v in listing.commits]
    plan.cutoff_commit = max(old) if old else None
    if plan.cutoff_commit is None:
        plan.reason = (f"no commit is older than the cut-off "
                       f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(plan.cutoff_ms / 1000))}")
        return plan
    boundary = _choose_boundary(plan, listing, _oldest_version_to_keep(plan, listing, plan.cutoff_commit))
    if boundary is None:
        return plan
    plan.boundary = boundary
    plan.files = _log_files_before(entries, boundary)
    plan.files.extend(_expired_sidecars(storage, listing, boundary, plan.cutoff_ms, plan.now_ms))
    if not plan.files and plan.checkpoint_to_write is None:
        plan.reason = f"nothing before version {boundary} is left in the log"
    return plan


def _earliest_readable(listing: LogListing) -> int:
    """The oldest version the log can still reconstruct."""
    starts = [c.version for c in listing.checkpoints]
    if 0 in listing.commits:
        starts.append(0)
    return min(starts) if starts else (min(listing.commits) if listing.commits else 0)


def _referenced_sidecars(storage: Storage, checkpoints: Iterable[Checkpoint]) -> set[str]:
    import pyarrow.parquet as pq

    keys: set[str] = set()
    for c in checkpoints:
        if c.kind != "v2":
            continue
        for f in c.files:
            if f.key.endswith(".json"):
                for action in parse_json_lines(storage.read(f.key), f.key):
                    if "sidecar" in action:
                        keys.add(sidecar_key(action["sidecar"]["path"]))
            else:
                import io

                pf = pq.ParquetFile(io.BytesIO(storage.read(f.key)))
                if "sidecar" in pf.schema_arrow.names:
                    for s in pf.read(columns=["sidecar"]).column(0).to_pylist():
                        if s and s.get("path"):
                            keys.add(sidecar_key(s["path"]))
    return keys


def _expired_sidecars(storage: Storage, listing: LogListing, boundary: int, cutoff_ms: int,
                      now_ms: int) -> list[FileInfo]:
    """Sidecar files no remaining V2 checkpoint names, older than the cut-off and than a day."""
    sidecars = list(storage.list_from(f"{LOG_DIR}_sidecars/"))
    if not sidecars:
        return []
    keep = _referenced_sidecars(storage, [c for c in listing.checkpoints if c.version >= boundary])
    young = _midnight(now_ms) - _DAY_MS
    out = []
    for f in sidecars:
        name = f.key.rpartition("/")[2]
        target = f"{LOG_DIR}_sidecars/{name[1:-4]}" if name.startswith(".") and name.endswith(".crc") else f.key
        if target in keep or f.mtime_ms >= cutoff_ms or f.mtime_ms >= young:
            continue
        out.append(f)
    return sorted(out, key=lambda f: f.key)


def cleanup_expired_log(storage: Storage, *, retention_hours: float | None = None, dry_run: bool = False,
                        now_ms: int | None = None, keep_versions: Iterable[int] = (),
                        snapshot: TableHeader | None = None,
                        checkpoint_writer: Callable[[int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Plan and run expired log cleanup; returns the run's metrics.

    ``snapshot`` needs only the protocol, metadata and version (a streamed state's shell will do);
    ``checkpoint_writer(version)`` writes the boundary checkpoint when one is missing (default:
    ``write_checkpoint`` of the loaded snapshot at that version).

    Metrics: ``status`` (``committed`` when files were deleted or a checkpoint written,
    ``skipped``, ``dry_run``), ``version_read``, ``cutoff_timestamp``, ``cutoffCommitVersion``,
    ``checkpointVersion`` (the boundary), ``checkpointWritten``, ``numLogFilesToDelete``,
    ``numLogFilesDeleted``, ``sizeOfLogFilesDeleted``, the counts of
    :meth:`LogCleanupPlan.counts`, ``log_files_to_delete`` (dry runs) and ``reason``.
    """
    snapshot = snapshot if snapshot is not None else Snapshot.load(storage, paths_only=True)
    plan = plan_log_cleanup(storage, retention_hours=retention_hours, now_ms=now_ms, keep_versions=keep_versions,
                            snapshot=snapshot)
    size = sum(f.size for f in plan.files)
    metrics: dict[str, Any] = {
        "version_read": plan.version, "version_committed": None,
        "log_retention_ms": plan.retention_ms, "cutoff_timestamp": plan.cutoff_ms,
        "cutoffCommitVersion": plan.cutoff_commit, "checkpointVersion": plan.boundary,
        "checkpointWritten": None, "numLogFilesToDelete": len(plan.files), "sizeOfLogFilesToDelete": size,
        "numLogFilesDeleted": 0, **{k: 0 for k in plan.counts()},
    }
    if plan.keep_versions:
        metrics["keep_versions"] = list(plan.keep_versions)
    if plan.boundary is None:
        metrics.update(status="skipped", reason=plan.reason)
        return metrics
    log.info("expired log cleanup of %s: cut-off %s, cut-off commit %s, keeping checkpoint %d and later; %d files",
             storage.root, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(plan.cutoff_ms / 1000)),
             plan.cutoff_commit, plan.boundary, len(plan.files))
    if dry_run:
        metrics.update(status="dry_run", log_files_to_delete=[f.key for f in plan.files],
                       checkpoint_to_write=plan.checkpoint_to_write, **plan.counts())
        for k in plan.counts():
            metrics[k] = 0
        metrics["files_to_delete_by_kind"] = plan.counts()
        return metrics
    if plan.checkpoint_to_write is not None:
        if checkpoint_writer is not None:
            check_checkpoint_allowed(snapshot.protocol, snapshot.metadata, plan.checkpoint_to_write)
            result = checkpoint_writer(plan.checkpoint_to_write)
        else:
            at = Snapshot.load(storage, plan.checkpoint_to_write)
            check_supported(at.protocol, Operation.CHECKPOINT, at.metadata)
            check_checkpoint_allowed(snapshot.protocol, snapshot.metadata, plan.checkpoint_to_write)
            result = write_checkpoint(at)
        metrics["checkpointWritten"] = result["version"]
        log.info("wrote a checkpoint of version %d (%s) before cleaning up", result["version"], result["path"])
        # the boundary must be a complete checkpoint now
        if not any(c.version == plan.checkpoint_to_write for c in list_log(storage, plan.checkpoint_to_write).checkpoints):
            raise MissingVersionError(f"the checkpoint of version {plan.checkpoint_to_write} is not complete; nothing deleted")
    deleted = 0
    for n, f in enumerate(plan.files, 1):
        try:
            storage.delete(f.key)
            deleted += 1
        except FileNotFoundError:
            pass
        if n % 1000 == 0:
            log.info("deleted %d / %d log files", n, len(plan.files))
    counts = plan.counts()
    metrics.update(status="committed" if deleted or metrics["checkpointWritten"] is not None else "skipped",
                   numLogFilesDeleted=deleted, sizeOfLogFilesDeleted=size, **counts)
    if not deleted and metrics["checkpointWritten"] is None:
        metrics["reason"] = plan.reason or "nothing to delete"
    log.info("deleted %d expired log files (%d bytes)", deleted, size)
    return metrics
