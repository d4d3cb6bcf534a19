"""Deletion vectors: locate, read, validate and decode them into row indexes (and write simple ones).

A deletion vector (DV) is a set of 64-bit row indexes of one data file, serialised as a
``RoaringBitmapArray``: a little-endian magic number followed by the portable 64-bit Roaring format
(a bucket count, then per bucket a 32-bit key and a portable 32-bit Roaring bitmap). It is stored
inline in the log (Z85 text, ``storageType='i'``) or in a file next to the data: at a path derived
from a UUID (``'u'``) or at an absolute path (``'p'``). A DV file starts with a format version byte
and holds one or more DVs, each framed as a big-endian size, the bitmap bytes and a big-endian
CRC-32 of those bytes; a descriptor's ``offset`` points at the size field.
"""

from __future__ import annotations

import posixpath
import struct
import uuid
import zlib
from typing import Iterable, Mapping
from urllib.parse import unquote

import numpy as np
from obstore.exceptions import BaseError as ObjectStoreError
from pyroaring import BitMap

from airflow_delta_maint.delta.errors import CorruptLogError, DeltaError, InvalidArgumentError
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.storage.write_once import put_once

__all__ = [
    "DV_MAGIC",
    "DV_MAGIC_NATIVE",
    "DV_FILE_VERSION",
    "read_deletion_vector",
    "decode_bitmap_array",
    "encode_deletion_vector",
    "write_deletion_vector",
    "dv_file_key",
    "dv_file_name",
    "deleted_row_count",
    "live_row_mask",
    "z85_decode",
    "z85_encode",
]

DV_MAGIC = 1681511377
DV_MAGIC_NATIVE = 1681511376
DV_FILE_VERSION = 1
_UUID_CHARS = 20  # Z85 text of the 16 UUID bytes
_RANGE_FROM_START = 4096  # read from byte 0 (version byte included) when the DV starts this close

_Z85_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_LOOKUP = np.full(256, -1, dtype=np.int64)
_Z85_LOOKUP[np.frombuffer(_Z85_ALPHABET, dtype=np.uint8)] = np.arange(85)
_Z85_POWERS = np.array([85 ** 4, 85 ** 3, 85 ** 2, 85, 1], dtype=np.uint64)

# Portable 32-bit Roaring format constants.
_COOKIE_NO_RUN = 12346
_COOKIE_RUN = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX_CARDINALITY = 4096
_BITSET_BYTES = 8192


# -- Z85 ------------------------------------------------------------------------------------
def z85_decode(text: str) -> bytes:
    """Decode Z85 text (length a multiple of 5) into bytes. Raises ValueError on bad input."""
    raw = text.encode("ascii")
    if len(raw) % 5:
        raise ValueError(f"Z85 text length {len(raw)} is not a multiple of 5")
    digits = _Z85_LOOKUP[np.frombuffer(raw, dtype=np.uint8)]
    if (digits < 0).any():
        raise ValueError("Z85 text has a character outside the Z85 alphabet")
    words = (digits.astype(np.uint64).reshape(-1, 5) * _Z85_POWERS).sum(axis=1)
    if (words > 0xFFFFFFFF).any():
        raise ValueError("Z85 text encodes a value larger than 32 bits")
    return words.astype(">u4").tobytes()


def z85_encode(data: bytes) -> str:
    """Encode bytes as Z85 text; the input is zero-padded to a multiple of 4 bytes."""
    padded = bytes(data) + b"\x00" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _Z85_POWERS) % 85
    return np.frombuffer(_Z85_ALPHABET, dtype=np.uint8)[digits.reshape(-1)].tobytes().decode("ascii")


# -- locating DV files ------------------------------------------------------------------------
def dv_file_name(dv: Mapping) -> str:
    """Relative path of a ``'u'`` DV file: ``[<prefix>/]deletion_vector_<uuid>.bin``."""
    text = dv.get("pathOrInlineDv") or ""
    if len(text) < _UUID_CHARS:
        raise CorruptLogError(f"deletion vector path {text!r} is shorter than an encoded UUID")
    prefix, encoded = text[:-_UUID_CHARS], text[-_UUID_CHARS:]
    try:
        file_uuid = uuid.UUID(bytes=z85_decode(encoded))
    except ValueError as exc:
        raise CorruptLogError(f"deletion vector path {text!r} has no valid encoded UUID: {exc}") from None
    name = f"deletion_vector_{file_uuid}.bin"
    return f"{prefix}/{name}" if prefix else name


def dv_file_key(storage: Storage, dv: Mapping | None) -> str | None:
    """Storage key of the file holding a DV.

    Returns None for no DV, for an inline DV, and for an absolute path outside the table root
    (such a file is not the table's to keep or delete).
    """
    if not dv:
        return None
    kind = dv.get("storageType")
    if kind == "i":
        return None
    if kind == "u":
        return dv_file_name(dv)
    if kind == "p":
        return storage.key_for_path(dv.get("pathOrInlineDv") or "")
    raise CorruptLogError(f"unknown deletion vector storage type {kind!r}")


def _locate(storage: Storage, dv: Mapping) -> tuple[Storage, str]:
    """The storage and key to read a ``'u'`` or ``'p'`` DV from."""
    key = dv_file_key(storage, dv)
    if key is not None:
        return storage, key
    path = dv.get("pathOrInlineDv") or ""
    parent, name = posixpath.split(path)
    try:
        return Storage(parent, storage.options, calls=storage.calls), unquote(name)
    except (DeltaError, ObjectStoreError, ValueError) as exc:
        raise CorruptLogError(f"deletion vector file {path} cannot be opened: {exc}") from None


# -- reading ------------------------------------------------------------------------------------
def deleted_row_count(dv: Mapping | None) -> int:
    """Rows a DV removes from its file (its ``cardinality``); 0 for no DV."""
    if not dv:
        return 0
    return int(dv.get("cardinality") or 0)


def read_deletion_vector(storage: Storage, dv: Mapping) -> np.ndarray:
    """Read and decode one DV of any storage type.

    Args:
        storage: the table's storage (``'u'`` paths are relative to its root).
        dv: a deletion vector descriptor (``storageType``, ``pathOrInlineDv``, ``offset``,
            ``sizeInBytes``, ``cardinality``).

    Returns:
        The deleted row indexes, sorted, unique, as a ``uint64`` array.

    Raises:
        CorruptLogError: missing or truncated file, bad version, size, magic number or checksum,
            undecodable bitmap, or a row count that disagrees with ``cardinality``.
    """
    kind = dv.get("storageType")
    if kind == "i":
        where = "inline deletion vector"
        data = _inline_bytes(dv)
    elif kind in ("u", "p"):
        dv_storage, key = _locate(storage, dv)
        where = f"deletion vector file {dv_storage.uri_for_key(key)} at offset {_offset(dv)}"
        data = _file_bytes(dv_storage, key, dv, where)
    else:
        raise CorruptLogError(f"unknown deletion vector storage type {kind!r}")
    rows = decode_bitmap_array(data, where)
    expected = dv.get("cardinality")
    if expected is not None and len(rows) != int(expected):
        raise CorruptLogError(f"{where} holds {len(rows)} row indexes but its cardinality is {expected}")
    return rows


def _offset(dv: Mapping) -> int:
    return int(dv.get("offset") or 0)


def _size(dv: Mapping, where: str) -> int:
    size = dv.get("sizeInBytes")
    if size is None or int(size) < 0:
        raise CorruptLogError(f"{where}: sizeInBytes is missing or negative ({size!r})")
    return int(size)


def _inline_bytes(dv: Mapping) -> bytes:
    size = _size(dv, "inline deletion vector")
    try:
        raw = z85_decode(dv.get("pathOrInlineDv") or "")
    except (ValueError, UnicodeEncodeError) as exc:
        raise CorruptLogError(f"inline deletion vector is not valid Z85: {exc}") from None
    if len(raw) < size or len(raw) - size >= 4:
        raise CorruptLogError(f"inline deletion vector decodes to {len(raw)} bytes but sizeInBytes is {size}")
    return raw[:size]


def _file_bytes(storage: Storage, key: str, dv: Mapping, where: str) -> bytes:
    offset, size = _offset(dv), _size(dv, where)
    end = offset + 4 + size + 4
    start = 0 if offset <= _RANGE_FROM_START else offset
    try:
        chunk = storage.read_range(key, start, end)
        version = chunk[:1] if start == 0 else storage.read_range(key, 0, 1)
    except FileNotFoundError:
        raise CorruptLogError(f"{where}: the file does not exist") from None
    except (ObjectStoreError, ValueError) as exc:
        raise CorruptLogError(f"{where}: cannot read bytes {start}-{end}: {exc}") from None
    if offset >= 1 and version != bytes([DV_FILE_VERSION]):
        raise CorruptLogError(f"{where}: unsupported file format version {version.hex() or 'none'}")
    framed = chunk[offset - start:]
    if len(framed) < 4 + size + 4:
        raise CorruptLogError(f"{where}: the file ends before the {size} bytes the descriptor names")
    (data_size,) = struct.unpack_from(">I", framed, 0)
    if data_size != size:
        raise CorruptLogError(f"{where}: stored size {data_size} differs from sizeInBytes {size}")
    data = framed[4:4 + size]
    (stored_crc,) = struct.unpack_from(">I", framed, 4 + size)
    actual_crc = zlib.crc32(data)
    if stored_crc != actual_crc:
        raise CorruptLogError(f"{where}: checksum mismatch (stored {stored_crc:08x}, computed {actual_crc:08x})")
    return data


# -- RoaringBitmapArray -------------------------------------------------------------------------
def decode_bitmap_array(data: bytes, where: str = "deletion vector") -> np.ndarray:
    """Decode a serialised RoaringBitmapArray into sorted, unique ``uint64`` row indexes.

    Reads the protocol's portable format (little-endian magic ``DV_MAGIC``, then portable 64-bit
    Roaring) and the older native format (big-endian magic ``DV_MAGIC_NATIVE``, a big-endian bitmap
    count, then each 32-bit bitmap prefixed with its big-endian byte length, bucket keys implied by
    position), which the protocol's inline example uses.
    """
    view = memoryview(data)
    if len(view) < 8:
        raise CorruptLogError(f"{where}: {len(view)} bytes is too short for a deletion vector")
    (magic,) = struct.unpack_from("<I", view, 0)
    if magic == DV_MAGIC:
        return _decode_portable(view, where)
    if struct.unpack_from(">I", view, 0)[0] == DV_MAGIC_NATIVE:
        return _decode_native(view, where)
    raise CorruptLogError(f"{where}: bad magic number {magic} (expected {DV_MAGIC})")


def _bucket_rows(view: memoryview, pos: int, size: int, key: int, where: str) -> np.ndarray:
    if key >= 1 << 31:
        raise CorruptLogError(f"{where}: bucket key {key} has its most significant bit set")
    try:
        bitmap = BitMap.deserialize(bytes(view[pos:pos + size]))
    except ValueError as exc:
        raise CorruptLogError(f"{where}: undecodable Roaring bitmap at byte {pos}: {exc}") from None
    low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.uint64)
    return low | np.uint64(key << 32) if key else low


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=np.uint64)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _decode_portable(view: memoryview, where: str) -> np.ndarray:
    if len(view) < 12:
        raise CorruptLogError(f"{where}: {len(view)} bytes is too short for a deletion vector")
    (buckets,) = struct.unpack_from("<Q", view, 4)
    if buckets > (len(view) - 12) // 12:
        raise CorruptLogError(f"{where}: {buckets} buckets cannot fit in {len(view)} bytes")
    pos = 12
    parts: list[np.ndarray] = []
    previous = -1
    for _ in range(buckets):
        if pos + 4 > len(view):
            raise CorruptLogError(f"{where}: truncated bucket header at byte {pos}")
        (key,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if key <= previous:
            raise CorruptLogError(f"{where}: bucket key {key} is out of order")
        previous = key
        size = _roaring32_size(view, pos, where)
        parts.append(_bucket_rows(view, pos, size, key, where))
        pos += size
    if pos != len(view):
        raise CorruptLogError(f"{where}: {len(view) - pos} unexpected bytes after the bitmap")
    return _joined(parts)


def _decode_native(view: memoryview, where: str) -> np.ndarray:
    (count,) = struct.unpack_from(">I", view, 4)
    if count > (len(view) - 8) // 4:
        raise CorruptLogError(f"{where}: {count} bitmaps cannot fit in {len(view)} bytes")
    pos = 8
    parts: list[np.ndarray] = []
    for key in range(count):
        if pos + 4 > len(view):
            raise CorruptLogError(f"{where}: truncated bitmap header at byte {pos}")
        (size,) = struct.unpack_from(">I", view, pos)
        pos += 4
        if _roaring32_size(view, pos, where) != size:
            raise CorruptLogError(f"{where}: Roaring bitmap at byte {pos} is not {size} bytes long")
        parts.append(_bucket_rows(view, pos, size, key, where))
        pos += size
    if pos != len(view):
        raise CorruptLogError(f"{where}: {len(view) - pos} unexpected bytes after the bitmap")
    return _joined(parts)


def _roaring32_size(view: memoryview, pos: int, where: str) -> int:
    """Byte length of the portable 32-bit Roaring bitmap starting at ``pos`` (bounds-checked)."""
    end = len(view)

    def need(at: int, n: int) -> None:
        if at + n > end:
            raise CorruptLogError(f"{where}: Roaring bitmap truncated at byte {at}")

    need(pos, 4)
    (cookie,) = struct.unpack_from("<I", view, pos)
    at = pos + 4
    run_flags = None
    if cookie & 0xFFFF == _COOKIE_RUN:
        count = (cookie >> 16) + 1
        flag_bytes = (count + 7) // 8
        need(at, flag_bytes)
        run_flags = np.unpackbits(np.frombuffer(view[at:at + flag_bytes], dtype=np.uint8),
                                  bitorder="little")[:count].astype(bool)
        at += flag_bytes
        has_offsets = count >= _NO_OFFSET_THRESHOLD
    elif cookie == _COOKIE_NO_RUN:
        need(at, 4)
        (count,) = struct.unpack_from("<I", view, at)
        at += 4
        has_offsets = True
    else:
        raise CorruptLogError(f"{where}: bad Roaring cookie {cookie} at byte {pos}")
    if count > 1 << 16:
        raise CorruptLogError(f"{where}: {count} Roaring containers is more than a bitmap can have")
    need(at, 4 * count)
    header = np.frombuffer(view[at:at + 4 * count], dtype="<u2").reshape(-1, 2)
    cardinalities = header[:, 1].astype(np.int64) + 1
    at += 4 * count
    if has_offsets:
        at += 4 * count
    sizes = np.where(cardinalities <= _ARRAY_MAX_CARDINALITY, 2 * cardinalities, _BITSET_BYTES)
    if run_flags is None or not run_flags.any():
        at += int(sizes.sum())
    else:
        for i in range(count):
            if run_flags[i]:
                need(at, 2)
                (runs,) = struct.unpack_from("<H", view, at)
                at += 2 + 4 * runs
            else:
                at += int(sizes[i])
    need(pos, at - pos)
    return at - pos


def live_row_mask(deleted: np.ndarray, num_rows: int) -> np.ndarray:
    """Boolean mask over a file's ``num_rows`` rows: True for rows the DV keeps."""
    mask = np.ones(num_rows, dtype=bool)
    if len(deleted):
        if int(deleted[-1]) >= num_rows:
            raise CorruptLogError(f"deletion vector removes row {int(deleted[-1])} of a file with {num_rows} rows")
        mask[deleted.astype(np.int64)] = False
    return mask


# -- writing ------------------------------------------------------------------------------------
def _unique_rows(row_indexes: Iterable[int] | np.ndarray) -> np.ndarray:
    values = np.asarray(row_indexes if isinstance(row_indexes, np.ndarray) else list(row_indexes))
    if not values.size:
        return np.empty(0, dtype=np.uint64)
    if values.dtype.kind not in "iu":
        raise InvalidArgumentError("row indexes must be integers")
    if values.dtype.kind == "i" and int(values.min()) < 0:
        raise InvalidArgumentError("row indexes must not be negative")
    values = np.unique(values.astype(np.uint64))
    if int(values[-1]) >= 1 << 63:
        raise InvalidArgumentError("row indexes must be below 2**63")
    return values


def encode_deletion_vector(row_indexes: Iterable[int] | np.ndarray) -> bytes:
    """Serialise row indexes as a RoaringBitmapArray (magic number + portable 64-bit Roaring)."""
    values = _unique_rows(row_indexes)
    highs = values >> np.uint64(32)
    keys, starts = np.unique(highs, return_index=True)
    out = [struct.pack("<IQ", DV_MAGIC, len(keys))]
    for key, chunk in zip(keys, np.split(values, starts[1:])):
        bitmap = BitMap((chunk & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        bitmap.run_optimize()
        out.append(struct.pack("<I", int(key)))
        out.append(bitmap.serialize())
    return b"".join(out)


def write_deletion_vector(storage: Storage, row_indexes: Iterable[int] | np.ndarray, prefix: str = "") -> dict:
    """Write row indexes as a new single-DV file under the table root; return its ``'u'`` descriptor.

    The file is created with put-if-absent under a fresh UUID, so an existing file is never replaced.
    """
    rows = _unique_rows(row_indexes)
    data = encode_deletion_vector(rows)
    framed = (bytes([DV_FILE_VERSION]) + struct.pack(">I", len(data)) + data
              + struct.pack(">I", zlib.crc32(data)))
    descriptor = {
        "storageType": "u",
        "pathOrInlineDv": prefix + z85_encode(uuid.uuid4().bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": int(len(rows)),
    }
    put_once(storage, dv_file_name(descriptor), framed)
    return descriptor
