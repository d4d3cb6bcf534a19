"""What writers touched recently, so OPTIMIZE can leave it alone on a busy table.

A concurrent DELETE, UPDATE or MERGE fails when an OPTIMIZE commit lands between its read and its
commit and removes a file it read, or adds files to a partition it read: delta-spark's conflict
check treats every file a commit that is not a blind append adds as new data, whatever its
``dataChange``. Writers of a busy table mostly touch recent data: the files they just wrote and
the partitions they write to. Leaving those out of a run spares the writers:

- ``min_file_age_s``: files younger than this (their ``modificationTime``) are left out;
- ``recent_commits``: partitions any of the newest N commits changed (an ``add`` or ``remove``
  with ``dataChange=true``: appends, and the deletion vectors of DELETE, UPDATE and MERGE) are
  left out. An unpartitioned or liquid-clustered table is one partition.

Decided from the log alone; :func:`leave_out` gives a snapshot view without those files to plan from.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.listing import list_log, read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.plans.auto_compaction import PartitionKey, partition_key, partition_label

__all__ = ["LeftOut", "leave_out", "recently_written_partitions"]


@dataclass
class LeftOut:
    """What :func:`leave_out` took out of the plan, for the metrics."""

    young_files: int = 0
    recent_partitions: list[str] = field(default_factory=list)
    recent_partition_files: int = 0

    @property
    def any(self) -> bool:
        return bool(self.young_files or self.recent_partition_files)

    def metrics(self) -> dict[str, Any]:
        return {"youngFilesLeftOut": self.young_files, "recentPartitionsLeftOut": self.recent_partitions,
                "recentPartitionFilesLeftOut": self.recent_partition_files}


def recently_written_partitions(snapshot: TableHeader, commits: int, whole_table: bool = False) -> set[PartitionKey]:
    """Partitions the newest ``commits`` commits (up to the snapshot's version) changed data in."""
    if commits <= 0:
        return set()
    lowest = max(0, snapshot.version - commits + 1)
    present = set(list_log(snapshot.storage, lowest).commits)
    out: set[PartitionKey] = set()
    for version in range(snapshot.version, lowest - 1, -1):
        if version not in present:  # cleaned up: nothing to tell about it
            continue
        for action in read_commit(snapshot.storage, version):
            body = action.get("add") or action.get("remove")
            if body is not None and body.get("dataChange", True):
                out.add(() if whole_table else partition_key(body.get("partitionValues")))
    return out


def leave_out(snapshot: Snapshot, *, min_file_age_s: float | None = None, recent_commits: int | None = None,
              whole_table: bool = False, now_ms: int | None = None) -> tuple[Snapshot, LeftOut]:
    """A view of ``snapshot`` without the young files and recently written partitions (see the
    module docstring), and what was left out. The view shares everything but ``files``."""
    if min_file_age_s is not None and min_file_age_s < 0:
        raise InvalidArgumentError(f"min file age must not be negative, got {min_file_age_s}")
    if recent_commits is not None and recent_commits < 0:
        raise InvalidArgumentError(f"recent commits must not be negative, got {recent_commits}")
    left = LeftOut()
    files = snapshot.files
    if not files.num_rows or not (min_file_age_s or recent_commits):
        return snapshot, left
    keep = np.ones(files.num_rows, dtype=bool)
    if min_file_age_s:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        mtime = files.column("modificationTime").fill_null(0).to_numpy(zero_copy_only=False)
        young = mtime > now - int(min_file_age_s * 1000)
        left.young_files = int(young.sum())
        keep &= ~young
    if recent_commits:
        recent = recently_written_partitions(snapshot, recent_commits, whole_table)
        if recent:
            keys = [() if whole_table else partition_key(pv) for pv in files.column("partitionValues").to_pylist()]
            hit = np.fromiter((k in recent for k in keys), dtype=bool, count=len(keys))
            left.recent_partition_files = int((hit & keep).sum())
            left.recent_partitions = sorted(partition_label(k) for k in recent)
            keep &= ~hit
    if keep.all():
        return snapshot, left
    view = copy.copy(snapshot)
    view.files = files.filter(pa.array(keep))
    return view, left
