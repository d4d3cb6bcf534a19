"""A fleet's night under a budget, on the worker: estimate each job that has work, choose, and defer the rest.

:func:`look_at_lake` reads each table's log once for the aggregates the estimates take
(:func:`~airflow_delta_maint.app.jobs.inspect.estimate_inputs`; no data file, no Spark), and the estimates answer
for the jobs' cheap checks (:func:`decide_by_estimates`). The core's
:func:`~airflow_delta_maint.delta.health.lake_budget.plan_lake` chooses; the jobs it defers become "skipped" results
that say why and what they would have cost, and the nights a job has waited and the cost model come from the
maintenance history (:func:`lake_history`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import DeltaError, NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.delta.health.cost_model import CostModel
from airflow_delta_maint.delta.health.estimates import READS_EXPIRED_LOG, Estimate, EstimateInputs
from airflow_delta_maint.delta.health.lake_budget import (GAIN_WEIGHTS, NOTHING_LEFT, Budget, Candidate, LakePlan, Planned,
                                                           plan_lake)
from airflow_delta_maint.delta.storage.store import Storage

from .execution import parse_job_args
from .fleet import Decision, FleetJob, FleetSpec, FleetTable, skipped_metrics
from .job_definitions import definition
from .worker_threads import reading_threads

log = logging.getLogger("delta_maint")

__all__ = ["LakeHistory", "budget_limits", "budgeted", "lake_history", "table_inputs"]


def table_inputs(table: str, storage_options: Mapping[str, str], *, with_expired_log: bool = True) -> EstimateInputs:
    """One streamed read of the table's log for the estimates (``with_expired_log``: the log's cleanup planned too:
    a listing of the whole log). It writes nothing: one listing of the log serves all its parts."""
    from .jobs.inspect import estimate_inputs
    from .state_reading import read_state

    return read_state(Storage(table, dict(storage_options)).remembering_listings(),
                      lambda state: estimate_inputs(state, with_expired_log=with_expired_log), None,
                      "the lake plan's estimate")


@dataclass(frozen=True)
class LakeHistory:
    """What a night's plan learns from the history: the nights each (table, job) has waited, the nights each
    table has needed work without any run, the cost model."""

    waiting: Mapping[tuple[str, str], int] = field(default_factory=dict)
    model: CostModel = field(default_factory=lambda: CostModel({}))
    table_waiting: Mapping[str, int] = field(default_factory=dict)


#: the history a night's plan reads: its waits are bounded by the starvation bounds (a week at most), and the
#: cost model takes each job's last runs; a month holds both with room for a lake that skips nights
HISTORY_DAYS = 30
PLAN_COLUMNS = ["table_uri", "operation", "status", "metrics"]
#: a deferred run's metrics as the fleet writes them (``skipped_metrics`` through json.dumps)
_DEFERRED = '"deferred": true'


def lake_history(history_uri: str | None, storage_options: Mapping[str, str] | None = None) -> LakeHistory:
    """One read of the history for the plan (an empty one where there is no history yet)."""
    if not history_uri:
        return LakeHistory()
    from airflow_delta_maint.delta.health.run_log import read_runs

    try:
        # of the last HISTORY_DAYS (the history grows by every run of every night), each row's table, job, status
        # and whether it was deferred; the metrics only of the runs the cost model learns from
        since_ms = int((time.time() - HISTORY_DAYS * 86400) * 1000)
        kept = read_runs(history_uri, storage_options, columns=PLAN_COLUMNS, since_ms=since_ms, each_file=plan_rows)
    except (TableNotFoundError, NotADeltaTableError):  # not written yet (on an object store: a prefix without commits)
        return LakeHistory()
    # a row a tuple (a dict a row costs more than the plan's choice); the model reads only the rows it learns from
    runs = [Run(*row) for row in zip(*(kept.column(c).to_pylist() for c in Run._fields))]
    learnt = kept.filter(pc.is_valid(kept.column("metrics"))).select(PLAN_COLUMNS).to_pylist()
    return LakeHistory(nights_waiting(runs), CostModel.learn(learnt), table_nights_waiting(runs))


class Run(NamedTuple):
    """What the plan's waits read of a history row."""

    table_uri: str
    operation: str
    status: str
    deferred: bool


def plan_rows(rows: pa.Table) -> pa.Table:
    """What the plan keeps of a file of history rows: a ``deferred`` flag (a skipped run the plan deferred or the
    run left), and the metrics only of the runs that committed with a prediction (most rows are skips, a KiB or two
    of metrics each: a month of a large lake would not fit in the plan's memory)."""
    metrics, status = rows.column("metrics"), rows.column("status")
    deferred = _rows_where(status, "skipped", metrics, _DEFERRED)
    learnt = _rows_where(status, "committed", metrics, "predicted_cpu_s")
    kept = pc.if_else(pa.array(learnt), metrics, pa.scalar(None, pa.string()))
    return rows.set_column(rows.schema.get_field_index("metrics"), "metrics", kept).append_column(
        "deferred", pa.array(deferred))


def _rows_where(status: pa.ChunkedArray, wanted: str, metrics: pa.ChunkedArray, text: str) -> np.ndarray:
    """A mask of the rows of status ``wanted`` whose metrics hold ``text``: only those rows' metrics are searched."""
    mask = np.zeros(len(status), dtype=bool)
    rows = np.flatnonzero(pc.fill_null(pc.equal(status, wanted), False).to_numpy(zero_copy_only=False))
    if len(rows):
        found = pc.fill_null(pc.match_substring(metrics.take(rows), text), False).to_numpy(zero_copy_only=False)
        mask[rows[found]] = True
    return mask


def nights_waiting(runs: Sequence[Run]) -> dict[tuple[str, str], int]:
    """Per (table, job): the nights in a row its newest history records deferred it (0 when the newest ran)."""
    waiting: dict[tuple[str, str], int] = {}
    done: set[tuple[str, str]] = set()
    for row in reversed(runs):  # newest first
        key = (str(row.table_uri), str(row.operation))
        if key in done:
            continue
        if row.deferred:
            waiting[key] = waiting.get(key, 0) + 1
        else:
            done.add(key)
    return waiting


def table_nights_waiting(runs: Sequence[Run]) -> dict[str, int]:
    """Per table: the nights it has needed work since its newest run (committed or failed), none of its
    deferred jobs run: the most records deferring one job since then (each night records one per job)."""
    deferred: dict[tuple[str, str], int] = {}
    ran: set[str] = set()
    for row in reversed(runs):  # newest first
        table = str(row.table_uri)
        if table in ran:
            continue
        if row.status in ("committed", "failed"):
            ran.add(table)
        elif row.deferred:
            key = (table, str(row.operation))
            deferred[key] = deferred.get(key, 0) + 1
    waiting: dict[str, int] = {}
    for (table, _), nights in deferred.items():
        waiting[table] = max(waiting.get(table, 0), nights)
    return waiting


def budget_limits(budget: Budget) -> dict[str, float]:
    """The limits a budget sets (``cores`` only beside ``deadline_s``), as recorded with each run the plan weighed."""
    limits = {k: v for k, v in budget.as_dict().items() if v is not None and k != "cores"}
    if budget.deadline_s is not None:
        limits["cores"] = budget.cores
    return limits


def _deferred(planned: Planned, limits: Mapping[str, float]) -> dict[str, Any]:
    c = planned.candidate
    return skipped_metrics(c.job, c.table, planned.reason, deferred=True, nights_waiting=c.nights_waiting + 1,
                           budget=dict(limits),
                           predicted_cpu_s=round(c.cpu_s, 4), gain_value=round(c.value, 3),
                           estimate=c.estimate.as_dict() if c.estimate is not None else None)


@dataclass
class LakeLook:
    """The lake's one look: what each table's log says (None: it could not be read, and why)."""

    inputs: dict[str, EstimateInputs | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: this process's CPU-seconds the look took
    cpu_s: float = 0.0

    def machine_scale(self, model: CostModel) -> float | None:
        """The machine's speed against the default rates, from this look: its CPU-seconds over what the defaults
        price its reads of the tables' logs at (None: no log read). A plan whose history has measured no run yet
        prices with it, not with the defaults (a run on a small table costs a fifth of them on this machine)."""
        b = model.base
        priced = sum(b.per_table_read + b.per_commit_replayed * x.health.commits_since_checkpoint
                     for x in self.inputs.values() if x is not None)
        return min(10.0, max(0.01, self.cpu_s / priced)) if priced > 0 and self.cpu_s > 0 else None


def look_at_lake(spec: FleetSpec, worker_options: Callable[[FleetTable], Mapping[str, str]] | None = None, *,
                 threads: int = 8) -> LakeLook:
    """One streamed read of each table's log, on ``threads`` threads (they wait on storage; see
    :func:`~.worker_threads.reading_threads`)."""
    def one(t: FleetTable) -> tuple[EstimateInputs | None, str | None]:
        expired = any(definition(j.job).operation in READS_EXPIRED_LOG for j in t.jobs)  # only where it is asked
        try:
            return table_inputs(t.table, dict(worker_options(t) if worker_options else t.storage_options),
                                with_expired_log=expired), None
        except DeltaError as exc:
            return None, str(exc)

    started = time.process_time()
    with ThreadPoolExecutor(max_workers=reading_threads((t.table for t in spec.tables), threads)) as pool:
        found = list(pool.map(one, spec.tables))
    look = LakeLook(cpu_s=time.process_time() - started)
    for t, (inputs, error) in zip(spec.tables, found):
        look.inputs[t.table] = inputs
        if error is not None:
            look.errors[t.table] = error
    return look


def decide_by_estimates(spec: FleetSpec, look: LakeLook,
                        worker_options: Callable[[FleetTable], Mapping[str, str]] | None = None) -> Decision:
    """Which jobs have work, from the lake's one look instead of each job's own read of the log: a job whose estimate
    gains nothing is skipped; a job without an estimate runs its own check; a table whose log cannot be read fails
    its first job, and its later ones do not run."""
    from .fleet import job_check

    to_run: list[FleetTable] = []
    known: list[list[dict[str, Any] | None]] = []
    for t in spec.tables:
        inputs, error = look.inputs.get(t.table), look.errors.get(t.table)
        results: list[dict[str, Any] | None] = []
        kept: list[FleetJob] = []
        for n, j in enumerate(t.jobs):
            if error is not None:
                results.append(_failed(j.job, t.table, error) if n == 0 else
                               skipped_metrics(j.job, t.table, f"not run: {t.jobs[0].job} failed on this table"))
                continue
            job, params = definition(j.job), vars(parse_job_args(j.job, j.args))
            gains = job.would_gain(inputs, params) if inputs is not None else None
            if gains is False and inputs is not None:  # the whole estimate only for the record of a skip
                estimate = job.estimate(inputs, params=params)
                results.append(skipped_metrics(j.job, t.table, "nothing to gain, by the estimate from the log",
                                               estimate=estimate.as_dict() if estimate is not None else None))
                continue
            check = None if gains is not None else job_check(j.job, j.args)
            reason = check(t.table, dict(worker_options(t) if worker_options else t.storage_options)) if check else None
            if reason:
                results.append(skipped_metrics(j.job, t.table, str(reason)))
            else:
                results.append(None)
                kept.append(j)
        known.append(results)
        if kept:
            to_run.append(FleetTable(t.table, kept, t.storage_options))
    return Decision(FleetSpec(to_run, spec.history_uri, spec.budget), known)


def _failed(job: str, table: str, error: str) -> dict[str, Any]:
    from .metrics import base_metrics, finish

    metrics = base_metrics(job, table)
    metrics.update(status="failed", error=error, error_type="DeltaError")
    return finish(metrics)


def budgeted(spec: FleetSpec, decision: Decision, budget: Budget,
             worker_options: Callable[[FleetTable], Mapping[str, str]] | None = None, *,
             history: LakeHistory | None = None, spent_cpu_s: float = 0.0, look: LakeLook | None = None,
             threads: int = 8, weights: Mapping[str, float] = GAIN_WEIGHTS) -> tuple[Decision, LakePlan]:
    """``decision`` cut down to what ``budget`` buys, and the plan. Deferred jobs join the known results
    (skipped, ``deferred: true``, with the limit they would pass and their predicted cost); a table whose
    estimate cannot be read keeps its jobs as candidates without an estimate. The CPU-seconds of the budget
    are the night's: what the checks spent (``spent_cpu_s``) and the estimates' reads are taken off first.
    ``look``: the lake's one look already taken (else the tables with work are read here). ``weights``: what each
    unit of gain is worth (:func:`~airflow_delta_maint.delta.health.lake_budget.gain_weights`)."""
    started = time.process_time()
    history = history or LakeHistory()
    work = [(i, t) for i, t in enumerate(decision.to_run.tables)]
    if look is None:
        look = look_at_lake(decision.to_run, worker_options, threads=threads)
    found = [look.inputs.get(t.table) for _, t in work]
    scale = look.machine_scale(history.model) if not history.model.measured else None
    if scale is not None:  # a first night: the machine's speed from the look, not the defaults
        history = dataclasses.replace(history, model=history.model.with_prior(scale))
    candidates = []
    for (_, t), got in zip(work, found):
        candidates.extend(_table_candidates(t, got, history, weights))
    limits = budget_limits(budget)  # as given: what the history shows each night was allowed
    night_cpu_s = budget.cpu_s

    def left_of_night() -> float:
        """What is left of the night's CPU-seconds: the checks and the estimates spent theirs."""
        return max(0.0, (night_cpu_s or 0.0) - (time.process_time() - started + spent_cpu_s))

    if night_cpu_s is not None:
        # the predictions are each run's median: their sum falls short of what the runs measure together by the
        # model's total bias, so the plan fills what is left divided by it
        budget = dataclasses.replace(budget, cpu_s=left_of_night() / history.model.total_bias)
    plan = plan_lake(candidates, budget, weights=weights)
    cut = _cut(spec, decision, plan, limits)
    if night_cpu_s is not None:  # the run keeps what is left once the choice is made and written down, undivided
        # (a budget the planning spent leaves the run a millisecond: a valid spec, whose first run may still go as
        # the plan's first run does)
        cut.to_run.budget = {**(cut.to_run.budget or {}), "cpu_s": max(left_of_night(), 1e-3)}
    return cut, plan


def _table_candidates(t: FleetTable, inputs: EstimateInputs | None, history: LakeHistory,
                      weights: Mapping[str, float]) -> list[Candidate]:
    """A table's jobs with work as candidates, each with its own estimate on the table as the look found it, and
    the earlier jobs after whose run it would gain nothing (``Candidate.covered_by``: a checkpoint covers the
    commits a log compaction listed after it would compact). ``inputs`` None: the look could not read the table."""
    out: list[Candidate] = []
    left_by: dict[str, EstimateInputs] = {}  # each earlier job with an estimate: the table its run leaves
    for j in t.jobs:
        job = definition(j.job)
        params = vars(parse_job_args(j.job, j.args))
        engine = job.engine(params)
        rates = history.model.rates(j.job, engine)
        estimate = job.estimate(inputs, rates, params) if inputs is not None else None
        covered_by = frozenset() if estimate is None else frozenset(
            earlier for earlier, after in left_by.items() if job.would_gain(after, params) is False)
        out.append(Candidate(t.table, j.job, estimate, history.waiting.get((t.table, j.job), 0),
                             history.table_waiting.get(t.table, 0),
                             scale=history.model.scale(j.job, engine), unestimated_cpu_s=rates.fixed_s,
                             saves_cpu_s=reads_saved_cpu_s(estimate, history.model), covered_by=covered_by,
                             weights=weights))
        if estimate is not None and estimate.after is not None:
            left_by[j.job] = estimate.after
    return out


#: reads of a table a night that replay its log: the plan's, and a job's after another job's commit
READS_PER_NIGHT = 2
#: the nights a deferred checkpoint's commits are replayed before it runs
REPLAY_NIGHTS = 1


def reads_saved_cpu_s(estimate: Estimate | None, model: CostModel) -> float:
    """The CPU-seconds a run saves the reads of its table (:data:`REPLAY_NIGHTS` nights of :data:`READS_PER_NIGHT`
    reads): the commits they no longer replay (a first checkpoint's net of its own read), priced by the default rate
    of a reader's replay at the machine's measured speed (the model's prior)."""
    if estimate is None or not estimate.gain.log_files_not_replayed:
        return 0.0
    return (estimate.gain.log_files_not_replayed * model.base.per_commit_replayed * model.prior * READS_PER_NIGHT
            * REPLAY_NIGHTS)


def _cut(spec: FleetSpec, decision: Decision, plan: LakePlan, limits: Mapping[str, float]) -> Decision:
    """The decision with only the chosen jobs to run (each with what the plan expects of it, its estimate and the
    night's budget ``limits``, and the plan's budget for the run), and the deferred ones known."""
    chosen = {(p.candidate.table, p.candidate.job): p for p in plan.chosen}
    deferred = {(p.candidate.table, p.candidate.job): p for p in plan.deferred}
    idle = {(p.candidate.table, p.candidate.job): p.candidate for p in plan.idle}
    to_run: list[tuple[int, FleetTable]] = []
    known = []
    for t, results in zip(spec.tables, decision.known):
        kept = []
        merged = []
        for j, m in zip(t.jobs, results):
            if m is None and (t.table, j.job) in idle:  # not waiting: its earlier jobs leave it nothing to do
                estimate = idle[(t.table, j.job)].estimate
                m = skipped_metrics(j.job, t.table, NOTHING_LEFT, estimate=estimate.as_dict() if estimate else None)
            elif m is None and (t.table, j.job) in deferred:
                m = _deferred(deferred[(t.table, j.job)], limits)
            elif m is None and (t.table, j.job) in chosen:
                c = chosen[(t.table, j.job)].candidate
                expect: dict[str, Any] = {"predicted_cpu_s": round(c.cpu_s, 4), "prediction_scale": round(c.scale, 6),
                                          "budget": dict(limits)}
                if c.estimate is not None:  # the score the plan saw and expects after, for the lake's health
                    expect["estimate"] = c.estimate.as_dict()
                kept.append(FleetJob(j.job, j.args, expect))
            merged.append(m)
        known.append(merged)
        if kept:
            best = min(chosen[(t.table, j.job)].rank or 0 for j in kept)
            to_run.append((best, FleetTable(t.table, kept, t.storage_options)))
    # the best runs first: a run that has spent its budget leaves the least worth
    ordered = [t for _, t in sorted(to_run, key=lambda bt: bt[0])]
    budget = {k: v for k, v in (("cpu_s", plan.budget.cpu_s), ("deadline_s", plan.budget.deadline_s)) if v is not None}
    return Decision(FleetSpec(ordered, spec.history_uri, budget or None), known)
