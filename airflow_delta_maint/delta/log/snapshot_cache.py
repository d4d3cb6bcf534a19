"""Snapshots kept for the next reader of the same table version, while a caller asks for it.

A lake's night reads every table's log to plan, then runs the chosen jobs, whose first read is of the same
version: inside :func:`keeping_snapshots` that read is answered from the plan's. A snapshot is kept under its
log segment (the exact log files, their sizes and times, that reconstruct it), so a newer commit, a new
checkpoint or a rewritten file is a different key. A newer version whose segment only adds commits to a kept
one's is built from the kept snapshot and those commits (:meth:`SnapshotCache.nearest`, used by
``Snapshot.load``): the next job of a night, after the last one committed, reads one commit, not the whole log.
Only snapshots of up to
:data:`MAX_FILES` file actions are kept, at most :data:`MAX_TOTAL_FILES` together, the least recently used
leaving first. Outside the block nothing is kept.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterator, Protocol, TypeVar

from airflow_delta_maint.delta.storage.store import Storage


class _State(Protocol):
    """What the cache needs of a snapshot (``delta/log/snapshot.py``, which reads through this module)."""

    files: Any
    tombstones: Any
    storage: Storage
    version: int


Snapshot = TypeVar("Snapshot", bound=_State)
#: (table root, log segment, read of paths only, compaction files verified)
_Key = tuple[str, Hashable, bool, bool]

__all__ = ["MAX_FILES", "MAX_TOTAL_FILES", "SnapshotCache", "keeping_snapshots", "kept_snapshots"]

#: the most file actions (live and removed) of one snapshot kept
MAX_FILES = 10_000
#: the most file actions of every snapshot kept together
MAX_TOTAL_FILES = 100_000


class SnapshotCache:
    """Snapshots by (table root, log segment, what was read of it); thread-safe."""

    def __init__(self, max_files: int = MAX_FILES, max_total_files: int = MAX_TOTAL_FILES):
        self.max_files, self.max_total_files = max_files, max_total_files
        self._kept: OrderedDict[_Key, tuple[Any, int]] = OrderedDict()
        self._by_root: dict[str, set[_Key]] = {}
        self._total = 0
        self._lock = threading.Lock()
        #: reads answered by a kept snapshot, reads that were not, and of those the ones that started from a kept
        #: snapshot of an earlier version (see :meth:`nearest`)
        self.hits = self.misses = self.extended = 0

    def get(self, storage: Storage, segment: Hashable, paths_only: bool, verify: bool) -> Any:
        """A copy of the snapshot kept for the segment, read through ``storage`` from now on (one read whole
        serves a read of paths only too)."""
        keys: list[_Key] = [(storage.root, segment, False, verify)] + (
            [(storage.root, segment, True, verify)] if paths_only else [])
        with self._lock:
            for key in keys:
                found = self._kept.get(key)
                if found is not None:
                    self._kept.move_to_end(key)
                    self.hits += 1
                    return _copy(found[0], storage)
            self.misses += 1
            return None

    def nearest(self, storage: Storage, paths_only: bool, verify: bool,
                builds_on: Callable[[Any], bool]) -> Any:
        """A copy of the newest kept snapshot of the table whose segment ``builds_on`` accepts (a whole one, or
        with ``paths_only`` one of paths only too), read through ``storage`` from now on; None when none is."""
        with self._lock:
            found = [key for key in self._by_root.get(storage.root, ())
                     if key[3] == verify and (paths_only or not key[2]) and builds_on(key[1])]
            if not found:
                return None
            key = max(found, key=lambda k: self._kept[k][0].version)
            self._kept.move_to_end(key)
            self.extended += 1
            return _copy(self._kept[key][0], storage)

    def put(self, storage: Storage, segment: Hashable, paths_only: bool, verify: bool, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` when it is small enough, making room by the least recently used."""
        size = _size(snapshot)
        if size > self.max_files:
            return
        key: _Key = (storage.root, segment, paths_only, verify)
        with self._lock:
            if key in self._kept:
                return
            self._kept[key] = (_copy(snapshot, None), size)
            self._by_root.setdefault(storage.root, set()).add(key)
            self._total += size
            while self._total > self.max_total_files and self._kept:
                gone, (_, dropped) = self._kept.popitem(last=False)
                self._total -= dropped
                self._by_root[gone[0]].discard(gone)


def _size(snapshot: _State) -> int:
    return int(snapshot.files.num_rows) + int(snapshot.tombstones.num_rows)


def _copy(snapshot: Snapshot, storage: Storage | None) -> Snapshot:
    """A snapshot sharing the immutable state (Arrow tables) with its own lists and mappings, and the reader's
    ``storage`` (its credentials, its count of store calls) when given."""
    out = copy.copy(snapshot)
    for name, value in vars(snapshot).items():
        if isinstance(value, (list, dict, set)):
            setattr(out, name, copy.deepcopy(value))
    if storage is not None:
        out.storage = storage
    return out


_ACTIVE: list[SnapshotCache] = []
_ACTIVE_LOCK = threading.Lock()


def kept_snapshots() -> SnapshotCache | None:
    """The cache of the innermost :func:`keeping_snapshots` block of this process, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def keeping_snapshots(cache: SnapshotCache | None = None) -> Iterator[SnapshotCache]:
    """Keep the snapshots read inside the block, on every thread of the process, for their next reader."""
    cache = cache if cache is not None else SnapshotCache()
    with _ACTIVE_LOCK:
        _ACTIVE.append(cache)
    try:
        yield cache
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(cache)

