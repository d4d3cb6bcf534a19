"""Rebasing a rewrite onto concurrent deletion vectors: the pure row and bitmap logic.

OPTIMIZE reads a set of input files (each with the deletion vector it had at the read version),
writes their live rows into new files and commits ``remove`` (inputs) + ``add`` (outputs). On a
table with deletion vectors, a concurrent DELETE, UPDATE or MERGE that committed meanwhile did not
rewrite an input: it committed a ``remove`` and an ``add`` of the same path with a new vector, a
superset of the old one. The rewrite is still good: its outputs hold every row the input still
has, plus the rows the writer has since deleted. Carrying exactly those rows onto the outputs as
deletion vectors gives the table the writer's commit followed by ours would have given.

This module decides, from the log and the row indexes alone:

- what the commits after the read version did to each input (:func:`input_changes`): nothing,
  a new deletion vector (the live ``add`` that replaced it), or removed outright;
- whether a new vector is a superset of the one read and which rows it adds
  (:func:`new_deletions`);
- where an input's row lands in the outputs: :class:`InOrderRowMap` for rewrites that keep the
  inputs' live rows in order (bin-packing, even splits), :class:`ExplicitRowMap` for orderings
  (Z-order, liquid clustering) from the source of each output row recorded while writing, and
  :func:`locate_row_ids` through stable row ids on row-tracking tables;
- the output's add action with the carried vector (:func:`with_deletion_vector`).

No I/O here: the application reads the vectors and row ids and writes the new vectors.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.protocol.paths import canonical_path

__all__ = [
    "ExplicitRowMap", "InOrderRowMap", "InputChange", "RowMapError", "WinnerScan", "decode_row_map",
    "encode_row_map", "input_changes", "locate_row_ids", "merge_locations", "new_deletions", "pack_sources", "with_deletion_vector",
]

#: bits of a packed source kept for the row's position in its input file (2**40 rows per file)
POSITION_BITS = 40
_POSITION_MASK = np.uint64((1 << POSITION_BITS) - 1)
#: inputs one bin may have with packed sources (2**23)
MAX_INPUTS = 1 << (64 - POSITION_BITS - 1)


class RowMapError(ValueError):
    """The row map does not agree with the files it describes: the rebase cannot be trusted."""


# -- what the winners did ---------------------------------------------------------------------------
@dataclass(frozen=True)
class InputChange:
    """What the commits after the read version did to one input file.

    Attributes:
        kind: ``"replaced"`` (removed and re-added under the same path, say with a new deletion
            vector) or ``"removed"`` (no longer live).
        version: the newest commit that touched the file.
        operation: that commit's ``commitInfo.operation``.
        add: the file's live add action after those commits (``replaced`` only).
    """

    kind: str
    version: int
    operation: str
    add: dict | None = None

    @property
    def dv_id(self) -> str:
        return dv_unique_id((self.add or {}).get("deletionVector"))


@dataclass
class WinnerScan:
    """The commits after a read version as far as a rebase cares."""

    changes: dict[str, InputChange] = field(default_factory=dict)
    #: (version, "protocol" or "metaData") of the first commit that changed either, if any
    schema_change: tuple[int, str] | None = None


def input_changes(commits: Iterable[tuple[int, Sequence[Mapping[str, Any]]]], paths: Iterable[str],
                  root: str) -> WinnerScan:
    """Apply ``commits`` (version, actions), oldest first, to the input files ``paths``.

    Within one commit removes come before adds (the protocol's set semantics), so a ``remove``
    and an ``add`` of one path in one commit leave it replaced. Paths are compared by their
    canonical form; the result is keyed by the caller's spelling.
    """
    wanted: dict[str, list[str]] = {}
    for p in paths:
        wanted.setdefault(canonical_path(p, root), []).append(p)
    scan = WinnerScan()
    state: dict[str, InputChange] = {}
    for version, actions in commits:
        operation = ""
        removed: set[str] = set()
        added: dict[str, dict] = {}
        for action in actions:
            if action.get("commitInfo") is not None:
                operation = str(action["commitInfo"].get("operation") or "")
            elif action.get("remove") is not None:
                key = canonical_path(action["remove"]["path"], root)
                if key in wanted:
                    removed.add(key)
            elif action.get("add") is not None:
                key = canonical_path(action["add"]["path"], root)
                if key in wanted:
                    added[key] = dict(action["add"])
            elif scan.schema_change is None and (action.get("protocol") is not None
                                                 or action.get("metaData") is not None):
                scan.schema_change = (version, "protocol" if action.get("protocol") is not None else "metaData")
        for key in removed | set(added):
            if key in added:
                state[key] = InputChange("replaced", version, operation, added[key])
            else:
                state[key] = InputChange("removed", version, operation)
    for key, change in state.items():
        for original in wanted[key]:
            scan.changes[original] = change
    return scan


def new_deletions(read_rows: np.ndarray, now_rows: np.ndarray) -> np.ndarray | None:
    """The rows a newer deletion vector deletes beyond the one read (sorted ``uint64``), or None
    when it does not delete every row the one read deleted (not a superset)."""
    read_rows = np.asarray(read_rows, dtype=np.uint64)
    now_rows = np.asarray(now_rows, dtype=np.uint64)
    if read_rows.size and not np.isin(read_rows, now_rows, assume_unique=True).all():
        return None
    if not read_rows.size:
        return np.unique(now_rows)
    return np.setdiff1d(now_rows, read_rows, assume_unique=True).astype(np.uint64)


# -- where input rows land --------------------------------------------------------------------------
class InOrderRowMap:
    """Outputs that hold the inputs' live rows in input order, split into consecutive files.

    Bin-packing writes one file with every live row of its inputs in order; ``target_files``
    cuts the same sequence into consecutive output files. Input row ``p`` of input ``i`` is live
    row ``p - (rows the read vector deleted before p)`` of that input, and its global index in the
    sequence locates the output file and the position in it.

    Args:
        physical_rows: each input's physical row count (``numRecords``).
        read_deleted: each input's deleted row indexes at the read version (sorted ``uint64``).
        output_rows: each output file's row count, in output order.

    Raises:
        RowMapError: the outputs do not hold exactly the inputs' live rows.
    """

    def __init__(self, physical_rows: Sequence[int], read_deleted: Sequence[np.ndarray], output_rows: Sequence[int]):
        if len(physical_rows) != len(read_deleted):
            raise RowMapError("one deletion vector per input is needed")
        self.read_deleted = [np.asarray(d, dtype=np.uint64) for d in read_deleted]
        live = [int(n) - len(d) for n, d in zip(physical_rows, self.read_deleted)]
        if any(n < 0 for n in live):
            raise RowMapError("an input's deletion vector deletes more rows than the file has")
        self.physical_rows = [int(n) for n in physical_rows]
        self.input_start = np.concatenate([[0], np.cumsum(live, dtype=np.int64)])
        self.output_start = np.concatenate([[0], np.cumsum([int(n) for n in output_rows], dtype=np.int64)])
        if self.input_start[-1] != self.output_start[-1]:
            raise RowMapError(f"the outputs hold {int(self.output_start[-1])} rows but the inputs "
                              f"{int(self.input_start[-1])} live rows")

    def locate(self, ordinal: int, positions: np.ndarray) -> dict[int, np.ndarray]:
        """Output file index -> row positions in it, of input ``ordinal``'s rows at ``positions``
        (rows live at the read version)."""
        positions = np.asarray(positions, dtype=np.uint64)
        if not positions.size:
            return {}
        if int(positions.max()) >= self.physical_rows[ordinal]:
            raise RowMapError(f"row {int(positions.max())} is beyond input {ordinal}'s "
                              f"{self.physical_rows[ordinal]} rows")
        deleted = self.read_deleted[ordinal]
        if deleted.size and np.isin(positions, deleted).any():
            raise RowMapError("a row the read deletion vector deleted has no place in the outputs")
        live_index = positions.astype(np.int64) - np.searchsorted(deleted, positions, side="left").astype(np.int64)
        global_index = self.input_start[ordinal] + live_index
        out_file = np.searchsorted(self.output_start, global_index, side="right") - 1
        out: dict[int, np.ndarray] = {}
        for f in np.unique(out_file):
            sel = global_index[out_file == f]
            out[int(f)] = np.sort((sel - self.output_start[f]).astype(np.uint64))
        return out


def pack_sources(ordinal: int, positions: np.ndarray) -> np.ndarray:
    """Each row's source as one ``uint64``: the input's ordinal in its bin, then its position."""
    if not 0 <= ordinal < MAX_INPUTS:
        raise RowMapError(f"input ordinal {ordinal} is out of range")
    positions = np.asarray(positions, dtype=np.uint64)
    if positions.size and int(positions.max()) > int(_POSITION_MASK):
        raise RowMapError("a row position is beyond 2**40")
    return (np.uint64(ordinal) << np.uint64(POSITION_BITS)) | positions


def encode_row_map(sources: np.ndarray) -> bytes:
    """The sources of one output file's rows, in file order, as compressed bytes."""
    return zlib.compress(np.asarray(sources, dtype="<u8").tobytes(), 1)


def decode_row_map(data: bytes) -> np.ndarray:
    raw = zlib.decompress(data)
    if len(raw) % 8:
        raise RowMapError("a row map's length is not a multiple of 8 bytes")
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


class ExplicitRowMap:
    """Outputs whose rows were reordered (Z-order, liquid clustering): the source of every output
    row, recorded while the rows were written (:func:`pack_sources`)."""

    def __init__(self, sources: Sequence[np.ndarray]):
        self.sources = [np.asarray(s, dtype=np.uint64) for s in sources]

    def locate(self, ordinal: int, positions: np.ndarray) -> dict[int, np.ndarray]:
        wanted = pack_sources(ordinal, np.asarray(positions, dtype=np.uint64))
        out: dict[int, np.ndarray] = {}
        found = 0
        for f, src in enumerate(self.sources):
            hit = np.flatnonzero(np.isin(src, wanted))
            if hit.size:
                out[f] = hit.astype(np.uint64)
                found += hit.size
        if found != len(np.unique(wanted)):
            raise RowMapError(f"{len(np.unique(wanted)) - found} of input {ordinal}'s rows are in no output")
        return out


def locate_row_ids(row_ids: np.ndarray, output_row_ids: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """Output file index -> positions of the rows whose stable row ids are ``row_ids`` (row-tracking
    tables: every rewritten row keeps its id in the output's materialized column)."""
    wanted = np.unique(np.asarray(row_ids, dtype=np.int64))
    out: dict[int, np.ndarray] = {}
    found = 0
    for f, ids in enumerate(output_row_ids):
        hit = np.flatnonzero(np.isin(np.asarray(ids, dtype=np.int64), wanted))
        if hit.size:
            out[f] = hit.astype(np.uint64)
            found += hit.size
    if found != wanted.size:
        raise RowMapError(f"{wanted.size - found} deleted row ids are in no output (or in several)")
    return out


def merge_locations(parts: Iterable[Mapping[int, np.ndarray]]) -> dict[int, np.ndarray]:
    """Union of several :meth:`locate` results, per output file (sorted, unique)."""
    out: dict[int, list[np.ndarray]] = {}
    for part in parts:
        for f, rows in part.items():
            out.setdefault(f, []).append(rows)
    return {f: np.unique(np.concatenate(rows)).astype(np.uint64) for f, rows in out.items()}


# -- the carried add -----------------------------------------------------------------------------
def with_deletion_vector(add: Mapping[str, Any], descriptor: Mapping[str, Any]) -> dict:
    """An output's add action carrying ``descriptor``: its statistics keep ``numRecords`` (physical
    rows, as the protocol has it) and say their bounds are no longer tight (``tightBounds``), as
    delta-spark writes a file whose deletion vector it changed."""
    out = dict(add)
    out["deletionVector"] = dict(descriptor)
    if out.get("stats"):
        stats = json.loads(out["stats"])
        stats["tightBounds"] = False
        out["stats"] = json.dumps(stats, separators=(",", ":"))
    return out
