"""Per-partition aggregates of the live files, streamed from the log in bounded memory.

What OPTIMIZE's cheap check needs is a handful of numbers per partition, never the files: the
bin-packing plan is empty exactly when, in every selected partition, the candidate files
(smaller than the minimum size, or with a deletion vector past the ratio) are fewer than two or
their two smallest sizes add up to more than the maximum file size, and none of them carries a
deletion vector (bins are packed smallest first, so the first bin holds two files as soon as the
two smallest fit together). A Z-order plan is empty when no selected partition has a file. The
auto-compaction policy needs per partition the number of files, of small files and their bytes,
and of files past the deleted-rows ratio.

:func:`scan_partitions` reads, through :meth:`StreamedState.scan`, the checkpoint columns
``add.path``, ``add.deletionVector``, ``add.partitionValues``, ``add.size``, ``add.stats``
(parsed only for files with a deletion vector, for ``numRecords``) and, when young files are left
out, ``add.modificationTime``; one row group at a time, with no Python object per file (files
with a deletion vector and files whose partition values are irregular excepted). Memory grows
with the number of partitions, not of files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.log.state_stream import StreamedState, StreamFallback
from airflow_delta_maint.delta.plans.auto_compaction import (PartitionCounts, PartitionKey, deleted_ratio_exceeded,
                                                             partition_key)

__all__ = ["PartitionScan", "Visit", "partition_ids", "scan_partitions"]

_SEP = "\x1f"
_NULL = "\x00"
_BIG = np.iinfo(np.int64).max


def partition_ids(values: pa.Array | pa.ChunkedArray, names: Sequence[str]) -> tuple[np.ndarray, list[PartitionKey]]:
    """Every row's partition key (as :func:`partition_key` makes it) as an index into a list of
    distinct keys. Vectorised for rows whose map holds exactly the partition columns ``names``;
    other rows are keyed in Python."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), []
    names = sorted(str(c) for c in names)
    original = values
    if pa.types.is_map(values.type):
        entries = pa.struct([pa.field("key", values.type.key_type, nullable=False),
                             pa.field("value", values.type.item_type)])
        values = values.cast(pa.list_(entries))
    lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
    regular = lengths == len(names)
    if names:
        flat = pc.list_flatten(values)
        parents = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
        flat_keys = flat.field("key")
        flat_values = flat.field("value")
        odd = pc.fill_null(pc.match_substring_regex(flat_values, "[\\x00\\x1f]"), False).to_numpy(zero_copy_only=False)
        if odd.any():
            regular[np.unique(parents[odd])] = False
        hits_by_name = {}
        for name in names:
            hits = pc.fill_null(pc.equal(flat_keys, name), False).to_numpy(zero_copy_only=False)
            hits_by_name[name] = hits
            regular &= np.bincount(parents[hits], minlength=n) == 1
        columns = [_lookup(flat_keys, flat_values, parents, hits_by_name[name], n) for name in names]
        if len(columns) == 1:
            combined = columns[0]
        else:
            combined = pc.binary_join_element_wise(*columns, _SEP, null_handling="replace", null_replacement=_NULL)
        encoded = pc.dictionary_encode(combined, null_encoding="encode")
        ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        keys: list[PartitionKey] = []
        for entry in encoded.dictionary.to_pylist():
            parts = [entry] if len(names) == 1 else (entry.split(_SEP) if entry is not None else [None] * len(names))
            keys.append(tuple((name, None if (len(names) > 1 and p == _NULL) else p) for name, p in zip(names, parts)))
    else:
        ids = np.zeros(n, np.int64)
        keys = [()]
    if not regular.all():
        rows = np.flatnonzero(~regular)
        slow = [partition_key(v) for v in original.take(pa.array(rows, pa.int64())).to_pylist()]
        index = {k: i for i, k in enumerate(keys)}
        for row, key in zip(rows, slow):
            at = index.get(key)
            if at is None:
                at = index[key] = len(keys)
                keys.append(key)
            ids[row] = at
        used, ids = np.unique(ids, return_inverse=True)
        keys = [keys[i] for i in used]
    return ids.astype(np.int64), keys


def _lookup(keys: pa.Array, values: pa.Array, parents: np.ndarray, hits: np.ndarray, n: int) -> pa.Array:
    """Per row, the value of the first entry whose key hit (null where none did)."""
    at = np.full(n, -1, np.int64)
    rows = parents[hits]
    positions = np.flatnonzero(hits)
    at[rows[::-1]] = positions[::-1]  # the first hit of each row wins
    found = at >= 0
    taken = values.take(pa.array(np.where(found, at, 0), pa.int64())) if len(values) else pa.nulls(n, pa.string())
    return pc.if_else(pa.array(found), taken, pa.scalar(None, taken.type))


@dataclass
class PartitionScan:
    """What :func:`scan_partitions` found, per partition key and in total."""

    keys: list[PartitionKey] = field(default_factory=list)
    #: live files per partition, all of them (the auto policy's view)
    counts: dict[PartitionKey, PartitionCounts] = field(default_factory=dict)
    #: per partition of the planning view (young files, recent partitions left out)
    files: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    candidates: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    smallest: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    candidate_dv: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: with ``collect``: the candidate files of the planning view (partition id, size, deletion
    #: vector or not, path), about 100 bytes each
    candidate_rows: list[pa.Table] = field(default_factory=list)
    total_files: int = 0
    young_files: int = 0
    recent_partition_files: int = 0

    def plan_is_empty(self, selected: Any, zorder: bool) -> bool:
        """Whether the plan over the partitions ``selected(key)`` accepts has no bin."""
        for i, key in enumerate(self.keys):
            if not selected(key):
                continue
            if zorder:
                if self.files[i]:
                    return False
                continue
            if self.candidate_dv[i]:
                return False
            if self.candidates[i] >= 2 and int(self.smallest[i, 0]) + int(self.smallest[i, 1]) <= self.target_file_size:
                return False
        return True

    target_file_size: int = 0

    def input_bytes(self, selected: Any) -> int:
        """The bytes the bin-packing plan over the partitions ``selected(key)`` accepts rewrites
        (needs ``collect``): the sizes of :meth:`bins`' files."""
        return sum(size for files in self.bins(selected) for _, size, _ in files)

    def bins(self, selected: Any) -> list[list[tuple[str, int, bool]]]:
        """The bins of the bin-packing plan over the partitions ``selected(key)`` accepts, each its files'
        (path, size, deletion vector or not) (needs ``collect``): per partition the candidates sorted by
        (size, path) are packed greedily into bins of at most ``target_file_size``, as the plan packs them;
        a bin of one file is one only when that file has a deletion vector."""
        if not self.candidate_rows:
            return []
        wanted = [i for i, key in enumerate(self.keys) if selected(key)]
        table = pa.concat_tables(self.candidate_rows)
        table = table.filter(pc.is_in(table.column("gid"), value_set=pa.array(wanted, pa.int64())))
        table = table.sort_by([("gid", "ascending"), ("size", "ascending"), ("path", "ascending")])
        out: list[list[tuple[str, int, bool]]] = []
        current_gid, current = None, 0
        files: list[tuple[str, int, bool]] = []
        for g, size, dv, path in zip(table.column("gid").to_pylist(), table.column("size").to_pylist(),
                                     table.column("dv").to_pylist(), table.column("path").to_pylist()):
            if g != current_gid or (files and current + size > self.target_file_size):
                if len(files) > 1 or (len(files) == 1 and files[0][2]):
                    out.append(files)
                current_gid, current, files = g, 0, []
            files.append((path, size, bool(dv)))
            current += size
        if len(files) > 1 or (len(files) == 1 and files[0][2]):
            out.append(files)
        return out


class _Grow:
    def __init__(self, scan: PartitionScan):
        self.scan = scan
        self.index: dict[PartitionKey, int] = {}

    def ids(self, keys: list[PartitionKey]) -> np.ndarray:
        out = np.empty(len(keys), np.int64)
        for i, k in enumerate(keys):
            g = self.index.get(k)
            if g is None:
                g = self.index[k] = len(self.scan.keys)
                self.scan.keys.append(k)
            out[i] = g
        n = len(self.scan.keys)
        s = self.scan
        if len(s.files) < n:
            extra = max(n - len(s.files), len(s.files))
            s.files = np.concatenate([s.files, np.zeros(extra, np.int64)])
            s.candidates = np.concatenate([s.candidates, np.zeros(extra, np.int64)])
            s.smallest = np.concatenate([s.smallest, np.full((extra, 2), _BIG, np.int64)])
            s.candidate_dv = np.concatenate([s.candidate_dv, np.zeros(extra, bool)])
        return out


def _dv_ratio_exceeded(dv: dict | None, stats: str | None, ratio: float) -> bool:
    from airflow_delta_maint.delta.plans.optimize import dv_ratio_exceeded as exceeded

    return exceeded({"deletionVector": dv, "stats": stats}, ratio)


#: called with every piece of live files, their partition ids (into ``PartitionScan.keys``), the
#: mask of the planning view (young files and recent partitions left out) and the keys
Visit = Callable[[pa.Table, np.ndarray, np.ndarray, list[PartitionKey]], None]


def scan_partitions(state: StreamedState, *, min_file_size: int, target_file_size: int, dv_ratio: float,
                    zorder: bool, auto_min_file_size: int | None, auto_ratio: float, whole_table: bool,
                    young_after_ms: int | None, recent: set[PartitionKey] | None,
                    collect: bool = False, one_partition: bool = False, visit: Visit | None = None,
                    visit_columns: Sequence[str] = ()) -> PartitionScan:
    """One pass over the live files (see the module docstring).

    Args:
        min_file_size, target_file_size, dv_ratio: the plan's candidate rule and bin size.
        zorder: count every file of the planning view (a Z-order plan takes them all).
        auto_min_file_size, auto_ratio: the auto policy's small-file size (None: no policy) and
            deleted-rows ratio.
        whole_table: the policy and recent partitions see the table as one partition.
        young_after_ms: files modified after this time are left out of the planning view.
        recent: partitions left out of the planning view (recently written).
        collect: keep the candidate files' partition, size and path (``candidate_rows``) for
            :meth:`PartitionScan.input_bytes`; memory then grows with the candidates (the
            execution choice does this only for logs small enough to run on the worker).
        one_partition: every file belongs to partition ``()`` whatever its partition values (a
            plan that ignores them: liquid clustering).
        visit, visit_columns: a plan's own aggregate (see :data:`Visit`) and the add columns it
            reads besides those read here.
    """
    scan = PartitionScan(target_file_size=target_file_size)
    grow = _Grow(scan)
    names = state.partition_columns
    columns = ["partitionValues", "size", "stats"] + (["modificationTime"] if young_after_ms is not None else [])
    columns += [c for c in visit_columns if c not in columns]
    for kind, table in state.scan(columns):
        if kind != "add" or table.num_rows == 0:
            continue
        local, keys = _piece_partitions(table, names, one_partition, whole_table)
        gid = grow.ids(keys)[local]
        size_col = table.column("size")
        size_valid = size_col.is_valid().to_numpy(zero_copy_only=False)
        size = pc.fill_null(size_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        has_dv = table.column("deletionVector").is_valid().to_numpy(zero_copy_only=False)
        plan_ratio, auto_ratio_hit = _ratios_exceeded(table, has_dv, dv_ratio,
                                                      auto_ratio if auto_min_file_size is not None else None)
        scan.total_files += table.num_rows
        if auto_min_file_size is not None:
            if not size_valid.all():
                raise StreamFallback("an add action without a size")
            _count_for_policy(scan, gid, size, auto_ratio_hit, auto_min_file_size)
        keep = _planning_view(scan, table, keys, local, young_after_ms, recent)
        np.add.at(scan.files, gid[keep], 1)
        if visit is not None:
            visit(table, gid, keep, scan.keys)
        if zorder:
            continue
        cand = keep & size_valid & ((size < min_file_size) | plan_ratio)
        if not cand.any():
            continue
        if collect:
            rows = pa.array(np.flatnonzero(cand), pa.int64())
            scan.candidate_rows.append(pa.table({
                "gid": pa.array(gid[cand], pa.int64()), "size": pa.array(size[cand], pa.int64()),
                "dv": pa.array(has_dv[cand]), "path": table.column("path").take(rows)}))
        _note_candidates(scan, gid[cand], size[cand], has_dv[cand])
    return scan


def _piece_partitions(table: pa.Table, names: Sequence[str], one_partition: bool,
                      whole_table: bool) -> tuple[np.ndarray, list[PartitionKey]]:
    """Each row's index into the piece's distinct partition keys, and those keys; every row in
    ``()`` when ``one_partition``. Partition values on a table planned ``whole_table`` make the
    stream give way (``StreamFallback``)."""
    keys: list[PartitionKey]
    if one_partition:
        local, keys = np.zeros(table.num_rows, np.int64), [()]
    else:
        local, keys = partition_ids(table.column("partitionValues"), names)
    if whole_table and any(k != () for k in keys):
        raise StreamFallback("partition values on a table planned as one partition")
    return local, keys


def _ratios_exceeded(table: pa.Table, has_dv: np.ndarray, dv_ratio: float,
                     auto_ratio: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Per row, whether its deletion vector deletes more than the plan's ratio, and more than the
    auto policy's (all False without a policy); read in Python for the rows with a vector only."""
    n = table.num_rows
    plan_ratio = np.zeros(n, bool)
    auto_ratio_hit = np.zeros(n, bool)
    dv_rows = np.flatnonzero(has_dv)
    if len(dv_rows):
        take = pa.array(dv_rows, pa.int64())
        dvs = table.column("deletionVector").take(take).to_pylist()
        stats = table.column("stats").take(take).to_pylist()
        for row, dv, st in zip(dv_rows, dvs, stats):
            plan_ratio[row] = _dv_ratio_exceeded(dv, st, dv_ratio)
            if auto_ratio is not None:
                auto_ratio_hit[row] = deleted_ratio_exceeded({"deletionVector": dv, "stats": st}, auto_ratio)
    return plan_ratio, auto_ratio_hit


def _count_for_policy(scan: PartitionScan, gid: np.ndarray, size: np.ndarray, auto_ratio_hit: np.ndarray,
                      auto_min_file_size: int) -> None:
    """Add a piece's files, small files, their bytes and files past the deleted-rows ratio to
    the auto policy's counts per partition."""
    small = size < auto_min_file_size
    uniq, inverse = np.unique(gid, return_inverse=True)
    files_n = np.bincount(inverse, minlength=len(uniq))
    small_n = np.bincount(inverse, weights=small, minlength=len(uniq)).astype(np.int64)
    dels = np.bincount(inverse, weights=auto_ratio_hit, minlength=len(uniq)).astype(np.int64)
    small_bytes_exact = _exact_sums(inverse, np.where(small, size, 0), len(uniq))
    for j, g in enumerate(uniq):
        key = scan.keys[g]
        c = scan.counts.get(key)
        if c is None:
            c = scan.counts[key] = PartitionCounts()
        c.files += int(files_n[j])
        c.small += int(small_n[j])
        c.small_bytes += int(small_bytes_exact[j])
        c.deletes += int(dels[j])


def _planning_view(scan: PartitionScan, table: pa.Table, keys: list[PartitionKey], local: np.ndarray,
                   young_after_ms: int | None, recent: set[PartitionKey] | None) -> np.ndarray:
    """The mask of a piece's rows the plan sees: young files and recently written partitions
    left out (and counted on ``scan``)."""
    keep = np.ones(table.num_rows, bool)
    if young_after_ms is not None:
        mtime = pc.fill_null(table.column("modificationTime"), 0).to_numpy(zero_copy_only=False)
        young = mtime > young_after_ms
        scan.young_files += int(young.sum())
        keep &= ~young
    if recent:
        hit_key = np.fromiter((k in recent for k in keys), dtype=bool, count=len(keys))
        hit = hit_key[local]
        scan.recent_partition_files += int((hit & keep).sum())
        keep &= ~hit
    return keep


def _note_candidates(scan: PartitionScan, g_c: np.ndarray, s_c: np.ndarray, dv_c: np.ndarray) -> None:
    """Add a piece's candidates (partition ids, sizes, deletion vector or not) to the counts,
    the deletion-vector flags and the two smallest sizes per partition."""
    scan.candidate_dv[np.unique(g_c[dv_c])] = True
    np.add.at(scan.candidates, g_c, 1)
    order = np.lexsort((s_c, g_c))
    g_s, s_s = g_c[order], s_c[order]
    first = np.flatnonzero(np.concatenate(([True], g_s[1:] != g_s[:-1])))
    second = first + 1
    has_second = second < len(g_s)
    has_second[has_second] = g_s[second[has_second]] == g_s[first[has_second]]
    groups = g_s[first]
    firsts = s_s[first]
    seconds = np.full(len(first), _BIG, np.int64)
    seconds[has_second] = s_s[second[has_second]]
    merged = np.sort(np.stack([scan.smallest[groups, 0], scan.smallest[groups, 1], firsts, seconds], axis=1),
                     axis=1)
    scan.smallest[groups] = merged[:, :2]


def _exact_sums(inverse: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, inverse, values.astype(np.int64))
    return out
