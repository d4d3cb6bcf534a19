"""Running out of memory while building a table state, told as what it is.

A checkpoint read whole (``Snapshot.load``) needs memory in proportion to the table's files. When
an allocation fails (Python's ``MemoryError``, pyarrow's ``ArrowMemoryError``), the log is not
corrupt: :func:`state_too_large` builds the one-line error that says so, with the number of files
the checkpoint holds when the log tells it cheaply, and what to do.
"""

from __future__ import annotations

import json

from airflow_delta_maint.delta.errors import StateTooLargeError
from airflow_delta_maint.delta.log.listing import LAST_CHECKPOINT, Checkpoint, LogSegment
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["checkpoint_files", "state_too_large"]


def checkpoint_files(storage: Storage, checkpoint: Checkpoint) -> tuple[int, str] | None:
    """How many files the checkpoint holds, as ``(count, what)``: its add actions as
    ``_last_checkpoint`` counts them (``numOfAddFiles``), else the actions its parquet files'
    footers count; None when neither can be read. Reads a few hundred bytes, never a whole file."""
    try:
        hint = json.loads(storage.read(LAST_CHECKPOINT))
        if isinstance(hint, dict) and hint.get("version") == checkpoint.version and \
                isinstance(hint.get("numOfAddFiles"), int):
            return hint["numOfAddFiles"], "files"
    except Exception:  # noqa: BLE001 - a hint only; memory is short, anything may fail here
        pass
    try:
        import pyarrow.parquet as pq

        from airflow_delta_maint.delta.log.snapshot import sidecar_key
        from airflow_delta_maint.delta.log.state_stream import _open_parquet, json_manifest_actions, other_actions

        rows = 0
        for f in checkpoint.files:
            if f.key.endswith(".json"):
                sidecars = json_manifest_actions(storage, f.key)["sidecar"]
            else:
                pf: pq.ParquetFile = _open_parquet(storage, f.key, f.size)
                rows += pf.metadata.num_rows
                sidecars = other_actions(storage, f.key, f.size, ("sidecar",))["sidecar"] \
                    if "sidecar" in pf.schema_arrow.names else []
            for s in sidecars:
                rows += _open_parquet(storage, sidecar_key(s["path"])).metadata.num_rows
        return rows, "actions"
    except Exception:  # noqa: BLE001 - as above
        return None


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
