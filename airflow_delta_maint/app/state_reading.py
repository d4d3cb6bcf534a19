"""How a job on the driver reads the table's state: whole in memory, or streamed from the log.

Small logs are loaded whole (``Snapshot.load``), as before; from the ``stream_min_files`` setting's
checkpointed files on (:class:`~airflow_delta_maint.app.settings.Settings`, ``DELTA_MAINT_STREAM_MIN_FILES``),
the jobs open the state streamed (:func:`~airflow_delta_maint.delta.log.state_stream.open_state`) and hand
the work per file to Spark tasks. Whatever the stream cannot vouch for (``StreamFallback``) is done
on the whole ``Snapshot`` instead, with the same answers.
"""

from __future__ import annotations

import logging

from airflow_delta_maint.delta.log.state_size import use_streamed_state
from airflow_delta_maint.delta.log.state_stream import StreamedState, StreamFallback, open_state
from airflow_delta_maint.delta.storage.store import Storage

from . import settings
from .context import JobContext

log = logging.getLogger("delta_maint.state")


def streamed_state(storage: Storage, version: int | None = None, what: str = "the job", *,
                   min_files: int | None = None) -> StreamedState | None:
    """The streamed state when the log is large and the stream can read it; None to load the
    whole ``Snapshot`` (a small log, or one the stream cannot vouch for).

    ``min_files``: the threshold (default: the running job's ``stream_min_files`` setting).
    """
    threshold = settings.current().stream_min_files if min_files is None else min_files
    if not use_streamed_state(storage, threshold):
        return None
    try:
        return open_state(storage, version)
    except StreamFallback as exc:
        log.info("%s reads the whole state in memory: %s", what, exc)
        return None


def fell_back(what: str, exc: StreamFallback) -> None:
    """Log that a streamed job goes on with the whole ``Snapshot``."""
    log.info("%s reads the whole state in memory: %s", what, exc)


def warm_up_spark(ctx: JobContext) -> None:
    """Start the job's SparkSession in the background (the driver streams the log meanwhile);
    nothing under local execution, on Spark Connect or when it is already up."""
    if ctx.spark_allowed and not ctx.connect and ctx._spark is None:
        from .spark_session import start_in_background

        start_in_background(ctx.master)
