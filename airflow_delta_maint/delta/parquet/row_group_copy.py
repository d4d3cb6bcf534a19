"""One parquet file made of other files' row groups, copied byte for byte (dictionary and data
pages), with a footer written anew: the rows are never decoded, so nothing is re-encoded.

The output's schema, column orders and descriptive key-value metadata come from a reference (the
table's current file schema, as a footer); ``created_by`` names this project. Each input must have
the reference's physical schema and the wanted codec, and be unencrypted (``refusal`` says why
not, so a caller can fall back to re-encoding). Arrow tables can be mixed in (``add_table``): they
are encoded by pyarrow into parquet bytes in memory, whose row groups are then copied the same way.

Every absolute offset of a copied chunk is moved (data, dictionary and index page offsets; the
deprecated ``ColumnChunk.file_offset`` is 0, as for a footer-only writer; ``RowGroup.file_offset``
is the first chunk's new start). Page indexes are carried over when they match the chunk's pages
(offset indexes moved, column indexes as they are, dropped when the input's column order differs),
and written after the row groups; bloom filters follow each input's row groups. Fields of row
groups and column chunks this project does not know are dropped: they could point into the input.
A failure while copying (``CorruptChunkError``) leaves the output unusable: discard it.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import IO, Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint import __version__
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.parquet.bounds import statistics_for_copy
from airflow_delta_maint.delta.parquet.chunks import (CorruptChunkError, IndexBytes, PageWalk, copy_chunk,
                                                      read_bloom_filter, read_page_index, rebase_offset_index,
                                                      walk_chunk_headers)
from airflow_delta_maint.delta.parquet.compact import Struct, encode
from airflow_delta_maint.delta.parquet.file_copy import copy_file_range, file_descriptor
from airflow_delta_maint.delta.parquet.eligibility import chunk_range, codec_number, refusal
from airflow_delta_maint.delta.parquet.footer import (MAGIC, Footer, ParquetFooterError, Source, file_bytes, open_source,
                                                      read_footer)
from airflow_delta_maint.delta.parquet.format import (CODECS, COLUMN_CHUNK, COLUMN_META_DATA, FILE_META_DATA,
                                                      KEY_VALUE, ROW_GROUP)
from airflow_delta_maint.delta.parquet.geo_logical_types import adopt_geo_types
from airflow_delta_maint.delta.parquet.key_values import merge_key_values, semantics_difference
from airflow_delta_maint.delta.parquet.variant_groups import adopt_annotations

__all__ = ["DEFAULT_CREATED_BY", "CopiedPart", "CopyRefused", "CopyResult", "RowGroupCopyWriter", "copy_files",
           "copy_refusal", "dictionary_columns", "reference_for_schema"]

DEFAULT_CREATED_BY = f"airflow-delta-maint version {__version__}"
_META_KEPT = ("type", "encodings", "path_in_schema", "codec", "num_values", "total_uncompressed_size",
              "total_compressed_size", "key_value_metadata", "encoding_stats", "size_statistics",
              "geospatial_statistics")
_I16_MAX = (1 << 15) - 1
#: page types and encodings of the format (parquet.thrift's PageType and Encoding)
_DICTIONARY_PAGE, _DATA_PAGES, _DICTIONARY_ENCODINGS = 2, (0, 3), (2, 8)


class CopyRefused(DeltaError):
    """An input whose row groups cannot be copied into the output; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class CopiedPart:
    """One input of the output: its writer, the output's row groups it became, and whether its
    column orders are the output's."""

    created_by: str
    row_groups: range
    same_order: bool


@dataclass
class CopyResult:
    """The output: its footer (FileMetaData), size in bytes and parts."""

    metadata: Struct
    size: int
    parts: list[CopiedPart] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return int(self.metadata["num_rows"])

    def footer(self) -> Footer:
        """The output's footer as ``read_footer`` would give it."""
        raw = encode(self.metadata)
        return Footer(self.metadata, len(raw), self.size, raw)


@dataclass
class _PendingIndex:
    chunk: Struct
    column_index: bytes | None
    offset_index: bytes


def reference_for_schema(schema: pa.Schema, codec: str = "snappy") -> Footer:
    """The footer pyarrow writes for ``schema`` (no rows): the reference for a file our rewrite
    would write with that Arrow schema."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf, compression=_pyarrow_codec(codec))
    return read_footer(io.BytesIO(buf.getvalue()))


def copy_refusal(footer: Footer, reference: Footer, codec: str | int) -> str | None:
    """Why the row groups of ``footer``'s file cannot be copied into a file of ``reference``'s
    schema compressed with ``codec``, or None: another physical schema or codec, encryption, a chunk
    outside the file, key-value metadata that changes how its rows read."""
    number = codec if isinstance(codec, int) else codec_number(codec)
    return refusal(footer, reference, number) or semantics_difference(
        footer.key_value_metadata(), reference.key_value_metadata())


def _pyarrow_codec(codec: str) -> str:
    name = CODECS[codec_number(codec)]
    if name == "lz4":
        raise ValueError("pyarrow cannot write the deprecated LZ4 codec (it writes lz4_raw)")
    return {"uncompressed": "none", "lz4_raw": "lz4"}.get(name, name)


class RowGroupCopyWriter:
    """Writes one parquet file to ``sink`` from inputs' row groups (``add_file``) and Arrow tables
    (``add_table``), in the order given; ``close`` writes the footer and returns the result.

    Args:
        sink: a writable binary stream (need not be seekable).
        reference: the footer whose schema, column orders and descriptive metadata the output takes.
        codec: the codec every input must use (pyarrow's names: ``snappy``, ``zstd``, ...).
        created_by: the output's ``created_by``.
        page_index: carry inputs' page indexes over (and write them for tables).
        bloom_filters: carry inputs' bloom filters over.
    """

    def __init__(self, sink: IO[bytes], reference: Footer, codec: str = "snappy", *,
                 created_by: str = DEFAULT_CREATED_BY, page_index: bool = True, bloom_filters: bool = True):
        self.sink, self.reference, self.codec = sink, reference, codec_number(codec)
        self.created_by, self.page_index, self.bloom_filters = created_by, page_index, bloom_filters
        self.pos = 0
        self.row_groups: list[Struct] = []
        self.parts: list[CopiedPart] = []
        self._key_values: list[dict[str, str | None]] = []
        self._indexes: list[_PendingIndex] = []
        self._leaves = reference.leaf_columns()
        self._orders = [encode(o) for o in reference.metadata.get("column_orders") or []]
        self._closed = False
        self._kernel_copy = True
        self._write(MAGIC)

    def _write(self, data: bytes | memoryview) -> None:
        self.sink.write(data)
        self.pos += len(data)

    def refusal(self, footer: Footer) -> str | None:
        """Why ``footer``'s file cannot be added, or None."""
        return copy_refusal(footer, self.reference, self.codec)

    def add_file(self, source: Source, footer: Footer | None = None) -> None:
        """Copy every row group of the parquet file ``source`` (a path or a seekable binary file).

        Raises:
            CopyRefused: the file cannot be copied (nothing was written).
            CorruptChunkError: a chunk's pages do not match its metadata (the output is unusable).
        """
        if self._closed:
            raise ValueError("the writer is closed")
        f, opened = open_source(source)
        try:
            footer = footer or read_footer(f)
            reason = self.refusal(footer)
            if reason:
                raise CopyRefused(reason)
            self._copy(f, footer)
        finally:
            if opened:
                f.close()

    def add_table(self, table: pa.Table, row_group_rows: int | None = None) -> None:
        """Encode ``table`` with pyarrow (the codec, statistics, dictionaries, a page index when
        ``page_index``) and copy its row groups; ``row_group_rows`` rows per row group (default:
        one row group).

        Raises:
            CopyRefused: pyarrow's file of ``table`` has another physical schema than the reference.
        """
        encoded = self.encode(table, row_group_rows)
        if encoded is not None:
            self.add_file(*encoded)

    def encode(self, table: pa.Table, row_group_rows: int | None = None, dictionary: bool | list[str] = True,
               into: pa.Buffer | None = None) -> tuple[pa.BufferReader, Footer] | None:
        """``table`` encoded as :meth:`add_table` encodes it, into memory, with its footer, ready for
        :meth:`add_file` (None: no rows); ``dictionary``: the leaf columns (dotted paths, see
        :func:`dictionary_columns`) tried as dictionaries, or all. Touches nothing of the writer: several tables may
        be encoded at once on other threads, then added in their order. The bytes go to Arrow's own buffer: a
        Python file object would take the interpreter's lock for every page the encoder writes. ``into``: a
        mutable buffer to encode into, reused by the caller once the result is added (its pages are already
        mapped, where a new buffer of each row group's size is faulted in page by page); the bytes go to a new
        buffer when they do not fit in it."""
        if table.num_rows == 0:
            return None
        options: dict[str, Any] = {"compression": _pyarrow_codec(CODECS[self.codec]), "use_dictionary": dictionary,
                                   "write_statistics": True, "write_page_index": self.page_index,
                                   "row_group_size": max(1, row_group_rows or table.num_rows)}
        data = _encoded_into(into, table, options) if into is not None else None
        if data is None:
            out = pa.BufferOutputStream()
            pq.write_table(table, out, **options)
            data = out.getvalue()
        buf = pa.BufferReader(data)
        footer = read_footer(buf)
        geo = adopt_geo_types(footer.schema, self.reference.schema)
        if geo is not None:  # pyarrow leaves a default CRS or edge algorithm out: the reference's spells it out
            footer.metadata["schema"] = geo
        adopt_annotations(footer, self.reference)  # pyarrow cannot write the VARIANT logical type
        buf.seek(0)
        return buf, footer

    def _copy(self, f: IO[bytes], footer: Footer) -> None:
        same_order = [encode(o) for o in footer.metadata.get("column_orders") or []] == self._orders
        first = len(self.row_groups)
        blooms: list[tuple[Struct, bytes]] = []
        indexes = IndexBytes(f, footer.row_groups) if self.page_index or self.bloom_filters else None
        for rg in footer.row_groups:
            columns = [self._copy_chunk(f, indexes, cc, leaf, footer.created_by, same_order, blooms)
                       for leaf, cc in enumerate(rg["columns"])]
            self.row_groups.append(self._row_group(rg, columns))
        for meta, bloom in blooms:
            meta["bloom_filter_offset"], meta["bloom_filter_length"] = self.pos, len(bloom)
            self._write(bloom)
        self._key_values.append(footer.key_value_metadata())
        self.parts.append(CopiedPart(footer.created_by, range(first, len(self.row_groups)), same_order))

    def _copy_chunk(self, f: IO[bytes], indexes: IndexBytes | None, cc: Struct, leaf: int, created_by: str,
                    same_order: bool, blooms: list[tuple[Struct, bytes]]) -> Struct:
        meta = cc["meta_data"]
        start, length = chunk_range(cc)
        new_start = self.pos
        walk = self._copy_in_kernel(f, start, length) or copy_chunk(f, start, length, self._write)
        if walk.values != meta["num_values"]:
            raise CorruptChunkError(f"the chunk at {start} holds {walk.values} values, its metadata says "
                                    f"{meta['num_values']}")
        delta = new_start - start
        moved = Struct(COLUMN_META_DATA)
        for name in _META_KEPT:
            moved[name] = meta.get(name)
        for name in ("data_page_offset", "dictionary_page_offset", "index_page_offset"):
            offset = meta.get(name)
            if offset is not None and (name == "data_page_offset" or offset >= start):
                moved[name] = offset + delta
        stats = meta.get("statistics")
        if stats is not None:
            moved["statistics"] = statistics_for_copy(stats, self._leaves[leaf], created_by, same_order)
        chunk = Struct(COLUMN_CHUNK)
        chunk["file_offset"], chunk["meta_data"] = 0, moved
        if self.page_index and indexes is not None:
            column_index, offset_index = read_page_index(indexes, cc, start, walk)
            if offset_index is not None:
                self._indexes.append(_PendingIndex(chunk, column_index if same_order else None,
                                                   rebase_offset_index(offset_index, delta)))
        if self.bloom_filters and indexes is not None:
            bloom = read_bloom_filter(indexes, meta)
            if bloom is not None:
                blooms.append((moved, bloom))
        return chunk

    def _copy_in_kernel(self, f: IO[bytes], start: int, length: int) -> PageWalk | None:
        """The chunk copied from a local file into a local file by the kernel, its page headers walked, or None
        when either is not a local file or the kernel cannot copy between them (the caller copies it then)."""
        source, sink = file_descriptor(f), file_descriptor(self.sink)
        if source is None or sink is None or not self._kernel_copy:
            return None
        walk = walk_chunk_headers(source, start, length)
        self.sink.flush()
        try:
            copied = copy_file_range(source, sink, start, length)
        except OSError as exc:
            raise CorruptChunkError(f"the chunk at {start} cannot be copied: {exc}") from None
        if not copied:
            self._kernel_copy = False
            return None
        self.pos += length
        return walk

    def _row_group(self, rg: Struct, columns: list[Struct]) -> Struct:
        out = Struct(ROW_GROUP)
        out["columns"] = columns
        out["total_byte_size"] = rg["total_byte_size"]
        out["num_rows"] = rg["num_rows"]
        out["sorting_columns"] = rg.get("sorting_columns")
        starts = [chunk_range(c)[0] for c in columns]
        out["file_offset"] = min(starts) if starts else self.pos
        out["total_compressed_size"] = sum(c["meta_data"]["total_compressed_size"] for c in columns)
        ordinal = len(self.row_groups)
        out["ordinal"] = ordinal if ordinal <= _I16_MAX else None
        return out

    def _write_indexes(self) -> None:
        for pending in self._indexes:
            if pending.column_index is not None:
                pending.chunk["column_index_offset"] = self.pos
                pending.chunk["column_index_length"] = len(pending.column_index)
                self._write(pending.column_index)
        for pending in self._indexes:
            pending.chunk["offset_index_offset"] = self.pos
            pending.chunk["offset_index_length"] = len(pending.offset_index)
            self._write(pending.offset_index)

    def close(self) -> CopyResult:
        """Write the page indexes and the footer; returns the output's footer, size and parts."""
        if self._closed:
            raise ValueError("the writer is closed")
        self._closed = True
        self._write_indexes()
        ref = self.reference.metadata
        md = Struct(FILE_META_DATA)
        md["version"] = ref.get("version", 1)
        md["schema"] = ref["schema"]
        md["num_rows"] = sum(rg["num_rows"] for rg in self.row_groups)
        md["row_groups"] = self.row_groups
        pairs = merge_key_values(self.reference.key_value_metadata(), self._key_values)
        md["key_value_metadata"] = [_key_value(k, v) for k, v in pairs] or None
        md["created_by"] = self.created_by
        md["column_orders"] = ref.get("column_orders")
        self._write(file_bytes(md))
        return CopyResult(md, self.pos, self.parts)


def _encoded_into(into: pa.Buffer, table: pa.Table, options: dict[str, Any]) -> pa.Buffer | None:
    """``table`` written by pyarrow with ``options`` at the start of ``into``: the bytes written, or None when
    they do not fit."""
    out = pa.FixedSizeBufferWriter(into)
    try:
        pq.write_table(table, out, **options)
    except OSError:  # pyarrow's "write out of bounds" of a full buffer
        return None
    return into.slice(0, out.tell())


def dictionary_columns(footer: Footer) -> list[str] | None:
    """The leaf columns (``path_in_schema`` joined by dots, as pyarrow's ``use_dictionary`` names them) whose
    dictionary held in every row group of ``footer``, or None when every one held. A column whose dictionary
    outgrew its page has data pages encoded otherwise (``encoding_stats``): more rows like these would only
    pay for a dictionary again before falling back."""
    leaves: list[str] = []
    fallen: set[str] = set()
    for rg in footer.row_groups:
        for cc in rg["columns"]:
            meta = cc.get("meta_data") or {}
            path = ".".join(meta.get("path_in_schema") or [])
            if path not in leaves:
                leaves.append(path)
            pages = meta.get("encoding_stats") or []
            if any(p["page_type"] == _DICTIONARY_PAGE for p in pages) and \
                    any(p["page_type"] in _DATA_PAGES and p["encoding"] not in _DICTIONARY_ENCODINGS and p["count"]
                        for p in pages):
                fallen.add(path)
    return [p for p in leaves if p not in fallen] if fallen else None


def _key_value(key: str, value: str | None) -> Struct:
    kv = Struct(KEY_VALUE)
    kv["key"], kv["value"] = key, value
    return kv


def copy_files(sources: Iterable[Source], sink: IO[bytes], reference: Footer, codec: str = "snappy",
               **options: Any) -> CopyResult | str:
    """Copy the row groups of ``sources`` into one file written to ``sink``, or, when one of them
    cannot be copied, return why (before anything is written). ``options`` go to the writer."""
    sources = list(sources)
    footers = []
    for source in sources:
        try:
            footer = read_footer(source) if isinstance(source, (str, os.PathLike)) else _read_rewound(source)
        except ParquetFooterError as e:
            return f"{_name(source)}: {e}"
        reason = copy_refusal(footer, reference, codec)
        if reason:
            return f"{_name(source)}: {reason}"
        footers.append(footer)
    writer = RowGroupCopyWriter(sink, reference, codec, **options)
    for source, footer in zip(sources, footers):
        writer.add_file(source, footer)
    return writer.close()


def _read_rewound(source: Any) -> Footer:
    footer = read_footer(source)
    source.seek(0)
    return footer


def _name(source: Any) -> str:
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", None) or type(source).__name__
