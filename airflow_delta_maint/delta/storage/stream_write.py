"""An object written as a stream: on local disk a file at its final path, on an object store a
multipart upload (obstore's ``open_writer``) whose parts go out while the writer produces the next
bytes, so a large file never sits whole in memory or in a local temporary copy.

Whole or not at all: a failure inside the ``with`` block deletes the local file, or aborts the upload
(the object is never created); only a clean exit completes it.

obstore's writer sends what stays below one part as a single put, and anything larger as a multipart upload of
parts of the buffer's size; the stream is counted so (:meth:`~.store.Storage.count_upload`) when it ends.
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
    part = part_bytes or PART_BYTES
    upload = _Upload(storage, key, writer)
    try:
        with writer:  # obstore aborts the upload when the block raises
            try:
                yield upload  # type: ignore[misc]
            except BaseException:
                failed_inside = True
                raise
    except BaseException as exc:
        if failed_inside:
            _count_aborted(storage, upload.written, part)
        else:  # the last part or the put failed
            storage.count_upload(upload.written, part, multipart=upload.written >= part)
        if failed_inside or not isinstance(exc, Exception):
            raise
        raise translate(exc, storage.root, storage.family, "write to", key) from None
    # the writer turns to a multipart upload once its buffer would hold a whole part
    storage.count_upload(upload.written, part, multipart=upload.written >= part)


def _count_aborted(storage: Storage, written: int, part: int) -> None:
    """Count a stream its writer gave up: nothing sent below a part, else the multipart upload, the parts its
    bytes filled, and the abort (a delete of no object)."""
    if written >= part:
        storage.calls.add("multipartUpload", 1, written)
        storage.calls.add("multipartPart", written // part, written // part * part)
        storage.calls.add("delete")
