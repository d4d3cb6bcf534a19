"""Whether OPTIMIZE of a liquid-clustered table has work, from the live files streamed in bounded memory.

:func:`~airflow_delta_maint.delta.plans.clustering.select_files` picks nothing exactly when
(without ``full``) no eligible file is unclustered and at most one ZCube of eligible files is
smaller than the minimum cube size, or (with ``full``) the table has no file. Eligible files have
no ``clusteringProvider`` or ``liquid``, and no ``ZCUBE_ZORDER_BY`` tag or one naming the
clustering columns. :class:`ClusteringWork` reads per file the ``tags`` map (``ZCUBE_ID``,
``ZCUBE_ZORDER_BY``), ``clusteringProvider`` and ``size``, vectorised, and keeps the size of every
ZCube it meets: memory grows with the ZCubes (one per clustering run's group, up to 150 GiB of
data each), not with the files.

For OPTIMIZE of a large table in rounds (``clustering_rounds``) it also counts the files and bytes
of every kind (clusteringStats' inputs) and keeps a uniform sample of the unclustered files' paths
(the :data:`SAMPLE` with the smallest path hashes), from which the rounds' path ranges are cut.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.log.state_stream import StreamFallback, path_hashes
from airflow_delta_maint.delta.plans.auto_compaction import PartitionKey
from airflow_delta_maint.delta.plans.clustering import CLUSTERING_PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY

__all__ = ["SAMPLE", "ClusteringWork"]

#: unclustered paths sampled (bottom hashes) to cut the rounds' path ranges
SAMPLE = 20_000


def _tag(tags: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """Every row's value of tag ``name`` (null when absent); the last one wins, as a dict made of
    the map's pairs keeps it."""
    if isinstance(tags, pa.ChunkedArray):
        tags = tags.combine_chunks()
    if not pa.types.is_map(tags.type):
        return pa.nulls(len(tags), pa.string())
    return pc.map_lookup(tags, name, "last")


class ClusteringWork:
    """A :data:`~airflow_delta_maint.delta.plans.partition_scan.Visit` that tells whether the
    clustering plan of the planning view picks any file (see the module docstring)."""

    columns = ("tags", "clusteringProvider", "size")

    def __init__(self, clustering_by: Sequence[str], *, full: bool, min_cube_size: int):
        self.names = list(clustering_by)
        self.full = full
        self.min_cube_size = min_cube_size
        self.files = 0
        self.unclustered = 0
        self.unclustered_bytes = 0
        self.skipped_other = 0
        self.cubes: dict[str, int] = {}
        self.cube_files: dict[str, int] = {}
        self.sample_hashes = np.zeros(0, np.uint64)
        self.sample_paths = pa.array([], pa.string())
        self._zorder_ok: dict[str, bool] = {}

    def _same_columns(self, values: pa.Array) -> np.ndarray:
        """Per row: no ``ZCUBE_ZORDER_BY`` tag, or one that names the clustering columns."""
        for v in pc.unique(values.drop_null()).to_pylist():
            if v not in self._zorder_ok:
                try:
                    self._zorder_ok[v] = json.loads(v) == self.names
                except ValueError:
                    self._zorder_ok[v] = False
        good = pa.array([v for v, ok in self._zorder_ok.items() if ok], pa.string())
        return pc.or_(values.is_null(), pc.is_in(values, value_set=good)).to_numpy(zero_copy_only=False)

    def classify(self, table: pa.Table) -> tuple[np.ndarray, pa.Array, np.ndarray]:
        """Per row of ``table`` (columns :attr:`columns`): whether a clustering run may pick the
        file (``full``: every file), its ZCube id (null when none), and whether it is in a ZCube."""
        tags = table.column("tags")
        cube = _tag(tags, ZCUBE_ID)
        in_cube = pc.fill_null(pc.not_equal(cube, ""), False).to_numpy(zero_copy_only=False)
        if self.full:
            return np.ones(table.num_rows, bool), cube, in_cube
        provider = table.column("clusteringProvider")
        eligible = pc.fill_null(pc.equal(provider, CLUSTERING_PROVIDER), False).to_numpy(zero_copy_only=False)
        eligible |= provider.is_null().to_numpy(zero_copy_only=False)
        eligible &= self._same_columns(_tag(tags, ZCUBE_ZORDER_BY))
        return eligible, cube, in_cube

    def __call__(self, table: pa.Table, gid: np.ndarray, keep: np.ndarray, keys: list[PartitionKey]) -> None:
        if not keep.all():
            table = table.filter(pa.array(keep))
        if not table.num_rows:
            return
        self.files += table.num_rows
        eligible, cube, in_cube = self.classify(table)
        self.skipped_other += int((~eligible).sum())
        loose = eligible & ~in_cube
        self.unclustered += int(loose.sum())
        if loose.any():
            take = pa.array(np.flatnonzero(loose), pa.int64())
            sizes = table.column("size").take(take)
            if sizes.null_count:
                raise StreamFallback("an unclustered file without a size")
            self.unclustered_bytes += int(pc.sum(sizes).as_py() or 0)
            self._sample(table.column("path").take(take))
        rows = eligible & in_cube
        if not rows.any():
            return
        take = pa.array(np.flatnonzero(rows), pa.int64())
        sizes = table.column("size").take(take)
        if sizes.null_count:
            raise StreamFallback("a clustered file without a size")
        sums = pa.table({"cube": cube.take(take), "size": sizes}).group_by("cube").aggregate(
            [("size", "sum"), ("size", "count")])
        for c, total, n in zip(sums.column("cube").to_pylist(), sums.column("size_sum").to_pylist(),
                               sums.column("size_count").to_pylist()):
            self.cubes[c] = self.cubes.get(c, 0) + int(total)
            self.cube_files[c] = self.cube_files.get(c, 0) + int(n)

    def _sample(self, paths: pa.Array) -> None:
        """Keep the :data:`SAMPLE` paths with the smallest hashes seen (a uniform sample)."""
        paths = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
        hashes = np.concatenate([self.sample_hashes, path_hashes(paths).astype(np.uint64)])
        every = pa.concat_arrays([self.sample_paths, paths.cast(pa.string())])
        if len(hashes) > SAMPLE:
            keep = np.argpartition(hashes, SAMPLE - 1)[:SAMPLE]
            hashes, every = hashes[keep], every.take(pa.array(keep, pa.int64()))
        self.sample_hashes, self.sample_paths = hashes, every

    def chosen_cubes(self) -> list[str]:
        """The ZCubes the plan reclusters, in its order (as ``select_files`` chooses them)."""
        if self.full:
            return sorted(self.cubes)
        small = [c for c in sorted(self.cubes) if self.cubes[c] < self.min_cube_size]
        return [] if (not self.unclustered and len(small) <= 1) else small

    def is_empty(self, partitions: set[PartitionKey] | None) -> bool:
        """Whether the plan picks no file; ``partitions``: the auto policy's choice (None: no policy)."""
        if partitions is not None and () not in partitions:
            return True
        if self.full:
            return self.files == 0
        if self.unclustered:
            return False
        return sum(1 for total in self.cubes.values() if total < self.min_cube_size) <= 1
