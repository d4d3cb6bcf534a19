"""Whether OPTIMIZE ``rewrite_type_widened`` has work, from the live files streamed in bounded memory.

The plan rewrites every selected file whose parquet footer holds a widened column in its old
type (:func:`~airflow_delta_maint.delta.protocol.type_widening.files_with_old_types`), so it has
work as soon as one such file is found. :class:`OldTypeFiles` reads the footers of the selected
files of each streamed piece, ``CHUNK`` at a time, and stops reading footers at the first file in
an old type (the log is still streamed to its end, so that the state is vouched for). A table whose
schema records no type change has no such file, and no footer is read.

Unlike the whole plan, which reads every selected file's footer, the check stops at the first old
file: a data file missing after it is reported by the run, not by the check.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from airflow_delta_maint.delta.plans.auto_compaction import PartitionKey
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.type_widening import files_with_old_types, type_changes
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["CHUNK", "OldTypeFiles"]

#: footers read together (on ``THREADS`` threads) before looking whether one was old
CHUNK = 64
THREADS = 16


class OldTypeFiles:
    """A :data:`~airflow_delta_maint.delta.plans.partition_scan.Visit` that tells whether a selected
    file of the planning view holds a widened column in its old type (see the module docstring)."""

    columns: tuple[str, ...] = ()

    def __init__(self, storage: Storage, metadata: Metadata, selected: Callable[[PartitionKey], bool]):
        self.storage, self.metadata, self.selected = storage, metadata, selected
        self.found: str | None = None
        self.read = 0
        self._changes = bool(type_changes(metadata))
        self._flags = np.zeros(0, bool)

    def __call__(self, table: pa.Table, gid: np.ndarray, keep: np.ndarray, keys: list[PartitionKey]) -> None:
        if self.found is not None or not self._changes:
            return
        if len(self._flags) < len(keys):  # new partitions: ask once each whether it is selected
            fresh = [bool(self.selected(k)) for k in keys[len(self._flags):]]
            self._flags = np.concatenate([self._flags, np.array(fresh, bool)])
        rows = np.flatnonzero(keep & self._flags[gid])
        if not len(rows):
            return
        paths = table.column("path").take(pa.array(rows, pa.int64())).to_pylist()
        for lo in range(0, len(paths), CHUNK):
            adds = [{"path": p} for p in paths[lo:lo + CHUNK]]
            self.read += len(adds)
            old = files_with_old_types(self.storage, self.metadata, adds, threads=THREADS)
            if old:
                self.found = old[0]["path"]
                return

    @property
    def is_empty(self) -> bool:
        return self.found is None
