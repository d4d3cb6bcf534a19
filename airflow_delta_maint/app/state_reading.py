"""How a job on the driver reads the table's state: whole in memory, or streamed from the log.

Small logs are loaded whole (``Snapshot.load``), as before; from the ``stream_min_files`` setting's
checkpointed files on (:class:`~airflow_delta_maint.app.settings.Settings`, ``DELTA_MAINT_STREAM_MIN_FILES``),
the jobs open the state streamed (:func:`~airflow_delta_maint.delta.log.state_stream.open_state`) and hand
the work per file to Spark tasks. Whatever the stream cannot vouch for (``StreamFallback``) is done
on the whole ``Snapshot`` instead, with the same answers.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from airflow_delta_maint.delta.log.state_size import use_streamed_state
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import TableState, open_streamed, read_table
from airflow_delta_maint.delta.storage.store import Storage

from . import settings
from .context import JobContext

log = logging.getLogger("delta_maint.state")
T = TypeVar("T")


def streamed_state(storage: Storage, version: int | None = None, what: str = "the job", *,
                   min_files: int | None = None) -> StreamedState | None:
    """The streamed state's header when the log is large and the stream can open it; None to read
    the whole ``Snapshot`` (a small log, or one the stream cannot vouch for): for the jobs that need
    the header only.

    ``min_files``: the threshold (default: the running job's ``stream_min_files`` setting).
    """
    threshold = settings.current().stream_min_files if min_files is None else min_files
    if not use_streamed_state(storage, threshold):
        return None
    return open_streamed(storage, version, what=what)


def read_state(storage: Storage, work: Callable[[TableState], T], version: int | None = None, what: str = "the job",
               *, paths_only: bool = False, min_files: int | None = None, streamed: bool = True) -> T:
    """Run ``work`` on the table's state: streamed when the log is large (the ``stream_min_files``
    setting, or ``min_files``) and ``streamed`` allows it, else whole;
    :func:`~airflow_delta_maint.delta.log.table_state.read_table` decides the fallback where the
    stream cannot vouch for the state."""
    threshold = settings.current().stream_min_files if min_files is None else min_files
    return read_table(storage, work, version=version, streamed=streamed and use_streamed_state(storage, threshold),
                      paths_only=paths_only, what=what)


def fell_back(what: str, why: object) -> None:
    """Log that a streamed job goes on with the whole ``Snapshot``, and why."""
    log.info("%s reads the whole state in memory: %s", what, why)


def warm_up_spark(ctx: JobContext) -> None:
    """Start the job's SparkSession in the background (the driver streams the log meanwhile);
    nothing under local execution, on Spark Connect or when it is already up."""
    if ctx.spark_allowed and not ctx.connect and ctx.started_spark is None:
        from .spark_session import start_in_background

        start_in_background(ctx.master)
