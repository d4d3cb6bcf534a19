"""Operators that run the Delta maintenance jobs (OPTIMIZE, VACUUM, log compaction) with spark-submit."""

from __future__ import annotations

import contextlib
import argparse
import importlib
import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.execution import EXECUTIONS, choose_execution, run_in_process
from airflow_delta_maint.app.jobs import JOB_MODULES
from airflow_delta_maint.app.metrics import base_metrics, finish
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.maintenance_history import configured_history_uri, history_args, record_on_worker
from airflow_delta_maint.hooks.provider_config import configured_execution
from airflow_delta_maint.hooks.storage_credentials import (
    StorageCredentials,
    refuse_secret_options,
    resolve_storage_credentials,
    worker_options,
)
from airflow_delta_maint.operators.lineage import (
    asset_event_extra,
    inject_parent_job_info,
    operator_lineage,
    table_uri_matches,
)

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context


def available_jobs() -> list[str]:
    """The jobs the bundled application offers (registered and present), found without importing them."""
    found = []
    for name, module in JOB_MODULES.items():
        with contextlib.suppress(ModuleNotFoundError):
            if importlib.util.find_spec(module) is not None:
                found.append(name)
    return found


def _flag(args: list[str], option: str, value: Any) -> None:
    if value is None or value == "":
        return
    if isinstance(value, bool):
        if value:
            args.append(option)
        return
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    args += [option, str(value)]


def _as_bool(value: Any) -> bool:
    """A flag that may arrive as a rendered template string ("True", "false", "1", ...)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class DeltaMaintenanceOperator(BaseOperator):
    """
    Base class: run one job of the Delta maintenance application on a table; return its metrics.

    The task submits the bundled PySpark application with spark-submit through
    :class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook` and returns the run's metrics
    object (``operation``, ``table``, ``status``, ``version_read``, ``version_committed``,
    ``started_at``, ``duration_s`` and the job's own numbers) as its XCom value. When
    ``skip_if_nothing_to_do`` is set and the job can tell without Spark that the table needs no
    work, no Spark application is started and the metrics say ``"status": "skipped"`` with a
    ``reason``.

    :param table_uri: the table's path or URI (``/data/t``, ``s3://bucket/t``, ...). (templated)
    :param storage_options: non-secret object-store options for the table (endpoint, region, ...);
        a key that names a secret (``secret``, ``password``, ``token``, ``account_key``, ``sas``,
        ``private_key``, ``credential``, ...) is refused: use ``storage_conn_id``. (templated)
    :param storage_conn_id: an Airflow connection holding the table's credentials: type ``aws``,
        ``wasb`` / ``adls`` or ``google_cloud_platform``. Its secrets reach spark-submit through the
        child process's environment only and are masked in logs. Without it, the worker's
        environment provides the credentials.
    :param conn_id: the Spark connection id.
    :param conf: extra Spark configuration. (templated)
    :param spark_binary: the spark-submit command (default ``spark-submit``).
    :param metrics_uri: folder on storage shared by the Spark driver and this worker, needed in
        cluster deploy mode for the metrics file. (templated)
    :param deploy_mode: ``client`` or ``cluster`` (default: the connection's ``deploy-mode`` extra).
    :param env_vars: environment variables for spark-submit and the driver.
    :param skip_if_nothing_to_do: check cheaply first and skip Spark when there is nothing to do.
    :param spark_submit_kwargs: further :class:`SparkSubmitHook` arguments (``executor_memory``,
        ``driver_memory``, ``num_executors``, ``verbose``, ...).
    :param history_uri: the maintenance history table every run of this task is appended to
        (default: ``[delta_maint] history_uri``; none: not recorded). (templated)
    :param execution: ``"spark"`` (the default, unless ``[delta_maint] execution`` says otherwise) submits the application; ``"local"`` runs the job in
        this worker's process without Spark, its parallel work (OPTIMIZE's rewrite, full VACUUM's
        listing and deletes) on up to four threads; Z-order and liquid clustering are refused
        there. ``"auto"`` runs locally while the log the job reads holds at most 16 MiB and an
        OPTIMIZE rewrites at most 1 GiB (below that Spark's start costs as much as the whole
        rewrite), else submits. Metrics and errors are the same either way; the connection's
        credentials stay in this process's memory. (templated)

    Assets and lineage: when the table's asset (an ``Asset`` whose URI names ``table_uri``) is among
    the task's ``outlets``, its asset event carries the run's metrics as ``extra``; a skipped run
    emits no event for it. The table is not an outlet by default: maintenance changes no data
    (``dataChange=false``). With the OpenLineage provider, runs report the table as input and
    output dataset with the files and bytes written and a ``deltaMaintenance`` run facet holding
    the metrics; ``[openlineage] spark_inject_parent_job_info`` adds the parent job to the Spark conf.
    """

    job: ClassVar[str] = ""
    template_fields: Sequence[str] = ("table_uri", "storage_options", "conf", "metrics_uri", "history_uri",
                                      "execution")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        storage_options: Mapping[str, Any] | None = None,
        storage_conn_id: str | None = None,
        conn_id: str = DeltaMaintHook.default_conn_name,
        conf: Mapping[str, Any] | None = None,
        spark_binary: str | None = None,
        metrics_uri: str | None = None,
        deploy_mode: str | None = None,
        env_vars: Mapping[str, Any] | None = None,
        skip_if_nothing_to_do: bool = True,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        history_uri: str | None = None,
        execution: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.history_uri = history_uri
        if execution is not None and "{{" not in str(execution) and str(execution).strip().lower() not in EXECUTIONS:
            raise AirflowException(f"execution must be one of {', '.join(EXECUTIONS)}, got {execution!r}")
        self.execution = execution
        refuse_secret_options(storage_options, self.task_id)
        self.storage_options = storage_options
        self.storage_conn_id = storage_conn_id
        self.conn_id = conn_id
        self.conf = conf
        self.spark_binary = spark_binary
        self.metrics_uri = metrics_uri
        self.deploy_mode = deploy_mode
        self.env_vars = env_vars
        self.skip_if_nothing_to_do = skip_if_nothing_to_do
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self._hook: DeltaMaintHook | None = None
        self._storage_credentials: StorageCredentials | None = None
        self._spark_conf: dict[str, Any] | None = None
        self._metrics: dict[str, Any] | None = None

    # -- what subclasses define ---------------------------------------------------------------
    def job_args(self) -> list[str]:
        """The job's own command-line options, from this operator's parameters."""
        return []

    # -- helpers ------------------------------------------------------------------------------
    @property
    def table_storage_options(self) -> dict[str, str]:
        """The storage options as strings (no credentials: these go on the application's command line)."""
        return {str(k): str(v) for k, v in (self.storage_options or {}).items()}

    @property
    def worker_storage_options(self) -> dict[str, str]:
        """Storage options for the checks on this worker: the connection's credentials under the explicit options."""
        return worker_options(self._storage_credentials, self.table_storage_options)

    def resolve_storage_credentials(self) -> StorageCredentials | None:
        """Fetch ``storage_conn_id`` (when set) and keep its credentials for this run; masks its secrets."""
        refuse_secret_options(self.storage_options, self.task_id)
        self._storage_credentials = resolve_storage_credentials(self.storage_conn_id, self.table_uri)
        return self._storage_credentials

    def _job_module(self) -> Any | None:
        name = JOB_MODULES.get(self.job)
        if name is None:
            raise AirflowException(
                f"the maintenance application has no job {self.job!r} (it offers: {', '.join(available_jobs())})"
            )
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                return None
            raise

    def job_params(self, module: Any | None = None) -> dict[str, Any]:
        """
        The job's options parsed by the job's own argument parser (every option, defaults included).

        :param module: the job module (default: imported from the application's job registry).
        :raises AirflowException: when an option is invalid.
        """
        module = module if module is not None else self._job_module()
        if module is None:
            return {}
        parser = argparse.ArgumentParser(prog=f"delta-maint {self.job}", exit_on_error=False, add_help=False)
        module.add_arguments(parser)
        try:
            namespace, unknown = parser.parse_known_args([str(a) for a in self.job_args()])
        except (argparse.ArgumentError, SystemExit) as exc:
            raise AirflowException(f"invalid options for {self.job}: {exc}") from None
        if unknown:
            raise AirflowException(f"invalid options for {self.job}: unknown {' '.join(unknown)}")
        return vars(namespace)

    def get_hook(self) -> DeltaMaintHook:
        """The hook that submits the application."""
        return DeltaMaintHook(
            conn_id=self.conn_id,
            conf=self._spark_conf if self._spark_conf is not None else self.conf,
            spark_binary=self.spark_binary,
            metrics_uri=self.metrics_uri,
            deploy_mode=self.deploy_mode,
            env_vars=self.env_vars,
            name=f"delta-maint-{self.job}-{self.task_id}",
            storage_credentials=self._storage_credentials,
            **self.spark_submit_kwargs,
        )

    def nothing_to_do(self, params: dict[str, Any]) -> str | None:
        """
        Why the job would do nothing on the table, found on this worker without Spark, or None.

        The default asks the job module's own ``nothing_to_do`` (when it offers one); subclasses
        call the Delta core directly. Bad input raises the core's ``DeltaError``, as the job would.

        :param params: the job's options, as :meth:`job_params` parses them.
        :return: a one-line reason, or None when the job may have work (or cannot tell cheaply).
        """
        module = self._job_module()
        check = getattr(module, "nothing_to_do", None) if module is not None else None
        if check is None:
            return None
        return check(self.table_uri, self.worker_storage_options, params)

    def check_nothing_to_do(self) -> dict[str, Any] | None:
        """
        Run the cheap :meth:`nothing_to_do` check (no Spark) and build "skipped" metrics if it says so.

        :return: the skipped metrics, or None when the job has work to do (or offers no check).
        """
        params = self.job_params()
        metrics = base_metrics(self.job, self.table_uri)
        try:
            reason = self.nothing_to_do(params)
            if not reason:
                return None
            from airflow_delta_maint.delta.log.history import log_state
            from airflow_delta_maint.delta.storage.store import Storage

            version = log_state(Storage(self.table_uri, self.worker_storage_options)).latest_version
        except DeltaError as exc:
            raise AirflowException(f"delta-maint {self.job} failed: {exc}") from exc
        metrics.update(status="skipped", reason=str(reason), version_read=version)
        metrics.update(getattr(reason, "details", None) or {})  # e.g. the auto-compaction decision
        return finish(metrics)

    # -- Airflow ------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        self.resolve_storage_credentials()
        history = configured_history_uri(self.history_uri)
        if _as_bool(self.skip_if_nothing_to_do):
            skipped = self.check_nothing_to_do()
            if skipped is not None:
                self.log.info("Nothing to do on %s: %s", self.table_uri, skipped["reason"])
                if history:
                    skipped["history"] = record_on_worker(history, skipped, context)
                return self.report(skipped, context)
        else:
            self.job_params()
        where, why = self.choose_execution()
        if where == "local":
            self.log.info("Running %s on %s in this process (%s)", self.job, self.table_uri, why)
            metrics = self.run_locally(history)
        else:
            self._spark_conf = inject_parent_job_info(self.conf, context)
            self._hook = self.get_hook()
            metrics = self._hook.run_job(self.job, self.table_uri, self.job_args() + history_args(history),
                                         self.table_storage_options)
        self.log.info(
            "%s on %s: %s (version read %s, committed %s)",
            self.job, self.table_uri, metrics.get("status"), metrics.get("version_read"),
            metrics.get("version_committed"),
        )
        return self.report(metrics, context)

    def choose_execution(self) -> tuple[str, str]:
        """Where this run goes, ``("local" | "spark", why)`` (see :func:`~airflow_delta_maint.app.execution.choose_execution`)."""
        try:
            execution = configured_execution(self.execution, EXECUTIONS)
        except ValueError as exc:
            raise AirflowException(str(exc)) from None
        try:
            return choose_execution(execution, self.job, self.job_params(), self.table_uri,
                                    self.worker_storage_options)
        except DeltaError as exc:
            raise AirflowException(f"delta-maint {self.job} failed: {exc}") from exc

    def run_locally(self, history: str | None) -> dict[str, Any]:
        """Run the job in this process (no Spark); metrics and failures as from spark-submit."""
        _, metrics = run_in_process(self.job, self.table_uri, self.job_args() + history_args(history),
                                    self.worker_storage_options)
        if metrics.get("status") == "failed":
            raise AirflowException(f"delta-maint {self.job} failed: {metrics.get('error', 'unknown error')}")
        return metrics

    # -- assets and lineage -------------------------------------------------------------------
    def table_outlets(self) -> list[Asset]:
        """The task's outlets that name this table."""
        return [o for o in self.outlets if isinstance(o, Asset) and table_uri_matches(o.uri, self.table_uri)]

    def report(self, metrics: dict[str, Any], context: Context) -> dict[str, Any]:
        """Keep the run's metrics for lineage; put them on the table's asset event, or drop the event when skipped."""
        self._metrics = metrics
        tables = self.table_outlets()
        if tables and metrics.get("status") == "skipped":
            self.outlets = [o for o in self.outlets if o not in tables]  # this run only: no event
            self.log.info("Skipped: no asset event for %s", ", ".join(a.uri for a in tables))
        else:
            extra = asset_event_extra(metrics)
            for asset in tables:
                context["outlet_events"][asset].extra.update(extra)
        return metrics

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """OpenLineage: the table as input and output dataset."""
        return operator_lineage(self.table_uri)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets, the output's statistics and the run's metrics."""
        return operator_lineage(self.table_uri, self._metrics)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets of the failed run."""
        return operator_lineage(self.table_uri)

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


class OptimizeOperator(DeltaMaintenanceOperator):
    """
    Compact a table's small files into few large ones (OPTIMIZE), optionally Z-ordered.

    The rewrite is committed with ``dataChange=false``, so readers and streaming consumers see no
    new data. Returns the run's metrics (``numAddedFiles``, ``numRemovedFiles``, ``numAddedBytes``,
    ``numRemovedBytes``, ...).

    :param where: a partition predicate limiting the files considered, e.g. ``"day >= '2024-01-01'"``. (templated)
    :param zorder_by: columns to Z-order by (a list or a comma-separated string). (templated)
    :param min_file_size: files of at least this many bytes are left alone. (templated)
    :param max_file_size: the target size of the files written, in bytes. (templated)
    :param max_concurrent_bins: how many bins Spark rewrites at once. (templated)
    :param batch_bytes: commit once every this many input bytes. (templated)
    :param dv_ratio: also rewrite files whose deletion vectors delete more than this share of their
        rows (default 0.05). (templated)
    :param compression: parquet codec of the files written: ``snappy`` (default), ``zstd``,
        ``gzip``, ``lz4`` or ``none``. (templated)
    :param full: liquid-clustered tables: recluster every file, as after a change of the clustering
        columns (delta-spark's ``OPTIMIZE FULL``). (templated)
    :param min_cube_size: liquid-clustered tables: a ZCube of at least this many bytes is finished
        and left alone (default 100 GiB, delta-spark's). (templated)
    :param target_cube_size: liquid-clustered tables: at most this many input bytes are clustered
        together (default 150 GiB). (templated)
    :param rewrite_type_widened: rewrite exactly the files that still hold a widened column in its
        old type (before dropping the type-widening feature). (templated)
    :param policy: ``"all"`` (default) plans every partition the options select; ``"auto"`` applies
        the auto-compaction policy: only partitions that received data files since an OPTIMIZE last
        covered them and hold at least ``min_num_files`` small files or a file past
        ``max_deleted_rows_ratio`` deleted rows, at most ``max_partitions``, the worst first. The
        decision runs on the worker from the log: when nothing is chosen no Spark application
        starts. (templated)
    :param all_partitions: ``policy="auto"``: consider every partition. (templated)
    :param min_num_files: ``policy="auto"``: small files a partition needs (default 50). (templated)
    :param max_deleted_rows_ratio: ``policy="auto"``: deleted-rows share that makes a file worth
        rewriting (default 0.05). (templated)
    :param max_partitions: ``policy="auto"``: partitions per run (default 128). (templated)
    :param target_files: rewrite each selected partition into exactly this many files of even row
        counts, splitting files that are too large. (templated)
    :param lease_seconds: how long a run reserves its partitions against other OPTIMIZE runs of the
        table, renewed while it works (default 600; 0 turns reservations off). (templated)
    :param bins_per_commit: commit rewritten bins this many at a time as they are rewritten; ``0``: one
        commit per batch once all its bins are rewritten; unset: rewritten bins wait for each other
        until another writer commits during the run, then each goes in at once. (templated)
    :param min_file_age: leave out files younger than this many seconds, which writers may still be
        working on. (templated)
    :param skip_recent_partitions: leave out partitions that any of the newest N commits changed data
        in. (templated)
    :param wait_for_writer: hold the rewritten bins and commit them right after another writer's
        commit, waiting for one at most this many seconds. (templated)
    :param dry_run: plan only; commit nothing. (templated, as the attribute ``dry_run_only``: an
        attribute named ``dry_run`` would hide ``BaseOperator.dry_run()``)

    Row-tracking, liquid-clustered and type-widened tables are handled as the Delta protocol
    says; ``where`` and ``zorder_by`` are refused on a liquid-clustered table.

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "optimize"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields,
        "where", "zorder_by", "min_file_size", "max_file_size", "max_concurrent_bins", "batch_bytes", "dv_ratio",
        "compression", "full", "min_cube_size", "target_cube_size", "rewrite_type_widened", "policy",
        "target_files", "all_partitions", "min_num_files", "max_deleted_rows_ratio", "max_partitions", "lease_seconds", "dry_run_only",
        "bins_per_commit", "min_file_age", "skip_recent_partitions", "wait_for_writer",
    )

    def __init__(
        self,
        *,
        where: str | None = None,
        zorder_by: str | Sequence[str] | None = None,
        min_file_size: int | str | None = None,
        max_file_size: int | str | None = None,
        max_concurrent_bins: int | str | None = None,
        batch_bytes: int | str | None = None,
        dv_ratio: float | str | None = None,
        compression: str | None = None,
        full: bool | str = False,
        min_cube_size: int | str | None = None,
        target_cube_size: int | str | None = None,
        rewrite_type_widened: bool | str = False,
        policy: str = "all",
        all_partitions: bool | str = False,
        min_num_files: int | str | None = None,
        max_deleted_rows_ratio: float | str | None = None,
        max_partitions: int | str | None = None,
        lease_seconds: int | str | None = None,
        target_files: int | str | None = None,
        bins_per_commit: int | str | None = None,
        min_file_age: float | str | None = None,
        skip_recent_partitions: int | str | None = None,
        wait_for_writer: float | str | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bins_per_commit = bins_per_commit
        self.min_file_age = min_file_age
        self.skip_recent_partitions = skip_recent_partitions
        self.wait_for_writer = wait_for_writer
        self.full = full
        self.min_cube_size = min_cube_size
        self.target_cube_size = target_cube_size
        self.rewrite_type_widened = rewrite_type_widened
        self.policy = policy
        self.all_partitions = all_partitions
        self.min_num_files = min_num_files
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.max_partitions = max_partitions
        self.lease_seconds = lease_seconds
        self.target_files = target_files
        self.where = where
        self.zorder_by = zorder_by
        self.min_file_size = min_file_size
        self.max_file_size = max_file_size
        self.max_concurrent_bins = max_concurrent_bins
        self.batch_bytes = batch_bytes
        self.dv_ratio = dv_ratio
        self.compression = compression
        self.dry_run_only = dry_run

    def job_args(self) -> list[str]:
        args: list[str] = []
        _flag(args, "--where", self.where)
        _flag(args, "--zorder-by", self.zorder_by)
        _flag(args, "--min-file-size", self.min_file_size)
        _flag(args, "--max-file-size", self.max_file_size)
        _flag(args, "--max-concurrent-bins", self.max_concurrent_bins)
        _flag(args, "--batch-bytes", self.batch_bytes)
        _flag(args, "--dv-ratio", self.dv_ratio)
        _flag(args, "--compression", self.compression)
        _flag(args, "--full", _as_bool(self.full))
        _flag(args, "--min-cube-size", self.min_cube_size)
        _flag(args, "--target-cube-size", self.target_cube_size)
        _flag(args, "--rewrite-type-widened", _as_bool(self.rewrite_type_widened))
        if str(self.policy).strip().lower() not in ("all", "auto"):
            raise AirflowException(f"policy must be 'all' or 'auto', got {self.policy!r}")
        _flag(args, "--auto", str(self.policy).strip().lower() == "auto")
        _flag(args, "--all-partitions", _as_bool(self.all_partitions))
        _flag(args, "--min-num-files", self.min_num_files)
        _flag(args, "--max-deleted-rows-ratio", self.max_deleted_rows_ratio)
        _flag(args, "--max-partitions", self.max_partitions)
        _flag(args, "--lease-seconds", self.lease_seconds)
        _flag(args, "--target-files", self.target_files)
        _flag(args, "--bins-per-commit", self.bins_per_commit)
        _flag(args, "--min-file-age", self.min_file_age)
        _flag(args, "--skip-recent-partitions", self.skip_recent_partitions)
        _flag(args, "--wait-for-writer", self.wait_for_writer)
        _flag(args, "--dry-run", _as_bool(self.dry_run_only))
        return args


class VacuumOperator(DeltaMaintenanceOperator):
    """
    Delete data files that no table version inside the retention window references (VACUUM).

    Returns the run's metrics (``numFilesDeleted``, ...).

    :param retention_hours: keep files needed by versions newer than this many hours (default: the
        table's ``delta.deletedFileRetentionDuration``, 168 hours). (templated)
    :param mode: ``full`` (list the table's files) or ``lite`` (use the log only). (templated)
    :param dry_run: list what would be deleted; delete nothing. (templated, as the attribute
        ``dry_run_only``)
    :param ignore_retention_check: allow a retention shorter than the table's own setting. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "vacuum"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields, "retention_hours", "mode", "dry_run_only", "ignore_retention_check",
    )

    def __init__(
        self,
        *,
        retention_hours: float | str | None = None,
        mode: str | None = None,
        dry_run: bool = False,
        ignore_retention_check: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.retention_hours = retention_hours
        self.mode = mode
        self.dry_run_only = dry_run
        self.ignore_retention_check = ignore_retention_check

    def job_args(self) -> list[str]:
        args: list[str] = []
        _flag(args, "--retention-hours", self.retention_hours)
        _flag(args, "--mode", self.mode)
        _flag(args, "--dry-run", _as_bool(self.dry_run_only))
        _flag(args, "--ignore-retention-check", _as_bool(self.ignore_retention_check))
        return args

    def nothing_to_do(self, params: dict[str, Any]) -> str | None:
        """
        Lite mode: a reason when no commit left the retention window since the last VACUUM's
        watermark, or when the commits that did removed no expired file that is no longer needed
        and the watermark would not move. Full mode: always None, since only a listing of the
        table (a Spark job) can prove it has no orphan files. Bad input (an unsupported table, a
        bad mode or retention, lite mode on a log whose early commits were cleaned up) raises.
        """
        from airflow_delta_maint.delta.protocol.features import check_supported
        from airflow_delta_maint.delta.log.snapshot import Snapshot
        from airflow_delta_maint.delta.plans.vacuum import lite_candidates, plan_vacuum

        mode = params.get("mode") or "full"
        snapshot = Snapshot.load(self.table_uri, storage_options=self.worker_storage_options, paths_only=True)
        check_supported(snapshot.protocol, "vacuum", snapshot.metadata)
        plan = plan_vacuum(snapshot, params.get("retention_hours"), mode,
                           bool(params.get("ignore_retention_check")), with_valid=False)
        if plan.lite is None:
            return None
        if plan.lite.empty:
            return (f"no commit left the retention window since the last VACUUM (watermark "
                    f"{plan.lite.watermark}, newest commit outside the window {plan.latest_outside})")
        found = lite_candidates(plan, snapshot.storage, snapshot)
        if found.files or found.watermark != plan.lite.watermark:
            return None  # files to delete, or a watermark to advance (else the log range to read grows)
        return (f"commits {plan.lite.start} to {plan.lite.end} removed no file that has expired and is no "
                f"longer needed, and the watermark stays at {plan.lite.watermark}")


class LogCompactionOperator(DeltaMaintenanceOperator):
    """
    Write log compaction files (and checkpoints) so readers open few log files instead of many commits.

    :param interval: compact every this many commits. (templated)
    :param max_window_bytes: the largest log window one compaction file covers, in bytes. (templated)
    :param checkpoint_interval: also write a checkpoint once this many commits follow the last one. (templated)
    :param cleanup_expired_log: then delete log files older than ``delta.logRetentionDuration``
        (commits, checkpoints, checksums, sidecars), as ``delta-maint cleanup-log`` does.

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "compact-log"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields, "interval", "max_window_bytes", "checkpoint_interval",
    )

    def __init__(
        self,
        *,
        interval: int | str | None = None,
        max_window_bytes: int | str | None = None,
        checkpoint_interval: int | str | None = None,
        cleanup_expired_log: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.interval = interval
        self.max_window_bytes = max_window_bytes
        self.checkpoint_interval = checkpoint_interval
        self.cleanup_expired_log = cleanup_expired_log

    def job_args(self) -> list[str]:
        args: list[str] = []
        _flag(args, "--interval", self.interval)
        _flag(args, "--max-window-bytes", self.max_window_bytes)
        _flag(args, "--checkpoint-interval", self.checkpoint_interval)
        _flag(args, "--cleanup-expired-log", bool(self.cleanup_expired_log))
        return args

    def nothing_to_do(self, params: dict[str, Any]) -> str | None:
        """
        A reason when no log compaction window is complete and missing (within the size guard)
        and no checkpoint is due; reads only the log from the last checkpoint on. Cleaning up
        expired compaction files waits for the next run that has work.
        """
        from airflow_delta_maint.delta.log.compaction import nothing_to_do

        reason = nothing_to_do(self.table_uri, self.worker_storage_options, params)
        if reason and params.get("cleanup_expired_log"):
            from airflow_delta_maint.delta.log.cleanup import plan_log_cleanup
            from airflow_delta_maint.delta.storage.store import Storage

            plan = plan_log_cleanup(Storage(self.table_uri, self.worker_storage_options))
            if plan.files or plan.checkpoint_to_write is not None:
                return None
            reason = f"{reason}; no expired log file to clean up" + (f" ({plan.reason})" if plan.reason else "")
        return reason


class InspectTableOperator(DeltaMaintenanceOperator):
    """
    Report a table's health (files, small files, tombstones, log state); changes nothing.

    :param version: inspect this version instead of the latest. (templated)
    :param small_file_bytes: files below this size count as small. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "inspect"
    template_fields: Sequence[str] = (*DeltaMaintenanceOperator.template_fields, "version", "small_file_bytes")

    def __init__(
        self,
        *,
        version: int | str | None = None,
        small_file_bytes: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.version = version
        self.small_file_bytes = small_file_bytes

    def job_args(self) -> list[str]:
        args: list[str] = []
        _flag(args, "--version", self.version)
        _flag(args, "--small-file-bytes", self.small_file_bytes)
        return args


__all__ = [
    "DeltaMaintenanceOperator", "OptimizeOperator", "VacuumOperator", "LogCompactionOperator",
    "InspectTableOperator", "available_jobs",
]
