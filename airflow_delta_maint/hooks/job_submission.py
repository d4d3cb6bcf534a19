"""Submitting one job, or a fleet, and reading back its metrics: the part of
:class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook` that speaks to the application (its arguments
made once from a job's typed options, its metrics file, its one-line failures)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.common_flags import HISTORY_URI, SEEN_VERSION
from airflow_delta_maint.app.environment_errors import describe as describe_environment
from airflow_delta_maint.app.metrics import write_metrics
from airflow_delta_maint.app.package_bundle import APPLICATION
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.hooks.application_run import try_read_metrics

__all__ = ["JobSubmission", "application_args"]


def application_args(job: str, options: Mapping[str, Any] | Sequence[str], history_uri: str | None = None,
                     seen_version: int | None = None) -> list[str]:
    """The application's arguments for a job's options (values by name, or arguments already), the history and
    the version the task's check saw."""
    from airflow_delta_maint.app.job_definitions import definition

    if isinstance(options, Mapping):
        try:
            args = definition(job).options.to_argv(options, job)
        except DeltaError as exc:
            raise AirflowException(str(exc)) from None
    else:
        args = [str(a) for a in options]
    return [*args, *([HISTORY_URI, history_uri] if history_uri else []),
            *([SEEN_VERSION, str(seen_version)] if seen_version is not None else [])]


class JobSubmission:
    """Runs jobs and fleets through the hook's own submission (spark-submit, or Spark Connect)."""

    _connect: Any
    _submit_log_tail: str
    @property
    def is_cluster_mode(self) -> bool:
        raise NotImplementedError
    log: Any

    if TYPE_CHECKING:  # the submission's own parts, in DeltaMaintHook and SparkSubmitHook
        def submit(self, application: str = "", **kwargs: Any) -> None: ...
        def submit_env(self) -> dict[str, str]: ...
        def check_master_reachable(self, timeout_s: float = 10.0) -> None: ...
        def new_metrics_location(self, job: str) -> str: ...
        def build_command(self, job: str, table_uri: str, job_args: Sequence[str] = (), metrics_out: str | None = None,
                          storage_options: Mapping[str, Any] | None = None) -> list[str]: ...
        def _cleanup_processes(self) -> None: ...
        def _finish_fast_start(self) -> None: ...

    def run_job(
        self,
        job: str,
        table_uri: str,
        job_args: Mapping[str, Any] | Sequence[str] = (),
        storage_options: Mapping[str, Any] | None = None,
        history_uri: str | None = None,
        seen_version: int | None = None,
    ) -> dict[str, Any]:
        """
        Submit one job and wait for it; return its metrics object.

        :param job: the job name (``optimize``, ``vacuum``, ``compact-log``, ``inspect``, ...).
        :param table_uri: the table's path or URI.
        :param job_args: the job's own options: their values by name (checked here, one message naming a bad
            one, and turned into the application's arguments once), or the application's arguments themselves.
        :param storage_options: object-store options for the table (passed to the application and
            used to read a metrics file from object storage).
        :param history_uri: record the run in the maintenance history at this URI.
        :param seen_version: the version the task's check saw; the metrics say whether the driver planned on a
            newer one (``version_checked``, ``replanned``).
        :raises AirflowException: when the job fails; the message is the application's own error.
        """
        job_args = application_args(job, job_args, history_uri, seen_version)
        if self._connect is not None:
            return self._connect.run_job(job, table_uri, job_args, storage_options)
        self.check_master_reachable()
        metrics_out = self.new_metrics_location(job)
        self.build_command(job, table_uri, job_args, metrics_out, storage_options)
        options = {k: str(v) for k, v in (storage_options or {}).items()}
        try:
            try:
                self.submit(str(APPLICATION), env=self.submit_env(), start_new_session=True)
            except AirflowException as exc:
                metrics = try_read_metrics(metrics_out, options)
                if metrics and metrics.get("status") == "failed" and metrics.get("error"):
                    raise AirflowException(f"delta-maint {job} failed: {metrics['error']}") from exc
                self._raise_environment_problem(f"delta-maint {job}", exc)
                raise
            metrics = try_read_metrics(metrics_out, options)
            if metrics is None:
                raise AirflowException(
                    f"delta-maint {job}: spark-submit succeeded but the driver wrote no metrics to {metrics_out}"
                    f"{self._submit_log_tail}"
                )
            if metrics.get("status") == "failed":
                raise AirflowException(f"delta-maint {job} failed: {metrics.get('error', 'unknown error')}")
            return metrics
        finally:
            self._cleanup_processes()
            self._finish_fast_start()
            if not self.is_cluster_mode:
                with contextlib.suppress(OSError):
                    os.unlink(metrics_out)

    def run_fleet(self, spec: Mapping[str, Any], storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """
        Submit one application that runs a fleet spec (see :mod:`airflow_delta_maint.app.fleet`); return its results.

        The spec is written beside the metrics file (a local file in client mode, under
        ``metrics_uri`` in cluster mode) and holds no credentials: those reach the driver through
        the spark-submit environment, as for one job. A table's failure does not fail the
        submission here: the results (``{"status", "tables": [one entry per table]}``) say which
        failed. When the application writes no results at all, this raises with its error.

        :param spec: the fleet spec (tables, their jobs and non-secret storage options).
        :param storage_options: object-store options for writing the spec and reading the results.
        :raises AirflowException: when the application produced no results.
        """
        if self._connect is not None:
            return self._connect.run_fleet(spec, storage_options)
        self.check_master_reachable()
        options = {k: str(v) for k, v in (storage_options or {}).items()}
        spec_uri = self.new_metrics_location("fleet-spec")
        metrics_out = self.new_metrics_location("fleet")
        write_metrics(spec, spec_uri, options)
        self.build_command("fleet", spec_uri, [], metrics_out, storage_options)
        try:
            error: AirflowException | None = None
            try:
                self.submit(str(APPLICATION), env=self.submit_env(), start_new_session=True)
            except AirflowException as exc:  # a failed table exits non-zero: its results say which
                error = exc
            results = try_read_metrics(metrics_out, options)
            if results is None or not isinstance(results.get("tables"), list):
                if error is not None:
                    self._raise_environment_problem("delta-maint fleet", error)
                raise AirflowException(f"delta-maint fleet: the application wrote no results to {metrics_out}"
                                       f"{self._submit_log_tail}") from error
            return results
        finally:
            self._cleanup_processes()
            self._finish_fast_start()
            if not self.is_cluster_mode:
                for path in (metrics_out, spec_uri):
                    with contextlib.suppress(OSError):
                        os.unlink(path)

    def _raise_environment_problem(self, what: str, cause: BaseException) -> None:
        """When spark-submit failed before the driver wrote metrics for a reason of the environment
        (the driver's Python, a missing module, Java), raise one line that says so; the output is in the log."""
        problem = describe_environment("\n".join(getattr(self, "_last_submit_log_lines", ())))
        if problem:
            raise AirflowException(f"{what} failed: {problem}") from cause

