"""A table's health score (0-100) and its parts, from the table's log alone (no Spark).

The score starts at 100 and each part takes away ``weight x penalty`` points, where the penalty is
a number between 0 (no debt) and 1 (as bad as this part gets):

==================  ======  =================================================================
part                weight  penalty
==================  ======  =================================================================
small_files         30      excess / files, where excess = sum over partitions of
                            small - ceil(small_bytes / target): the files a full compaction of
                            each partition's small files would remove
statistics          10      (without + missing) / files: files readers cannot skip by their
                            statistics (none, or leaving out a column the table covers)
deletion_vectors    20      min(1, deleted_rows / rows / 0.2): deleted rows still stored,
                            full penalty at a fifth of the rows
tombstones          15      tombstone_bytes / (tombstone_bytes + live_bytes): storage kept
                            only for time travel, awaiting VACUUM (removed files whose path is
                            live, or that the last VACUUM's cut-off covers, do not count)
checkpoint          15      min(1, commits_since_checkpoint / (2 x checkpointInterval))
log_compaction      10      min(1, floor(uncovered / interval) / 4): complete log compaction
                            windows after the newest checkpoint or compaction file
==================  ======  =================================================================

``score = floor(100 - sum(weight x penalty) + 0.5)`` (halves round up). docs/health.md explains each choice.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.log.commit_time import commit_info_time
from airflow_delta_maint.delta.log.history import LogState, last_operation_version, read_commit_info_head
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.table_properties import (DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_LOG_COMPACTION_INTERVAL,
                                                                 InvalidTablePropertyError, TableProperties)
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["HealthInputs", "WEIGHTS", "health_inputs", "health_score", "records_and_deleted", "score_of", "vacuum_cutoff_ms"]

#: points each part can take away; they sum to 100
WEIGHTS: dict[str, int] = {"small_files": 30, "statistics": 10, "deletion_vectors": 20, "tombstones": 15,
                           "checkpoint": 15, "log_compaction": 10}
#: the deleted-row share at which the deletion-vector part reaches its full penalty
DV_FULL_PENALTY_RATIO = 0.2
#: complete uncompacted log windows at which the log-compaction part reaches its full penalty
COMPACTION_FULL_PENALTY_WINDOWS = 4


@dataclass(frozen=True)
class HealthInputs:
    """The numbers the score is computed from (all from one snapshot and its log listing)."""

    num_files: int
    size_bytes: int
    target_file_bytes: int
    num_small_files: int
    small_files_bytes: int
    excess_small_files: int  # sum over partitions of small - ceil(small_bytes / target)
    num_records: int  # rows in files whose statistics give numRecords
    deleted_rows: int  # deletion-vector cardinalities of those files
    tombstone_bytes: int
    commits_since_checkpoint: int
    checkpoint_interval: int
    uncovered_commits: int  # after the newer of the last checkpoint and the last compaction file
    compaction_interval: int
    files_without_stats: int = 0  # live files without statistics
    files_missing_stats_columns: int = 0  # live files whose statistics leave out a covered column


def records_and_deleted(files: pa.Table) -> tuple[int, int]:
    """The rows the files hold by their statistics, and the rows their deletion vectors delete."""
    if files.num_rows == 0:
        return 0, 0
    found = pc.extract_regex(files.column("stats"), r'"numRecords"\s*:\s*(?P<n>\d+)')
    valid = found.is_valid()
    records = pc.cast(pc.struct_field(found, "n"), pa.int64())
    dv = files.column("deletionVector")
    cardinality = pc.fill_null(pc.struct_field(dv, "cardinality"), 0) if dv.null_count < len(dv) \
        else pa.chunked_array([pa.array(np.zeros(len(dv), dtype=np.int64))])
    num_records = int(pc.sum(pc.if_else(valid, records, 0)).as_py() or 0)
    deleted = int(pc.sum(pc.if_else(valid, pc.cast(cardinality, pa.int64()), 0)).as_py() or 0)
    return num_records, deleted


def _excess_small_files(files: pa.Table, small: np.ndarray, sizes: np.ndarray, target: int) -> int:
    """Small files a full compaction would remove, partition by partition (OPTIMIZE never mixes partitions)."""
    if not small.any():
        return 0
    values = files.column("partitionValues").filter(pa.array(small)).to_pylist()
    per_partition: dict[tuple, list[int]] = {}
    for value, size in zip(values, sizes[small].tolist()):
        key = tuple(sorted((value or {}).items() if isinstance(value, dict) else (value or [])))
        entry = per_partition.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += int(size)
    return sum(count - math.ceil(total / max(1, target)) for count, total in per_partition.values())


def _readable(properties: TableProperties, name: str, default: int) -> int:
    """A property's value, or ``default`` where the value is bad: a score reads, it does not refuse."""
    try:
        return int(getattr(properties, name))
    except InvalidTablePropertyError:
        return default


def vacuum_cutoff_ms(storage: Storage, version: int, max_commits: int = 1000,
                     oldest_removal_ms: int | None = None) -> int | None:
    """Files removed before this time (epoch ms) are gone: the last completed VACUUM (within
    ``max_commits`` commits of ``version``) deleted them. Its ``VACUUM START`` timestamp minus the
    retention it ran with; None when there is no such VACUUM. ``oldest_removal_ms``: the oldest removal
    asked about; a VACUUM that ended before it deleted none of them, so the search stops at the commits
    before it (a writer's clock behind the VACUUM's can only count more bytes as still there)."""
    end = last_operation_version(storage, ["VACUUM END"], version, max_commits=max_commits,
                                 not_before_ms=oldest_removal_ms)
    if end is None:
        return None
    end_info = read_commit_info_head(storage, end) or {}
    if str((end_info.get("operationParameters") or {}).get("status", "COMPLETED")).upper() != "COMPLETED":
        return None
    start = last_operation_version(storage, ["VACUUM START"], end, max_commits=max_commits)
    info = read_commit_info_head(storage, start) if start is not None else None
    if not info:
        return None
    params = info.get("operationParameters") or {}
    retention = params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis"))
    when = commit_info_time(info)
    if when is None or retention is None:
        return None
    try:
        return int(when) - int(retention)
    except (TypeError, ValueError):
        return None


def health_inputs(snapshot: Snapshot, target_file_bytes: int, state: LogState | None = None) -> HealthInputs:
    """Collect the score's inputs from a snapshot (and the log state, when the snapshot is the latest).

    Args:
        snapshot: the table state.
        target_file_bytes: files below this size are small.
        state: the table's :class:`LogState`; when it is for a later version than the snapshot, or
            absent, the last compaction file is not counted (only the snapshot's checkpoint).
    """
    sizes = snapshot.files.column("size").to_numpy(zero_copy_only=False).astype(np.int64) \
        if snapshot.num_files else np.zeros(0, dtype=np.int64)
    is_small = sizes < target_file_bytes
    small = sizes[is_small]
    records, deleted = records_and_deleted(snapshot.files)
    without, missing = _needing_stats(snapshot)
    tombstone_bytes = 0
    if snapshot.tombstones.num_rows:
        # a removed logical file whose path is still live (say, re-added with a deletion vector)
        # keeps its bytes: VACUUM cannot delete them
        gone = pc.invert(pc.is_in(snapshot.tombstones.column("path"), snapshot.files.column("path")))
        # and files removed before the last VACUUM's cut-off are deleted already
        oldest = pc.min(snapshot.tombstones.column("deletionTimestamp")).as_py()
        cutoff = vacuum_cutoff_ms(snapshot.storage, snapshot.version, oldest_removal_ms=oldest)
        if cutoff is not None:
            removed_at = pc.fill_null(snapshot.tombstones.column("deletionTimestamp"), cutoff)
            gone = pc.and_(gone, pc.greater_equal(removed_at, cutoff))
        tombstone_bytes = int(pc.sum(pc.fill_null(snapshot.tombstones.column("size").filter(gone), 0)).as_py() or 0)
    return inputs_from_aggregates(
        snapshot, state, num_files=int(len(sizes)), size_bytes=int(sizes.sum()), target_file_bytes=int(target_file_bytes),
        num_small_files=int(len(small)), small_files_bytes=int(small.sum()),
        excess_small_files=_excess_small_files(snapshot.files, is_small, sizes, int(target_file_bytes)),
        num_records=records, deleted_rows=deleted, tombstone_bytes=tombstone_bytes, files_without_stats=without,
        files_missing_stats_columns=missing)


def _needing_stats(snapshot: Snapshot) -> tuple[int, int]:
    """(files without statistics, files missing a covered column); (0, 0) when the table's statistics
    settings cannot be read."""
    from airflow_delta_maint.delta.errors import DeltaError
    from airflow_delta_maint.delta.plans.compute_stats import count_needing, table_stats_columns

    try:
        columns = table_stats_columns(snapshot)
    except DeltaError:
        return 0, 0
    return count_needing(snapshot.files.column("stats").to_pylist(), columns) if snapshot.num_files else (0, 0)


def inputs_from_aggregates(snapshot: TableHeader, state: LogState | None, **files: int) -> HealthInputs:
    """The score's inputs from the files' aggregates (``num_files``, ``size_bytes``,
    ``target_file_bytes``, ``num_small_files``, ``small_files_bytes``, ``excess_small_files``,
    ``num_records``, ``deleted_rows``, ``tombstone_bytes``, ``files_without_stats``,
    ``files_missing_stats_columns``) and the log: ``snapshot`` needs its
    version, segment and metadata only (a streamed state's shell will do)."""
    checkpoint = snapshot.segment.checkpoint_version
    since_checkpoint = snapshot.version - (checkpoint if checkpoint is not None else -1)
    uncovered = since_checkpoint
    if state is not None and state.latest_version == snapshot.version:
        uncovered = state.commits_since_compaction
    properties = snapshot.metadata.properties
    return HealthInputs(
        **files, commits_since_checkpoint=int(since_checkpoint),
        checkpoint_interval=_readable(properties, "checkpoint_interval", DEFAULT_CHECKPOINT_INTERVAL),
        uncovered_commits=int(uncovered),
        compaction_interval=_readable(properties, "log_compaction_interval", DEFAULT_LOG_COMPACTION_INTERVAL))


def _penalties(h: HealthInputs) -> dict[str, tuple[float, dict[str, Any]]]:
    excess = max(0, h.excess_small_files)
    dv_ratio = h.deleted_rows / h.num_records if h.num_records else 0.0
    total = h.tombstone_bytes + h.size_bytes
    windows = h.uncovered_commits // max(1, h.compaction_interval)
    return {
        "small_files": (excess / h.num_files if h.num_files else 0.0,
                        {"num_files": h.num_files, "num_small_files": h.num_small_files,
                         "small_files_bytes": h.small_files_bytes, "target_file_bytes": h.target_file_bytes,
                         "excess_small_files": excess}),
        "statistics": ((h.files_without_stats + h.files_missing_stats_columns) / h.num_files if h.num_files else 0.0,
                       {"files_without_stats": h.files_without_stats,
                        "files_missing_stats_columns": h.files_missing_stats_columns}),
        "deletion_vectors": (min(1.0, dv_ratio / DV_FULL_PENALTY_RATIO),
                             {"num_records": h.num_records, "deleted_rows": h.deleted_rows,
                              "deleted_ratio": round(dv_ratio, 6)}),
        "tombstones": (h.tombstone_bytes / total if total else 0.0,
                       {"tombstone_bytes": h.tombstone_bytes, "live_bytes": h.size_bytes}),
        "checkpoint": (min(1.0, h.commits_since_checkpoint / (2 * h.checkpoint_interval)),
                       {"commits_since_checkpoint": h.commits_since_checkpoint,
                        "checkpoint_interval": h.checkpoint_interval}),
        "log_compaction": (min(1.0, windows / COMPACTION_FULL_PENALTY_WINDOWS),
                           {"uncovered_commits": h.uncovered_commits, "compaction_interval": h.compaction_interval,
                            "uncompacted_windows": windows}),
    }


def health_score(inputs: HealthInputs) -> dict[str, Any]:
    """The score and its parts.

    Returns:
        ``{"score": int 0-100, "parts": {name: {"weight", "penalty", "points_lost", ...inputs}},
        "inputs": {...}}``; ``penalty`` is rounded to 4 decimals, ``points_lost`` to 2.
    """
    parts: dict[str, Any] = {}
    lost = 0.0
    for name, (penalty, detail) in _penalties(inputs).items():
        weight = WEIGHTS[name]
        lost += weight * penalty
        parts[name] = {"weight": weight, "penalty": round(penalty, 4), "points_lost": round(weight * penalty, 2),
                       **detail}
    return {"score": _points(lost), "parts": parts, "inputs": asdict(inputs)}


def score_of(inputs: HealthInputs) -> int:
    """The score alone (what :func:`health_score` gives as ``score``, without its parts)."""
    return _points(sum(WEIGHTS[name] * penalty for name, (penalty, _) in _penalties(inputs).items()))


def _points(lost: float) -> int:
    return int(math.floor(max(0.0, min(100.0, 100.0 - lost)) + 0.5))
