"""One maintenance job on one table, as a task runs it on the Airflow worker, everything but Spark's part.

It resolves a table by name and the table's credentials, asks the job whether it has anything to do (the
log alone, no Spark), chooses where the run goes and runs it in this process when it stays here. The
operators hold their arguments and Airflow's wiring (template fields, assets, lineage, XCom) and hand the
rest to this object and to :class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook`, which submits
the application. Never imports pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.execution import (EXECUTIONS, LOCAL_MAX_LOG_BYTES, Looked, choose_execution, log_bytes,
                                               parsed_args, run_parsed)
from airflow_delta_maint.app.job_definitions import JobDefinition
from airflow_delta_maint.app.metrics import base_metrics, finish
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.storage.store_calls import StoreCalls, counting
from airflow_delta_maint.hooks.catalogs import ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_target import (
    check_catalog_allows,
    check_table_arguments,
    credential_operation,
    resolve_refreshed_table_name,
    resolve_table_name,
    storage_credentials_for,
)
from airflow_delta_maint.hooks.provider_config import configured_execution
from airflow_delta_maint.hooks.storage_credentials import (
    StorageCredentials,
    refuse_secret_options,
    resolve_storage_credentials,
    worker_options,
)

__all__ = ["MaintenanceTask"]


@dataclass
class MaintenanceTask:
    """A job on a table, as one task runs it.

    :param job: the job's definition.
    :param task_id: the task's id, named in errors.
    :param table_uri: the table's location (for a table by name: set once it is resolved).
    :param table_name: the table's name in a catalog, instead of ``table_uri``.
    :param catalog_conn_id: the catalog's connection, for ``table_name``.
    :param storage_options: non-secret store options (no credentials).
    :param storage_conn_id: the connection holding the table's credentials.
    :param log: where the task logs.
    """

    job: JobDefinition
    task_id: str
    table_uri: str = ""
    table_name: str | None = None
    catalog_conn_id: str | None = None
    storage_options: Mapping[str, Any] | None = None
    storage_conn_id: str | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("delta_maint.task"))
    resolved: ResolvedTable | None = None
    refresh_env: dict[str, str] = field(default_factory=dict)
    credentials: StorageCredentials | None = None
    #: what the check's look at the log found for the execution choice (None: the choice looks itself)
    looked: Looked | None = None
    #: full reads of the log this task made on the worker (its listings aside)
    log_reads: int = 0
    #: the version the check's look saw (None: no look); the run says whether it had to plan on a newer one
    seen_version: int | None = None

    # -- the table and its credentials -------------------------------------------------------------
    @property
    def table_storage_options(self) -> dict[str, str]:
        """The storage options as strings (no credentials: these go on the application's command line)."""
        return {str(k): str(v) for k, v in (self.storage_options or {}).items()}

    @property
    def worker_storage_options(self) -> dict[str, str]:
        """Storage options for the checks on this worker: the connection's credentials under the explicit options."""
        return worker_options(self.credentials, self.table_storage_options)

    def resolve_table(self, params: Mapping[str, Any]) -> ResolvedTable | None:
        """Resolve ``table_name`` in its catalog (once) and take its location as ``table_uri``; None for a table
        given by URI. ``params``: the job's parsed options (delta-spark's runs get no credential refresh)."""
        if not self.table_name:
            return None
        if self.resolved is None:
            check_table_arguments(self.table_uri, self.table_name, self.catalog_conn_id, self.task_id)
            operation = credential_operation([self.job.name])
            if self.job.uses_delta_spark(params):  # delta-spark's Hadoop store reads its credentials once
                self.resolved = resolve_table_name(str(self.table_name), self.catalog_conn_id, operation)
            else:
                self.resolved, self.refresh_env = resolve_refreshed_table_name(
                    str(self.table_name), self.catalog_conn_id, operation)
            self.table_uri = self.resolved.location
            self.log.info("%s resolved to %s", self.resolved.name, self.resolved.location)
        return self.resolved

    def resolve_credentials(self, params: Mapping[str, Any]) -> StorageCredentials | None:
        """Fetch ``storage_conn_id`` (when set), or take the credentials the catalog vended for a table by name,
        and keep them for this run (their secrets masked); a catalog-managed table is checked to allow the job."""
        refuse_secret_options(self.storage_options, self.task_id)
        resolved = self.resolve_table(params)
        if resolved is not None:
            self.credentials = storage_credentials_for(resolved, self.storage_conn_id, self.refresh_env)
            check_catalog_allows(resolved, self.job.name, self.worker_storage_options)
        else:
            self.credentials = resolve_storage_credentials(self.storage_conn_id, self.table_uri)
        return self.credentials

    def install_credential_refresh(self) -> None:
        """Have this process's stores of the table ask the catalog again for vended credentials (the checks on
        this worker, a local run); :meth:`drop_credential_refresh` undoes it."""
        from airflow_delta_maint.catalogs.unity_credentials import provider_from_environ
        from airflow_delta_maint.delta.storage.store import register_credential_provider

        provider = provider_from_environ(self.refresh_env)
        if provider is not None and self.table_uri:
            register_credential_provider(self.table_uri, provider)

    def drop_credential_refresh(self) -> None:
        from airflow_delta_maint.delta.storage.store import register_credential_provider

        if self.refresh_env and self.table_uri:
            register_credential_provider(self.table_uri, None)

    # -- the check, the choice, the run in this process ---------------------------------------------
    def failed(self, exc: DeltaError) -> AirflowException:
        """The task's error for a failure of the job: one line, as the application reports it."""
        return AirflowException(f"delta-maint {self.job.name} failed: {exc}")

    def nothing_to_do(self, options: Any) -> str | None:
        """Why the job would do nothing on the table (its check without Spark), or None. Bad input raises
        the core's ``DeltaError``, as the job would."""
        return self.job.nothing_to_do(self.table_uri, self.worker_storage_options, options)

    def check(self, params: Mapping[str, Any], execution: str | None = None) -> dict[str, Any] | None:
        """The "skipped" metrics when the job's check says there is nothing to do, else None; their
        ``storeCalls`` are the check's.

        A job whose runner offers ``look`` reads the log once for the check, the version and (for the
        execution ``auto`` of a job that rewrites data files, on a small log) the bytes its plan rewrites, which
        the execution choice then takes instead of reading the log again."""
        calls = StoreCalls()
        with counting(calls):
            metrics = self._check(params, execution)
        if metrics is not None:
            metrics["storeCalls"] = calls.counts()
        return metrics

    def _check(self, params: Mapping[str, Any], execution: str | None) -> dict[str, Any] | None:
        try:
            options = self.job.typed_options(params)
            look = getattr(self.job.module(), "look", None)
            if look is not None and options is not None:
                plan_bytes = self._sizes_before_look(params, execution)
                self.log_reads += 1
                reason, version, planned = look(self.table_uri, self.worker_storage_options, options,
                                                plan_bytes=plan_bytes)
                self.seen_version = version
                if self.looked is not None and plan_bytes:
                    self.looked = Looked(self.looked.log_bytes, None if planned is None else planned.bytes, planned)
            else:
                self.log_reads += 1
                reason = self.nothing_to_do(options)
                version = self._latest_version() if reason else None
            if not reason:
                return None
        except DeltaError as exc:
            raise self.failed(exc) from exc
        metrics = base_metrics(self.job.name, self.table_uri)
        metrics.update(status="skipped", reason=str(reason), version_read=version)
        if params.get("engine") is not None:
            metrics["engine"] = params["engine"]
        metrics.update(getattr(reason, "details", None) or {})  # e.g. the auto-compaction decision
        return finish(metrics)

    def _sizes_before_look(self, params: Mapping[str, Any], execution: str | None) -> bool:
        """Whether the look should plan the rewrite's bytes: ``auto`` execution of a job that rewrites data
        files, on a log small enough for the worker (its listing, kept for the choice)."""
        try:
            requested = configured_execution(execution, EXECUTIONS)
        except ValueError:
            return False  # the choice refuses it, in one line
        if requested != "auto" or not self.job.rewrites_data(params) or self.job.spark_only(params):
            return False
        size = log_bytes(self.table_uri, self.worker_storage_options,
                         all_commits=self.job.reads_older_commits(params))
        self.looked = Looked(size, None)
        return size <= LOCAL_MAX_LOG_BYTES

    def _latest_version(self) -> int:
        from airflow_delta_maint.delta.log.history import log_state
        from airflow_delta_maint.delta.storage.store import Storage

        return log_state(Storage(self.table_uri, self.worker_storage_options)).latest_version

    def check_options(self, params: Mapping[str, Any]) -> None:
        """Refuse a bad option as the job would, before anything is read (the run has no check)."""
        try:
            self.job.typed_options(params)
        except DeltaError as exc:
            raise self.failed(exc) from exc

    def choose(self, execution: str | None, params: Mapping[str, Any]) -> tuple[str, str]:
        """Where this run goes, ``("local" | "spark", why)`` (see
        :func:`~airflow_delta_maint.app.execution.choose_execution`)."""
        try:
            requested = configured_execution(execution, EXECUTIONS)
        except ValueError as exc:
            raise AirflowException(str(exc)) from None
        try:
            return choose_execution(requested, self.job.name, params, self.table_uri, self.worker_storage_options,
                                    looked=self.looked)
        except DeltaError as exc:
            raise self.failed(exc) from exc

    def run_locally(self, params: Mapping[str, Any], history_uri: str | None) -> dict[str, Any]:
        """Run the job in this process (no Spark); metrics and failures as from spark-submit."""
        args = parsed_args(self.job, params, history_uri, seen_version=self.seen_version)
        _, metrics = run_parsed(self.job, self.table_uri, args, self.worker_storage_options)
        if metrics.get("status") == "failed":
            raise AirflowException(f"delta-maint {self.job.name} failed: {metrics.get('error', 'unknown error')}")
        return metrics
