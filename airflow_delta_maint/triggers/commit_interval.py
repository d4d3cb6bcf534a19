"""Count a Delta table's commits since its last maintenance, cheaply; and the trigger that waits for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.commit_watch import CommitWatch
from airflow_delta_maint.delta.log.history import last_operation_version, latest_version_cheap, log_state
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.hooks.storage_credentials import (
    aget_connection,
    credentials_from_connection,
    refuse_secret_options,
    worker_options,
)

SINCE_CHOICES = ("last_optimize", "last_checkpoint", "last_compaction", "version")


def _optional_int(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    return int(value)


def validate_since(since: str, since_version: Any, min_commits: Any) -> tuple[int | None, int]:
    """
    Check the sensor's arguments (after templating) and convert them.

    :param since: what to count from: one of :data:`SINCE_CHOICES`.
    :param since_version: the version to count from when ``since="version"``.
    :param min_commits: how many commits are enough.
    :return: ``(since_version, min_commits)`` as integers.
    :raises ValueError: when an argument is invalid.
    """
    if since not in SINCE_CHOICES:
        raise ValueError(f"since must be one of {', '.join(SINCE_CHOICES)}; got {since!r}")
    version = _optional_int(since_version)
    if since == "version" and version is None:
        raise ValueError("since='version' needs since_version (e.g. the to_version of a previous run)")
    needed = int(min_commits)
    if needed < 1:
        raise ValueError(f"min_commits must be at least 1; got {needed}")
    return version, needed


def count_commits(
    table_uri: str,
    min_commits: int,
    since: str = "last_optimize",
    since_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    watch: CommitWatch | None = None,
) -> dict[str, int]:
    """
    The commits a table gathered since a reference point, read cheaply from its log.

    The cost does not grow with the table's history: the latest version is found by existence
    checks from the checkpoint ``_last_checkpoint`` names; ``last_optimize`` reads the commitInfo
    of at most ``min_commits`` commits backwards; ``last_compaction`` lists the log from the last
    checkpoint on (log compaction files can only be found by listing).

    :param table_uri: the table's path or URI.
    :param min_commits: how many commits are enough (bounds the backwards scan of ``last_optimize``).
    :param since: ``last_optimize`` (the newest OPTIMIZE commit), ``last_checkpoint``,
        ``last_compaction`` (the newer of the last checkpoint and the last log compaction file) or
        ``version`` (``since_version``).
    :param since_version: the version to count from when ``since="version"``.
    :param storage_options: object-store options for the table.
    :param watch: what the previous count of this table saw (a sensor's or trigger's own); the count then reads
        only what is new: two existence checks when nothing was committed.
    :return: ``{"from_version", "to_version", "commits"}``: the versions after the reference
        point up to the latest one, and how many there are. When no OPTIMIZE is found within
        ``min_commits`` commits, the range is those ``min_commits`` commits.
    :raises DeltaError: when the table is missing or not a Delta table.
    """
    storage = Storage(table_uri, storage_options)
    if since == "last_compaction":
        state = log_state(storage)
        latest = state.latest_version
        ends = [v for v in (state.last_checkpoint_version, state.last_compaction_end) if v is not None]
        base = max(ends) if ends else -1
    else:
        if watch is None:
            latest, checkpoint = latest_version_cheap(storage)
        else:
            latest, checkpoint = watch.latest_version(storage, with_checkpoint=since == "last_checkpoint")
        if since == "version":
            base = int(since_version) if since_version is not None else -1
        elif since == "last_checkpoint":
            base = checkpoint if checkpoint is not None else -1
        elif since == "last_optimize":
            found = (last_operation_version(storage, ["OPTIMIZE"], latest, max_commits=min_commits) if watch is None
                     else watch.last_operation(storage, ["OPTIMIZE"], latest, max_commits=min_commits))
            base = found if found is not None else max(-1, latest - min_commits)
        else:
            raise ValueError(f"since must be one of {', '.join(SINCE_CHOICES)}; got {since!r}")
    from_version = base + 1
    return {"from_version": from_version, "to_version": latest, "commits": max(0, latest - base)}


async def storage_options_now(table_uri: str, storage_options: Mapping[str, str],
                              storage_conn_id: str | None) -> dict[str, str]:
    """The storage options of one check: the connection's credentials (fetched now, never kept in the
    trigger's arguments) under the explicit ones."""
    if not storage_conn_id:
        return dict(storage_options)
    conn = await aget_connection(storage_conn_id)
    credentials = await asyncio.to_thread(credentials_from_connection, conn, table_uri)
    return worker_options(credentials, storage_options)


async def table_now(trigger: Any) -> tuple[str, dict[str, str]]:
    """The table a trigger watches and its storage options for one check: ``table_uri``, or ``table_name``
    resolved in the catalog of ``catalog_conn_id`` now (its vended credentials never kept in the
    trigger's arguments)."""
    _, table_uri, options = await named_table_now(trigger)
    return table_uri, options


async def named_table_now(trigger: Any) -> tuple[Any | None, str, dict[str, str]]:
    """:func:`table_now` with the catalog's answer (a ``ResolvedTable``) first, None for a table given by URI."""
    name = getattr(trigger, "table_name", None)
    if not name:
        return None, trigger.table_uri, await storage_options_now(trigger.table_uri, trigger.storage_options,
                                                                  trigger.storage_conn_id)
    from airflow_delta_maint.hooks.catalogs.table_target import resolve_table_name, storage_credentials_for

    resolved = await asyncio.to_thread(resolve_table_name, name, trigger.catalog_conn_id)
    credentials = await asyncio.to_thread(storage_credentials_for, resolved, trigger.storage_conn_id)
    return resolved, resolved.location, worker_options(credentials, trigger.storage_options)


def table_label(table_uri: str | None, table_name: str | None, catalog_conn_id: str | None) -> str:
    """How a trigger names its table in logs and events: the URI, or ``name (catalog conn)``."""
    return str(table_uri) if table_uri else f"{table_name} (catalog {catalog_conn_id})"


async def check_commits(trigger: Any) -> dict[str, int]:
    """One commit count for a trigger holding ``table_uri`` (or ``table_name`` and ``catalog_conn_id``),
    ``min_commits``, ``since``, ``since_version``, ``storage_options`` and ``storage_conn_id``, off the event loop."""
    table_uri, options = await table_now(trigger)
    return await asyncio.to_thread(count_commits, table_uri, trigger.min_commits, trigger.since,
                                   trigger.since_version, options, getattr(trigger, "commit_watch", None))


class CommitIntervalTrigger(BaseTrigger):
    """
    Fire once a Delta table has gathered ``min_commits`` commits since a reference point.

    Each check runs the cheap log reads of :func:`count_commits` in a worker thread, so the
    triggerer's event loop never blocks on storage I/O. The event's payload is
    ``{"status": "success", "from_version", "to_version", "commits"}``, or
    ``{"status": "error", "message"}`` when the table cannot be read (missing, not a Delta table).

    :param table_uri: the table's path or URI.
    :param min_commits: how many commits are enough.
    :param since: ``last_optimize``, ``last_checkpoint``, ``last_compaction`` or ``version``.
    :param since_version: the version to count from when ``since="version"``.
    :param storage_options: non-secret object-store options for the table (stored with the
        trigger in the metadata database, so keys naming a secret are refused).
    :param storage_conn_id: an Airflow connection holding the table's credentials. Only its id is
        serialized; the trigger fetches the connection inside the triggerer before each check.
    :param poke_interval: seconds between checks.
    :param table_name: the table's name in a catalog instead of ``table_uri``, resolved before each check.
    :param catalog_conn_id: the catalog's connection (with ``table_name``); only its id is serialized.
    """

    def __init__(
        self,
        table_uri: str | None,
        min_commits: int,
        since: str = "last_optimize",
        since_version: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        poke_interval: float = 60.0,
        storage_conn_id: str | None = None,
        table_name: str | None = None,
        catalog_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        refuse_secret_options(storage_options, type(self).__name__)
        self.table_uri = table_uri
        self.table_name = table_name or None
        self.catalog_conn_id = catalog_conn_id or None
        self.label = table_label(table_uri, table_name, catalog_conn_id)
        self.min_commits = int(min_commits)
        self.since = since
        self.since_version = _optional_int(since_version)
        self.storage_options = dict(storage_options or {})
        self.poke_interval = float(poke_interval)
        self.storage_conn_id = storage_conn_id or None
        #: what the last check saw: the next one reads only what is new (not serialized)
        self.commit_watch = CommitWatch()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Serialize the trigger's arguments and class path."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "min_commits": self.min_commits,
                "since": self.since,
                "since_version": self.since_version,
                "storage_options": self.storage_options,
                "poke_interval": self.poke_interval,
                "storage_conn_id": self.storage_conn_id,
                **({"table_name": self.table_name, "catalog_conn_id": self.catalog_conn_id} if self.table_name
                   else {}),
            },
        )

    async def check(self) -> dict[str, int]:
        """One check, off the event loop."""
        return await check_commits(self)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Check every ``poke_interval`` seconds until enough commits are there."""
        while True:
            try:
                seen = await self.check()
            except (DeltaError, ValueError, AirflowException) as exc:
                yield TriggerEvent({"status": "error", "message": f"{self.label}: {exc}"})
                return
            if seen["commits"] >= self.min_commits:
                self.log.info("%s: %d commits (versions %d..%d)", self.label, seen["commits"],
                              seen["from_version"], seen["to_version"])
                yield TriggerEvent({"status": "success", **seen})
                return
            self.log.debug("%s: %d of %d commits", self.label, seen["commits"], self.min_commits)
            await asyncio.sleep(self.poke_interval)


__all__ = ["CommitIntervalTrigger", "count_commits", "validate_since", "named_table_now", "table_label", "table_now",
           "SINCE_CHOICES"]
