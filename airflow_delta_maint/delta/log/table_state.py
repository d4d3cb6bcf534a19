"""Opening a table's state, and the one place that decides between streamed and whole.

A job names the state it would like (streamed in bounded memory, or whole in memory) and hands
its work, written once against :class:`~airflow_delta_maint.delta.log.table_header.TableHeader`
and its scan, to :func:`read_table`. Where the stream cannot vouch for the state (when it is
opened, or while the work scans it, before the work has written anything), the work runs again on
the state loaded whole, whose answer (or error) is then the answer. No job catches the stream's
fallback itself.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, TypeVar, Union

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState, StreamFallback, open_state
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["TableState", "open_streamed", "read_table"]

log = logging.getLogger("delta_maint.state")

#: a table's state: eager (every file in memory) or streamed (files left in the log); both are
#: table headers with the same scan
TableState = Union[Snapshot, StreamedState]
T = TypeVar("T")


def read_table(table: str | Storage, work: Callable[[TableState], T], *, version: int | None = None,
               storage_options: Mapping[str, str] | None = None, streamed: bool = True, paths_only: bool = False,
               what: str = "the job") -> T:
    """Run ``work`` on the table's state at ``version`` (default: the latest) and return its answer.

    Args:
        table: the table path or URI, or its Storage.
        work: the job's reading, given either state; it must write nothing before its scans end.
        streamed: open the state streamed (else, or where the stream cannot vouch for it, whole).
        paths_only: for the whole state: read the checkpoint's file actions for their path,
            deletion vector and deletion time only (see ``Snapshot.load``).
        what: the job's name, for the log line that says it reads the whole state.
    """
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    if streamed:
        state: StreamedState | None = None
        try:
            state = open_state(storage, version)
            return work(state)
        except StreamFallback as exc:
            log.info("%s reads the whole state in memory: %s", what, exc)
            if state is not None:  # the same version as the stream's, not a newer one
                version = state.version
    return work(Snapshot.load(storage, version, paths_only=paths_only))


def open_streamed(table: str | Storage, version: int | None = None, storage_options: Mapping[str, str] | None = None,
                  what: str = "the job") -> StreamedState | None:
    """The streamed state's header, for a job that needs no file of it; None where the stream
    cannot vouch for it when it is opened (the caller then reads the whole state its own way)."""
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    try:
        return open_state(storage, version)
    except StreamFallback as exc:
        log.info("%s reads the whole state in memory: %s", what, exc)
        return None
