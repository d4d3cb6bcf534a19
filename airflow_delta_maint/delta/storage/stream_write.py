"""An object written as a stream: on local disk a file at its final path, on an object store a
multipart upload (obstore's ``open_writer``) whose parts go out while the writer produces the next
bytes, so a large file never sits whole in memory or in a local temporary copy.

Whole or not at all: a failure inside the ``with`` block deletes the local file, or aborts the upload
(the object is never created); only a clean exit completes it.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO, Any, Iterator

import obstore

from airflow_delta_maint.delta.storage.failures import translate
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["PART_BYTES", "UPLOADS", "open_stream"]

#: bytes of one part of a multipart upload (S3 wants at least 5 MiB but for the last)
PART_BYTES = 16 << 20
#: parts uploaded at once
UPLOADS = 4


class _Upload:
    """A writable binary stream over obstore's writer, its failures as the store's one-line errors."""

    def __init__(self, storage: Storage, key: str, writer: Any):
        self.storage, self.key, self.writer, self.written = storage, key, writer, 0

    def write(self, data: bytes | memoryview) -> int:
        try:
            n = self.writer.write(data)
        except Exception as exc:
            raise translate(exc, self.storage.root, self.storage.family, "write to", self.key) from None
        self.written += len(data)
        return n

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def open_stream(storage: Storage, key: str, part_bytes: int | None = None) -> Iterator[IO[bytes]]:
    """A binary stream that becomes the object ``key`` when the block exits cleanly (overwriting it);
    nothing is left of it when the block raises. ``part_bytes``: of each part (default ``PART_BYTES``)."""
    if storage.is_local:
        path = storage.local_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path, "wb") as f:
                yield f
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        storage.drop_checksum_sidecar(key)
        return
    storage.require_put_if_absent()
    try:
        writer = obstore.open_writer(storage.store, key, buffer_size=part_bytes or PART_BYTES,
                                     max_concurrency=UPLOADS)
    except Exception as exc:
        raise translate(exc, storage.root, storage.family, "write to", key) from None
    failed_inside = False
    try:
        with writer:  # obstore aborts the upload when the block raises
            try:
                yield _Upload(storage, key, writer)  # type: ignore[misc]
            except BaseException:
                failed_inside = True
                raise
    except Exception as exc:
        if failed_inside:
            raise
        raise translate(exc, storage.root, storage.family, "write to", key) from None
