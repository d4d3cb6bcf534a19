"""What a run asks an object store for: calls and bytes by kind, counted where :class:`~.store.Storage` and its
sibling modules call obstore (which keeps no request counters of its own).

Every object-store :class:`~.store.Storage` counts into one :class:`StoreCalls`: the one it was opened with, else
the counter of the :func:`counting` block it was opened in (a job's), else this process's :data:`PROCESS_CALLS`
(a Spark task's storages, unpickled in an executor's Python worker, count there; the task reports what its run
added, see ``app/runners/store_call_tasks.py``). Local disk is not counted: it takes no requests.

A kind counts our calls, not HTTP requests: obstore repeats a failed request by itself (``max_retries``), pages a
listing (S3: 1,000 keys a request, Azure: 5,000) and splits a bulk delete (S3: 1,000 keys a request, Azure: 256;
GCS: one request per key), all below what is counted here.
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from typing import Iterator, Mapping

__all__ = ["FIELDS", "KINDS", "PROCESS_CALLS", "StoreCallCounts", "StoreCalls", "counting", "current_calls",
           "empty_counts", "merge_counts"]

#: the kinds of calls, as the metrics name them
KINDS = ("list", "get", "getRange", "head", "put", "putIfAbsent", "multipartUpload", "multipartPart", "delete",
         "deleteMany")
#: what is counted of each kind: calls; bytes read or written; objects a listing returned or a delete named
FIELDS = ("calls", "bytes", "objects")

#: counts as plain data: ``{kind: {"calls": n, "bytes": n, "objects": n}}``, every kind and field present
StoreCallCounts = dict[str, dict[str, int]]


def empty_counts() -> StoreCallCounts:
    """Counts of no call."""
    return {kind: dict.fromkeys(FIELDS, 0) for kind in KINDS}


def merge_counts(into: StoreCallCounts, other: Mapping[str, Mapping[str, int]]) -> StoreCallCounts:
    """Add ``other`` (kinds or fields it lacks count as 0; unknown ones are ignored) to ``into``; return ``into``."""
    for kind, fields in other.items():
        target = into.get(kind)
        if target is None:
            continue
        for name in FIELDS:
            target[name] += int(fields.get(name, 0) or 0)
    return into


class StoreCalls:
    """A thread-safe counter of store calls by kind (see :data:`KINDS`); cheap: one lock per call counted."""

    __slots__ = ("_lock", "_counts")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {kind: [0, 0, 0] for kind in KINDS}

    def add(self, kind: str, calls: int = 1, nbytes: int = 0, objects: int = 0) -> None:
        """Count ``calls`` calls of ``kind`` that moved ``nbytes`` bytes and named ``objects`` objects."""
        with self._lock:
            counts = self._counts[kind]
            counts[0] += calls
            counts[1] += nbytes
            counts[2] += objects

    def counts(self) -> StoreCallCounts:
        """The counts so far, as plain data (a copy)."""
        with self._lock:
            return {kind: dict(zip(FIELDS, values)) for kind, values in self._counts.items()}

    def merge(self, other: Mapping[str, Mapping[str, int]]) -> None:
        """Add counts made elsewhere (a Spark task's) to these."""
        with self._lock:
            for kind, fields in other.items():
                values = self._counts.get(kind)
                if values is not None:
                    for i, name in enumerate(FIELDS):
                        values[i] += int(fields.get(name, 0) or 0)

    def since(self, earlier: Mapping[str, Mapping[str, int]]) -> StoreCallCounts:
        """What was counted after ``earlier`` (a :meth:`counts` of this counter)."""
        now = self.counts()
        for kind, fields in earlier.items():
            if kind in now:
                for name in FIELDS:
                    now[kind][name] -= int(fields.get(name, 0) or 0)
        return now

    def total(self) -> int:
        """Calls of every kind."""
        with self._lock:
            return sum(values[0] for values in self._counts.values())

    def __repr__(self) -> str:
        busy = {kind: c for kind, c in self.counts().items() if c["calls"]}
        return f"StoreCalls({busy})"


#: where storages opened outside any :func:`counting` block count (a Spark task's, the worker's checks)
PROCESS_CALLS = StoreCalls()

_CURRENT: ContextVar[StoreCalls | None] = ContextVar("delta_maint_store_calls", default=None)


def current_calls() -> StoreCalls:
    """The counter a storage opened here and now counts into: the innermost :func:`counting` block's (in this
    thread's context), else :data:`PROCESS_CALLS`."""
    return _CURRENT.get() or PROCESS_CALLS


@contextlib.contextmanager
def counting(calls: StoreCalls) -> Iterator[StoreCalls]:
    """Storages opened inside the block (in this thread's context) count into ``calls``."""
    token = _CURRENT.set(calls)
    try:
        yield calls
    finally:
        _CURRENT.reset(token)
