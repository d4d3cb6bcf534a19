"""A listing of an object-store table that starts before VACUUM knows it needs it.

Loading the snapshot and listing the table both wait on the store, so a full VACUUM starts one
recursive listing of the table root on a thread before it reads the log. Once the snapshot says
how large the table is, the job either takes the listing (a small table, listed on the driver in
one stream anyway) or cancels it (a large one, listed by prefix in Spark tasks). A listing that
grows past its page limit stops by itself, so a job that fails before deciding wastes little.
"""

from __future__ import annotations

import logging
import threading
from typing import Sequence

from airflow_delta_maint.delta.storage.table_files import Subtree, hidden_name, partition_prefixes
from airflow_delta_maint.delta.storage.failures import translate
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["PrefetchedListing"]

log = logging.getLogger("delta_maint.vacuum")

#: the listing gives up beyond this many objects (some 200 pages of 1,000 keys)
PREFETCH_MAX_OBJECTS = 200_000


class PrefetchedListing:
    """Every object under the root of ``storage`` but ``_delta_log``, listed on a daemon thread.

    Args:
        storage: an object-store table root (local disk is listed folder by folder instead).
        max_objects: stop, and give no result, past this many objects.
    """

    def __init__(self, storage: Storage, max_objects: int = PREFETCH_MAX_OBJECTS) -> None:
        if storage.is_local:
            raise ValueError("a prefetched listing is for object stores")
        self._storage = storage
        self._max = max_objects
        self._stop = threading.Event()
        self._keys: list[str] = []
        self._sizes: list[int] = []
        self._mtimes: list[int] = []
        self._error: BaseException | None = None
        self._complete = False
        self._thread = threading.Thread(target=self._run, name="vacuum-prefetch-listing", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import obstore
        import pyarrow as pa
        import pyarrow.compute as pc

        keys, sizes, mtimes = self._keys, self._sizes, self._mtimes
        storage = self._storage
        storage.calls.add("list")
        try:
            # Arrow pages of 1,000: no dict and no datetime per object, a fraction of the CPU (which
            # the driver's other thread, loading the log, needs meanwhile)
            for chunk in obstore.list(storage.store, None, chunk_size=1000, return_arrow=True):
                if self._stop.is_set() or len(keys) > self._max:
                    return  # leaving the stream stops the requests after the page in flight
                page = pa.record_batch(chunk)
                storage.calls.add("list", 0, objects=page.num_rows)
                ms = pc.divide(page.column("last_modified").cast(pa.int64()), 1000).to_pylist()
                for key, size, mtime in zip(page.column("path").to_pylist(), page.column("size").to_pylist(), ms):
                    if not key.startswith("_delta_log/"):
                        keys.append(key)
                        sizes.append(size)
                        mtimes.append(mtime)
            self._complete = len(keys) <= self._max
        except Exception as exc:  # raised, as one line, where the result is taken
            self._error = translate(exc, storage.root, storage.family, "list")

    def cancel(self) -> None:
        """Stop listing: the table is listed another way."""
        self._stop.set()

    def subtree(self, partition_columns: Sequence[str] = ()) -> Subtree | None:
        """Wait for the listing; its visible files (hidden names skipped as
        :func:`~.table_files.list_subtree` does), or None when it gave up or was cancelled.

        Raises the listing's error (a one-line StorageError) if it failed.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        if not self._complete:
            log.info("the early listing stopped after %d objects; listing again", len(self._keys))
            return None
        prefixes = partition_prefixes(partition_columns)
        out = Subtree()
        for key, size, mtime in zip(self._keys, self._sizes, self._mtimes):
            if not any(hidden_name(p, prefixes) for p in key.split("/")):
                out.keys.append(key)
                out.sizes.append(size)
                out.mtimes.append(mtime)
        return out
