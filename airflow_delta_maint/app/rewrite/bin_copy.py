"""OPTIMIZE's bin-packing rewrite of one bin, its inputs' row groups copied byte for byte where that
is exact (:mod:`.copy_choice` decides) and the other inputs read and re-encoded together into full
row groups, in one output file.

The output keeps the inputs' live rows in the bin's order (a rebase onto concurrent deletion vectors
counts on it): rows waiting to be re-encoded are written before the next copied input. Full row groups of
them are encoded on threads of the bin (ENCODE_THREADS at once) while the next inputs are read, and written
in their order. Its statistics are merged from the footers; the float and double values the footers cannot
prove are gathered from every row on its way in (the re-encoded tables as they are encoded, each copied
input's columns read from it on a thread while the next is copied), and only what is still unknown is read
back (:mod:`~airflow_delta_maint.delta.protocol.copied_stats`), so they are those a full rewrite gives. It
is written as a stream (a multipart upload on object stores), its copied inputs read by ranges. A
column chunk whose pages do not match its metadata discards the output and the bin is re-encoded.
Pure pyarrow and the core: runs in a Spark task, a thread of the worker or a test.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.parquet.chunks import CorruptChunkError
from airflow_delta_maint.delta.parquet.footer import Footer
from airflow_delta_maint.delta.parquet.row_group_copy import CopyRefused, RowGroupCopyWriter, dictionary_columns
from airflow_delta_maint.delta.protocol.copied_stats import copied_file_stats_gathered
from airflow_delta_maint.delta.protocol.schema import PrimitiveType
from airflow_delta_maint.delta.protocol.stats import StatsCollector, stats_json
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.stream_write import open_stream

from . import data_files
from .copy_choice import CopyChoice, choose_copies, input_source, table_reason
from .data_files import (RewriteSpec, file_size, output_dir, output_name, read_ahead_room, read_ahead_threads,
                         read_data_file)
from .rewrite_counts import RewriteCounts
from .variant_columns import with_variant_layout

__all__ = ["BinRewrite", "rewrite_bin"]

log = logging.getLogger("delta_maint.optimize")


class BinRewrite(NamedTuple):
    """One bin rewritten: the output's add action (none when no row is left) and what was copied."""

    adds: list[dict]
    counts: RewriteCounts


def rewrite_bin(spec: RewriteSpec, adds: list[dict], partition_values: dict[str, str | None]) -> BinRewrite:
    """Rewrite one bin into one file, copying row groups as ``spec.copy_row_groups`` allows."""
    spec = with_variant_layout(spec, adds)
    if spec.copy_row_groups == "never":
        return _reencode(spec, adds, partition_values, RewriteCounts())
    reason = table_reason(spec)
    if reason is not None:
        counts = RewriteCounts()
        counts.fell_back(reason, len(adds))
        return _reencode(spec, adds, partition_values, counts)
    choice = choose_copies(spec, adds)
    if not choice.copies:
        return _reencode(spec, adds, partition_values, choice.counts)
    try:
        return _copy_bin(spec, adds, partition_values, choice)
    except (CorruptChunkError, CopyRefused) as exc:
        log.warning("OPTIMIZE %s: the row groups of a bin of %d files cannot be copied (%s); re-encoding it",
                    spec.storage.root, len(adds), exc)
        counts = RewriteCounts()
        counts.fell_back("corruptChunk" if isinstance(exc, CorruptChunkError) else "fileLayout", len(adds))
        return _reencode(spec, adds, partition_values, counts)


def _reencode(spec: RewriteSpec, adds: list[dict], partition_values: dict[str, str | None],
              counts: RewriteCounts) -> BinRewrite:
    sizes: list[int] = []
    out = data_files.rewrite_bin(spec, adds, partition_values, sizes)
    counts.row_groups_reencoded += len(sizes)
    counts.bytes_reencoded += sum(sizes)
    return BinRewrite(out, counts)


#: tables of rows waiting to be re-encoded that are encoded at once, each on a thread of the bin, while the bin
#: reads on (each holds up to ``row_group_bytes`` of Arrow data and its encoded bytes until its turn to be written)
ENCODE_THREADS = 2
#: room for a row group's encoded bytes, as a share of its Arrow bytes, plus ENCODE_ROOM_BYTES (bytes that do not fit
#: are encoded again into a buffer of their own)
ENCODE_ROOM_SHARE = 1.25
ENCODE_ROOM_BYTES = 1 << 20
#: a new encoding buffer is made this much larger than the row group at hand needs, so that the next row groups, a
#: little larger or smaller, fit in it too (pages never written are never mapped)
ENCODE_BUFFER_SLACK = 1.5


class _Pending:
    """Rows waiting to be re-encoded into the output, encoded as one row group once they hold
    ``row_group_bytes`` of Arrow data (or before the next copied input, or at the end) on a thread of
    ``pool``, and written in their order; their float values go to ``stats`` as they are encoded. Columns whose
    dictionary outgrew its page in the first row group encoded are not tried as dictionaries again. Into a local
    file, row groups are encoded into buffers used again once their bytes are written (an upload may hold on to
    the bytes it is given, so each row group there gets a buffer of its own)."""

    def __init__(self, writer: RowGroupCopyWriter, counts: RewriteCounts, spec: RewriteSpec,
                 partition_values: dict[str, str | None], stats: StatsCollector, pool: ThreadPoolExecutor):
        self.writer, self.counts, self.stats, self.pool = writer, counts, stats, pool
        self.spec, self.partition_values = spec, partition_values
        self.tables: list[pa.Table] = []
        self.nbytes = 0
        self.encoding: deque[tuple[Future, pa.Buffer | None]] = deque()
        self.dictionary: bool | list[str] = True
        self.reuse_buffers = spec.storage.is_local
        self.free_buffers: list[pa.Buffer] = []

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.nbytes += table.nbytes
        if self.nbytes >= self.spec.row_group_bytes:
            self.flush()

    def flush(self) -> None:
        """Hand the waiting rows to an encoding thread (once fewer than ENCODE_THREADS are at work)."""
        if not self.tables:
            return
        data = pa.concat_tables(self.tables) if len(self.tables) > 1 else self.tables[0]
        self.tables, self.nbytes = [], 0
        while len(self.encoding) >= ENCODE_THREADS:
            self._write_next()
        data = self.spec.with_partitions(data, self.partition_values)
        into = self._buffer(encoding_room(data)) if self.reuse_buffers else None
        self.encoding.append((self.pool.submit(self._encode, data, into), into))

    def _buffer(self, size: int) -> pa.Buffer:
        """A buffer of at least ``size`` bytes to encode into: a free one, else a new one with room to spare."""
        while self.free_buffers:
            buffer = self.free_buffers.pop()
            if buffer.size >= size:
                return buffer
        return pa.allocate_buffer(int(size * ENCODE_BUFFER_SLACK))

    def _encode(self, data: pa.Table, into: pa.Buffer | None) -> tuple[pa.BufferReader, Footer] | None:
        self.stats.update(data)
        dictionary = self.dictionary
        encoded = self.writer.encode(data, dictionary=dictionary, into=into)
        kept = dictionary_columns(encoded[1]) if encoded is not None and dictionary is True else None
        if kept is not None:
            self.dictionary = kept
        return encoded

    def drain(self) -> None:
        """Write every waiting row, in order: before a copied input, and at the end."""
        self.flush()
        while self.encoding:
            self._write_next()

    def _write_next(self) -> None:
        future, into = self.encoding.popleft()
        encoded = future.result()
        if encoded is not None:
            before = len(self.writer.row_groups)
            self.writer.add_file(*encoded)
            self.counts.row_groups_reencoded += len(self.writer.row_groups) - before
            self.counts.bytes_reencoded += _compressed(self.writer, before)
        if into is not None:  # its bytes are in the file now
            self.free_buffers.append(into)


def encoding_room(table: pa.Table) -> int:
    """Bytes to set aside for ``table`` encoded as one row group (see ENCODE_ROOM_SHARE)."""
    return int(table.nbytes * ENCODE_ROOM_SHARE) + ENCODE_ROOM_BYTES


def _compressed(writer: RowGroupCopyWriter, first: int) -> int:
    return sum(int(rg["total_compressed_size"]) for rg in writer.row_groups[first:])


def _inputs(spec: RewriteSpec, adds: list[dict], footers: list[Footer | None]
            ) -> Iterator[tuple[dict, Footer | None, pa.Table | None]]:
    """The bin's inputs in order: (add, footer, None) to copy, (add, None, live rows) to re-encode,
    the re-encoded ones read ahead (see :func:`~.data_files.read_ahead_room`)."""
    order = [i for i, f in enumerate(footers) if f is None]
    storage = spec.storage
    with ThreadPoolExecutor(max_workers=read_ahead_threads(storage)) as pool:
        pending: dict[int, Future] = {}
        for i, add in enumerate(adds):
            while order and read_ahead_room(storage, [file_size(adds[j]) for j in pending], file_size(adds[order[0]])):
                j = order.pop(0)
                pending[j] = pool.submit(read_data_file, spec, adds[j])
            footer = footers[i]
            yield (add, footer, None) if footer is not None else (add, None, pending.pop(i).result())


def _gather(spec: RewriteSpec, add: dict, stats: StatsCollector) -> None:
    """A copied input's float and double values, read from the input (its bytes are the output's), to ``stats``."""
    names = list(dict.fromkeys(c.physical_path[0] for c in stats.cols
                               if isinstance(c.type, PrimitiveType) and c.type.name in ("float", "double")))
    if not names:
        return
    source = input_source(spec, add)
    try:
        parquet = pq.ParquetFile(source)
        present = [n for n in names if n in parquet.schema_arrow.names]
        if present:
            stats.update(parquet.read(columns=present, use_threads=False))
    finally:
        if isinstance(source, RangeReader):
            source.close()


def _write(spec: RewriteSpec, adds: list[dict], choice: CopyChoice, sink: object,
           partition_values: dict[str, str | None], stats: StatsCollector) -> RowGroupCopyWriter:
    """The bin written into ``sink``: re-encoded rows encoded on threads while the next inputs are read, each
    copied input's float values read on a thread while the next is copied; all of them given to ``stats``."""
    assert choice.reference is not None
    writer = RowGroupCopyWriter(sink, choice.reference, spec.compression)  # type: ignore[arg-type]
    counts = choice.counts
    with ThreadPoolExecutor(max_workers=ENCODE_THREADS + 1) as pool:
        pending = _Pending(writer, counts, spec, partition_values, stats, pool)
        gathering: list[Future] = []
        for add, footer, table in _inputs(spec, adds, choice.footers):
            if footer is None:
                assert table is not None
                pending.add(table)
                continue
            pending.drain()  # the rows before this input go first: the bin's order is kept
            before = len(writer.row_groups)
            source = input_source(spec, add)
            try:
                writer.add_file(source, footer)
            finally:
                if isinstance(source, RangeReader):
                    source.close()
            counts.row_groups_copied += len(writer.row_groups) - before
            counts.bytes_copied += _compressed(writer, before)
            gathering.append(pool.submit(_gather, spec, add, stats))
        pending.drain()
        for done in gathering:
            done.result()
    return writer


def _copy_bin(spec: RewriteSpec, adds: list[dict], partition_values: dict[str, str | None],
              choice: CopyChoice) -> BinRewrite:
    storage = spec.storage
    rel_path = f"{output_dir(storage, adds)}{output_name(spec)}"
    key = storage.key_for_path(rel_path)
    if key is None:
        raise ValueError(f"{rel_path} is not inside the table {storage.root}")
    collector = StatsCollector(spec.metadata)
    with open_stream(storage, key) as sink:
        result = _write(spec, adds, choice, sink, partition_values, collector).close()
    try:
        if result.num_rows == 0:
            storage.delete(key)
            return BinRewrite([], choice.counts)
        output = storage.local_path(key) if storage.is_local else RangeReader(storage, key, result.size)
        stats = copied_file_stats_gathered(result, collector, output, tight_bounds=spec.tight_bounds)
    except BaseException:
        with contextlib.suppress(Exception):
            storage.delete(key)
        raise
    add = {"path": rel_path, "partitionValues": dict(partition_values), "size": result.size,
           "modificationTime": int(time.time() * 1000), "dataChange": False, "stats": stats_json(stats),
           **({"tags": spec.file_tags} if spec.file_tags else {})}
    return BinRewrite([add], choice.counts)
