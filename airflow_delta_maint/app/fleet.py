"""Maintain many tables in one application: the fleet spec, the decision without Spark, the run.

A fleet spec is a JSON object listing tables and, per table, the jobs to run in order::

    {"tables": [{"table": "s3://b/events", "storage_options": {"AWS_REGION": "eu-west-1"},
                 "jobs": [{"job": "optimize", "args": [...]}, {"job": "vacuum", "args": [...]}]}],
     "history_uri": null}

``args`` are the job's options as the command line takes them (docs/job-options.md); a former flag kept for
one release is taken with the same one-line warning on stderr.

``storage_options`` hold no secrets: credentials reach the application through its environment.
The Airflow worker decides with :func:`decide` which jobs have work (each job's cheap check, no
Spark) and submits only those; the application runs them with :func:`run_fleet`, one SparkSession
for all. Results are one entry per table (see :func:`table_entry`); a table's failure stops that
table's later jobs and no other table's.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError

from .engines import check_engine
from .execution import needs_spark, parse_job_args
from .history_batch import HistoryBatch
from .worker_threads import reading_threads
from .job_definitions import definition
from .context import JobContext
from .jobs import execute_job
from .metrics import base_metrics, finish
from .run_cpu import cpu_outside_process
from .settings import Settings

log = logging.getLogger("delta_maint")


@dataclass
class FleetJob:
    job: str
    args: list[str] = field(default_factory=list)
    #: what a plan expects of the run (``predicted_cpu_s``, ``prediction_scale``), recorded with its metrics
    expect: dict[str, Any] = field(default_factory=dict)


@dataclass
class FleetTable:
    table: str
    jobs: list[FleetJob]
    storage_options: dict[str, str] = field(default_factory=dict)


@dataclass
class FleetSpec:
    tables: list[FleetTable]
    history_uri: str | None = None
    #: the night's limits the run keeps (``cpu_s``, ``deadline_s``: it starts no job once one is reached)
    budget: dict[str, float] | None = None

    @classmethod
    def from_json(cls, data: Any) -> FleetSpec:
        """Build and validate a spec (every job known, every job's options valid); raises ``InvalidArgumentError``."""
        if not isinstance(data, Mapping) or not isinstance(data.get("tables"), list):
            raise InvalidArgumentError("a fleet spec is a JSON object with a list under \"tables\"")
        tables = []
        for i, raw in enumerate(data["tables"]):
            if not isinstance(raw, Mapping) or not raw.get("table") or not isinstance(raw.get("jobs"), list):
                raise InvalidArgumentError(f"fleet table #{i}: needs \"table\" and a list of \"jobs\"")
            jobs = []
            for raw_job in raw["jobs"]:
                name = raw_job.get("job") if isinstance(raw_job, Mapping) else None
                job = FleetJob(str(name), [str(a) for a in raw_job.get("args", [])],
                               dict(raw_job.get("expect") or {})) if name else None
                if job is None:
                    raise InvalidArgumentError(f"fleet table {raw['table']}: each job needs a \"job\" name")
                parsed = parse_job_args(job.job, job.args)  # bad input fails before anything runs
                check_engine(job.job, getattr(parsed, "engine", None))
                jobs.append(job)
            options = {str(k): str(v) for k, v in (raw.get("storage_options") or {}).items()}
            tables.append(FleetTable(str(raw["table"]), jobs, options))
        history = data.get("history_uri")
        return cls(tables, str(history) if history else None, run_budget(data.get("budget")))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "history_uri": self.history_uri,
            "tables": [{"table": t.table, "storage_options": t.storage_options,
                        "jobs": [{"job": j.job, "args": j.args, **({"expect": j.expect} if j.expect else {})}
                                 for j in t.jobs]} for t in self.tables]}
        if self.budget:
            out["budget"] = dict(self.budget)
        return out


def run_budget(raw: Any) -> dict[str, float] | None:
    """The limits a run keeps of a budget (checked: one clear error for a bad one), or None."""
    if not raw:
        return None
    from airflow_delta_maint.delta.health.lake_budget import Budget

    budget = Budget.from_mapping(raw)
    kept = {"cpu_s": budget.cpu_s, "deadline_s": budget.deadline_s}
    return {k: float(v) for k, v in kept.items() if v is not None} or None


def table_status(jobs: Sequence[Mapping[str, Any]]) -> str:
    """A table's status from its jobs': failed, else committed, else dry_run, else skipped."""
    statuses = {m.get("status") for m in jobs}
    for status in ("failed", "committed", "dry_run"):
        if status in statuses:
            return status
    return "skipped"


def table_entry(table: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One table's result: ``table``, ``status``, ``jobs`` (each job's metrics, in order), ``error`` when failed."""
    entry: dict[str, Any] = {"table": table, "status": table_status(jobs), "jobs": jobs}
    errors = [f"{m['operation']}: {m['error']}" for m in jobs if m.get("status") == "failed" and m.get("error")]
    if errors:
        entry["error"] = "; ".join(errors)
    return entry


def skipped_metrics(job: str, table: str, reason: str, **extra: Any) -> dict[str, Any]:
    """The metrics of a job that did not run."""
    metrics = base_metrics(job, table)
    metrics.update(status="skipped", reason=reason, **extra)
    return finish(metrics)


# -- on the worker: which jobs have work --------------------------------------------------------
def job_check(job: str, args: Sequence[str]) -> Callable[[str, Mapping[str, str]], Any] | None:
    """The job's cheap "nothing to do" check (no Spark) with its options ``args`` (checked here: a bad
    value raises ``DeltaError``), or None when it offers none."""
    defined = definition(job)
    module = defined.module()
    if getattr(module, "nothing_to_do", None) is None or getattr(module, "options_from", None) is None:
        return None
    options = defined.typed_options(vars(parse_job_args(job, args)))
    return lambda table, storage_options: defined.nothing_to_do(table, storage_options, options)


@dataclass
class Decision:
    """What the worker found: the spec of the jobs with work, and the results known already."""

    to_run: FleetSpec
    #: per table (in the spec's order), per job: metrics already known (skipped or failed), or None (to run)
    known: list[list[dict[str, Any] | None]]

    @property
    def tables_with_work(self) -> list[str]:
        return [t.table for t in self.to_run.tables]


def decide(spec: FleetSpec, worker_options: Callable[[FleetTable], Mapping[str, str]] | None = None,
           threads: int = 8) -> Decision:
    """Run each job's cheap check on this process (no Spark); keep only the jobs with work.

    A table whose check fails (missing, corrupt, unsupported) gets a failed entry for that job and
    no later job, and is not submitted; the other tables go on. Checks run on ``threads`` threads
    (they wait on storage).
    """
    from concurrent.futures import ThreadPoolExecutor

    def one(t: FleetTable) -> tuple[list[FleetJob], list[dict[str, Any] | None]]:
        options = dict(worker_options(t) if worker_options is not None else t.storage_options)
        run: list[FleetJob] = []
        known: list[dict[str, Any] | None] = []
        failed: str | None = None
        for j in t.jobs:
            if failed is not None:
                known.append(skipped_metrics(j.job, t.table, f"not run: {failed} failed on this table"))
                continue
            try:
                check = job_check(j.job, j.args)
                reason = check(t.table, options) if check else None
            except DeltaError as exc:
                m = base_metrics(j.job, t.table)
                m.update(status="failed", error=str(exc), error_type=type(exc).__name__)
                known.append(finish(m))
                failed = j.job
                continue
            if reason:
                known.append(skipped_metrics(j.job, t.table, str(reason), **(getattr(reason, "details", None) or {})))
            else:
                known.append(None)
                run.append(j)
        return run, known

    with ThreadPoolExecutor(max_workers=reading_threads((t.table for t in spec.tables), threads)) as pool:
        results = list(pool.map(one, spec.tables))
    to_run = [FleetTable(t.table, run, t.storage_options) for t, (run, _) in zip(spec.tables, results) if run]
    return Decision(FleetSpec(to_run, spec.history_uri), [known for _, known in results])


def merge(spec: FleetSpec, decision: Decision, ran: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries of every table of ``spec``: the worker's known metrics merged with the application's results."""
    by_table: dict[str, list[dict[str, Any]]] = {e["table"]: list(e.get("jobs", [])) for e in ran}
    out = []
    for t, known in zip(spec.tables, decision.known):
        results = iter(by_table.get(t.table, []))
        jobs = []
        for j, m in zip(t.jobs, known):
            if m is None:
                m = next(results, None)
            if m is None:
                m = finish({**base_metrics(j.job, t.table), "error": "the application returned no result for it"})
            jobs.append(m)
        out.append(table_entry(t.table, jobs))
    return out


# -- in the application: run them --------------------------------------------------------------
@dataclass
class Spent:
    """What a run has spent of its budget: this process's CPU-seconds since it started (its jobs, their records in
    the history, everything between), what its jobs measured outside it (their Spark tasks' Python workers and
    executors), the wall clock."""

    budget: Mapping[str, float]
    started: float
    cpu_at_start: float = field(default_factory=time.process_time)
    tasks_cpu_s: float = 0.0
    runs_started: int = 0

    @property
    def cpu_s(self) -> float:
        return time.process_time() - self.cpu_at_start + self.tasks_cpu_s

    def over(self) -> str | None:
        """The limit reached, in words, or None."""
        cpu, deadline = self.budget.get("cpu_s"), self.budget.get("deadline_s")
        if cpu is not None and self.cpu_s >= cpu:
            return f"cpu_s: {self.cpu_s:.2f} of {cpu:g} CPU-s measured"
        elapsed = time.monotonic() - self.started
        if deadline is not None and elapsed >= deadline:
            return f"deadline_s: {elapsed:.0f} of {deadline:g} s"
        return None

    def would_pass(self, predicted_cpu_s: Any) -> str | None:
        """Why a run the plan predicts at ``predicted_cpu_s`` would pass what is left of the CPU budget, in words,
        or None (no prediction, no CPU budget, or it fits). The application's first run always fits, as in the plan:
        a run bigger than the whole budget would otherwise wait for ever."""
        cpu = self.budget.get("cpu_s")
        if cpu is None or not isinstance(predicted_cpu_s, (int, float)) or not self.runs_started:
            return None
        left = cpu - self.cpu_s
        if predicted_cpu_s <= left:
            return None
        return f"cpu_s: predicted {predicted_cpu_s:.3f} of {left:.3f} CPU-s left"


def run_fleet(spec: FleetSpec, master: str | None = None, *, spark_allowed: bool = True,
              settings: Settings | None = None, spark_conf: Mapping[str, str] | None = None,
              history_options: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Run every table's jobs in order in this process, one SparkSession for all; one entry per table.

    With ``spark_allowed`` false (the fleet runs on the Airflow worker) no SparkSession starts: the
    jobs' parallel work runs on threads. ``settings``: the application's settings (default: this
    process's environment; a bad one raises ``InvalidArgumentError``). ``spark_conf``: for a session
    this process starts itself (the command line's, outside spark-submit). ``history_options``: the history's
    object-store options (``plan-lake --storage-option``; else the environment's).
    """
    settings = settings if settings is not None else Settings.from_environ(os.environ)
    conf = dict(spark_conf or {})
    if spark_allowed and any(needs_spark(j.job, vars(parse_job_args(j.job, j.args))) for t in spec.tables for j in t.jobs):
        from .spark_session import start_in_background

        start_in_background(master, conf)  # comes up while the first table's log is read
    entries = []
    t0 = time.monotonic()
    spent = Spent(spec.budget or {}, t0)

    def context(table: FleetTable) -> JobContext:
        return JobContext(table=table.table, storage_options=dict(table.storage_options), master=master,
                          spark_allowed=spark_allowed, settings=settings, spark_conf=conf)

    history = HistoryBatch(spec.history_uri, dict(history_options or {}))
    try:
        for n, t in enumerate(spec.tables, 1):
            entry = run_table(t, context, spent, history)
            entries.append(entry)
            log.info("table %d/%d %s: %s (%.1f s into the run)", n, len(spec.tables), t.table, entry["status"],
                     time.monotonic() - t0)
    finally:
        history.flush()
    return entries


def run_table(t: FleetTable, context: Callable[[FleetTable], Any], spent: Spent,
              history: HistoryBatch) -> dict[str, Any]:
    """One table's jobs in order (none after a failure, none once the budget is spent, none the plan predicts
    beyond what is left of it, nor the table's jobs after such a one); the runs join ``history``'s next append."""
    from .jobs import application_id

    jobs: list[dict[str, Any]] = []
    ran: list[dict[str, Any]] = []
    failed: str | None = None
    left_behind: str | None = None  # a run left for not fitting: the table's later jobs wait with it
    ctx = None
    for j in t.jobs:
        if failed is not None:
            jobs.append(skipped_metrics(j.job, t.table, f"not run: {failed} failed on this table"))
            continue
        out_of_budget = spent.over()
        if out_of_budget:
            jobs.append(skipped_metrics(j.job, t.table, f"not run: the budget ran out ({out_of_budget})", left=True,
                                        deferred=True, **j.expect))
            continue
        too_big = None if left_behind else spent.would_pass(j.expect.get("predicted_cpu_s"))
        if too_big or left_behind:  # smaller runs of other tables may still fit; this table's later jobs wait
            reason = f"it would pass the budget ({too_big})" if too_big else f"{left_behind} was left before it"
            left_behind = left_behind or j.job
            jobs.append(skipped_metrics(j.job, t.table, f"not run: {reason}", left=True, deferred=True, **j.expect))
            continue
        args = parse_job_args(j.job, j.args)
        ctx = context(t)
        spent.runs_started += 1
        _, metrics = execute_job(j.job, definition(j.job).module(), args, ctx, expect=j.expect)
        spent.tasks_cpu_s += cpu_outside_process(metrics)
        jobs.append(metrics)
        if not args.history_uri:
            ran.append(metrics)
        if metrics.get("status") == "failed":
            failed = j.job
            log.error("%s: %s failed: %s", t.table, j.job, metrics.get("error"))
    history.add(ran, application_id(ctx.started_spark if ctx else None))
    return table_entry(t.table, jobs)
