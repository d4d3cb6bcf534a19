"""VACUUM's valid set: the keys of every file a version inside the retention window may read.

The latest snapshot's active files and its tombstones deleted at or after the cutoff, and the
deletion vector files of both, as storage keys (the log's paths are relative and URL-encoded, or
absolute; paths outside the table root are left out). Built whole (:func:`valid_keys`), or looked
up for a few keys (:func:`valid_among`), on either state of the table through its scan; :mod:`~airflow_delta_maint.delta.plans.vacuum_valid_stream` streams it to parquet.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.deletion_vectors import dv_file_key
from airflow_delta_maint.delta.protocol.paths import maybe_noncanonical
from airflow_delta_maint.delta.storage.store import Storage, normalize_table_uri

__all__ = ["dv_keys", "key_for_log_path", "log_path_keys", "referencing", "split_simple_paths", "valid_among",
           "valid_keys"]


def _is_absolute(path: str) -> bool:
    if path.startswith("/"):
        return True
    scheme, sep, rest = path.partition(":")
    return bool(sep) and len(scheme) > 1 and rest.startswith("/") and scheme.replace("+", "").replace(
        "-", "").replace(".", "").isalnum() and scheme[0].isalpha()


def key_for_log_path(storage: Storage, path: str) -> str | None:
    """The storage key of a path as the log stores it (relative and URL-encoded, or absolute).

    Returns None for an absolute path outside the table root.
    """
    if not _is_absolute(path):
        return unquote(path) if "%" in path else path
    if path.startswith("/"):  # an absolute local path without a scheme
        if not storage.is_local:
            return None
        absolute = os.path.normpath(unquote(path))
        root = storage.local_dir.rstrip("/")
        return absolute[len(root) + 1:] if absolute.startswith(root + "/") else None
    try:
        absolute = normalize_table_uri(path)
    except ValueError:
        return None
    if absolute.startswith(storage.root + "/"):
        rest = absolute[len(storage.root) + 1:]
        return rest if absolute.startswith("file://") else unquote(rest)
    return None


def log_path_keys(storage: Storage, paths: Sequence[str]) -> list[str]:
    """The storage keys of paths as the log stores them (see :func:`key_for_log_path`); None paths
    and paths outside the table root are left out."""
    out = []
    for path in paths:
        if path is None:
            continue
        if path[:1] != "/" and ":/" not in path:
            out.append(unquote(path) if "%" in path else path)
        else:
            key = key_for_log_path(storage, path)
            if key is not None:
                out.append(key)
    return out


def dv_keys(storage: Storage, table: pa.Table) -> list[str]:
    """The storage keys of the deletion vector files of file actions (a ``deletionVector`` column);
    inline deletion vectors and files outside the table root are left out."""
    if table.num_rows == 0:
        return []
    column = table.column("deletionVector")
    present = pc.indices_nonzero(column.is_valid())
    if len(present) == 0:
        return []
    keys = []
    for dv in column.take(present).to_pylist():
        key = dv_file_key(storage, dv)
        if key is not None:
            keys.append(key)
    return keys


def referencing(state: TableHeader, cutoff_ms: int) -> Iterator[pa.Table]:
    """The file actions whose files VACUUM keeps, in pieces from the state's scan: live files, and
    tombstones deleted at or after the cutoff (path and deletion vector; eager or streamed alike)."""
    for kind, table in state.scan([], ["deletionTimestamp"]):
        if kind == "remove":
            deleted_at = pc.fill_null(table.column("deletionTimestamp"), 0)
            table = table.filter(pc.greater_equal(deleted_at, cutoff_ms))
        if table.num_rows:
            yield table


def split_simple_paths(paths: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, list[str]]:
    """Paths whose key is the path itself (relative, nothing escaped: nearly all of them), as
    Arrow; the others as a Python list for :func:`log_path_keys`. Vectorised: no Python per simple path."""
    paths = paths.drop_null()
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    odd = maybe_noncanonical(paths)  # '%' or ':' anywhere, or a leading '/': a byte scan
    return paths.filter(pa.array(~odd)), paths.filter(pa.array(odd)).to_pylist()


def valid_keys(state: TableHeader, cutoff_ms: int) -> set[str]:
    """Keys VACUUM must keep: active files, tombstones deleted at or after ``cutoff_ms``, and the
    deletion vector files of both. Paths outside the table root are left out."""
    storage = state.storage
    keep: set[str] = set()
    for table in referencing(state, cutoff_ms):
        simple, odd = split_simple_paths(table.column("path"))
        keep.update(simple.to_pylist())
        keep.update(log_path_keys(storage, odd))
        keep.update(dv_keys(storage, table))
    return keep


def valid_among(state: TableHeader, cutoff_ms: int, keys: Iterable[str]) -> set[str]:
    """The ``keys`` that are in the valid set (:func:`valid_keys`), without building all of it:
    cheap when the keys are few and the table is large (lite mode). On a streamed state it reads
    the checkpoint's ``add.path``, ``add.deletionVector``, ``remove.path``, ``remove.deletionVector``
    and ``remove.deletionTimestamp``, one row group at a time (``state_stream``)."""
    wanted = set(keys)
    if not wanted:
        return set()
    lookup = pa.array(sorted(wanted), pa.string())
    found: set[str] = set()
    for table in referencing(state, cutoff_ms):
        found |= _found_in(state.storage, table, lookup, wanted)
    return found


def _found_in(storage: Storage, table: pa.Table, lookup: pa.Array, wanted: set[str]) -> set[str]:
    found: set[str] = set()
    simple, odd = split_simple_paths(table.column("path"))
    if len(simple):
        found.update(simple.filter(pc.fill_null(pc.is_in(simple, value_set=lookup), False)).to_pylist())
    found.update(k for k in log_path_keys(storage, odd) if k in wanted)
    found.update(k for k in dv_keys(storage, table) if k in wanted)
    return found
