"""What ``inspect`` and the health score need of a table's files, as aggregates of its scan.

:func:`summarize_state` reads a table's state through its scan (the eager state's pieces in memory,
the streamed state's one row group at a time, in bounded memory) (the file actions' ``size``, ``stats``, ``partitionValues`` and deletion
vector; the tombstones' ``size`` and ``deletionTimestamp``) and keeps aggregates only: counts and
bytes, the size histogram, records and deleted rows, the files whose statistics are missing or
leave out a covered column, small files per partition (memory grows with
partitions, not files) and the tombstones (memory grows with them). Whether a tombstone's path is
still live needs a second pass over the live paths, only when there are tombstones. The numbers
are the inputs of :func:`~airflow_delta_maint.delta.health.score.inputs_from_aggregates`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.health.score import records_and_deleted, vacuum_cutoff_ms
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.plans.compute_stats import count_needing, table_stats_columns
from airflow_delta_maint.delta.protocol.schema import Column

__all__ = ["StateSummary", "summarize_state"]


@dataclass
class StateSummary:
    """Aggregates of the live files and tombstones of one state."""

    edges: list[int]
    num_files: int = 0
    size_bytes: int = 0
    num_small_files: int = 0
    small_files_bytes: int = 0
    dv_files: int = 0
    num_records: int = 0
    deleted_rows: int = 0
    bucket_files: list[int] = field(default_factory=list)
    bucket_bytes: list[int] = field(default_factory=list)
    num_tombstones: int = 0
    tombstone_total_bytes: int = 0
    tombstone_gone_bytes: int = 0
    per_partition: dict[tuple, list[int]] = field(default_factory=dict)
    #: files without statistics, and files whose statistics leave out a column the table covers
    #: (None when the table's statistics settings cannot be read)
    files_without_stats: int | None = 0
    files_missing_stats_columns: int | None = 0

    def excess_small_files(self, target: int) -> int:
        """Small files a full compaction would remove, partition by partition."""
        return sum(count - math.ceil(total / max(1, target)) for count, total in self.per_partition.values())


def _partition_keys(values: pa.Array) -> list[tuple]:
    """The partition of each row as the in-memory score keys it: its sorted (name, value) pairs."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_map(values.type):
        offsets = values.offsets.to_numpy(zero_copy_only=False)
        if len(values) and values.null_count == 0 and (np.diff(offsets) == 1).all():  # one partition column
            starts = pa.array(offsets[:-1], pa.int64())
            keys = values.keys.take(starts).to_pylist()
            items = values.items.take(starts).to_pylist()
            return [((k, v),) for k, v in zip(keys, items)]
    return [tuple(sorted((v or {}).items() if isinstance(v, dict) else (v or []))) for v in values.to_pylist()]


def summarize_state(state: TableHeader, small_file_bytes: int, edges: list[int]) -> StateSummary:
    """Stream ``state`` once (twice when it has tombstones) into a :class:`StateSummary`; the size
    histogram uses ``edges`` (ascending; a last bucket holds everything from the last edge on).

    Raises:
        StreamFallback: the streamed state cannot be vouched for.
    """
    out = StateSummary(list(edges), bucket_files=[0] * len(edges), bucket_bytes=[0] * len(edges))
    try:
        covered: list[Column] | None = table_stats_columns(state)
    except DeltaError:  # an unreadable statistics setting: the report still comes, without these counts
        covered = None
        out.files_without_stats = out.files_missing_stats_columns = None
    bounds = np.array(edges[1:], dtype=np.int64)
    tombstones: list[pa.Table] = []
    for kind, table in state.scan(["size", "stats", "partitionValues"], ["size", "deletionTimestamp"]):
        if kind == "remove":
            tombstones.append(table.select(["path", "size", "deletionTimestamp"]))
            continue
        sizes = pc.fill_null(table.column("size"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        out.num_files += len(sizes)
        out.size_bytes += int(sizes.sum())
        small = sizes < small_file_bytes
        out.num_small_files += int(small.sum())
        out.small_files_bytes += int(sizes[small].sum())
        buckets = np.searchsorted(bounds, sizes, side="right")
        out.bucket_files = [a + int(b) for a, b in zip(out.bucket_files, np.bincount(buckets, minlength=len(edges)))]
        out.bucket_bytes = [a + int(b) for a, b in
                            zip(out.bucket_bytes, np.bincount(buckets, weights=sizes, minlength=len(edges)).astype(np.int64))]
        out.dv_files += int(pc.sum(table.column("deletionVector").is_valid()).as_py() or 0)
        records, deleted = records_and_deleted(table)
        if covered is not None:
            without, missing = count_needing(table.column("stats").to_pylist(), covered)
            out.files_without_stats = (out.files_without_stats or 0) + without
            out.files_missing_stats_columns = (out.files_missing_stats_columns or 0) + missing
        out.num_records += records
        out.deleted_rows += deleted
        if small.any():
            parts = _partition_keys(table.column("partitionValues").filter(pa.array(small)))
            for key, size in zip(parts, sizes[small].tolist()):
                entry = out.per_partition.setdefault(key, [0, 0])
                entry[0] += 1
                entry[1] += int(size)
    if tombstones:
        removed = pa.concat_tables(tombstones)
        out.num_tombstones = removed.num_rows
        out.tombstone_total_bytes = int(pc.sum(removed.column("size")).as_py() or 0) if removed.num_rows else 0
        if removed.num_rows:
            out.tombstone_gone_bytes = _gone_bytes(state, removed)
    return out


def _gone_bytes(state: TableHeader, removed: pa.Table) -> int:
    """Bytes of tombstones whose path is no longer live and that the last VACUUM has not deleted yet."""
    paths = removed.column("path").combine_chunks()
    lookup = pa.array(sorted(set(paths.to_pylist()) - {None}), pa.string())
    live = np.zeros(len(paths), dtype=bool)
    for kind, table in state.scan([]):
        if kind != "add":
            continue
        hit = table.column("path").filter(pc.fill_null(pc.is_in(table.column("path"), value_set=lookup), False))
        if len(hit):
            live |= pc.fill_null(pc.is_in(paths, value_set=hit.combine_chunks() if isinstance(hit, pa.ChunkedArray)
                                          else hit), False).to_numpy(zero_copy_only=False)
    gone = ~live
    oldest = pc.min(removed.column("deletionTimestamp")).as_py()
    cutoff = vacuum_cutoff_ms(state.storage, state.version, oldest_removal_ms=oldest)
    if cutoff is not None:
        removed_at = pc.fill_null(removed.column("deletionTimestamp"), cutoff).to_numpy(zero_copy_only=False)
        gone &= removed_at >= cutoff
    sizes = pc.fill_null(removed.column("size"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return int(sizes[gone].sum())
