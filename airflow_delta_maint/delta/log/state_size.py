"""How large a table's state is, read cheaply from the log, to choose between the in-memory and the
streamed reading of it.

The application's jobs hold the whole state in memory (``Snapshot.load``) on small tables, which is
fastest there, and stream it (``state_stream``, work per file in Spark tasks) on large ones, whose
state would not fit the driver. The choice reads only what the log says about its own size:
``_last_checkpoint``'s ``numOfAddFiles`` (or its action count ``size``) when it names the latest
checkpoint, else the latest checkpoint's bytes (its parts, or a V2 checkpoint's sidecars). Both
readings give the same answers, so a stale or missing hint only costs time, never correctness.

The threshold is the caller's (the application passes its ``stream_min_files`` setting, read from
``DELTA_MAINT_STREAM_MIN_FILES`` at its entry points; tests force the streamed path on small tables
with ``0``); :data:`STREAM_MIN_FILES` is the default.
"""

from __future__ import annotations

import json

from airflow_delta_maint.delta.log.listing import LAST_CHECKPOINT, list_log
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["BYTES_PER_FILE", "STREAM_MIN_FILES", "checkpointed_files", "use_streamed_state"]

#: from this many checkpointed files on, the jobs stream the state (``Snapshot.load`` holds about
#: 1.2 GiB per million files with statistics; below this the in-memory reading is faster)
STREAM_MIN_FILES = 250_000
#: compressed checkpoint bytes per file action, a low estimate (adds with JSON statistics take
#: 60-150 bytes in a zstd or snappy checkpoint): a checkpoint's size over this is an upper bound
BYTES_PER_FILE = 128


def checkpointed_files(storage: Storage) -> int:
    """About how many file actions the latest checkpoint holds (0 when there is none).

    Reads ``_last_checkpoint`` and the log listing only (from the checkpoint the hint names on, the whole log
    without one); for a V2 checkpoint without a hint, the sizes its sidecar actions state (the top file's
    non-file columns).
    """
    try:
        hint = json.loads(storage.read(LAST_CHECKPOINT))
    except (FileNotFoundError, ValueError):
        hint = None
    named = hint.get("version") if isinstance(hint, dict) else None
    listing = list_log(storage, named) if isinstance(named, int) and named > 0 else None
    if listing is None or not listing.checkpoints:  # no hint, or a stale one: the whole log
        listing = list_log(storage)
    latest = listing.checkpoints[-1] if listing.checkpoints else None
    if latest is None:
        return 0
    if isinstance(hint, dict) and hint.get("version") == latest.version:
        for key in ("numOfAddFiles", "size"):
            if isinstance(hint.get(key), int) and hint[key] > 0:
                return int(hint[key])
    size = sum(f.size for f in latest.files)
    if latest.kind == "v2":
        from airflow_delta_maint.delta.log.checkpoint_read import sidecar_sizes

        try:
            size += sum(s for _, s in sidecar_sizes(storage, latest))
        except Exception:  # noqa: BLE001 - an estimate: an unreadable top file is read (and reported) later
            pass
    return size // BYTES_PER_FILE


def use_streamed_state(storage: Storage, threshold: int = STREAM_MIN_FILES) -> bool:
    """Whether a job should stream this table's state rather than load it whole: from ``threshold``
    checkpointed files on (0: always)."""
    if threshold <= 0:
        return True
    return checkpointed_files(storage) >= threshold
