"""Liquid clustering (PROTOCOL.md "Clustered Table"), decided from the log alone: the clustering
columns, which files an OPTIMIZE reclusters, and how well a table is clustered.

Files a clustering run writes carry ``clusteringProvider: "liquid"`` and the tags delta-spark's
incremental clustering keeps: ``ZCUBE_ID`` (one id per group of files clustered together, a
*ZCube*) and ``ZCUBE_ZORDER_BY`` (the clustering columns' logical names, as JSON). The choice of
files follows delta-spark's clustering strategy, so both engines treat each other's files alike:

1. candidates are files with no ``clusteringProvider`` (unclustered) or ``liquid``, leaving out
   files clustered by other columns (after the clustering columns changed, only ``full``
   reclusters them);
2. files of a ZCube at least ``min_cube_size`` bytes big are left alone;
3. when what remains is one ZCube and no unclustered file, there is nothing to do.

The candidates, unclustered files first, are packed into groups of at most
``target_cube_size`` bytes; each group is ordered along a Hilbert curve over the clustering
columns and written as files of the target file size, forming one new ZCube.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from airflow_delta_maint.delta.errors import CorruptLogError, InvalidArgumentError
from airflow_delta_maint.delta.protocol.actions import Protocol
from airflow_delta_maint.delta.protocol.features import table_features
from airflow_delta_maint.delta.protocol.schema import Column, SchemaLike, all_columns

__all__ = [
    "CLUSTERING_PROVIDER", "DEFAULT_MIN_CUBE_SIZE", "DEFAULT_TARGET_CUBE_SIZE", "DOMAIN", "ZCUBE_ID", "ZCUBE_ZORDER_BY",
    "ClusteringSelection", "average_overlap_depth", "clustering_columns", "clustering_quality", "is_clustered",
    "select_files", "tag_clustered_files",
]

DOMAIN = "delta.clustering"
CLUSTERING_PROVIDER = "liquid"
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"
GIB = 1 << 30
#: delta-spark's defaults: a ZCube of at least 100 GiB is finished; groups of up to 150 GiB
DEFAULT_MIN_CUBE_SIZE = 100 * GIB
DEFAULT_TARGET_CUBE_SIZE = 150 * GIB


def is_clustered(protocol: Protocol) -> bool:
    """The table has the ``clustering`` writer feature."""
    return "clustering" in table_features(protocol)[1]


def _physical_paths(configuration: str) -> list[tuple[str, ...]]:
    try:
        parsed = json.loads(configuration or "{}")
        raw = parsed.get("clusteringColumns")
    except (ValueError, AttributeError):
        raw = None
    if not isinstance(raw, list):
        raise CorruptLogError(f"unreadable {DOMAIN} domain configuration: {configuration!r}")
    out: list[tuple[str, ...]] = []
    for item in raw:
        # PROTOCOL.md's example lists names; delta-spark writes each column as a list of name parts
        if isinstance(item, str):
            out.append((item,))
        elif isinstance(item, list) and item and all(isinstance(p, str) for p in item):
            out.append(tuple(item))
        else:
            raise CorruptLogError(f"unreadable clustering column {item!r} in the {DOMAIN} domain")
    return out


def clustering_columns(schema: SchemaLike, domains: Mapping[str, Mapping[str, Any]]) -> list[Column]:
    """The clustering columns the ``delta.clustering`` domain names (physical names under column
    mapping), resolved against the schema; empty when the domain is absent or lists none.

    Raises:
        CorruptLogError: the domain is unreadable or names a column the schema does not have.
    """
    domain = domains.get(DOMAIN)
    if not domain or domain.get("removed"):
        return []
    by_physical = {c.physical_path: c for c in all_columns(schema)}
    out = []
    for path in _physical_paths(domain.get("configuration") or "{}"):
        col = by_physical.get(path)
        if col is None:
            raise CorruptLogError(f"the {DOMAIN} domain names column {'.'.join(path)!r}, which the schema lacks")
        out.append(col)
    return out


def _tags(add: Mapping[str, Any]) -> dict[str, str]:
    tags = add.get("tags") or {}
    return dict(tags) if not isinstance(tags, dict) else tags


@dataclass
class ClusteringSelection:
    """Files a clustering run rewrites, in groups (new ZCubes), and delta-spark's clusteringStats."""

    groups: list[list[dict]]
    stats: dict[str, Any]


def _file_stats(files: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    files = list(files)
    return {"numFiles": len(files), "size": sum(int(f["size"]) for f in files)}


def select_files(files: Sequence[dict], columns: Sequence[Column], *, full: bool = False,
                 min_cube_size: int = DEFAULT_MIN_CUBE_SIZE,
                 target_cube_size: int = DEFAULT_TARGET_CUBE_SIZE) -> ClusteringSelection:
    """Which live files to recluster, grouped into new ZCubes (see the module docstring).

    ``full`` reclusters every file, whatever its provider, columns or ZCube.
    """
    if min_cube_size <= 0 or target_cube_size <= 0:
        raise InvalidArgumentError(f"cube sizes must be positive (min {min_cube_size}, target {target_cube_size})")
    names = [c.name for c in columns]
    cubes: dict[str, list[dict]] = {}
    unclustered: list[dict] = []
    skipped_other = 0
    for f in files:
        tags = _tags(f)
        cube = tags.get(ZCUBE_ID)
        if full:
            (cubes.setdefault(cube, []) if cube else unclustered).append(f)
            continue
        provider = f.get("clusteringProvider")
        if provider not in (None, CLUSTERING_PROVIDER):
            skipped_other += 1
            continue
        zorder_by = tags.get(ZCUBE_ZORDER_BY)
        if zorder_by is not None:
            try:
                if json.loads(zorder_by) != names:
                    skipped_other += 1
                    continue
            except ValueError:
                skipped_other += 1
                continue
        (cubes.setdefault(cube, []) if cube else unclustered).append(f)
    input_cube_files = [f for c in cubes.values() for f in c]
    if full:
        chosen_cubes = sorted(cubes)
    else:
        small = [c for c in sorted(cubes) if sum(int(f["size"]) for f in cubes[c]) < min_cube_size]
        chosen_cubes = [] if (not unclustered and len(small) <= 1) else small
    candidates = sorted(unclustered, key=lambda f: f["path"]) + [
        f for c in chosen_cubes for f in sorted(cubes[c], key=lambda f: f["path"])]
    groups: list[list[dict]] = []
    current: list[dict] = []
    current_bytes = 0
    for f in candidates:
        if current and current_bytes + int(f["size"]) > target_cube_size:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(f)
        current_bytes += int(f["size"])
    if current:
        groups.append(current)
    stats = {
        "inputZCubeFiles": _file_stats(input_cube_files),
        "inputOtherFiles": _file_stats(unclustered),
        "inputNumZCubes": len(cubes),
        "mergedFiles": _file_stats(candidates),
        "numOutputZCubes": len(groups),
        "numFilesSkippedOtherClustering": skipped_other,
    }
    return ClusteringSelection(groups, stats)


def tag_clustered_files(adds: list[dict], columns: Sequence[Column]) -> list[dict]:
    """The add actions of one new ZCube, marked as delta-spark marks clustered files."""
    cube = str(uuid.uuid4())
    zorder_by = json.dumps([c.name for c in columns], separators=(",", ":"))
    return [{**a, "clusteringProvider": CLUSTERING_PROVIDER,
             "tags": {**_tags(a), ZCUBE_ID: cube, ZCUBE_ZORDER_BY: zorder_by}} for a in adds]


# -- quality ---------------------------------------------------------------------------------------
def _bound(stats: Mapping[str, Any], kind: str, path: Sequence[str]) -> Any:
    node: Any = stats.get(kind)
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return None if isinstance(node, dict) else node


def average_overlap_depth(files: Iterable[Mapping[str, Any]], column: Column) -> float | None:
    """How many files a point query on ``column`` must read, on average: for every file's min and
    max value taken as a point, the number of files whose [min, max] range contains it. A file
    without statistics for the column counts as containing every point. 1.0 is perfect; None when
    no file has statistics for the column."""
    lows: list[Any] = []
    highs: list[Any] = []
    unknown = 0
    for f in files:
        raw = f.get("stats")
        stats = json.loads(raw) if isinstance(raw, str) and raw else (raw if isinstance(raw, dict) else {})
        lo, hi = _bound(stats, "minValues", column.physical_path), _bound(stats, "maxValues", column.physical_path)
        if lo is None or hi is None:
            unknown += 1
        else:
            lows.append(lo)
            highs.append(hi)
    if not lows:
        return None
    try:
        lo_sorted = np.sort(np.array(lows, dtype=object))
        hi_sorted = np.sort(np.array(highs, dtype=object))
    except TypeError:
        return None
    points = np.concatenate([lo_sorted, hi_sorted])
    # files containing p: those starting at or before p minus those ending before p
    depth = (np.searchsorted(lo_sorted, points, side="right") - np.searchsorted(hi_sorted, points, side="left"))
    return float(np.mean(depth) + unknown)


def clustering_quality(files: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> dict[str, float | None]:
    """Average overlap depth per clustering column (logical name), as :func:`average_overlap_depth`."""
    return {c.name: (round(d, 3) if (d := average_overlap_depth(files, c)) is not None else None) for c in columns}
