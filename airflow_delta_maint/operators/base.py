"""The base of the maintenance operators: one job of the maintenance application on one table.

It resolves the table's credentials, checks on the worker (without Spark) whether the job has
anything to do, chooses where the run goes (spark-submit through the hook, or this worker's
process), and reports the metrics to XCom, the table's asset event and OpenLineage.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.client_logs import quieted_client_loggers
from airflow_delta_maint.app.execution import EXECUTIONS, choose_execution, parsed_args, run_parsed
from airflow_delta_maint.app.job_definitions import JOBS, JobDefinition
from airflow_delta_maint.app.job_definitions.definition import NATIVE
from airflow_delta_maint.app.job_definitions.options import Option
from airflow_delta_maint.app.metrics import base_metrics, finish
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.hooks.catalogs import ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_target import (
    check_catalog_allows,
    credential_operation,
    check_table_arguments,
    resolve_refreshed_table_name,
    resolve_table_name,
    storage_credentials_for,
)
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.maintenance_history import configured_history_uri, record_on_worker
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
from airflow_delta_maint.operators.options import as_bool, check_engine, resolve_engine

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context


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
            cls.__init__ = _options_init(cls, job)  # type: ignore[method-assign]

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
        self._resolved: ResolvedTable | None = None
        self._refresh_env: dict[str, str] = {}
        check_engine(engine)
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
        self._storage_credentials: StorageCredentials | None = None
        self._spark_conf: dict[str, Any] | None = None
        self._metrics: dict[str, Any] | None = None

    # -- the job's options --------------------------------------------------------------------
    @property
    def definition(self) -> JobDefinition:
        """The job this operator runs."""
        if self.job not in JOBS:
            raise AirflowException(f"the maintenance application has no job {self.job!r} (it offers: "
                                   f"{', '.join(JOBS)})")
        return JOBS[self.job]

    def job_values(self) -> dict[str, Any]:
        """The job's options as this operator holds them (rendered), and the engine's: typed values, no text."""
        job = self.definition
        try:
            values = job.options.from_operator(vars(self))
        except DeltaError as exc:
            raise AirflowException(str(exc)) from None
        engine = self.resolved_engine()
        if job.engine_option and (self.engine is not None or engine != NATIVE):
            values[job.engine_option] = engine
        return values

    def resolved_engine(self) -> str:
        """The engine of this run: ``engine``, else ``[delta_maint] engine``, else native."""
        return resolve_engine(self.engine)

    def job_params(self) -> dict[str, Any]:
        """Every option of the job (defaults included), parsed from :meth:`job_values`.

        :raises AirflowException: when an option is invalid (one line naming it).
        """
        try:
            return self.definition.parse(self.job_values())
        except DeltaError as exc:
            raise AirflowException(str(exc)) from None

    # -- helpers ------------------------------------------------------------------------------
    @property
    def table_storage_options(self) -> dict[str, str]:
        """The storage options as strings (no credentials: these go on the application's command line)."""
        return {str(k): str(v) for k, v in (self.storage_options or {}).items()}

    @property
    def worker_storage_options(self) -> dict[str, str]:
        """Storage options for the checks on this worker: the connection's credentials under the explicit options."""
        return worker_options(self._storage_credentials, self.table_storage_options)

    def resolve_table(self) -> ResolvedTable | None:
        """Resolve ``table_name`` in its catalog (once per run) and take its location as ``table_uri``; None
        for a table given by URI."""
        if not self.table_name:
            return None
        if self._resolved is None:
            check_table_arguments(self.table_uri, self.table_name, self.catalog_conn_id, self.task_id)
            self._resolved, self._refresh_env = self._resolve_name()
            self.table_uri = self._resolved.location
            self.log.info("%s resolved to %s", self._resolved.name, self._resolved.location)
        return self._resolved

    def _resolve_name(self) -> tuple[ResolvedTable, dict[str, str]]:
        """The table by name; for a run of our engine, with what asks the catalog again for its vended
        credentials (delta-spark's Hadoop store reads them once, so they are checked to outlive its start)."""
        operation = credential_operation([self.job])
        if self.definition.uses_delta_spark(self.job_params()):
            return resolve_table_name(str(self.table_name), self.catalog_conn_id, operation), {}
        return resolve_refreshed_table_name(str(self.table_name), self.catalog_conn_id, operation)

    def install_credential_refresh(self) -> None:
        """Have this process's stores of the table ask the catalog again for vended credentials (the checks on
        this worker, a local run); :meth:`drop_credential_refresh` undoes it."""
        from airflow_delta_maint.catalogs.unity_credentials import provider_from_environ
        from airflow_delta_maint.delta.storage.store import register_credential_provider

        provider = provider_from_environ(self._refresh_env)
        if provider is not None and self.table_uri:
            register_credential_provider(self.table_uri, provider)

    def drop_credential_refresh(self) -> None:
        from airflow_delta_maint.delta.storage.store import register_credential_provider

        if self._refresh_env and self.table_uri:
            register_credential_provider(self.table_uri, None)

    def resolve_storage_credentials(self) -> StorageCredentials | None:
        """Fetch ``storage_conn_id`` (when set), or take the credentials the catalog vended for a table by
        name, and keep them for this run; masks their secrets."""
        refuse_secret_options(self.storage_options, self.task_id)
        resolved = self.resolve_table()
        if resolved is not None:
            self._storage_credentials = storage_credentials_for(resolved, self.storage_conn_id, self._refresh_env)
            check_catalog_allows(resolved, self.job, self.worker_storage_options)
        else:
            self._storage_credentials = resolve_storage_credentials(self.storage_conn_id, self.table_uri)
        return self._storage_credentials

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
        """
        The job's typed options, or None for a job without them.

        :param params: the job's options, as :meth:`job_params` parses them.
        :raises DeltaError: a bad value, as the job would refuse it, before anything is read.
        """
        return self.definition.typed_options(params)

    def nothing_to_do(self, options: Any) -> str | None:
        """
        Why the job would do nothing on the table, found on this worker without Spark, or None.

        Asks the job's own check (when it offers one), which asks the Delta core. Bad input raises the core's
        ``DeltaError``, as the job would.

        :param options: the job's typed options, as :meth:`typed_options` builds them.
        :return: a one-line reason, or None when the job may have work (or cannot tell cheaply).
        """
        return self.definition.nothing_to_do(self.table_uri, self.worker_storage_options, options)

    def check_nothing_to_do(self) -> dict[str, Any] | None:
        """
        Run the cheap :meth:`nothing_to_do` check (no Spark) and build "skipped" metrics if it says so.

        :return: the skipped metrics, or None when the job has work to do (or offers no check).
        """
        params = self.job_params()
        metrics = base_metrics(self.job, self.table_uri)
        try:
            reason = self.nothing_to_do(self.typed_options(params))
            if not reason:
                return None
            from airflow_delta_maint.delta.log.history import log_state
            from airflow_delta_maint.delta.storage.store import Storage

            version = log_state(Storage(self.table_uri, self.worker_storage_options)).latest_version
        except DeltaError as exc:
            raise AirflowException(f"delta-maint {self.job} failed: {exc}") from exc
        metrics.update(status="skipped", reason=str(reason), version_read=version)
        if params.get("engine") is not None:
            metrics["engine"] = params["engine"]
        metrics.update(getattr(reason, "details", None) or {})  # e.g. the auto-compaction decision
        return finish(metrics)

    # -- Airflow ------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        # the store and catalog clients' own loggers stay quiet (a task logger at DEBUG shows them)
        with quieted_client_loggers(self.log.isEnabledFor(logging.DEBUG)):
            self.resolve_storage_credentials()
            self.install_credential_refresh()
            try:
                return self._execute_resolved(context)
            finally:
                self.drop_credential_refresh()

    def _execute_resolved(self, context: Context) -> dict[str, Any]:
        history = configured_history_uri(self.history_uri)
        if as_bool(self.skip_if_nothing_to_do):
            skipped = self.check_nothing_to_do()
            if skipped is not None:
                self.log.info("Nothing to do on %s: %s", self.table_uri, skipped["reason"])
                if history:
                    skipped["history"] = record_on_worker(history, skipped, context)
                return self.report(skipped, context)
        else:
            try:
                self.typed_options(self.job_params())
            except DeltaError as exc:
                raise AirflowException(f"delta-maint {self.job} failed: {exc}") from exc
        where, why = self.choose_execution()
        if where == "local":
            self.log.info("Running %s on %s in this process (%s)", self.job, self.table_uri, why)
            metrics = self.run_locally(history)
        else:
            self._spark_conf = inject_parent_job_info(self.conf, context)
            self._hook = self.get_hook()
            metrics = self._hook.run_job(self.job, self.table_uri, self.job_values(), self.table_storage_options,
                                         history_uri=history)
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
        job = self.definition
        _, metrics = run_parsed(job, self.table_uri, parsed_args(job, self.job_params(), history),
                                self.worker_storage_options)
        if metrics.get("status") == "failed":
            raise AirflowException(f"delta-maint {self.job} failed: {metrics.get('error', 'unknown error')}")
        return metrics

    # -- assets and lineage -------------------------------------------------------------------
    def table_asset_uris(self) -> list[str]:
        """The URIs that name this table as an asset: its location, and for a table by name its catalog asset URI
        (``arn:aws:glue:...:table/db/t``, ``hive://host:port/db.t``, ``databricks://host/c.s.t``)."""
        resolved = self._resolved
        return [u for u in (self.table_uri, resolved.asset_uri if resolved is not None else "") if u]

    def table_outlets(self) -> list[Asset]:
        """The task's outlets that name this table (by its location or, for a table by name, its catalog)."""
        uris = self.table_asset_uris()
        return [o for o in self.outlets
                if isinstance(o, Asset) and any(table_uri_matches(o.uri, uri) for uri in uris)]

    def report(self, metrics: dict[str, Any], context: Context) -> dict[str, Any]:
        """Keep the run's metrics for lineage; put them on the table's asset event, or drop the event when skipped."""
        if self._resolved is not None:
            metrics.setdefault("table_name", self._resolved.name)
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

    def lineage_dataset(self) -> tuple[str, str] | None:
        """The table's OpenLineage dataset by its catalog name (None for a table given by URI)."""
        resolved = self.resolve_table()
        return resolved.lineage if resolved is not None and resolved.lineage[0] else None

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """OpenLineage: the table as input and output dataset."""
        return operator_lineage(self.table_uri or "", dataset=self.lineage_dataset())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets, the output's statistics and the run's metrics."""
        return operator_lineage(self.table_uri or "", self._metrics, dataset=self.lineage_dataset())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets of the failed run."""
        return operator_lineage(self.table_uri or "", dataset=self.lineage_dataset())

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


def _keyword_default(option: Option) -> Any:
    """An option keyword's default on the operator: off for a flag, else unset (the job's own default applies)."""
    return False if option.kind == "bool" and option.from_keyword is None else None


def _options_init(cls: type[DeltaMaintenanceOperator], job: JobDefinition) -> Any:
    """The ``__init__`` of ``cls``: the job's option keywords (its signature names each, so Airflow's
    ``partial``/``expand`` and ``default_args`` know them), held as attributes, then the base's arguments."""
    keywords = job.options.keywords()

    def __init__(self: DeltaMaintenanceOperator, **kwargs: Any) -> None:
        held = {o.attribute: kwargs.pop(o.keyword, _keyword_default(o)) for o in keywords}  # type: ignore[arg-type]
        super(cls, self).__init__(**kwargs)
        for attribute, value in held.items():
            setattr(self, attribute, value)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(str(o.keyword), inspect.Parameter.KEYWORD_ONLY,
                                 default=_keyword_default(o)) for o in keywords]
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__name__}.__init__"
    __init__.__doc__ = f"The options of {job.name} as keywords (see the class docstring), then the base's."
    return __init__
