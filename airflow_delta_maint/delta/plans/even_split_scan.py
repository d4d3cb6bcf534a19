"""Whether OPTIMIZE ``target_files=N`` has work, from the live files streamed in bounded memory.

:func:`~airflow_delta_maint.delta.plans.optimize.plan_target_files` leaves a selected partition
alone when it already has ``min(N, max(1, rows))`` files, none with a deletion vector, whose live
row counts (``numRecords`` minus the deletion vector's cardinality) are at most one apart; every
selected file needs ``numRecords``. :class:`EvenSplitCheck` keeps per partition the number of
files, the sum, minimum and maximum of their live rows, whether one has a deletion vector, and the
first path (in path order) without ``numRecords``: memory grows with partitions, not files.
``numRecords`` is read with pyarrow's JSON reader, a batch at a time, when every row is one JSON
object on one line; a batch it cannot read as the plan reads it (such a row, a number that is not
an integer, a repeated key) is read in Python, as the plan reads it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.state_stream import StreamFallback
from airflow_delta_maint.delta.plans.auto_compaction import PartitionKey
from airflow_delta_maint.delta.plans.optimize import live_rows, stats_num_records

__all__ = ["MAX_RECORDS", "EvenSplitCheck", "num_records"]

#: counts from here on are left to the whole plan (Python integers); sums of 2^23 files stay in 64 bits
MAX_RECORDS = 1 << 40
_BIG = np.iinfo(np.int64).max
_SMALL = np.iinfo(np.int64).min
_PARSE = pj.ParseOptions(explicit_schema=pa.schema([("numRecords", pa.int64())]),
                         unexpected_field_behavior="ignore")
_READ = pj.ReadOptions(use_threads=False, block_size=8 << 20)


def num_records(stats: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(``numRecords`` of every row, 0 where missing; whether it is present) of a column of JSON
    statistics, vectorised where pyarrow's JSON reader reads the batch as ``json.loads`` does.

    Raises:
        StreamFallback: a count of ``MAX_RECORDS`` or more, whose sums 64 bits may not hold.
    """
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    n = len(stats)
    present = pc.fill_null(pc.greater(pc.utf8_length(stats), 0), False).to_numpy(zero_copy_only=False)
    records = np.zeros(n, np.int64)
    rows = np.flatnonzero(present)
    if not len(rows):
        return records, present
    texts = stats.take(pa.array(rows, pa.int64()))
    got: np.ndarray | None = None
    # one JSON object per row, no line break: then pyarrow's reader yields exactly one row per text
    if pc.all(pc.match_substring_regex(texts, "^\\s*\\{[^\\n\\r]*\\}\\s*$")).as_py():
        try:
            lines = pa.LargeListArray.from_arrays(pa.array([0, len(texts)], pa.int64()), texts.cast(pa.large_string()))
            data = pc.binary_join(lines, pa.scalar("\n", pa.large_string()))[0]
            parsed = pj.read_json(pa.BufferReader(data.as_buffer()), parse_options=_PARSE, read_options=_READ)
            column = parsed.column("numRecords")
            if len(column) == len(rows):
                valid = column.is_valid().to_numpy(zero_copy_only=False)
                got = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
                present[rows] = valid
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            got = None
    if got is None:
        slow = [stats_num_records(t) for t in texts.to_pylist()]
        if any(r is not None and abs(r) >= MAX_RECORDS for r in slow):
            raise StreamFallback(f"a numRecords statistic of {MAX_RECORDS} or more")
        present[rows] = [r is not None for r in slow]
        got = np.array([r if r is not None else 0 for r in slow], np.int64)
    elif len(got) and int(np.abs(got).max()) >= MAX_RECORDS:
        raise StreamFallback(f"a numRecords statistic of {MAX_RECORDS} or more")
    records[rows] = got
    return records, present


class EvenSplitCheck:
    """A :data:`~airflow_delta_maint.delta.plans.partition_scan.Visit` that tells whether the
    ``target_files`` plan of the planning view rewrites any partition (see the module docstring)."""

    columns = ("stats",)

    def __init__(self, target_files: int):
        self.target = int(target_files)
        self.files = np.zeros(0, np.int64)
        self.rows = np.zeros(0, np.int64)
        self.low = np.zeros(0, np.int64)
        self.high = np.zeros(0, np.int64)
        self.with_dv = np.zeros(0, bool)
        self.missing: dict[int, str] = {}

    def _grow(self, n: int) -> None:
        extra = n - len(self.files)
        if extra > 0:
            extra = max(extra, len(self.files))
            self.files = np.concatenate([self.files, np.zeros(extra, np.int64)])
            self.rows = np.concatenate([self.rows, np.zeros(extra, np.int64)])
            self.low = np.concatenate([self.low, np.full(extra, _BIG, np.int64)])
            self.high = np.concatenate([self.high, np.full(extra, _SMALL, np.int64)])
            self.with_dv = np.concatenate([self.with_dv, np.zeros(extra, bool)])

    def __call__(self, table: pa.Table, gid: np.ndarray, keep: np.ndarray, keys: list[PartitionKey]) -> None:
        self._grow(len(keys))
        if not keep.all():
            table, gid = table.filter(pa.array(keep)), gid[keep]
        if not table.num_rows:
            return
        records, present = num_records(table.column("stats"))
        dv = table.column("deletionVector")
        has_dv = dv.is_valid().to_numpy(zero_copy_only=False)
        live = records
        if has_dv.any():
            dv = dv.combine_chunks() if isinstance(dv, pa.ChunkedArray) else dv
            card = pc.fill_null(pc.struct_field(dv, "cardinality"), 0).to_numpy(zero_copy_only=False)
            live = records - np.where(has_dv, card, 0).astype(np.int64)
            self.with_dv[np.unique(gid[has_dv])] = True
        np.add.at(self.files, gid, 1)
        np.add.at(self.rows, gid[present], live[present])
        np.minimum.at(self.low, gid[present], live[present])
        np.maximum.at(self.high, gid[present], live[present])
        if not present.all():
            lost = np.flatnonzero(~present)
            paths = table.column("path").take(pa.array(lost, pa.int64())).to_pylist()
            for g, path in zip(gid[lost].tolist(), paths):
                if g not in self.missing or path < self.missing[g]:
                    self.missing[g] = path

    def is_empty(self, keys: list[PartitionKey], selected: Callable[[PartitionKey], bool]) -> bool:
        """Whether no selected partition is to be rewritten.

        Raises:
            InvalidArgumentError: a selected file has no ``numRecords``, named as the plan names it
                (the first partition in the plan's order, the first such path in it).
        """
        self._grow(len(keys))
        chosen = [g for g, key in enumerate(keys) if self.files[g] and selected(key)]
        lacking = [g for g in chosen if g in self.missing]
        if lacking:
            first = min(lacking, key=lambda g: [(a, b or "") for a, b in keys[g]])
            live_rows({"path": self.missing[first]})  # raises the plan's error
            raise InvalidArgumentError(f"{self.missing[first]} has no numRecords statistic")  # pragma: no cover
        for g in chosen:
            shaped = (int(self.files[g]) == min(self.target, max(1, int(self.rows[g])))
                      and not self.with_dv[g] and int(self.high[g]) - int(self.low[g]) <= 1)
            if not shaped:
                return False
        return True
