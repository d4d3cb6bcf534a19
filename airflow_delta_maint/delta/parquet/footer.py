"""A parquet file's footer (``FileMetaData``): read from a seekable file, decoded and encoded with
the compact-protocol codec of ``compact.py`` (see there why it is our own).

Decode then encode gives back the writer's bytes: fields are re-emitted in id order, as every
known writer emits them, and fields the table does not know are carried through as raw bytes.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from typing import IO, Any, Union

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.parquet.compact import Struct, ThriftDecodeError, decode, encode
from airflow_delta_maint.delta.parquet.format import FILE_META_DATA, PHYSICAL_TYPES

__all__ = ["ENCRYPTED_MAGIC", "MAGIC", "Footer", "ParquetFooterError", "Source", "decode_file_metadata",
           "encode_file_metadata", "file_bytes", "open_source", "read_footer",
           "read_range"]

MAGIC = b"PAR1"
ENCRYPTED_MAGIC = b"PARE"
_TAIL = 64 << 10  # read this much of the end at once: most footers fit, so one request is enough

#: a parquet file: a local path or a readable, seekable binary file (say, the store's RangeReader)
Source = Union[str, "os.PathLike[str]", IO[bytes], io.RawIOBase]


class ParquetFooterError(DeltaError):
    """A file whose end is not a parquet footer this project can read."""


@dataclass
class Footer:
    """A file's decoded footer: ``metadata`` (FileMetaData), its encoded length and bytes, and the
    file's size."""

    metadata: Struct
    length: int
    file_size: int
    raw: bytes

    @property
    def num_rows(self) -> int:
        return int(self.metadata.get("num_rows", 0))

    @property
    def row_groups(self) -> list[Struct]:
        return self.metadata.get("row_groups", [])

    @property
    def schema(self) -> list[Struct]:
        return self.metadata.get("schema", [])

    @property
    def created_by(self) -> str:
        return self.metadata.get("created_by") or ""

    def key_value_metadata(self) -> dict[str, str | None]:
        return {kv.get("key"): kv.get("value") for kv in self.metadata.get("key_value_metadata") or []}

    def leaf_columns(self) -> list[Struct]:
        """The schema's leaf elements, in column order."""
        return [el for el in self.schema[1:] if not el.get("num_children")]

    def physical_type(self, leaf: int) -> str:
        return PHYSICAL_TYPES[self.leaf_columns()[leaf]["type"]]


def decode_file_metadata(data: bytes) -> Struct:
    """The FileMetaData encoded in ``data`` (the footer's bytes, without length and magic)."""
    try:
        md, end = decode(data, FILE_META_DATA)
    except ThriftDecodeError as e:
        raise ParquetFooterError(str(e)) from None
    if end != len(data):
        raise ParquetFooterError(f"the footer has {len(data) - end} bytes after its FileMetaData")
    return md


def encode_file_metadata(md: Struct) -> bytes:
    """The compact-protocol bytes of a FileMetaData."""
    return encode(md)


def file_bytes(md: Struct) -> bytes:
    """The end of a parquet file for ``md``: the encoded footer, its length and the magic."""
    data = encode(md)
    return data + struct.pack("<I", len(data)) + MAGIC


def open_source(source: Source) -> tuple[IO[bytes], bool]:
    """A readable binary file for ``source``, and whether the caller opened it (and must close it)."""
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb"), True
    return source, False  # type: ignore[return-value]


def _size(f: Any) -> int:
    size = getattr(f, "size", None)
    if isinstance(size, int):
        return size
    return f.seek(0, 2)


def _read_at(f: Any, offset: int, n: int) -> bytes:
    f.seek(offset)
    out = bytearray()
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def read_footer(source: Source) -> Footer:
    """The footer of the parquet file ``source``.

    Raises:
        ParquetFooterError: the file is too short, lacks the magic, or its footer is encrypted or
            cannot be decoded.
    """
    f, opened = open_source(source)
    try:
        size = _size(f)
        if size < 12:
            raise ParquetFooterError(f"a parquet file has at least 12 bytes, this one {size}")
        tail = _read_at(f, max(0, size - _TAIL), min(size, _TAIL))
        if tail[-4:] == ENCRYPTED_MAGIC:
            raise ParquetFooterError("the footer is encrypted")
        if tail[-4:] != MAGIC:
            raise ParquetFooterError("the file does not end with the parquet magic")
        length = struct.unpack("<I", tail[-8:-4])[0]
        if length + 12 > size:
            raise ParquetFooterError(f"the footer length {length} exceeds the file ({size} bytes)")
        if length + 8 <= len(tail):
            raw = tail[len(tail) - 8 - length:-8]
        else:
            raw = _read_at(f, size - 8 - length, length)
        return Footer(decode_file_metadata(raw), length, size, raw)
    finally:
        if opened:
            f.close()


def read_range(source: IO[bytes], offset: int, n: int) -> bytes:
    """``n`` bytes of ``source`` from ``offset`` (fewer at the end of the file)."""
    return _read_at(source, offset, n)
