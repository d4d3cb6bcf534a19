"""Running out of memory while building a table state, told as what it is.

A checkpoint read whole (``Snapshot.load``) needs memory in proportion to the table's files. When
an allocation fails (Python's ``MemoryError``, pyarrow's ``ArrowMemoryError``), the log is not
corrupt: :func:`state_too_large` builds the one-line error that says so, with the number of files
the checkpoint holds when the log tells it cheaply, and what to do.
"""

from __future__ import annotations

from airflow_delta_maint.delta.errors import StateTooLargeError
from airflow_delta_maint.delta.log.checkpoint_read import checkpoint_files
from airflow_delta_maint.delta.log.listing import LogSegment
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["state_too_large"]


def state_too_large(storage: Storage, segment: LogSegment) -> StateTooLargeError:
    """The error for a state of ``segment`` that did not fit in memory (see the module docstring)."""
    held = ""
    if segment.checkpoint is not None:
        size = checkpoint_files(storage, segment.checkpoint)
        if size is not None:
            held = f" (its checkpoint at version {segment.checkpoint.version} holds {size[0]:,} {size[1]})"
    return StateTooLargeError(
        f"the state of {storage.root} at version {segment.version} did not fit in memory{held}; this is not a "
        "corrupt log: give the process that read it (the Spark driver, or the Airflow worker for its checks) more "
        "memory, or let the worker's checks read the log streamed in bounded memory (they load the whole state "
        "only when the stream cannot vouch for it)")
