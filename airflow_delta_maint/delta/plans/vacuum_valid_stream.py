"""VACUUM's valid set of a large table, streamed from the log into parquet files instead of a set.

:func:`~airflow_delta_maint.delta.plans.vacuum.valid_keys` builds a Python set of every key the
table still references (some 100 bytes per file). For a large table
:func:`write_valid_keys` streams the same keys, one row group of the checkpoint at a time
(``StreamedState.scan``: the file actions' path, deletion vector and deletion time), into parquet
files of one string column ``key``, for a distributed anti-join with the listing. Keys may repeat;
memory stays that of one batch.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.plans.vacuum import _dv_keys, _keys, _split_simple

__all__ = ["KEY_SCHEMA", "write_valid_keys"]

KEY_SCHEMA = pa.schema([("key", pa.string())])
#: keys per output file: several files let the anti-join read them in parallel
FILE_KEYS = 2_000_000


def _piece_keys(state: StreamedState, table: pa.Table) -> pa.Array:
    simple, odd = _split_simple(table.column("path"))
    extra = _keys(state.storage, odd) + _dv_keys(state.storage, table)
    if not extra:
        return simple.cast(pa.string())
    return pa.concat_arrays([simple.cast(pa.string()), pa.array(extra, pa.string())])


def write_valid_keys(state: StreamedState, cutoff_ms: int, folder: str) -> int:
    """Write the keys VACUUM must keep (live files, tombstones deleted at or after ``cutoff_ms``,
    the deletion-vector files of both) as parquet files into the local ``folder``; return how
    many keys were written (repeats included).

    Raises:
        StreamFallback: the streamed state cannot be vouched for (``valid_keys`` then).
    """
    os.makedirs(folder, exist_ok=True)
    written = 0
    number = 0
    writer: pq.ParquetWriter | None = None
    in_file = 0
    try:
        for kind, table in state.scan([], ["deletionTimestamp"]):
            if kind == "remove":
                deleted_at = pc.fill_null(table.column("deletionTimestamp"), 0)
                table = table.filter(pc.greater_equal(deleted_at, cutoff_ms))
            if not table.num_rows:
                continue
            keys = _piece_keys(state, table)
            if not len(keys):
                continue
            if writer is None or in_file >= FILE_KEYS:
                if writer is not None:
                    writer.close()
                number += 1
                writer = pq.ParquetWriter(os.path.join(folder, f"valid-{number:05d}.parquet"), KEY_SCHEMA,
                                          compression="zstd")
                in_file = 0
            writer.write_table(pa.table([keys], schema=KEY_SCHEMA))
            in_file += len(keys)
            written += len(keys)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:  # no key at all: an empty file keeps the folder readable
        pq.write_table(KEY_SCHEMA.empty_table(), os.path.join(folder, "valid-00000.parquet"))
    return written
