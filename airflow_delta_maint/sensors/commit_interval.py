"""Wait until a Delta table has gathered enough commits to be worth maintaining."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.commit_watch import CommitWatch
from airflow_delta_maint.hooks.catalogs.table_target import (
    check_table_arguments,
    resolve_table_name,
    storage_credentials_for,
)
from airflow_delta_maint.hooks.storage_credentials import (
    refuse_secret_options,
    resolve_storage_credentials,
    worker_options,
)
from airflow_delta_maint.triggers.commit_interval import (
    SINCE_CHOICES,
    CommitIntervalTrigger,
    count_commits,
    validate_since,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class CommitIntervalSensor(BaseSensorOperator):
    """
    Wait until a Delta table has at least ``min_commits`` commits since its last maintenance.

    Each poke reads only the tail of the table's log (see
    :func:`~airflow_delta_maint.triggers.commit_interval.count_commits`); its cost does not grow
    with the table's history. The sensor's XCom value is the version range it saw:
    ``{"from_version", "to_version", "commits"}`` (pass ``to_version`` to the next run's
    ``since_version`` to count from there).

    :param table_uri: the table's path or URI. (templated)
    :param table_name: the table's name in a catalog instead (exactly one of the two), resolved at each poke
        (and in the triggerer before each check) to its location and vended credentials. (templated)
    :param catalog_conn_id: the catalog's connection, needed with ``table_name`` (see ``docs/catalogs.md``).
    :param min_commits: how many commits are enough. (templated)
    :param since: what to count from: ``last_optimize`` (the newest OPTIMIZE commit),
        ``last_checkpoint``, ``last_compaction`` (the newer of the last checkpoint and log
        compaction file) or ``version``. (templated)
    :param since_version: the version to count from when ``since="version"``, e.g.
        ``"{{ ti.xcom_pull(task_ids='wait', include_prior_dates=True)['to_version'] }}"``. (templated)
    :param storage_options: non-secret object-store options for the table (endpoint, region, ...);
        keys naming a secret are refused. (templated)
    :param storage_conn_id: an Airflow connection holding the table's credentials (type ``aws``,
        ``wasb`` / ``adls`` or ``google_cloud_platform``). Each poke fetches it; a deferred sensor's
        trigger carries only its id and fetches it in the triggerer.
    :param deferrable: wait in the triggerer instead of a worker slot.

    Other parameters (``poke_interval``, ``timeout``, ``mode``, ``soft_fail``, ...): see
    :class:`~airflow.sdk.BaseSensorOperator`.
    """

    template_fields: Sequence[str] = ("table_uri", "table_name", "min_commits", "since", "since_version",
                                      "storage_options")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str | None = None,
        min_commits: int | str,
        since: str = "last_optimize",
        since_version: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        storage_conn_id: str | None = None,
        deferrable: bool = False,
        table_name: str | None = None,
        catalog_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_table_arguments(table_uri, table_name, catalog_conn_id, f"{type(self).__name__} {self.task_id!r}")
        self.table_name = table_name
        self.catalog_conn_id = catalog_conn_id
        if "{{" not in str(since) and since not in SINCE_CHOICES:
            raise ValueError(f"since must be one of {', '.join(SINCE_CHOICES)}; got {since!r}")
        self.table_uri = table_uri
        self.min_commits = min_commits
        self.since = since
        self.since_version = since_version
        refuse_secret_options(storage_options, self.task_id)
        self.storage_options = storage_options
        self.storage_conn_id = storage_conn_id
        self.deferrable = deferrable
        #: what the last poke saw (pokes of one try in "poke" mode): the next one reads only what is new
        self._commit_watch = CommitWatch()

    def _arguments(self) -> tuple[int | None, int]:
        try:
            return validate_since(self.since, self.since_version, self.min_commits)
        except ValueError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None

    @property
    def _options(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.storage_options or {}).items()}

    def _table_and_options(self) -> tuple[str, dict[str, str]]:
        """The table's location and storage options now: ``table_name`` resolved in its catalog at each poke."""
        if self.table_name:
            resolved = resolve_table_name(self.table_name, self.catalog_conn_id)
            return resolved.location, worker_options(storage_credentials_for(resolved, self.storage_conn_id),
                                                     self._options)
        return str(self.table_uri), worker_options(resolve_storage_credentials(self.storage_conn_id, self.table_uri),
                                                   self._options)

    def poke(self, context: Context) -> PokeReturnValue:
        since_version, min_commits = self._arguments()
        refuse_secret_options(self.storage_options, self.task_id)
        table_uri, options = self._table_and_options()
        label = f"{self.table_name} ({table_uri})" if self.table_name else table_uri
        try:
            seen = count_commits(table_uri, min_commits, self.since, since_version, options, self._commit_watch)
        except DeltaError as exc:
            raise AirflowException(f"cannot count the commits of {label}: {exc}") from exc
        self.log.info(
            "%s: %d commits since %s (versions %d..%d); waiting for %d",
            label, seen["commits"], self.since, seen["from_version"], seen["to_version"], min_commits,
        )
        return PokeReturnValue(is_done=seen["commits"] >= min_commits, xcom_value=seen)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context=context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        since_version, min_commits = self._arguments()
        self.defer(
            trigger=CommitIntervalTrigger(
                table_uri=self.table_uri,
                min_commits=min_commits,
                since=self.since,
                since_version=since_version,
                storage_options=self._options,
                storage_conn_id=self.storage_conn_id,
                poke_interval=self.poke_interval,
                table_name=self.table_name,
                catalog_conn_id=self.catalog_conn_id,
            ),
            method_name="execute_complete",
            timeout=datetime.timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, int]:
        """Resume after the trigger fired; return the version range it saw."""
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "the trigger ended without an event")
            raise AirflowException(f"{self.task_id}: {message}")
        seen = {k: event[k] for k in ("from_version", "to_version", "commits")}
        self.log.info("%s: %d commits (versions %d..%d)", self.table_uri or self.table_name, seen["commits"],
                      seen["from_version"], seen["to_version"])
        return seen


__all__ = ["CommitIntervalSensor"]
