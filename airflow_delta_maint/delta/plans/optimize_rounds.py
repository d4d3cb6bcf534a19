"""OPTIMIZE of a large table a part at a time, in bounded memory.

A plan of bin-packing or Z-order is a set of bins per partition, and no partition's bins depend on
another's. So on a table whose state is streamed (``state_stream``), the partitions with work
(found by ``partition_scan`` in one pass, with no Python object per file) are grouped into
*rounds* of at most ``max_files`` (default :data:`ROUND_FILES`) candidate files, in the plan's
partition order. A second pass spills every round's candidate files (bin-packing: smaller than the
minimum size or with a deletion vector; Z-order: every file) as whole add actions to a parquet file
of its own in a local folder. Each round is then read back as a partial snapshot (the table's
protocol, metadata and log, and those files) and planned, rewritten and committed as a plan of its
own: the same bins as the plan of the whole table, a round's worth in memory at a time. One
partition is never split: a partition with more candidates than a round holds is a round of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.plans.auto_compaction import PartitionKey
from airflow_delta_maint.delta.plans.partition_scan import PartitionScan, partition_ids
from airflow_delta_maint.delta.protocol.actions import ADD, ADD_SCHEMA, conform
from airflow_delta_maint.delta.protocol.paths import canonical_paths
from airflow_delta_maint.delta.storage.scratch import make_scratch, remove_scratch

__all__ = ["ROUND_FILES", "Rounds", "SpillWriters", "conformed_adds", "live_files_among", "partition_rounds", "spill_rounds"]

#: candidate files planned together: some 1-2 KiB each once planned (their add actions, with
#: statistics), so a round stays within a few hundred MiB on the driver (the default of the
#: application's ``optimize_round_files`` setting, ``DELTA_MAINT_OPTIMIZE_ROUND_FILES``)
ROUND_FILES = 200_000


def _order(key: PartitionKey) -> list[tuple[str, str]]:
    return [(a, b or "") for a, b in key]  # the order the plan lists its partitions in


@dataclass
class Rounds:
    """The partitions with work, grouped into rounds."""

    partitions: list[list[PartitionKey]] = field(default_factory=list)
    #: candidate files per round, as the first pass counted them
    files: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.partitions)


def partition_rounds(scan: PartitionScan, selected: Callable[[PartitionKey], bool], zorder: bool,
                     max_files: int = ROUND_FILES) -> Rounds:
    """Group the partitions the plan would rewrite (``selected`` and with work: a file with a
    deletion vector to purge, or two candidates that fit one bin; with ``zorder`` any file) into
    rounds of at most ``max_files`` candidates, in the plan's partition order."""
    work: list[tuple[PartitionKey, int]] = []
    for i, key in enumerate(scan.keys):
        if not selected(key):
            continue
        if zorder:
            if scan.files[i]:
                work.append((key, int(scan.files[i])))
            continue
        fits = scan.candidates[i] >= 2 and int(scan.smallest[i, 0]) + int(scan.smallest[i, 1]) <= scan.target_file_size
        if scan.candidate_dv[i] or fits:
            work.append((key, int(scan.candidates[i])))
    rounds = Rounds()
    for key, n in sorted(work, key=lambda kn: _order(kn[0])):
        if not rounds.partitions or (rounds.files[-1] and rounds.files[-1] + n > max_files):
            rounds.partitions.append([])
            rounds.files.append(0)
        rounds.partitions[-1].append(key)
        rounds.files[-1] += n
    return rounds


def conformed_adds(table: pa.Table) -> pa.Table:
    """A streamed piece of add actions (``ADD_SCHEMA``'s columns) cast to ``ADD_SCHEMA`` exactly."""
    return pa.Table.from_arrays([conform(table.column(f.name), f.type) for f in ADD], schema=ADD_SCHEMA)


class SpilledRounds:
    """The rounds' candidate files in a local folder, one parquet file per round; removed on
    :meth:`close`."""

    def __init__(self, folder: Path, count: int):
        self.folder = folder
        self.count = count

    def path(self, n: int) -> Path:
        return self.folder / f"round-{n:06d}.parquet"

    def read(self, n: int) -> pa.Table:
        """Round ``n``'s file as written (``ADD_SCHEMA``, and any column the writer added)."""
        path = self.path(n)
        if not path.exists():
            return ADD_SCHEMA.empty_table()
        return pq.read_table(path)

    def files(self, n: int) -> pa.Table:
        """Round ``n``'s candidate files (``ADD_SCHEMA``)."""
        return self.read(n).select(ADD_SCHEMA.names)

    def close(self) -> None:
        remove_scratch(self.folder)

    def __enter__(self) -> "SpilledRounds":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: rows the spill holds in memory before it writes the largest round's rows out
SPILL_BUFFER_ROWS = 100_000


class SpillWriters:
    """One parquet file per round (or bucket), written from pieces that arrive in any order.

    A piece of the log's stream holds rows of many rounds; written as they come, every file would
    get a row group per piece, and the open writers would keep the metadata of tens of thousands of
    row groups. So rows are buffered, at most :data:`SPILL_BUFFER_ROWS` in all, and the largest
    round's rows are written as one row group (without statistics, which nothing reads) when the
    buffer is full."""

    def __init__(self, path: Callable[[int], Path], schema: pa.Schema, buffer_rows: int | None = None):
        self.path, self.schema = path, schema
        self.buffer_rows = SPILL_BUFFER_ROWS if buffer_rows is None else buffer_rows
        self.writers: dict[int, pq.ParquetWriter] = {}
        self.pending: dict[int, list[pa.Table]] = {}
        self.counts: dict[int, int] = {}
        self.buffered = 0

    def add(self, n: int, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self.pending.setdefault(n, []).append(table)
        self.counts[n] = self.counts.get(n, 0) + table.num_rows
        self.buffered += table.num_rows
        while self.buffered > self.buffer_rows:
            self._flush(max(self.counts, key=lambda k: self.counts[k]))

    def _flush(self, n: int) -> None:
        tables = self.pending.pop(n, [])
        self.buffered -= self.counts.pop(n, 0)
        if not tables:
            return
        writer = self.writers.get(n)
        if writer is None:
            writer = self.writers[n] = pq.ParquetWriter(self.path(n), self.schema, compression="zstd",
                                                        write_statistics=False)
        writer.write_table(pa.concat_tables(tables), row_group_size=1 << 30)

    def close(self, flush: bool = True) -> None:
        try:
            if flush:
                for n in sorted(self.pending):
                    self._flush(n)
        finally:
            for writer in self.writers.values():
                writer.close()
            self.writers.clear()
            self.pending.clear()


def spill_rounds(state: StreamedState, rounds: Rounds, *, min_file_size: int, zorder: bool,
                 folder: str | None = None) -> SpilledRounds:
    """One pass over the live files: write each round's candidate files, whole add actions, to
    its own parquet file under a new folder in ``folder`` (default: the temporary folder). Raises
    what :meth:`StreamedState.scan` raises."""
    round_of = {key: n for n, keys in enumerate(rounds.partitions) for key in keys}
    spill = SpilledRounds(Path(make_scratch("delta-maint-optimize-", folder)), len(rounds))
    writers = SpillWriters(spill.path, ADD_SCHEMA)
    names = state.partition_columns
    try:
        for kind, table in state.scan(ADD_SCHEMA.names):
            if kind != "add" or table.num_rows == 0:
                continue
            local, keys = partition_ids(table.column("partitionValues"), names)
            of_key = np.fromiter((round_of.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
            rid = of_key[local] if len(keys) else np.full(table.num_rows, -1, np.int64)
            mask = rid >= 0
            if not zorder:
                small = pc.fill_null(pc.less(table.column("size"), min_file_size), False).to_numpy(zero_copy_only=False)
                with_dv = table.column("deletionVector").is_valid().to_numpy(zero_copy_only=False)
                mask &= small | with_dv
            if not mask.any():
                continue
            for n in np.unique(rid[mask]):
                writers.add(int(n), conformed_adds(table.filter(pa.array(mask & (rid == n)))))
        writers.close()
    except BaseException:
        writers.close(flush=False)
        spill.close()
        raise
    return spill


def live_files_among(state: TableState, paths: list[str]) -> Snapshot:
    """A partial snapshot of ``state`` holding the live files among ``paths`` only: the base a
    round's commit is rebased onto after a concurrent commit (from the scan: bounded by ``paths``)."""
    storage = state.storage
    wanted = canonical_paths(pa.array(sorted(set(paths)), pa.string()), storage.root)
    pieces = []
    for kind, table in state.scan(ADD_SCHEMA.names):
        if kind != "add" or table.num_rows == 0:
            continue
        hit = pc.is_in(canonical_paths(table.column("path"), storage.root), value_set=wanted)
        if pc.any(hit).as_py():
            pieces.append(conformed_adds(table.filter(hit)))
    files = pa.concat_tables(pieces) if pieces else ADD_SCHEMA.empty_table()
    return state.part(files)


def iter_round_snapshots(state: StreamedState, spill: SpilledRounds) -> Iterator[tuple[int, Snapshot]]:
    """Each round's partial snapshot, one at a time."""
    for n in range(spill.count):
        yield n, state.part(spill.files(n))
