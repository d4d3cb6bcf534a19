"""Column chunks copied byte for byte, their pages walked on the way: every page header must parse,
the pages must fill the chunk exactly and hold as many values as its metadata says, or the copy
stops (``CorruptChunkError``). Also what a chunk keeps beside it: its page index and bloom filter,
checked against the pages before they are carried over."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import IO, Callable

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.parquet.compact import Struct, ThriftDecodeError, decode, encode
from airflow_delta_maint.delta.parquet.footer import read_range
from airflow_delta_maint.delta.parquet.format import (BLOOM_FILTER_HEADER, COLUMN_INDEX, DATA_PAGE, DATA_PAGE_V2,
                                                      DICTIONARY_PAGE, OFFSET_INDEX, PAGE_HEADER)

__all__ = ["BLOCK_BYTES", "CorruptChunkError", "IndexBytes", "PageWalk", "copy_chunk", "read_bloom_filter", "read_page_index",
           "rebase_offset_index", "walk_chunk_headers", "HEADER_PROBE_BYTES"]

#: a column chunk is read and written in pieces of at most this many bytes
BLOCK_BYTES = 8 << 20
_MAX_HEADER = 1 << 20
#: bytes read first at a page header's offset when the headers are read alone (more, up to _MAX_HEADER, for a
#: longer one: a page's statistics may hold long strings)
HEADER_PROBE_BYTES = 16 << 10


class CorruptChunkError(DeltaError):
    """A column chunk whose pages do not match its metadata."""


@dataclass
class PageWalk:
    """What a chunk's pages hold: values in data pages, and each data page's offset from the
    chunk's start."""

    values: int = 0
    dictionary_pages: int = 0
    data_page_offsets: list[int] = field(default_factory=list)


def _account(walk: PageWalk, header: Struct, at: int) -> None:
    kind = header.get("type")
    if kind == DICTIONARY_PAGE:
        if walk.dictionary_pages or walk.data_page_offsets:
            raise CorruptChunkError("a dictionary page that is not the chunk's first page")
        walk.dictionary_pages += 1
    elif kind == DATA_PAGE:
        walk.values += header["data_page_header"]["num_values"]
        walk.data_page_offsets.append(at)
    elif kind == DATA_PAGE_V2:
        walk.values += header["data_page_header_v2"]["num_values"]
        walk.data_page_offsets.append(at)


def _walk_block(walk: PageWalk, view: memoryview, view_start: int, next_header: int, last: bool) -> tuple[int, bytes]:
    """Walk the page headers that start in ``view`` (chunk bytes from ``view_start``); returns the
    next header's offset and the bytes of a header cut by the end of ``view``."""
    while True:
        rel = next_header - view_start
        if rel >= len(view):
            return next_header, b""
        window = view[rel:rel + _MAX_HEADER]
        try:
            header, size = decode(window, PAGE_HEADER)  # type: ignore[arg-type]
            page = header["compressed_page_size"]
        except (ThriftDecodeError, KeyError):
            if not last and len(window) < _MAX_HEADER:
                return next_header, bytes(window)
            raise CorruptChunkError(f"no page header at chunk offset {next_header}") from None
        if page < 0:
            raise CorruptChunkError(f"a page of negative size at chunk offset {next_header}")
        _account(walk, header, next_header)
        next_header += size + page


def copy_chunk(source: IO[bytes], start: int, length: int, write: Callable[[bytes | memoryview], object]) -> PageWalk:
    """Copy ``length`` bytes of ``source`` from ``start`` through ``write``, walking the pages.

    Raises:
        CorruptChunkError: the bytes are not whole pages filling the range.
    """
    walk = PageWalk()
    source.seek(start)
    done = next_header = 0
    carry = b""
    # an Arrow file (the rows just encoded, in memory) lends its bytes: no copy of them on the way through
    read = getattr(source, "read_buffer", None) or source.read
    while done < length:
        data = read(min(BLOCK_BYTES, length - done))
        if not isinstance(data, bytes):
            data = memoryview(data).cast("B")  # unsigned bytes, as the decoder reads them
        if not data:
            raise CorruptChunkError(f"the file ends inside a column chunk ({start}+{length})")
        write(data)
        view = memoryview(carry + data if carry else data)
        view_start = done - len(carry)
        done += len(data)
        next_header, carry = _walk_block(walk, view, view_start, next_header, done >= length)
    if next_header != length:
        raise CorruptChunkError(f"the pages of the chunk at {start} end at {next_header}, its metadata says {length}")
    return walk


def _header_at(fd: int, at: int, left: int) -> tuple[Struct, int]:
    """The page header at file offset ``at`` of ``fd`` (at most ``left`` bytes before the chunk's end) and its
    encoded size."""
    probe = min(HEADER_PROBE_BYTES, left)
    while True:
        window = os.pread(fd, probe, at)
        if len(window) < probe:
            raise CorruptChunkError(f"the file ends inside a column chunk (at {at + len(window)})")
        try:
            return decode(window, PAGE_HEADER)
        except ThriftDecodeError:
            if probe >= min(_MAX_HEADER, left):
                raise CorruptChunkError(f"no page header at file offset {at}") from None
            probe = min(probe * 8, _MAX_HEADER, left)


def walk_chunk_headers(fd: int, start: int, length: int) -> PageWalk:
    """The pages of the ``length`` bytes at ``start`` of the open file ``fd``, only their headers read (the
    pages' own bytes are moved by the caller, in the kernel).

    Raises:
        CorruptChunkError: the bytes are not whole pages filling the range.
    """
    walk = PageWalk()
    at = 0
    while at < length:
        header, size = _header_at(fd, start + at, length - at)
        try:
            page = header["compressed_page_size"]
        except KeyError:
            raise CorruptChunkError(f"no page header at chunk offset {at}") from None
        if page < 0:
            raise CorruptChunkError(f"a page of negative size at chunk offset {at}")
        _account(walk, header, at)
        at += size + page
    if at != length:
        raise CorruptChunkError(f"the pages of the chunk at {start} end at {at}, its metadata says {length}")
    return walk


class IndexBytes:
    """Reads a file's page indexes and bloom filters: when they lie within ``REGION_BYTES`` of one
    another (as writers put them, after the row groups), all in one read, else one read each."""

    REGION_BYTES = 32 << 20

    def __init__(self, source: IO[bytes], row_groups: list[Struct]):
        self.source = source
        self.start, self.data = 0, b""
        ranges = []
        for rg in row_groups:
            for cc in rg.get("columns", []):
                meta = cc.get("meta_data")
                for at, n in ((cc.get("offset_index_offset"), cc.get("offset_index_length")),
                              (cc.get("column_index_offset"), cc.get("column_index_length")),
                              (meta.get("bloom_filter_offset") if meta else None,
                               meta.get("bloom_filter_length") if meta else None)):
                    if at is not None and n:
                        ranges.append((at, at + n))
        if ranges:
            lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
            if hi - lo <= self.REGION_BYTES:
                self.start, self.data = lo, read_range(source, lo, hi - lo)

    def read(self, at: int, n: int) -> bytes:
        """``n`` bytes from ``at``."""
        if self.start <= at and at + n <= self.start + len(self.data):
            return self.data[at - self.start:at - self.start + n]
        return read_range(self.source, at, n)


def read_page_index(source: IndexBytes, chunk: Struct, start: int,
                    walk: PageWalk) -> tuple[bytes | None, Struct | None]:
    """A chunk's column index (its bytes, which hold no offsets) and offset index (decoded), each
    None when absent or not matching the data pages of the chunk (starting at ``start``); no column
    index without an offset index."""
    offset_index = column_index = None
    at, n = chunk.get("offset_index_offset"), chunk.get("offset_index_length")
    if at is not None and n:
        try:
            index, _ = decode(source.read(at, n), OFFSET_INDEX)
            if [p["offset"] - start for p in index["page_locations"]] == walk.data_page_offsets:
                offset_index = index
        except (ThriftDecodeError, KeyError):
            offset_index = None
    at, n = chunk.get("column_index_offset"), chunk.get("column_index_length")
    if offset_index is not None and at is not None and n:
        raw = source.read(at, n)
        try:
            pages = len(decode(raw, COLUMN_INDEX)[0]["null_pages"])
        except (ThriftDecodeError, KeyError):
            pages = -1
        column_index = raw if pages == len(walk.data_page_offsets) else None
    return column_index, offset_index


def rebase_offset_index(index: Struct, delta: int) -> bytes:
    """The offset index's bytes with every page moved by ``delta`` bytes."""
    out = index.copy()
    locations = []
    for p in index["page_locations"]:
        q = p.copy()
        q["offset"] = p["offset"] + delta
        locations.append(q)
    out["page_locations"] = locations
    return encode(out)


def read_bloom_filter(source: IndexBytes, meta: Struct) -> bytes | None:
    """A chunk's bloom filter (header and bitset), or None when absent or unreadable."""
    at, n = meta.get("bloom_filter_offset"), meta.get("bloom_filter_length")
    if at is None:
        return None
    head = source.read(at, n if n else 256)
    try:
        header, size = decode(head, BLOOM_FILTER_HEADER)
        total = size + header["numBytes"]
    except (ThriftDecodeError, KeyError):
        return None
    if n and n != total:
        return None
    return head if len(head) == total else source.read(at, total)
