"""VACUUM's valid set of a large table, streamed from the log into parquet files instead of a set.

:func:`~airflow_delta_maint.delta.plans.vacuum_valid.valid_keys` builds a Python set of every key the
table still references (some 100 bytes per file). For a large table
:func:`write_valid_keys` streams the same keys, one row group of the checkpoint at a time
(``StreamedState.scan``: the file actions' path, deletion vector and deletion time), into parquet
files of one string column ``key``, for a distributed anti-join with the listing. Keys may repeat;
memory stays that of one batch. :class:`KeyWriter` writes such files for other key sets too (the
keys of the versions ``keep_versions`` keeps).
"""

from __future__ import annotations

import contextlib
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.plans.vacuum_valid import dv_keys, log_path_keys, split_simple_paths
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["KEY_SCHEMA", "KeyWriter", "file_keys", "write_valid_keys"]

KEY_SCHEMA = pa.schema([("key", pa.string())])
#: keys per output file: several files let the anti-join read them in parallel
FILE_KEYS = 2_000_000


def file_keys(storage: Storage, table: pa.Table) -> pa.Array:
    """The keys of a piece of file actions (``path``, ``deletionVector``): their data files and
    deletion-vector files, as :func:`~airflow_delta_maint.delta.plans.vacuum_valid.valid_keys` finds
    them (paths outside the table root left out)."""
    simple, odd = split_simple_paths(table.column("path"))
    extra = log_path_keys(storage, odd) + dv_keys(storage, table)
    if not extra:
        return simple.cast(pa.string())
    return pa.concat_arrays([simple.cast(pa.string()), pa.array(extra, pa.string())])


class KeyWriter:
    """Keys written as parquet files ``<prefix>-NNNNN.parquet`` of one column ``key`` (or rows of
    another ``schema`` whose first column is the key) into a local folder, :data:`FILE_KEYS` rows a
    file; ``written`` counts them (repeats included)."""

    def __init__(self, folder: str, prefix: str, schema: pa.Schema = KEY_SCHEMA) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder, self.prefix, self.schema = folder, prefix, schema
        self.written = 0
        self.paths: list[str] = []
        self._writer: pq.ParquetWriter | None = None
        self._in_file = 0

    def write(self, keys: pa.Array) -> None:
        """Write keys (a writer of :data:`KEY_SCHEMA`)."""
        self.write_table(pa.table([keys], schema=KEY_SCHEMA))

    def write_table(self, table: pa.Table) -> None:
        """Write rows of the writer's schema."""
        if not table.num_rows:
            return
        if self._writer is None or self._in_file >= FILE_KEYS:
            self._close_file()
            path = os.path.join(self.folder, f"{self.prefix}-{len(self.paths) + 1:05d}.parquet")
            self.paths.append(path)
            self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
            self._in_file = 0
        self._writer.write_table(table)
        self._in_file += table.num_rows
        self.written += table.num_rows

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        """Close the last file; with no key at all, write an empty file (the folder stays readable)."""
        self._close_file()
        if not self.paths:
            path = os.path.join(self.folder, f"{self.prefix}-00000.parquet")
            pq.write_table(self.schema.empty_table(), path)
            self.paths.append(path)

    def discard(self) -> None:
        """Close and delete every file written."""
        self._close_file()
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):  # already gone: nothing to discard
                os.remove(path)
        self.paths.clear()
        self.written = 0


def write_valid_keys(state: StreamedState, cutoff_ms: int, folder: str) -> int:
    """Write the keys VACUUM must keep (live files, tombstones deleted at or after ``cutoff_ms``,
    the deletion-vector files of both) as parquet files into the local ``folder``; return how
    many keys were written (repeats included).

    Raises:
        StreamFallback: the streamed state cannot be vouched for (``valid_keys`` then).
    """
    writer = KeyWriter(folder, "valid")
    try:
        for kind, table in state.scan([], ["deletionTimestamp"]):
            if kind == "remove":
                deleted_at = pc.fill_null(table.column("deletionTimestamp"), 0)
                table = table.filter(pc.greater_equal(deleted_at, cutoff_ms))
            if table.num_rows:
                writer.write(file_keys(state.storage, table))
    finally:
        writer.close()
    return writer.written
