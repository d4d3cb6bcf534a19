"""File paths as the log writes them, and the reconciliation key each stands for."""

from __future__ import annotations

import re
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["canonical_path", "canonical_paths", "file_name", "maybe_noncanonical"]

_SCAN_BLOCK = 1 << 20

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)
#: Paths whose reconciliation key differs from the path itself: absolute, with a scheme, or escaped.
_NEEDS_CANONICAL = r"^/|^[A-Za-z][A-Za-z0-9+.\-]*:|%"
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def canonical_path(path: str, root: str) -> str:
    """The reconciliation key of a file path as the log stores it.

    Log paths are URIs: relative to the table root (URL-encoded) or absolute. The same file may
    be written as ``/a/b``, ``file:/a/b`` or ``file:///a/b``, or as an absolute URI under the
    table root where another action used the relative form. All spellings of one file map to
    one key: the decoded path relative to ``root`` when the file is inside the table, else the
    decoded absolute URI (scheme-less absolute paths qualified with the root's file system).
    """
    m = _SCHEME.match(path)
    if m is None:
        if not path.startswith("/"):
            return unquote(path)
        scheme, rest = root.split(":", 1)
        authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
        absolute = f"{scheme}://{authority}{unquote(path)}"
    else:
        scheme, rest = _SCHEME_ALIASES.get(m.group(1).lower(), m.group(1).lower()), m.group(2)
        if rest.startswith("//"):
            authority, _, tail = rest[2:].partition("/")
            tail = "/" + tail
        else:
            authority, tail = "", rest
        if scheme == "file" and authority == "localhost":
            authority = ""
        absolute = f"{scheme}://{authority}{unquote(tail)}"
    base = unquote(root).rstrip("/") + "/"
    return absolute[len(base):] if absolute.startswith(base) else absolute


def maybe_noncanonical(paths: pa.Array) -> np.ndarray:
    """Rows whose path may differ from its canonical key: it has '%' or ':', or starts with '/'.

    A byte scan of the string data (no per-row Python), as fast as memory allows.
    """
    n = len(paths)
    flags = np.zeros(n, dtype=bool)
    if n == 0 or paths.null_count == n:
        return flags
    width = np.int64 if pa.types.is_large_string(paths.type) else np.int32
    _, offset_buf, data_buf = paths.buffers()
    offsets = np.frombuffer(offset_buf, dtype=width, count=n + 1, offset=paths.offset * np.dtype(width).itemsize)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    for start in range(lo, hi, _SCAN_BLOCK):  # cache-sized blocks: no full-size temporaries
        block = data[start:min(hi, start + _SCAN_BLOCK)]
        mask = block == 0x25
        mask |= block == 0x3A
        if mask.any():
            hits = np.flatnonzero(mask) + start
            flags[np.searchsorted(offsets, hits, side="right") - 1] = True
    starts = offsets[:-1]
    nonempty = np.greater(offsets[1:], starts)
    flags[nonempty] |= data[starts[nonempty]] == 0x2F
    return flags


def file_name(path: str) -> str:
    """The last segment of ``canonical_path(path, root)`` for any root, computed cheaply.

    Escapes never straddle a literal '/', so it is the raw last segment, decoded (and cut again
    if the decoding produced a '/').
    """
    m = _SCHEME.match(path)
    if m is not None:  # the scheme and authority are never part of the last segment
        rest = m.group(2)
        path = "/" + rest[2:].partition("/")[2] if rest.startswith("//") else rest
    name = path.rpartition("/")[2]
    return unquote(name).rpartition("/")[2] if "%" in name else name


def canonical_paths(paths: pa.Array | pa.ChunkedArray, root: str) -> pa.Array:
    """:func:`canonical_path` of every row, vectorised: only rows :func:`maybe_noncanonical` flags
    are canonicalised in Python; the others are their own key."""
    arr = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    flags = maybe_noncanonical(arr)
    if not flags.any():
        return arr
    idx = np.flatnonzero(flags)
    fixed = [None if p is None else canonical_path(p, root) for p in arr.take(pa.array(idx, pa.int64())).to_pylist()]
    return pc.replace_with_mask(arr, pa.array(flags), pa.array(fixed, pa.string()))
