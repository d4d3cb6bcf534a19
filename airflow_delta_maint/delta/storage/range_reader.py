"""A stored object read as a seekable file, by byte ranges: for parquet readers that need only a
footer and some columns of a remote file, never the whole of it."""

from __future__ import annotations

import io
from typing import Any

from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["RangeReader"]


class RangeReader(io.RawIOBase):
    """A read-only, seekable file over the object ``key`` of ``storage`` (``size`` bytes long),
    each read one ranged GET."""

    def __init__(self, storage: Storage, key: str, size: int):
        self.storage, self.key, self.size, self.pos = storage, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else (self.pos + offset if whence == 1 else self.size + offset)
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.storage.read_range(self.key, self.pos, end)
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
