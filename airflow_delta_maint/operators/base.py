"""The base of the maintenance operators: one job of the maintenance application on one table.

It resolves the table's credentials, checks on the worker (without Spark) whether the job has
anything to do, chooses where the run goes (spark-submit through the hook, or this worker's
process), and reports the metrics to XCom, the table's asset event and OpenLineage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.client_logs import quieted_client_loggers
from airflow_delta_maint.app.execution import EXECUTIONS
from airflow_delta_maint.app.job_definitions import JOBS
from airflow_delta_maint.app.job_definitions.definition import NATIVE
from airflow_delta_maint.hooks.catalogs import ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_target import (
    check_table_arguments,
)
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.maintenance_task import MaintenanceTask
from airflow_delta_maint.hooks.maintenance_history import configured_history_uri, record_on_worker
from airflow_delta_maint.hooks.storage_credentials import (
    StorageCredentials,
    refuse_secret_options,
)
from airflow_delta_maint.operators.option_keywords import JobOptions, options_init
from airflow_delta_maint.operators.table_reporting import TableReporting
from airflow_delta_maint.operators.lineage import (
    inject_parent_job_info,
)
from airflow_delta_maint.operators.options import as_bool, refuse_unknown_engine

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaMaintenanceOperator(JobOptions, TableReporting, BaseOperator):
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
    :param table_name: the table's name in a catalog instead (``db.table`` in Glue or a Hive metastore), resolved on the worker, without Spark, to its location
        and the storage credentials the catalog vends; exactly one of ``table_uri`` and ``table_name``.
        A view or a table that is not Delta is refused; so is a writing job on a catalog-managed table
        unless its catalog allows the operation. Mapped tasks expand over it. (templated)
    :param catalog_conn_id: the catalog's Airflow connection (type ``aws`` for Glue, ``hive_metastore``); needed with ``table_name``. See ``docs/catalogs.md``.
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

    :param engine: who does the data work: ``"native"`` (this provider's own engine, the default unless
        ``[delta_maint] engine`` says otherwise) or ``"delta-spark"`` (delta-spark's own commands on the
        application's SparkSession; the submission carries delta-spark's jars, see
        :class:`~airflow_delta_maint.hooks.delta_maint.DeltaMaintHook`). The checks on the worker, the
        policy, dry runs, metrics and the maintenance history are the same either way; delta-spark
        runs always go to Spark (``execution="local"`` is refused). (templated)

    Assets and lineage: when the table's asset (an ``Asset`` whose URI names ``table_uri``, or for a
    table by name its catalog asset URI, see ``docs/catalogs.md``) is among the task's ``outlets``, its asset event carries the run's metrics as ``extra``; a skipped run
    emits no event for it. The table is not an outlet by default: maintenance changes no data
    (``dataChange=false``). With the OpenLineage provider, runs report the table as input and
    output dataset with the files and bytes written and a ``deltaMaintenance`` run facet holding
    the metrics; ``[openlineage] spark_inject_parent_job_info`` adds the parent job to the Spark conf.
    """

    job: ClassVar[str] = ""
    #: the template fields every maintenance operator has; a job's own come from its options' declarations
    base_template_fields: ClassVar[tuple[str, ...]] = ("table_uri", "table_name", "storage_options", "conf",
                                                       "metrics_uri", "history_uri", "execution", "engine")
    template_fields: Sequence[str] = base_template_fields
    ui_color = "#00add4"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A job's operator takes its options as keyword arguments, held as attributes and rendered as templates,
        all from the job's definition (:mod:`airflow_delta_maint.app.job_definitions`)."""
        super().__init_subclass__(**kwargs)
        if cls.job in JOBS and "__init__" not in vars(cls):
            job = JOBS[cls.job]
            cls.template_fields = (*cls.base_template_fields, *job.options.template_fields())
            cls.__init__ = options_init(cls, job)  # type: ignore[method-assign]

    def __init__(
        self,
        *,
        table_uri: str | None = None,
        table_name: str | None = None,
        catalog_conn_id: str | None = None,
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
        engine: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_table_arguments(table_uri, table_name, catalog_conn_id, f"{type(self).__name__} {self.task_id!r}")
        self.table_uri: str = table_uri or ""  # a table by name: its location once resolved
        self.table_name = table_name
        self.catalog_conn_id = catalog_conn_id
        self._task: MaintenanceTask | None = None
        refuse_unknown_engine(engine)
        self.engine = engine
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
        self._spark_conf: dict[str, Any] | None = None
        self._metrics: dict[str, Any] | None = None

    # -- the task on this worker (:class:`~airflow_delta_maint.hooks.maintenance_task.MaintenanceTask`) ----------
    @property
    def task(self) -> MaintenanceTask:
        """This run's job on its table: resolution, credentials, the check, the choice, a run in this process."""
        if self._task is None:
            self._task = MaintenanceTask(self.definition, self.task_id, table_uri=self.table_uri,
                                         table_name=self.table_name, catalog_conn_id=self.catalog_conn_id,
                                         storage_options=self.storage_options, storage_conn_id=self.storage_conn_id,
                                         log=self.log)
        return self._task

    @property
    def _resolved(self) -> ResolvedTable | None:
        return self._task.resolved if self._task is not None else None

    @property
    def _storage_credentials(self) -> StorageCredentials | None:
        return self._task.credentials if self._task is not None else None

    @property
    def table_storage_options(self) -> dict[str, str]:
        """The storage options as strings (no credentials: these go on the application's command line)."""
        return self.task.table_storage_options

    @property
    def worker_storage_options(self) -> dict[str, str]:
        """Storage options for the checks on this worker: the connection's credentials under the explicit options."""
        return self.task.worker_storage_options

    def resolve_table(self) -> ResolvedTable | None:
        """Resolve ``table_name`` in its catalog (once per run) and take its location as ``table_uri``."""
        resolved = self.task.resolve_table(self.job_params())
        self.table_uri = self.task.table_uri
        return resolved

    def resolve_storage_credentials(self) -> StorageCredentials | None:
        """Fetch ``storage_conn_id`` (when set), or take the credentials the catalog vended for a table by
        name, and keep them for this run; masks their secrets."""
        credentials = self.task.resolve_credentials(self.job_params())
        self.table_uri = self.task.table_uri
        return credentials

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
            engine=self.resolved_engine() if self.definition.engine_option else NATIVE,
            **self.spark_submit_kwargs,
        )

    def typed_options(self, params: dict[str, Any]) -> Any | None:
        """The job's typed options from :meth:`job_params` (a bad value raises the core's ``DeltaError``)."""
        return self.definition.typed_options(params)

    def nothing_to_do(self, options: Any) -> str | None:
        """Why the job would do nothing on the table, found on this worker without Spark, or None."""
        return self.task.nothing_to_do(options)

    def check_nothing_to_do(self) -> dict[str, Any] | None:
        """The "skipped" metrics when the job's check (no Spark) finds nothing to do, else None."""
        return self.task.check(self.job_params())

    # -- Airflow ------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        self._task = None  # the rendered arguments
        # the store and catalog clients' own loggers stay quiet (a task logger at DEBUG shows them)
        with quieted_client_loggers(self.log.isEnabledFor(logging.DEBUG)):
            self.resolve_storage_credentials()
            self.task.install_credential_refresh()
            try:
                return self._execute_resolved(context)
            finally:
                self.task.drop_credential_refresh()

    def _execute_resolved(self, context: Context) -> dict[str, Any]:
        history = configured_history_uri(self.history_uri)
        if as_bool(self.skip_if_nothing_to_do):
            skipped = self.task.check(self.job_params(), self.execution)
            if skipped is not None:
                self.log.info("Nothing to do on %s: %s", self.table_uri, skipped["reason"])
                if history:
                    skipped["history"] = record_on_worker(history, skipped, context)
                return self.report(skipped, context)
        else:
            self.task.check_options(self.job_params())
        where, why = self.choose_execution()
        if where == "local":
            self.log.info("Running %s on %s in this process (%s)", self.job, self.table_uri, why)
            metrics = self.run_locally(history)
        else:
            self._spark_conf = inject_parent_job_info(self.conf, context)
            self._hook = self.get_hook()
            metrics = self._hook.run_job(self.job, self.table_uri, self.job_values(), self.table_storage_options,
                                         history_uri=history, seen_version=self.task.seen_version)
        self.log.info(
            "%s on %s: %s (version read %s, committed %s)",
            self.job, self.table_uri, metrics.get("status"), metrics.get("version_read"),
            metrics.get("version_committed"),
        )
        return self.report(metrics, context)

    def choose_execution(self) -> tuple[str, str]:
        """Where this run goes, ``("local" | "spark", why)`` (see :func:`~airflow_delta_maint.app.execution.choose_execution`)."""
        return self.task.choose(self.execution, self.job_params())

    def run_locally(self, history: str | None) -> dict[str, Any]:
        """Run the job in this process (no Spark); metrics and failures as from spark-submit."""
        return self.task.run_locally(self.job_params(), history)

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
