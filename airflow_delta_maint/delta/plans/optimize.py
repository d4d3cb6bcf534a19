"""OPTIMIZE planning on the driver (no Spark): which files to rewrite, in which bins.

Bin-packing follows delta-spark's OptimizeExecutor: per partition, candidate files (smaller
than ``min_file_size``, or carrying a deletion vector that deletes more than ``dv_ratio`` of
their rows) are sorted by size and packed into bins of at most ``target_file_size``; a bin of a
single file is dropped unless the file has a deletion vector to purge. With Z-order every
file of a partition forms one group.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.auto_compaction import partition_key
from airflow_delta_maint.delta.plans.clustering import (DEFAULT_MIN_CUBE_SIZE, DEFAULT_TARGET_CUBE_SIZE, clustering_columns, is_clustered,
                                                        select_files)
from airflow_delta_maint.delta.plans.optimize_inputs import (GIB, check_rewritable_schema, file_size_settings, partition_filter,
                                                             validate_zorder)
from airflow_delta_maint.delta.protocol.schema import Column
from airflow_delta_maint.delta.protocol.type_widening import files_with_old_types

__all__ = [
    "DEFAULT_DV_RATIO", "GIB", "SIZE_PERCENTILE_KEYS", "Bin", "OptimizePlan", "add_dicts", "check_rewritable_schema",
    "dv_ratio_exceeded", "file_size_settings", "live_rows", "partition_filter", "plan_clustering", "plan_optimize",
    "plan_target_files", "size_percentiles", "stats_num_records", "validate_zorder",
]

DEFAULT_DV_RATIO = 0.05


@dataclass
class Bin:
    """Files of one partition rewritten together into one file (or a Z-ordered group)."""

    partition_values: dict[str, str | None]
    files: list[dict]
    input_bytes: int = 0

    @property
    def num_dvs(self) -> int:
        return sum(1 for f in self.files if f.get("deletionVector"))


@dataclass
class OptimizePlan:
    version: int
    min_file_size: int
    target_file_size: int
    zorder_by: list[str]
    predicate: str | None
    zorder_columns: list[Column] = field(default_factory=list)
    bins: list[Bin] = field(default_factory=list)
    num_candidate_files: int = 0
    num_table_files: int = 0
    #: how bins are written: "binpack" (one file per bin), "zorder" or "hilbert" (liquid clustering)
    layout: str = "binpack"
    #: liquid clustering: the clustering columns (logical names) and delta-spark's clusteringStats
    clustering_by: list[str] = field(default_factory=list)
    clustering_stats: dict[str, Any] = field(default_factory=dict)
    #: layout "even": the files each bin (partition) is rewritten into
    target_files: int | None = None
    #: what was left out before planning to spare writers (``recent_writes.LeftOut.metrics``), if anything
    left_out: dict[str, Any] = field(default_factory=dict)

    @property
    def input_files(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def input_bytes(self) -> int:
        return sum(b.input_bytes for b in self.bins)

    @property
    def is_empty(self) -> bool:
        return not self.bins

    def predicted_output_files(self) -> int:
        if self.layout == "binpack":
            return len(self.bins)
        if self.layout == "even":
            return sum(min(self.target_files or 1, max(1, sum(_live(a) for a in b.files))) for b in self.bins)
        return sum(max(1, math.ceil(b.input_bytes / self.target_file_size)) for b in self.bins)

    def summary(self) -> dict[str, Any]:
        """The dry-run view of the plan."""
        partitions: dict[str, dict[str, int]] = {}
        for b in self.bins:
            key = "/".join(f"{k}={v}" for k, v in sorted(b.partition_values.items())) or "<unpartitioned>"
            p = partitions.setdefault(key, {"bins": 0, "files": 0, "bytes": 0})
            p["bins"] += 1
            p["files"] += len(b.files)
            p["bytes"] += b.input_bytes
        return {
            "num_partitions": len(partitions),
            "num_bins": len(self.bins),
            "num_files_to_rewrite": self.input_files,
            "num_bytes_to_rewrite": self.input_bytes,
            "predicted_output_files": self.predicted_output_files(),
            "num_deletion_vectors_to_purge": sum(b.num_dvs for b in self.bins),
            "partitions": partitions,
            **({"clustering_by": self.clustering_by, "clusteringStats": self.clustering_stats}
               if self.layout == "hilbert" else {}),
            **({"target_files": self.target_files} if self.layout == "even" else {}),
        }


def _live(add: dict) -> int:
    try:
        return live_rows(add)
    except InvalidArgumentError:
        return 1


def dv_ratio_exceeded(add: dict, ratio: float) -> bool:
    dv = add.get("deletionVector")
    if not dv:
        return False
    stats = add.get("stats")
    try:
        records = json.loads(stats).get("numRecords") if stats else None
    except ValueError:
        records = None
    if not records:
        return True
    return dv.get("cardinality", 0) / records > ratio


def add_dicts(files: pa.Table) -> list[dict]:
    """Add actions of an ``ADD_SCHEMA`` table as the plans hold them: no null fields, the
    partition values and tags as dicts."""
    adds = [{k: v for k, v in a.items() if v is not None} for a in files.to_pylist()] if files.num_rows else []
    for a in adds:
        a["partitionValues"] = dict(a.get("partitionValues") or [])
        if isinstance(a.get("tags"), list):
            a["tags"] = dict(a["tags"])
    return adds


def plan_clustering(snapshot: Snapshot, *, full: bool = False, target_file_size: int | None = None,
                    min_cube_size: int | None = None, target_cube_size: int | None = None) -> OptimizePlan:
    """Plan OPTIMIZE of a liquid-clustered table (see ``clustering.py``): groups of files that each
    become one new ZCube ordered along a Hilbert curve over the clustering columns."""
    check_rewritable_schema(snapshot)
    min_size, max_size = file_size_settings(snapshot, None, target_file_size)
    columns = clustering_columns(snapshot.metadata.schema_string, snapshot.domains)
    plan = OptimizePlan(snapshot.version, min_size, max_size, [], None, zorder_columns=columns,
                        num_table_files=snapshot.num_files, layout="hilbert", clustering_by=[c.name for c in columns])
    adds = add_dicts(snapshot.files)
    selection = select_files(
        adds, columns, full=full,
        min_cube_size=DEFAULT_MIN_CUBE_SIZE if min_cube_size is None else int(min_cube_size),
        target_cube_size=DEFAULT_TARGET_CUBE_SIZE if target_cube_size is None else int(target_cube_size))
    plan.clustering_stats = selection.stats
    plan.num_candidate_files = sum(len(g) for g in selection.groups)
    plan.bins = [Bin({}, g, sum(int(f["size"]) for f in g)) for g in selection.groups]
    return plan


def stats_num_records(stats: str | None) -> int | None:
    """``numRecords`` of a file's JSON statistics; None when missing or unreadable."""
    try:
        parsed = json.loads(stats) if stats else None
        records = parsed.get("numRecords") if isinstance(parsed, dict) else None
        return int(records) if records is not None else None
    except (ValueError, TypeError, OverflowError):
        return None


def live_rows(add: dict) -> int:
    """Rows of a file its deletion vector leaves (``numRecords`` minus the vector's cardinality).

    Raises:
        InvalidArgumentError: the file has no ``numRecords`` statistic.
    """
    records = stats_num_records(add.get("stats"))
    if records is None:
        raise InvalidArgumentError(f"target_files needs every file's numRecords statistic to split rows evenly, "
                                   f"and {add['path']} has none")
    return int(records) - int((add.get("deletionVector") or {}).get("cardinality") or 0)


def plan_target_files(snapshot: Snapshot, target_files: int, *, predicate: str | None = None,
                      target_file_size: int | None = None, partitions: set[tuple] | None = None) -> OptimizePlan:
    """Every selected partition as one bin to be rewritten into exactly ``target_files`` files of
    even row counts (``min(target_files, rows)`` when it holds fewer rows). A partition already in
    that shape (that many files, no deletion vector, row counts at most one apart) is left alone,
    so a rerun is a no-op."""
    if int(target_files) < 1:
        raise InvalidArgumentError(f"target_files must be positive, got {target_files}")
    check_rewritable_schema(snapshot)
    min_size, max_size = file_size_settings(snapshot, None, target_file_size)
    matches = partition_filter(snapshot, predicate)
    plan = OptimizePlan(snapshot.version, min_size, max_size, [], predicate, num_table_files=snapshot.num_files,
                        layout="even", target_files=int(target_files))
    groups: dict[tuple, list[dict]] = {}
    for add in snapshot.files.to_pylist() if snapshot.files.num_rows else []:
        pv = dict(add["partitionValues"] or [])
        if matches is not None and not matches(pv):
            continue
        if partitions is not None and partition_key(pv) not in partitions:
            continue
        add = {k: v for k, v in add.items() if v is not None}
        add["partitionValues"] = pv
        if isinstance(add.get("tags"), list):
            add["tags"] = dict(add["tags"])
        groups.setdefault(tuple(sorted(pv.items(), key=lambda kv: kv[0])), []).append(add)
    for key in sorted(groups, key=lambda k: [(a, b or "") for a, b in k]):
        files = sorted(groups[key], key=lambda a: a["path"])
        counts = [live_rows(a) for a in files]
        shaped = (len(files) == min(int(target_files), max(1, sum(counts)))
                  and not any(a.get("deletionVector") for a in files) and max(counts) - min(counts) <= 1)
        if shaped:
            continue
        plan.bins.append(Bin(dict(key), files, sum(a["size"] for a in files)))
    plan.num_candidate_files = plan.input_files
    return plan


def plan_optimize(snapshot: Snapshot, *, predicate: str | None = None, zorder_by: Sequence[str] = (),
                  min_file_size: int | None = None, target_file_size: int | None = None,
                  dv_ratio: float = DEFAULT_DV_RATIO, full: bool = False, min_cube_size: int | None = None,
                  target_cube_size: int | None = None, rewrite_type_widened: bool = False,
                  partitions: set[tuple] | None = None, target_files: int | None = None) -> OptimizePlan:
    """Plan the rewrite of ``snapshot``; raises InvalidArgumentError for bad input and
    UnsupportedFeatureError for a schema whose files cannot be rewritten.

    A table with the ``clustering`` feature is liquid clustered instead (:func:`plan_clustering`):
    ``zorder_by`` and ``predicate`` are refused there, as delta-spark refuses them, and ``full``
    reclusters every file. ``full`` and the cube sizes apply to clustered tables only.

    ``rewrite_type_widened`` rewrites exactly the files that still hold a widened column in its
    old type (whatever their size; see ``type_widening.py``), bin-packed per partition.

    ``partitions`` limits the plan to these partitions (keys as ``auto_compaction.partition_key``
    makes them; ``()`` is the whole table of a clustered or unpartitioned table).

    ``target_files`` rewrites every selected partition into exactly that many files of even row
    counts (splitting files that are too large), see :func:`plan_target_files`.
    """
    if target_files is not None:
        _check_target_files_options(snapshot, zorder_by, full, rewrite_type_widened, min_cube_size, target_cube_size)
        return plan_target_files(snapshot, target_files, predicate=predicate, target_file_size=target_file_size,
                                 partitions=partitions)
    if rewrite_type_widened and (zorder_by or full or min_cube_size is not None or target_cube_size is not None):
        raise InvalidArgumentError("rewrite_type_widened rewrites files as they are: it takes no zorder_by, "
                                   "full or cube sizes")
    if is_clustered(snapshot.protocol) and not rewrite_type_widened:
        _check_clustered_options(zorder_by, predicate, min_file_size)
        if clustering_columns(snapshot.metadata.schema_string, snapshot.domains):
            plan = plan_clustering(snapshot, full=full, target_file_size=target_file_size, min_cube_size=min_cube_size,
                                   target_cube_size=target_cube_size)
            if partitions is not None and () not in partitions:
                plan.bins = []
            return plan
        # clustered by no column (ALTER TABLE ... CLUSTER BY NONE): compaction only, as delta-spark does
        full, min_cube_size, target_cube_size = False, None, None
    if full or min_cube_size is not None or target_cube_size is not None:
        raise InvalidArgumentError("full, min_cube_size and target_cube_size apply to liquid-clustered "
                                   "tables only (the table has no 'clustering' feature)")
    return _plan_bins(snapshot, predicate, zorder_by, min_file_size, target_file_size, dv_ratio, rewrite_type_widened,
                      partitions)


def _check_target_files_options(snapshot: Snapshot, zorder_by: Sequence[str], full: bool, rewrite_type_widened: bool,
                                min_cube_size: int | None, target_cube_size: int | None) -> None:
    """Refuse the options ``target_files`` does not combine with, and a liquid-clustered table."""
    if zorder_by or full or rewrite_type_widened or min_cube_size is not None or target_cube_size is not None:
        raise InvalidArgumentError("target_files rewrites partitions into even files: it takes no "
                                   "zorder_by, full, rewrite_type_widened or cube sizes")
    if is_clustered(snapshot.protocol):
        raise InvalidArgumentError("target_files does not apply to a liquid-clustered table: its files are "
                                   "laid out by the clustering columns")


def _check_clustered_options(zorder_by: Sequence[str], predicate: str | None, min_file_size: int | None) -> None:
    """Refuse the options a liquid-clustered table does not take, as delta-spark refuses them."""
    if zorder_by:
        raise InvalidArgumentError("cannot Z-order a liquid-clustered table: OPTIMIZE clusters it by its "
                                   "clustering columns; leave out zorder_by")
    if predicate:
        raise InvalidArgumentError("a liquid-clustered table takes no partition predicate: OPTIMIZE "
                                   "clusters the whole table; leave out where")
    if min_file_size is not None:
        raise InvalidArgumentError("min_file_size does not apply to a liquid-clustered table: files are "
                                   "chosen by their ZCube; use min_cube_size")


def _plan_bins(snapshot: Snapshot, predicate: str | None, zorder_by: Sequence[str], min_file_size: int | None,
               target_file_size: int | None, dv_ratio: float, rewrite_type_widened: bool,
               partitions: set[tuple] | None) -> OptimizePlan:
    """Bin-packing (or one Z-ordered group per partition) of the selected partitions' candidates."""
    check_rewritable_schema(snapshot)
    min_size, max_size = file_size_settings(snapshot, min_file_size, target_file_size)
    if not 0 <= dv_ratio <= 1:
        raise InvalidArgumentError(f"dv_ratio must be between 0 and 1, got {dv_ratio}")
    zorder = validate_zorder(snapshot, zorder_by) if zorder_by else []
    matches = partition_filter(snapshot, predicate)
    plan = OptimizePlan(snapshot.version, min_size, max_size, [c.name for c in zorder], predicate,
                        zorder_columns=zorder, num_table_files=snapshot.num_files,
                        layout="zorder" if zorder else "binpack")
    if snapshot.files.num_rows == 0:
        return plan
    every_file = bool(zorder) or rewrite_type_widened
    adds = _selected_adds(snapshot, min_size, every_file, matches, partitions)
    if rewrite_type_widened:  # the footers of the selected files only
        old = {a["path"] for a in files_with_old_types(snapshot.storage, snapshot.metadata,
                                                       [{"path": a["path"]} for a in adds])}
        adds = [a for a in adds if a["path"] in old]
    groups = _candidate_groups(adds, min_size, dv_ratio, every_file)
    plan.num_candidate_files = sum(len(g) for g in groups.values())
    for key in sorted(groups, key=lambda k: [(a, b or "") for a, b in k]):
        group = groups[key]
        pv = dict(key)
        if zorder:
            plan.bins.append(Bin(pv, sorted(group, key=lambda a: a["path"]), sum(a["size"] for a in group)))
            continue
        plan.bins.extend(b for b in _pack(pv, group, max_size)
                         if len(b.files) > 1 or b.files[0].get("deletionVector") or rewrite_type_widened)
    return plan


def _selected_adds(snapshot: Snapshot, min_size: int, every_file: bool, matches: Callable[[dict], bool] | None,
                   partitions: set[tuple] | None) -> list[dict]:
    """The add actions of the selected partitions (predicate and partition keys), their partition
    values as dicts; unless ``every_file``, only the small files and those with a deletion vector."""
    files = snapshot.files
    if not every_file:
        small = pc.less(files.column("size"), min_size)
        with_dv = files.column("deletionVector").is_valid()
        files = files.filter(pc.or_(small, with_dv))
    adds = []
    for add in files.to_pylist():
        pv = dict(add["partitionValues"] or [])
        add["partitionValues"] = pv
        if matches is not None and not matches(pv):
            continue
        if partitions is not None and partition_key(pv) not in partitions:
            continue
        adds.append(add)
    return adds


def _candidate_groups(adds: list[dict], min_size: int, dv_ratio: float, every_file: bool) -> dict[tuple, list[dict]]:
    """The candidates (every file when ``every_file``, else those smaller than ``min_size`` or
    whose deletion vector deletes more than ``dv_ratio``) by partition, without null fields."""
    groups: dict[tuple, list[dict]] = {}
    for add in adds:
        pv = add["partitionValues"]
        if not every_file and add["size"] >= min_size and not dv_ratio_exceeded(add, dv_ratio):
            continue
        add = {k: v for k, v in add.items() if v is not None}
        if isinstance(add.get("tags"), list):
            add["tags"] = dict(add["tags"])
        groups.setdefault(tuple(sorted(pv.items(), key=lambda kv: kv[0])), []).append(add)
    return groups


def _pack(pv: dict[str, str | None], group: list[dict], max_size: int) -> list[Bin]:
    """One partition's candidates, smallest first, packed into bins of at most ``max_size`` bytes
    (a file larger than that gets a bin of its own)."""
    group.sort(key=lambda a: (a["size"], a["path"]))
    current: list[dict] = []
    current_bytes = 0
    packed: list[Bin] = []
    for add in group:
        if current and current_bytes + add["size"] > max_size:
            packed.append(Bin(pv, current, current_bytes))
            current, current_bytes = [], 0
        current.append(add)
        current_bytes += add["size"]
    if current:
        packed.append(Bin(pv, current, current_bytes))
    return packed


#: the file-size figures of an OPTIMIZE run's metrics, delta-spark's names
SIZE_PERCENTILE_KEYS: tuple[str, ...] = ("minFileSize", "p25FileSize", "p50FileSize", "p75FileSize", "maxFileSize")


def size_percentiles(sizes: Sequence[int]) -> dict[str, int]:
    """min/p25/p50/p75/max of file sizes, as delta-spark's OPTIMIZE metrics name them."""
    if not sizes:
        return {}
    arr = np.asarray(sizes, dtype=np.int64)
    q = np.percentile(arr, [25, 50, 75], method="lower")
    return {"minFileSize": int(arr.min()), "p25FileSize": int(q[0]), "p50FileSize": int(q[1]),
            "p75FileSize": int(q[2]), "maxFileSize": int(arr.max())}
