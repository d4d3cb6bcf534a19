"""What VACUUM full mode runs inside Spark tasks: list subtrees, delete files.

Imports only the storage layer and :mod:`airflow_delta_maint.delta.storage.table_files` (no pyarrow,
no pyspark), so a freshly started Python worker is ready quickly.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence

from airflow_delta_maint.delta.storage.table_files import Subtree, delete_files_parallel, list_subtree
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["DELETE_BATCH", "ListingSummary", "TASK_THREADS", "delete_partition", "delete_rows", "list_partition", "list_rows",
           "split_keys", "summarize"]

DELETE_BATCH = 500
TASK_THREADS = 4
_SEP = "\0"  # cannot occur in a file name

# (old keys joined by _SEP, their sizes, their modification times, visible files, visible bytes,
#  folders with their modification times)
ListingSummary = tuple[str, list[int], list[int], int, int, dict[str, int]]


def summarize(found: Subtree, cutoff_ms: int) -> ListingSummary:
    """A compact, cheaply pickled form of a listing: only the files older than the cutoff are
    sent back in full (the others can never be deleted by this run)."""
    old = [i for i, m in enumerate(found.mtimes) if m < cutoff_ms]
    if len(old) == len(found.keys):
        keys, sizes, mtimes = found.keys, found.sizes, found.mtimes
    else:
        keys = [found.keys[i] for i in old]
        sizes = [found.sizes[i] for i in old]
        mtimes = [found.mtimes[i] for i in old]
    return _SEP.join(keys), sizes, mtimes, len(found.keys), sum(found.sizes), found.dirs


def split_keys(joined: str) -> list[str]:
    """The keys of a :data:`ListingSummary`."""
    return joined.split(_SEP) if joined else []


def list_partition(prefixes: Iterable[str], storage: Storage, cutoff_ms: int,
                   partition_columns: Sequence[str]) -> Iterator[ListingSummary]:
    """Spark task: list the subtrees under ``prefixes`` and yield one merged summary. Object
    stores are listed a few subtrees at a time on threads (listing waits on the network); local
    disk on one thread (the walk is CPU-bound Python, threads would only contend for the GIL)."""
    prefixes = list(prefixes)
    merged = Subtree()
    threads = 1 if storage.is_local else max(1, min(TASK_THREADS, len(prefixes)))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for found in pool.map(lambda p: list_subtree(storage, p, partition_columns), prefixes):
            merged.extend(found)
    yield summarize(merged, cutoff_ms)


def delete_partition(keys: Iterable[str], storage: Storage, counter: Any) -> Iterator[int]:
    """Spark task: delete its keys on a few threads; report progress through an accumulator;
    yield how many were deleted."""
    yield delete_files_parallel(storage, list(keys), TASK_THREADS, DELETE_BATCH, counter.add)


def list_rows(prefixes: Iterable[str], storage: Storage, partition_columns: Sequence[str]
              ) -> Iterator[tuple[str, str, int, int]]:
    """Spark task: list the subtrees under ``prefixes`` and yield one row per visible file
    ``("f", key, size, mtime)`` and folder ``("d", key, 0, mtime)``, for a listing that stays in
    Spark (VACUUM's anti-join) instead of coming back to the driver."""
    prefixes = list(prefixes)
    threads = 1 if storage.is_local else max(1, min(TASK_THREADS, len(prefixes)))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for found in pool.map(lambda p: list_subtree(storage, p, partition_columns), prefixes):
            for key, size, mtime in zip(found.keys, found.sizes, found.mtimes):
                yield "f", key, size, mtime
            for key, mtime in found.dirs.items():
                yield "d", key, 0, mtime


def delete_rows(rows: Iterable[Any], storage: Storage, counter: Any) -> Iterator[int]:
    """Spark task: delete the keys of its rows (first field) on a few threads; yield how many went."""
    keys = [r[0] for r in rows]
    yield delete_files_parallel(storage, keys, TASK_THREADS, DELETE_BATCH, counter.add)
