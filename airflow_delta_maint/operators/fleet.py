"""One task that maintains many tables in one Spark application."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.client_logs import quieted_client_loggers
from airflow_delta_maint.app.execution import (LOCAL_MAX_LOG_BYTES, log_bytes, parse_job_args, reads_older_commits,
                                               rewrites_execution, spark_only)
from airflow_delta_maint.app.job_definitions import definition, fleet_defaults
from airflow_delta_maint.app.job_definitions.definition import NATIVE
from airflow_delta_maint.app.fleet import Decision, FleetJob, FleetSpec, FleetTable, decide, merge, run_fleet
from airflow_delta_maint.app.lake_plan import LakeLook, budgeted, decide_by_estimates, lake_history, look_at_lake
from airflow_delta_maint.app.rewrite.copy_estimate import PlannedRewrite
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.health.lake_budget import Budget
from airflow_delta_maint.delta.health.lake_budget import gain_weights as gain_weights_of
from airflow_delta_maint.delta.log.snapshot_cache import keeping_snapshots
from airflow_delta_maint.hooks.catalogs import CatalogError, ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_target import (
    check_catalog_allows,
    credential_operation,
    resolve_table_name,
    storage_credentials_for,
)
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.maintenance_history import configured_history_uri, record_on_worker
from airflow_delta_maint.hooks.provider_config import configured_engine, configured_execution
from airflow_delta_maint.hooks.storage_credentials import (
    StorageCredentials,
    refuse_secret_options,
    resolve_storage_credentials,
    worker_options,
)
from airflow_delta_maint.operators.lineage import inject_parent_job_info
from airflow_delta_maint.operators.option_keywords import warn_deprecated
from airflow_delta_maint.operators.options import as_bool, refuse_unknown_engine, job_options

if TYPE_CHECKING:
    from airflow.sdk import Context

T = TypeVar("T")

#: the jobs run on each table when ``jobs`` is not given, in this order: compute-stats after OPTIMIZE, which
#: writes statistics for the files it rewrites, so only the files it leaves are read (its check skips a table
#: whose files all have statistics)
DEFAULT_JOBS: dict[str, dict[str, Any]] = fleet_defaults()
#: where a fleet runs: submitted, or on the worker when every job there is small enough
FLEET_EXECUTIONS = ("spark", "auto")


def with_engine(job: str, options: Mapping[str, Any] | None, engine: str, explicit: bool) -> dict[str, Any]:
    """A job's options with the table's engine (the job's own ``engine`` option wins) for the jobs that take
    it; nothing for inspect or, unless given explicitly, for the native engine."""
    out = dict(options or {})
    if engine == NATIVE and not explicit:
        return out
    declared = definition(job).options
    engine_option = definition(job).engine_option
    if engine_option and not {engine_option, *(f.name for f in declared[engine_option].former_names)} & set(out):
        out[engine_option] = engine
    return out


def one_line(error: str) -> str:
    """An error on one line: a multi-line one (a Python worker's traceback) as its first and last lines."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} ... {lines[-1]}"


class MaintainTablesOperator(BaseOperator):
    """
    Maintain a list of Delta tables in one Spark application: the worker decides, the cluster works.

    For every table and job the worker first runs the job's cheap check with the Delta core, without
    Spark; only the tables with work go into the one application submitted (none: no Spark at all).
    The application runs each table's jobs in order on one SparkSession. The task's XCom value is a
    list with one entry per table, skipped ones included: ``table``, ``status`` (``committed``,
    ``skipped``, ``dry_run``, ``failed``), ``jobs`` (each job's metrics object, as the single-table
    operators return it) and ``error`` for a failed table. A table's failure stops that table's
    later jobs and no other table's; when a table failed, the list is still pushed as the task's
    ``return_value`` and the task then fails naming the failed tables.

    :param tables: the tables: URIs, or mappings ``{"table_uri": ..., "jobs": {...}, "storage_options":
        {...}}`` to give one table its own jobs or non-secret options; a mapping may name the table with
        ``"table_name"`` in the catalog of ``catalog_conn_id`` instead. (templated)
    :param table_names: tables by name in the catalog of ``catalog_conn_id`` (``db.table``), e.g. the output of
        :class:`~airflow_delta_maint.operators.catalog_tables.ListCatalogTablesOperator`; resolved on the
        worker, without Spark, before the checks. Added to ``tables``. (templated)
    :param catalog_conn_id: the catalog connection of the tables given by name (see ``docs/catalogs.md``).
        Their storage credentials: those the catalog vends (one set for the whole application: tables with
        credentials vended per table are refused, maintain them as mapped tasks), else ``storage_conn_id``,
        else (Glue) the catalog's ``aws`` connection.
    :param jobs: the jobs run on each table, in order: a mapping of job name (``optimize``,
        ``compact-log``, ``vacuum``, ``checkpoint``, ``cleanup-log``, ``inspect``) to its options,
        named as the job's command-line options with underscores (``{"vacuum": {"mode": "lite",
        "retention_hours": 168}}``). Default: OPTIMIZE, log compaction, lite VACUUM. (templated)
    :param storage_options: non-secret object-store options for every table (secrets are refused:
        use ``storage_conn_id``). (templated)
    :param storage_conn_id: an Airflow connection with the tables' credentials; its secrets reach
        spark-submit through the child process's environment only.
    :param skip_if_nothing_to_do: run the cheap checks and submit only the jobs with work.
    :param history_uri: the maintenance history table every job run is appended to. (templated)
    :param conn_id: the Spark connection id.
    :param conf: extra Spark configuration. (templated)
    :param spark_binary: the spark-submit command.
    :param metrics_uri: folder on storage shared by the driver and this worker (cluster deploy mode).
    :param deploy_mode: ``client`` or ``cluster``.
    :param env_vars: environment variables for spark-submit and the driver.
    :param spark_submit_kwargs: further :class:`SparkSubmitHook` arguments.
    :param check_threads: how many tables are checked at once on the worker (the checks wait on storage).
    :param execution: ``"spark"`` (the default, unless ``[delta_maint] execution`` says otherwise;
        a configured ``"local"`` counts as ``"auto"``) submits the tables with work; ``"auto"`` runs them in this
        worker's process instead, without Spark, when no job needs Spark (Z-order, liquid
        clustering), every table's log holds at most 16 MiB and the OPTIMIZEs together rewrite at
        most 1 GiB (see :class:`~airflow_delta_maint.operators.maintenance.DeltaMaintenanceOperator`).
    :param engine: who does the data work of every table's jobs, ``"native"`` or ``"delta-spark"``
        (default ``[delta_maint] engine``, else native); a table mapping's own ``"engine"`` wins for that
        table. OPTIMIZE, VACUUM, checkpoint and cleanup-log take it; log compaction takes it for its
        checkpoint and expired-log cleanup; inspect always runs natively. The application carries
        delta-spark's jars when any table uses it. (templated)
    :param budget: the night's limits (``{"cpu_s": 3600, "bytes_rewritten": ..., "max_tables": ...,
        "deadline_s": ..., "cores": ...}``): after the checks, the worker estimates what each job with work
        would gain and cost, from the log alone, and keeps the runs that gain most per predicted CPU-second
        within the limits; the others are "skipped" with ``deferred: true``, the limit they would pass and their
        predicted cost, and a job deferred for 3 nights goes first. The application starts no job once the
        CPU-seconds it measured or the deadline are reached. The plan is pushed to XCom as ``lake_plan``
        (``delta-maint plan-lake``'s dry run shows it without running). See docs/fleet.md. (templated)
    :param gain_weights: with a budget, what a unit of each gain is worth to the choice, in files a reader no
        longer opens, in place of the defaults (``{"log_files_not_replayed": 0.1}``: a lake read by engines that
        checkpoint as they write; gains: files_removed, log_files_not_replayed, dv_bytes_purged,
        deletion_vectors_dropped, files_given_stats, bytes_freed). See docs/fleet.md. (templated)
    """

    template_fields: Sequence[str] = ("tables", "table_names", "jobs", "storage_options", "conf", "metrics_uri",
                                      "history_uri", "engine", "budget", "gain_weights")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        tables: Sequence[str | Mapping[str, Any]] | str | None = None,
        table_names: Sequence[str] | str | None = None,
        catalog_conn_id: str | None = None,
        jobs: Mapping[str, Mapping[str, Any] | None] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        storage_conn_id: str | None = None,
        skip_if_nothing_to_do: bool = True,
        history_uri: str | None = None,
        conn_id: str = DeltaMaintHook.default_conn_name,
        conf: Mapping[str, Any] | None = None,
        spark_binary: str | None = None,
        metrics_uri: str | None = None,
        deploy_mode: str | None = None,
        env_vars: Mapping[str, Any] | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        check_threads: int = 8,
        execution: str | None = None,
        engine: str | None = None,
        budget: Mapping[str, Any] | None = None,
        gain_weights: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        refuse_unknown_engine(engine)
        self.engine = engine
        # a bad limit or weight fails when the DAG is parsed (a templated one when it is rendered)
        for given, check in ((budget, Budget.from_mapping), (gain_weights, gain_weights_of)):
            if isinstance(given, Mapping) and not any("{{" in str(v) for v in given.values()):
                self.checked(check, given)
        self.budget = budget
        self.gain_weights = gain_weights
        if execution is not None and str(execution).strip().lower() not in FLEET_EXECUTIONS:
            raise AirflowException(f"execution must be 'spark' or 'auto', got {execution!r}")
        self.execution = str(execution).strip().lower() if execution is not None else None
        refuse_secret_options(storage_options, self.task_id)
        self.tables = tables
        self.table_names = table_names
        self.catalog_conn_id = catalog_conn_id
        self._resolved: dict[str, ResolvedTable] = {}
        self.jobs = jobs
        self.storage_options = storage_options
        self.storage_conn_id = storage_conn_id
        self.skip_if_nothing_to_do = skip_if_nothing_to_do
        self.history_uri = history_uri
        self.conn_id = conn_id
        self.conf = conf
        self.spark_binary = spark_binary
        self.metrics_uri = metrics_uri
        self.deploy_mode = deploy_mode
        self.env_vars = env_vars
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.check_threads = check_threads
        self._hook: DeltaMaintHook | None = None
        self._credentials: StorageCredentials | None = None

    def checked(self, check: Callable[[Any], T], given: Any) -> T:
        """``check(given)``: a budget or the gain weights, whose bad input fails the task in one line."""
        try:
            return check(given)
        except DeltaError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None

    def plan_within_budget(self, spec: FleetSpec, decision: Decision, history: str | None, planning_cpu_s: float,
                           context: Context, look: LakeLook | None = None) -> Decision:
        """``decision`` cut down to what the budget buys (the plan in XCom as ``lake_plan``)."""
        if not self.budget:
            return decision
        budget = self.checked(Budget.from_mapping, self.budget)
        weights = self.checked(gain_weights_of, self.gain_weights)
        started = time.process_time()  # the history is read as it is written here: record_on_worker's options
        cut, plan = budgeted(spec, decision, budget, lambda t: worker_options(self._credentials, t.storage_options),
                             history=lake_history(history), spent_cpu_s=planning_cpu_s + time.process_time() - started,
                             look=look, threads=self.check_threads, weights=weights)
        used = plan.used()
        self.log.info("budget %s: %d runs on %d tables chosen (%.1f predicted CPU-s), %d deferred",
                      {k: v for k, v in budget.as_dict().items() if v is not None}, used["runs"], used["tables"],
                      used["cpu_s"], len(plan.deferred))
        context["ti"].xcom_push(key="lake_plan", value=plan.as_dict())
        return cut

    # -- the spec -----------------------------------------------------------------------------
    def all_tables(self) -> list[str | Mapping[str, Any]]:
        """``tables`` and ``table_names`` as one list (comma-separated strings split)."""
        def listed(value: Any) -> list[Any]:
            if value is None:
                return []
            if isinstance(value, str):
                return [t.strip() for t in value.split(",") if t.strip()]
            return list(value)

        return [*listed(self.tables), *({"table_name": str(n)} for n in listed(self.table_names))]

    def _resolve(self, raw: Mapping[str, Any], jobs: Iterable[str]) -> str:
        """A table mapping's location: its ``table_uri``, or its ``table_name`` resolved in the catalog (with
        credentials for ``jobs``, where the catalog vends them)."""
        name, uri = raw.get("table_name"), raw.get("table_uri")
        if name and uri:
            raise AirflowException(f"{self.task_id}: give a table's table_uri or its table_name, not both: {raw!r}")
        if not name:
            return str(uri or "")
        resolved = resolve_table_name(str(name), self.catalog_conn_id, credential_operation(jobs))
        self._resolved[resolved.location] = resolved
        return resolved.location

    def fleet_spec(self, history_uri: str | None = None) -> FleetSpec:
        """The tables and their jobs as a fleet spec, validated (bad input raises before anything runs)."""
        tables = self.all_tables()
        if not tables:
            raise AirflowException(f"{self.task_id}: no table to maintain")
        refuse_secret_options(self.storage_options, self.task_id)
        common = {str(k): str(v) for k, v in (self.storage_options or {}).items()}
        out = []
        for t in tables:
            raw: Mapping[str, Any] = {"table_uri": t} if isinstance(t, str) else t
            jobs: Mapping[str, Any] = raw.get("jobs") or self.jobs or DEFAULT_JOBS
            uri = self._resolve(raw, [str(name) for name in jobs])
            if not uri:
                raise AirflowException(f"{self.task_id}: each table needs a table_uri or a table_name, got {t!r}")
            own = raw.get("storage_options") or {}
            refuse_secret_options(own, f"{self.task_id} ({uri})")
            try:
                engine = configured_engine(raw.get("engine") if raw.get("engine") is not None else self.engine)
            except ValueError as exc:
                raise AirflowException(f"{self.task_id} ({uri}): {exc}") from None
            explicit = raw.get("engine") is not None or self.engine is not None
            try:
                fleet_jobs = [FleetJob(str(name), definition(str(name)).options.to_argv(
                    with_engine(str(name), opts, engine, explicit), str(name), warn=warn_deprecated))
                    for name, opts in jobs.items()]
            except DeltaError as exc:
                raise AirflowException(f"{self.task_id} ({uri}): {exc}") from None
            out.append(FleetTable(str(uri), fleet_jobs, {**common, **{str(k): str(v) for k, v in own.items()}}))
        try:
            return FleetSpec.from_json(FleetSpec(out, history_uri).to_json())
        except DeltaError as exc:
            raise AirflowException(f"{self.task_id}: {exc}") from None

    def resolve_credentials(self, spec: FleetSpec) -> StorageCredentials | None:
        """The one set of credentials the application carries: ``storage_conn_id``'s, or for tables by name
        what their catalog gives (:func:`storage_credentials_for`); then the catalog-managed gate per job."""
        if not self._resolved:
            return resolve_storage_credentials(self.storage_conn_id, spec.tables[0].table)
        vended = sorted(r.name for r in self._resolved.values() if r.credentials is not None)
        if vended and len(spec.tables) > 1:
            raise CatalogError(
                f"{self.task_id}: {', '.join(vended)} come with storage credentials their catalog vends per "
                "table, and one application carries one set: maintain them as mapped tasks instead")
        if len(self._resolved) == len(spec.tables):
            credentials = storage_credentials_for(next(iter(self._resolved.values())), self.storage_conn_id)
        else:  # tables by URI among them: the task's connection
            credentials = resolve_storage_credentials(self.storage_conn_id, spec.tables[0].table)
        for t in spec.tables:
            resolved = self._resolved.get(t.table)
            if resolved is not None:
                options = worker_options(credentials, t.storage_options)
                for job in t.jobs:
                    check_catalog_allows(resolved, job.job, options)
        return credentials

    def where_to_run(self, spec: FleetSpec) -> tuple[str, str]:
        """Where ``execution="auto"`` runs the fleet, ``("local" | "spark", why)``: on this worker when no job needs
        Spark (Z-order, liquid clustering), every log is small, and all OPTIMIZEs together fit as one table's OPTIMIZE
        must (:func:`~airflow_delta_maint.app.execution.rewrites_execution`: re-encoded bytes within the budget, a
        plan that nearly only copies row groups weighed by what it re-encodes; Spark's start is paid once for the
        whole fleet)."""
        plans: list[PlannedRewrite] = []
        for t in spec.tables:
            options = worker_options(self._credentials, t.storage_options)
            jobs = [(j.job, vars(parse_job_args(j.job, j.args))) for j in t.jobs]
            only = next((s for s in (spark_only(job, params) for job, params in jobs) if s), None)
            if only:
                return "spark", f"{t.table}: {only} needs Spark"
            older = any(reads_older_commits(job, params) for job, params in jobs)
            size = log_bytes(t.table, options, all_commits=older)
            if size > LOCAL_MAX_LOG_BYTES:
                return "spark", f"{t.table}: the log holds {size} bytes, more than {LOCAL_MAX_LOG_BYTES} for a run here"
            for job, params in jobs:
                if definition(job).rewrites_data(params):
                    planned = definition(job).planned_rewrite(t.table, options, params)
                    if planned is None:
                        return "spark", f"{t.table}: liquid clustering needs Spark"
                    plans.append(planned)
        if not plans:
            return "local", "no job rewrites data files"
        return rewrites_execution(plans)

    def get_hook(self, conf: Mapping[str, Any] | None = None, spec: FleetSpec | None = None) -> DeltaMaintHook:
        """The hook that submits the fleet application (with delta-spark's jars when a job of ``spec`` uses it)."""
        delta_spark = spec is not None and any(
            definition(j.job).engine(vars(parse_job_args(j.job, j.args))) == "delta-spark"
            for t in spec.tables for j in t.jobs)
        return DeltaMaintHook(
            conn_id=self.conn_id, conf=conf if conf is not None else self.conf, spark_binary=self.spark_binary,
            metrics_uri=self.metrics_uri, deploy_mode=self.deploy_mode, env_vars=self.env_vars,
            name=f"delta-maint-fleet-{self.task_id}", storage_credentials=self._credentials,
            engine="delta-spark" if delta_spark else "native", **self.spark_submit_kwargs,
        )

    # -- Airflow ------------------------------------------------------------------------------
    def execute(self, context: Context) -> list[dict[str, Any]]:
        # the jobs run on this worker start from the plan's read of each table's log
        with quieted_client_loggers(self.log.isEnabledFor(logging.DEBUG)), keeping_snapshots():
            return self._execute(context)

    def _execute(self, context: Context) -> list[dict[str, Any]]:
        history = configured_history_uri(self.history_uri)
        if not self.all_tables():
            self.log.info("No table to maintain")
            return []
        spec = self.fleet_spec(history)
        self._credentials = self.resolve_credentials(spec)
        started = time.process_time()
        options = lambda t: worker_options(self._credentials, t.storage_options)  # noqa: E731
        look = look_at_lake(spec, options, threads=self.check_threads) if self.budget else None
        if look is not None and as_bool(self.skip_if_nothing_to_do):  # the estimates answer for the checks
            decision = decide_by_estimates(spec, look, options)
        elif as_bool(self.skip_if_nothing_to_do):
            decision = decide(spec, options, threads=self.check_threads)
        else:
            decision = Decision(spec, [[None] * len(t.jobs) for t in spec.tables])
        decision = self.plan_within_budget(spec, decision, history, time.process_time() - started, context, look)
        with_work = decision.tables_with_work
        self.log.info("%d of %d tables have work%s", len(with_work), len(spec.tables),
                      f": {', '.join(with_work)}" if len(with_work) <= 20 else "")
        ran: list[dict[str, Any]] = []
        try:
            execution = configured_execution(self.execution, FLEET_EXECUTIONS)
        except ValueError as exc:
            raise AirflowException(str(exc)) from None
        where, why = self.where_to_run(decision.to_run) if with_work and execution == "auto" else ("spark", "")
        if with_work and where == "local":
            self.log.info("Every job with work is small enough for this worker (%s): running them in this process", why)
            local = FleetSpec([FleetTable(t.table, t.jobs, worker_options(self._credentials, t.storage_options))
                               for t in decision.to_run.tables], decision.to_run.history_uri, decision.to_run.budget)
            ran = run_fleet(local, spark_allowed=False)  # credentials stay in this process's memory
        elif with_work:
            if why:
                self.log.info("Submitting the fleet to Spark: %s", why)
            self._hook = self.get_hook(inject_parent_job_info(self.conf, context), decision.to_run)
            try:
                ran = self._hook.run_fleet(decision.to_run.to_json(), self.storage_options)["tables"]
            except AirflowException as exc:  # no results at all: every submitted job failed with this error
                message = str(exc).splitlines()[0]
                ran = [{"table": t.table, "jobs": [{"operation": j.job, "table": t.table, "status": "failed",
                                                    "error": message} for j in t.jobs]}
                       for t in decision.to_run.tables]
        results = merge(spec, decision, ran)
        for entry in results:
            if entry["table"] in self._resolved:
                entry["table_name"] = self._resolved[entry["table"]].name
        if history:
            for entry, known in zip(results, decision.known):
                for metrics, decided in zip(entry["jobs"], known):
                    # skipped by its check or deferred by the budget, or left by a run whose budget ran out
                    if (decided is not None and decided.get("status") == "skipped") or metrics.get("left"):
                        metrics["history"] = record_on_worker(history, metrics, context)
        for entry in results:
            self.log.info("%s: %s%s", entry["table"], entry["status"],
                          f" ({one_line(entry['error'])})" if entry.get("error") else "")
        failed = [e for e in results if e["status"] == "failed"]
        if failed:
            # the results of every table stay in XCom (same key as a success), then the task fails
            context["ti"].xcom_push(key="return_value", value=results)
            raise AirflowException(
                f"delta-maint fleet: {len(failed)} of {len(results)} tables failed: "
                + "; ".join(f"{e['table']} ({one_line(e.get('error', 'failed'))})" for e in failed))
        return results

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


__all__ = ["MaintainTablesOperator", "job_options", "DEFAULT_JOBS"]
