"""An event trigger that schedules DAGs on a Delta table's commits (``Asset(watchers=[AssetWatcher(...)])``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.commit_watch import CommitWatch
from airflow_delta_maint.hooks.storage_credentials import (
    refuse_secret_options,
)
from airflow_delta_maint.triggers import commit_interval
from airflow_delta_maint.triggers.commit_interval import named_table_now, table_label, validate_since

#: prefix of the key under which the trigger keeps the last version it fired for in the asset's state store
STATE_KEY_PREFIX = "delta_maint.table_commits"


def next_crossing(seen: Mapping[str, int], fired_to: int | None, min_commits: int) -> dict[str, int] | None:
    """
    The event to fire for one check, or None: the commits counted from the later of the reference
    point and the last version already fired for must reach ``min_commits``.

    :param seen: :func:`~airflow_delta_maint.triggers.commit_interval.count_commits`'s answer.
    :param fired_to: the ``to_version`` of the last event fired (None: none yet, or forgotten).
    :param min_commits: how many commits are enough.
    :return: ``{"from_version", "to_version", "commits"}`` when the table crossed the threshold again.
    """
    base, commits = _counted(seen, fired_to)
    if commits < min_commits:
        return None
    return {"from_version": base + 1, "to_version": seen["to_version"], "commits": commits}


def _counted(seen: Mapping[str, int], fired_to: int | None) -> tuple[int, int]:
    """The version the count starts after (the later of the reference point and the last version fired
    for), and the commits after it up to the latest version."""
    base = seen["from_version"] - 1
    latest = seen["to_version"]
    if fired_to is not None and latest >= fired_to:
        base = max(base, fired_to)
    return base, max(0, latest - base)


def waiting_message(table_uri: str, seen: Mapping[str, int], fired_to: int | None, min_commits: int) -> str:
    """
    The one line a check that is not due logs, e.g. ``s3://b/t: versions 3..4, 2 commits since the last
    event (version 2), waiting for 3`` or ``s3://b/t: latest version 5, no commits since the last event
    (version 5), waiting for 3``.

    :param table_uri: the table.
    :param seen: :func:`~airflow_delta_maint.triggers.commit_interval.count_commits`'s answer.
    :param fired_to: the ``to_version`` of the last event fired (None: none yet, or forgotten).
    :param min_commits: how many commits are enough.
    """
    base, commits = _counted(seen, fired_to)
    latest = seen["to_version"]
    counted = (f"versions {base + 1}..{latest}, {commits} commit{'' if commits == 1 else 's'}" if commits
               else f"latest version {latest}, no commits")
    if fired_to is not None and base == fired_to:
        counted += f" since the last event (version {fired_to})"
    return f"{table_uri}: {counted}, waiting for {min_commits}"


class TableCommitsTrigger(BaseEventTrigger):
    """
    Fire an asset event each time a Delta table crosses ``min_commits`` commits since its last maintenance.

    Use it in an asset watcher and schedule the maintenance DAG on the asset::

        table = Asset("events", uri="s3://bucket/events", watchers=[
            AssetWatcher(name="events_commits", trigger=TableCommitsTrigger(table_uri="s3://bucket/events",
                                                                            min_commits=100))])

    It fires on a change, not on a state: after an event for versions up to ``to_version``, the
    next one needs ``min_commits`` commits after the later of the reference point (``since``) and
    that ``to_version``. So a DAG that runs OPTIMIZE resets the count, and a table that stays due
    because nothing maintained it fires again only after ``min_commits`` further commits, never
    in a loop. The last version fired for is kept in the watched asset's state store (when the
    triggerer offers one), so a restarted triggerer does not fire again for the same commits; an
    event may still be delivered twice across a restart, so DAGs scheduled on it must be
    idempotent (the maintenance operators are).

    Each check runs the cheap log reads of
    :func:`~airflow_delta_maint.triggers.commit_interval.count_commits` in a worker thread; the
    event loop never blocks. A table that cannot be read (missing, not yet created, not a Delta
    table) is logged and checked again at the next interval. A check that is not due logs one line
    (:func:`waiting_message`) when the latest version or the last event changed, not at every check.

    The payload is ``{"table_uri", "from_version", "to_version", "commits"}``; for a table by name,
    ``table_uri`` is its location at the check that fired, with ``table_name`` and ``asset_uri`` (its catalog
    asset URI, the one to give the watched ``Asset``, see ``docs/catalogs.md``).

    :param table_uri: the table's path or URI; a fixed value (the trigger's arguments identify it).
    :param min_commits: how many commits are enough.
    :param since: ``last_optimize`` (default), ``last_checkpoint``, ``last_compaction`` or ``version``.
    :param since_version: the version to count from when ``since="version"``.
    :param storage_options: non-secret object-store options (keys naming a secret are refused).
    :param storage_conn_id: an Airflow connection holding the table's credentials; only its id is
        stored, the triggerer fetches the connection before each check.
    :param poke_interval: seconds between checks.
    :param table_name: the table's name in a catalog instead of ``table_uri`` (fixed), resolved before each
        check; the payload then holds ``table_name`` and ``asset_uri`` too.
    :param catalog_conn_id: the catalog's connection (with ``table_name``); only its id is stored.
    """

    def __init__(
        self,
        *,
        table_uri: str | None = None,
        table_name: str | None = None,
        catalog_conn_id: str | None = None,
        min_commits: int,
        since: str = "last_optimize",
        since_version: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        storage_conn_id: str | None = None,
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__()
        if bool(table_uri) == bool(table_name) or (table_name and not catalog_conn_id):
            raise ValueError(f"{type(self).__name__}: give table_uri, or table_name with catalog_conn_id")
        fixed = {"table_uri": table_uri or "", "table_name": table_name or "", "catalog_conn_id": catalog_conn_id or "",
                 "since": since, "storage_conn_id": storage_conn_id or "",
                 **{f"storage_options.{k}": v for k, v in (storage_options or {}).items()}}
        for name, value in fixed.items():
            if "{{" in str(value):
                raise ValueError(f"{type(self).__name__}: {name} must be a fixed value, not a template; got {value!r}")
        refuse_secret_options(storage_options, type(self).__name__)
        version, needed = validate_since(since, since_version, min_commits)
        if float(poke_interval) <= 0:
            raise ValueError(f"{type(self).__name__}: poke_interval must be positive; got {poke_interval!r}")
        self.table_uri = str(table_uri) if table_uri else None
        self.table_name = table_name or None
        self.catalog_conn_id = catalog_conn_id or None
        self.label = table_label(table_uri, table_name, catalog_conn_id)
        self.min_commits = needed
        self.since = since
        self.since_version = version
        self.storage_options = {str(k): str(v) for k, v in (storage_options or {}).items()}
        self.storage_conn_id = storage_conn_id or None
        self.poke_interval = float(poke_interval)
        self._fired_to: int | None = None
        #: a table by name: its location, name and catalog asset URI at the last check, for the event
        self._named: dict[str, str] = {}
        #: what the last check saw: the next one reads only what is new (not serialized)
        self.commit_watch = CommitWatch()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and the (deterministic) arguments that identify this trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "min_commits": self.min_commits,
                "since": self.since,
                "since_version": self.since_version,
                "storage_options": dict(sorted(self.storage_options.items())),
                "storage_conn_id": self.storage_conn_id,
                "poke_interval": self.poke_interval,
                **({"table_name": self.table_name, "catalog_conn_id": self.catalog_conn_id} if self.table_name
                   else {}),
            },
        )

    @property
    def state_key(self) -> str:
        """The asset state store key of this trigger's memory (two watchers of one asset do not share it)."""
        _, kwargs = self.serialize()
        digest = hashlib.sha256(json.dumps(kwargs, sort_keys=True).encode()).hexdigest()[:16]
        return f"{STATE_KEY_PREFIX}.{digest}"

    async def _load_fired_to(self) -> int | None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            value = await store.aget(self.state_key, None)
        except Exception as exc:  # a store that cannot answer only costs a duplicate event
            self.log.warning("%s: the asset state store is unavailable (%s); memory kept in this process only",
                             self.label, exc)
            return None
        return int(value) if isinstance(value, (int, str)) and str(value).lstrip("-").isdigit() else None

    async def _save_fired_to(self, version: int) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            await store.aset(self.state_key, version)
        except Exception as exc:
            self.log.warning("%s: cannot record version %d in the asset state store (%s)",
                             self.label, version, exc)

    async def check(self) -> dict[str, int]:
        """One count of the table's commits, off the event loop (a table by name resolved first, its location and
        catalog asset URI kept for the event)."""
        resolved, table_uri, options = await named_table_now(self)
        if resolved is not None:
            self._named = {"table_uri": table_uri, "table_name": resolved.name, "asset_uri": resolved.asset_uri}
        return await asyncio.to_thread(commit_interval.count_commits, table_uri, self.min_commits, self.since,
                                       self.since_version, options, self.commit_watch)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Check every ``poke_interval`` seconds; fire each time the table crosses the threshold."""
        stored = await self._load_fired_to()
        if stored is not None:
            self._fired_to = stored
            self.log.info("%s: last event fired for version %d", self.label, stored)
        last_error = None
        last_waiting = None  # logged once per state (latest version, last version fired for), not per check
        while True:
            try:
                seen = await self.check()
            except (DeltaError, ValueError, OSError, AirflowException) as exc:
                message = f"{self.label}: cannot count commits: {exc}"
                if message != last_error:
                    self.log.warning("%s (checking again in %ss)", message, self.poke_interval)
                last_error = message
                last_waiting = None
            else:
                last_error = None
                if self._fired_to is not None and seen["to_version"] < self._fired_to:
                    self.log.warning("%s: latest version %d is older than the last event's %d (table "
                                     "recreated?); counting afresh", self.label, seen["to_version"],
                                     self._fired_to)
                    self._fired_to = None
                event = next_crossing(seen, self._fired_to, self.min_commits)
                if event is not None:
                    self.log.info("%s: %d commits (versions %d..%d)", self.label, event["commits"],
                                  event["from_version"], event["to_version"])
                    yield TriggerEvent({"table_uri": self.table_uri, **self._named, **event})
                    # remembered after the event is handed over: a crash in between repeats it, never loses it
                    self._fired_to = event["to_version"]
                    await self._save_fired_to(event["to_version"])
                else:
                    waiting = waiting_message(self.label, seen, self._fired_to, self.min_commits)
                    if waiting != last_waiting:
                        self.log.info("%s", waiting)
                    last_waiting = waiting
            await asyncio.sleep(self.poke_interval)


__all__ = ["TableCommitsTrigger", "next_crossing", "waiting_message", "STATE_KEY_PREFIX"]
