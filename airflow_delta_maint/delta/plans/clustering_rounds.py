"""Liquid clustering of a large table in rounds: the plan's new ZCubes, a round's worth at a time.

``select_files`` orders the candidates (the unclustered files by path, then each chosen ZCube's
files by path, the ZCubes in id order) and packs them greedily into groups of at most the target
cube size: each group becomes one new ZCube. The order is a sort over every candidate, so on a
large table it is done out of core:

1. the first pass (``clustering_scan.ClusteringWork``) counts the candidates and keeps a uniform
   sample of the unclustered paths, from which the unclustered files are cut into path ranges of
   about half a round each; the chosen ZCubes are cut into runs of consecutive ZCubes the same way;
2. a second pass spills every candidate's whole add action into the parquet file of its range
   (*bucket*), with its rank (0 for unclustered files, else 1 + the ZCube's place in the order);
3. the buckets are read back in order, each sorted by (rank, path) in memory, and the greedy
   packing runs over them as over the whole list: every file gets its group. Whole groups are
   written to round files of at least ``max_files`` (:data:`~.optimize_rounds.ROUND_FILES`) files each.

The groups, and so the plan's bins, are those of the plan of the whole table. A group is never
split: a round holds at least one whole group, however many files it has.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.plans.clustering_scan import ClusteringWork
from airflow_delta_maint.delta.plans.optimize_rounds import SpilledRounds, SpillWriters, conformed_adds
from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA
from airflow_delta_maint.delta.storage.scratch import make_scratch, remove_scratch

__all__ = ["ClusteringOrder", "clustering_order", "spill_clustering_rounds"]

_RANKED = pa.schema([*ADD_SCHEMA, pa.field("_rank", pa.int64())])


@dataclass
class ClusteringOrder:
    """How the candidates are cut into buckets, in the plan's order."""

    chosen: list[str]
    #: the first path of every unclustered bucket after the first
    boundaries: list[str]
    #: per chosen ZCube (by rank - 1), its bucket
    cube_bucket: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def clustering_order(work: ClusteringWork, max_files: int) -> ClusteringOrder:
    """The buckets of the candidates ``work`` counted: path ranges of the unclustered files (from
    its sample) and runs of consecutive chosen ZCubes, each of about ``max_files / 2`` files."""
    per_bucket = max(1, max_files // 2)
    chosen = work.chosen_cubes()
    boundaries: list[str] = []
    if work.unclustered > per_bucket and len(work.sample_paths):
        sample = np.array(sorted(set(work.sample_paths.to_pylist())), dtype=object)
        count = min(len(sample), -(-work.unclustered // per_bucket))
        cuts = {str(sample[int(len(sample) * i / count)]) for i in range(1, count)}
        boundaries = sorted(cuts)
    bucket = len(boundaries) + 1
    cube_bucket = np.zeros(len(chosen), np.int64)
    filled = 0
    for i, c in enumerate(chosen):
        n = work.cube_files.get(c, 0)
        if filled and filled + n > per_bucket:
            bucket += 1
            filled = 0
        cube_bucket[i] = bucket
        filled += n
    return ClusteringOrder(chosen, boundaries, cube_bucket)


def _bucket_of(order: ClusteringOrder, paths: pa.Array, rank: np.ndarray) -> np.ndarray:
    out = np.zeros(len(rank), np.int64)
    for boundary in order.boundaries:  # unclustered: the number of boundaries at or below the path
        out += pc.fill_null(pc.greater_equal(paths, boundary), False).to_numpy(zero_copy_only=False)
    ranked = rank > 0
    if ranked.any():
        out[ranked] = order.cube_bucket[rank[ranked] - 1]
    return out


def spill_clustering_rounds(state: StreamedState, work: ClusteringWork, order: ClusteringOrder, *,
                            target_cube_size: int, max_files: int, young_after_ms: int | None = None,
                            folder: str | None = None) -> tuple[SpilledRounds, list[int]]:
    """Passes 2 and 3 (see the module docstring): the rounds' files, each a parquet file of whole
    add actions with the column ``_group`` (the group's number within the run), and per group its
    number of files. ``young_after_ms``: files modified later are left out, as the first pass left
    them out."""
    base = Path(make_scratch("delta-maint-cluster-", folder))
    buckets = base / "buckets"
    buckets.mkdir()
    rank_of = pa.array(order.chosen, pa.string())
    writers = SpillWriters(lambda b: buckets / f"{b:06d}.parquet", _RANKED)
    try:
        for kind, table in state.scan(ADD_SCHEMA.names):
            if kind != "add" or table.num_rows == 0:
                continue
            if young_after_ms is not None:
                mtime = pc.fill_null(table.column("modificationTime"), 0)
                table = table.filter(pc.less_equal(mtime, young_after_ms))
                if not table.num_rows:
                    continue
            eligible, cube, in_cube = work.classify(table)
            index = pc.fill_null(pc.index_in(cube, value_set=rank_of), -1).to_numpy(zero_copy_only=False)
            rank = np.where(in_cube, index + 1, 0).astype(np.int64)
            pick = eligible & (~in_cube | (index >= 0))
            if not pick.any():
                continue
            rows = table.filter(pa.array(pick))
            rank = rank[pick]
            bucket = _bucket_of(order, rows.column("path"), rank)
            ranked = conformed_adds(rows).append_column("_rank", pa.array(rank, pa.int64()))
            for b in np.unique(bucket):
                writers.add(int(b), ranked.filter(pa.array(bucket == b)))
        writers.close()
        rounds, group_files = _pack(buckets, base, target_cube_size, max_files)
    except BaseException:
        writers.close(flush=False)
        remove_scratch(base)
        raise
    shutil.rmtree(buckets, ignore_errors=True)
    spill = SpilledRounds(base, rounds)
    return spill, group_files


class _RoundFiles:
    """Writes whole groups, in order, to round files; a round closes at a group's end once it holds
    ``max_files`` files."""

    schema = pa.schema([*ADD_SCHEMA, pa.field("_group", pa.int64())])

    def __init__(self, base: Path, max_files: int):
        self.base = base
        self.max_files = max_files
        self.rounds = 0
        self.in_round = 0
        self.writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        """Rows of complete groups, sorted by group."""
        if not table.num_rows:
            return
        groups = table.column("_group").to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))
        ends = np.concatenate((starts[1:], [len(groups)]))
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            if self.writer is not None and self.in_round >= self.max_files:
                self.close()
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.base / f"round-{self.rounds:06d}.parquet", self.schema)
                self.rounds += 1
            self.writer.write_table(table.slice(lo, hi - lo))
            self.in_round += hi - lo

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = None
        self.in_round = 0


def _pack(buckets: Path, base: Path, target: int, max_files: int) -> tuple[int, list[int]]:
    """Read the buckets in order, sort each, pack the groups greedily (as ``select_files`` packs
    them) and write whole groups to round files; returns the number of rounds and the files per
    group."""
    out = _RoundFiles(base, max_files)
    group_files: list[int] = []
    current_bytes = 0
    open_group: list[pa.Table] = []  # rows of the last group, which the next bucket may continue
    try:
        for path in sorted(buckets.glob("*.parquet")):
            table = pq.read_table(path).sort_by([("_rank", "ascending"), ("path", "ascending")])
            groups = np.empty(table.num_rows, np.int64)
            for i, size in enumerate(table.column("size").to_numpy(zero_copy_only=False).astype(np.int64).tolist()):
                if not group_files or (group_files[-1] and current_bytes + size > target):
                    group_files.append(0)
                    current_bytes = 0
                groups[i] = len(group_files) - 1
                group_files[-1] += 1
                current_bytes += size
            table = table.drop_columns(["_rank"]).append_column("_group", pa.array(groups, pa.int64()))
            last = len(group_files) - 1
            closed = table.filter(pc.less(table.column("_group"), last))
            if closed.num_rows:
                out.write(pa.concat_tables([*open_group, closed]))
                open_group = []
            open_group.append(table.filter(pc.equal(table.column("_group"), last)))
        if open_group:
            out.write(pa.concat_tables(open_group))
    finally:
        out.close()
    return out.rounds, group_files
