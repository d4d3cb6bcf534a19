"""Carrying concurrent deletions onto an OPTIMIZE bin's outputs: the reads the rebase needs.

:mod:`airflow_delta_maint.delta.plans.dv_rebase` holds the logic; this module does its I/O on the
driver: reads the deletion vectors an input had at the read version and has now, the physical
row counts of the inputs (parquet footers), the stable row ids of deleted rows and of the
outputs' rows on row-tracking tables, and decodes the row maps Z-order and liquid clustering
return. :func:`carry_deletions` answers, for one bin, either the rows to delete in each output
or why the bin cannot be rebased (and must be dropped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.plans.dv_rebase import (ExplicitRowMap, InOrderRowMap, InputChange, RowMapError,
                                                       decode_row_map, locate_row_ids, merge_locations, new_deletions)
from airflow_delta_maint.delta.protocol.deletion_vectors import read_deletion_vector
from airflow_delta_maint.delta.protocol.row_tracking import RowTracking
from airflow_delta_maint.delta.storage.store import Storage

from .rewrite_counts import RewriteCounts

#: layouts whose outputs keep their inputs' live rows in order
IN_ORDER_LAYOUTS = ("binpack", "even")


@dataclass
class BinOutputs:
    """What rewriting one bin produced: the outputs' add actions (no deletion vector yet) and, for
    reordering layouts on tables without materialized row ids, each output's row map (the packed
    source of every row, compressed; see ``dv_rebase.encode_row_map``)."""

    adds: list[dict]
    row_maps: list[bytes] | None = None
    #: bin-packing: what the rewrite copied and re-encoded
    counts: RewriteCounts | None = None


@dataclass
class Carry:
    """The deletions to carry onto a bin's outputs: output index -> row positions."""

    rows: dict[int, np.ndarray] = field(default_factory=dict)
    #: inputs whose deletion vector changed after the read version
    changed_inputs: int = 0


def _parquet(storage: Storage, path: str) -> pq.ParquetFile:
    key = storage.key_for_path(path)
    if key is None:
        raise RowMapError(f"{path} is outside the table")
    source: Any = storage.local_path(key) if storage.is_local else pa.BufferReader(storage.read(key))
    return pq.ParquetFile(source)


def _deleted(storage: Storage, add: Mapping[str, Any]) -> np.ndarray:
    dv = add.get("deletionVector")
    return read_deletion_vector(storage, dv) if dv else np.empty(0, dtype=np.uint64)


def _row_ids(storage: Storage, rt: RowTracking, add: Mapping[str, Any], positions: np.ndarray | None) -> np.ndarray:
    """Stable row ids of a file's rows at ``positions`` (all rows when None): the materialized
    column where it holds a value, else ``baseRowId`` + the physical position."""
    pf = _parquet(storage, add["path"])
    n = pf.metadata.num_rows
    name = rt.row_id_column
    if name and name in pf.schema_arrow.names:
        ids = pf.read(columns=[name], use_threads=False).column(name).combine_chunks().cast(pa.int64())
    else:
        ids = pa.nulls(n, pa.int64())
    if ids.null_count:
        base = add.get("baseRowId")
        if base is None:
            raise RowMapError(f"{add['path']} has rows without a stable row id")
        ids = pc.coalesce(ids, pa.array(np.arange(int(base), int(base) + n, dtype=np.int64)))
    values = ids.to_numpy(zero_copy_only=False).astype(np.int64)
    return values if positions is None else values[positions.astype(np.int64)]


def carry_deletions(storage: Storage, layout: str, row_tracking: RowTracking, inputs: list[dict],
                    outputs: BinOutputs, changes: Mapping[str, InputChange]) -> Carry | str:
    """The rows to delete in ``outputs`` so that the bin's commit equals the concurrent commits
    in ``changes`` followed by ours, or the reason it cannot (the bin is then dropped).

    Args:
        storage: the table's storage.
        layout: the plan's layout (``binpack``, ``even``, ``zorder``, ``hilbert``).
        row_tracking: the table's row-tracking state (row ids map reordered rows when materialized).
        inputs: the bin's input files as read at the read version.
        outputs: what the rewrite wrote.
        changes: what later commits did to the inputs, by path (untouched inputs left out).
    """
    new_rows: dict[int, np.ndarray] = {}
    read_rows: dict[int, np.ndarray] = {}
    for k, add in enumerate(inputs):
        change = changes.get(add["path"])
        if change is None:
            continue
        where = f"{add['path']} (version {change.version}, {change.operation or 'unknown operation'})"
        if change.kind == "removed":
            return f"input removed by a concurrent commit: {where}"
        try:
            read_rows[k] = _deleted(storage, add)
            now = _deleted(storage, change.add or {})
        except DeltaError as exc:
            return f"deletion vector unreadable for {where}: {exc}"
        extra = new_deletions(read_rows[k], now)
        if extra is None:
            return f"the new deletion vector does not keep every row deleted at the read version: {where}"
        new_rows[k] = extra
    carry = Carry(changed_inputs=len(read_rows))
    wanted = {k: rows for k, rows in new_rows.items() if rows.size}
    if not wanted:
        return carry
    try:
        if layout in IN_ORDER_LAYOUTS:
            physical = [_parquet(storage, a["path"]).metadata.num_rows for a in inputs]
            deleted = [read_rows[k] if k in read_rows else _deleted(storage, a) for k, a in enumerate(inputs)]
            counts = [_num_records(a) for a in outputs.adds]
            mapper: Any = InOrderRowMap(physical, deleted, counts)
            carry.rows = merge_locations(mapper.locate(k, rows) for k, rows in wanted.items())
        elif outputs.row_maps is not None:
            mapper = ExplicitRowMap([decode_row_map(m) for m in outputs.row_maps])
            carry.rows = merge_locations(mapper.locate(k, rows) for k, rows in wanted.items())
        elif row_tracking.materializes:
            ids = np.concatenate([_row_ids(storage, row_tracking, inputs[k], rows) for k, rows in wanted.items()])
            out_ids = [_row_ids(storage, row_tracking, a, None) for a in outputs.adds]
            carry.rows = locate_row_ids(ids, out_ids)
        else:
            return "no row map: the rewrite recorded no source of its reordered rows"
    except RowMapError as exc:
        return f"row map disagrees with the files: {exc}"
    except (DeltaError, OSError) as exc:
        return f"cannot read the files to map rows: {exc}"
    return carry


def _num_records(add: Mapping[str, Any]) -> int:
    stats = json.loads(add.get("stats") or "{}")
    if stats.get("numRecords") is None:
        raise RowMapError(f"output {add['path']} has no numRecords statistic")
    return int(stats["numRecords"])
