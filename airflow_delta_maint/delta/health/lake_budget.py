"""A night's maintenance of a lake under a budget: which (table, job) runs go, in what order, and why the rest wait.

The input is one candidate per job that has work on a table (its cheap check said so), each with its estimate
(:mod:`airflow_delta_maint.delta.health.estimates`). The choice is greedy by gain per predicted CPU-second,
the way a knapsack is filled when items are many and small against the sack:

1. a table that has needed work for :data:`STARVATION_NIGHTS` nights without any run goes first, the longest
   waiting first: its most worthwhile candidate;
2. then a run that pays for itself: the next night's reads of its table save at least what it costs (a
   checkpoint of a long log: every read of the table, the next plan's included, replays fewer commits), the
   greatest saving first;
3. then a job that has waited :data:`JOB_STARVATION_NIGHTS` nights on a table that other jobs kept maintained
   (housekeeping such as VACUUM gains little a night, and would otherwise wait for ever behind compaction), up to
   :data:`JOB_STARVATION_SHARE` of a CPU budget (the others wait by their ratio);
4. then the rest by :func:`gain_value` ÷ predicted CPU-seconds, highest first;
5. a candidate that does not fit in what is left of any limit waits, with the limit it would pass; smaller
   ones after it may still fit. A candidate that an earlier job of its table, chosen before it, leaves nothing
   to gain (a log compaction of the commits a checkpoint covers) is not chosen, and does not wait. A waiting one of 1. or 3. is taken even when it alone is over what is left, if
   nothing was taken before it (a run bigger than the whole budget would otherwise wait for ever).

A table's chosen jobs run in the order its jobs are listed (OPTIMIZE before compute-stats and VACUUM), so a
job that follows a rewrite is planned on the table the rewrite leaves. The core knows no Spark: the worker
plans, the application runs what was chosen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.health.estimates import Estimate, Gain

__all__ = ["Budget", "Candidate", "GAIN_WEIGHTS", "JOB_STARVATION_NIGHTS", "JOB_STARVATION_SHARE", "LakePlan",
           "NOTHING_LEFT", "Planned", "STARVATION_NIGHTS", "gain_value", "gain_weights", "plan_lake"]

#: nights a table may need work without any run before its best run goes first
STARVATION_NIGHTS = 3
#: nights one job may wait on a table that other runs maintained before it goes first (a week)
JOB_STARVATION_NIGHTS = 7
#: the share of a CPU budget the jobs that waited a week may take before the rest (when a lake's housekeeping
#: has all waited since the same night, it goes over a few nights instead of taking one whole night)
JOB_STARVATION_SHARE = 0.2
MIB = 1 << 20
GIB = 1 << 30
#: what each unit of gain is worth, in files a reader no longer opens on a scan of the table (the unit):
#: a file removed is one open fewer (a parquet file costs a reader two requests at least: its footer, then its
#: columns); a log file no longer replayed is one request fewer on every load of the table, half an open;
#: 8 MiB no longer read through deletion vectors is about the time of one open on an object store;
#: a deletion vector dropped is its read before the file's rows, one small request, half an open; a file given statistics is
#: skipped by about half the selective reads; a GiB freed is storage, not reads
GAIN_WEIGHTS: Mapping[str, float] = {"files_removed": 1.0, "log_files_not_replayed": 0.5,
                                     "dv_bytes_purged": 1.0 / (8 * MIB), "deletion_vectors_dropped": 0.5,
                                     "files_given_stats": 0.5, "bytes_freed": 1.0 / GIB}
#: why a candidate that gains nothing once its table's earlier jobs ran is not chosen
NOTHING_LEFT = "nothing to gain once its table's earlier jobs have run"
#: the gain of a job without an estimate (housekeeping whose gain the log's aggregates cannot see)
UNESTIMATED_GAIN = 0.1
#: its predicted CPU-seconds, unless the cost model says what a run's start costs
UNESTIMATED_CPU_S = 0.05


def gain_value(gain: Gain | None, weights: Mapping[str, float] = GAIN_WEIGHTS) -> float:
    """One number for a gain: the weighted sum of ``weights`` (:data:`GAIN_WEIGHTS`, or a lake's own)."""
    if gain is None:
        return UNESTIMATED_GAIN
    return sum(weight * float(getattr(gain, name)) for name, weight in weights.items())


def gain_weights(values: Mapping[str, Any] | None) -> dict[str, float]:
    """:data:`GAIN_WEIGHTS` with a lake's own weights by gain in place of some (what its readers pay: a lake read
    by engines that checkpoint as they write weighs log files less). A gain that is not in it, or a weight that is
    not a number of 0 or more, raises one clear error; a lake whose weights are all 0 gains nothing, an error too."""
    out = dict(GAIN_WEIGHTS)
    unknown = sorted(set(values or {}) - set(GAIN_WEIGHTS))
    if unknown:
        raise InvalidArgumentError(f"gain_weights: unknown gain {', '.join(unknown)} "
                                   f"(gains: {', '.join(sorted(GAIN_WEIGHTS))})")
    for name, value in (values or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"gain_weights: {name} must be a number, got {value!r}") from None
        if not math.isfinite(number) or number < 0:
            raise InvalidArgumentError(f"gain_weights: {name} must be 0 or more, got {value!r}")
        out[name] = number
    if not any(out.values()):
        raise InvalidArgumentError("gain_weights: every weight is 0, so no run would gain anything")
    return out


@dataclass(frozen=True)
class Budget:
    """A night's limits; None: no limit of that kind.

    Attributes:
        cpu_s: predicted CPU-seconds of the chosen runs together.
        bytes_rewritten: bytes of data files the chosen runs read to rewrite.
        max_tables: tables with at least one chosen run.
        deadline_s: wall-clock seconds for the application; the plan spreads predicted CPU-seconds over
            ``cores``, and the application stops starting work when the deadline has passed.
        cores: the cores the application's work runs on (for ``deadline_s``).
    """

    cpu_s: float | None = None
    bytes_rewritten: int | None = None
    max_tables: int | None = None
    deadline_s: float | None = None
    cores: int = 1

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Budget:
        """A budget from its limits by name (``cpu_s``, ``bytes_rewritten``, ``max_tables``, ``deadline_s``,
        ``cores``); a wrong name or a value that is not a positive number raises one clear error."""
        values = dict(values or {})
        known = {"cpu_s", "bytes_rewritten", "max_tables", "deadline_s", "cores"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidArgumentError(f"budget: unknown limit {', '.join(unknown)} (limits: {', '.join(sorted(known))})")
        out: dict[str, Any] = {}
        for name, value in values.items():
            if value is None or value == "":
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"budget: {name} must be a number, got {value!r}") from None
            if not math.isfinite(number) or number <= 0:
                raise InvalidArgumentError(f"budget: {name} must be above 0, got {value!r}")
            out[name] = int(number) if name in ("bytes_rewritten", "max_tables", "cores") else number
        return cls(**out)

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.cpu_s, self.bytes_rewritten, self.max_tables, self.deadline_s))

    def as_dict(self) -> dict[str, Any]:
        return {"cpu_s": self.cpu_s, "bytes_rewritten": self.bytes_rewritten, "max_tables": self.max_tables,
                "deadline_s": self.deadline_s, "cores": self.cores}


@dataclass(frozen=True)
class Candidate:
    """A job with work on a table: its estimate (None: the job has none), the nights it has waited and the
    nights its table has needed work without any run."""

    table: str
    job: str
    estimate: Estimate | None
    nights_waiting: int = 0
    table_nights_waiting: int = 0
    #: the cost model's scale of the default rates its estimate was priced with
    scale: float = 1.0
    #: its predicted CPU-seconds when it has no estimate (a run's own start, by the cost model)
    unestimated_cpu_s: float = UNESTIMATED_CPU_S
    #: the CPU-seconds it saves the next night's reads of the table (log files no longer replayed)
    saves_cpu_s: float = 0.0

    #: the table's earlier jobs after whose run it would gain nothing (a checkpoint covers the commits a log
    #: compaction listed after it would compact): once one of them is chosen, it is not
    covered_by: frozenset[str] = frozenset()
    #: what each unit of gain is worth (:func:`gain_weights`)
    weights: Mapping[str, float] = field(default_factory=lambda: GAIN_WEIGHTS)

    @property
    def pays_for_itself(self) -> bool:
        """Whether the next night's reads save at least what it costs tonight."""
        return self.saves_cpu_s > 0 and self.saves_cpu_s >= self.cpu_s

    @property
    def cpu_s(self) -> float:
        return self.estimate.cost.cpu_s if self.estimate is not None else self.unestimated_cpu_s

    @property
    def bytes_rewritten(self) -> int:
        """The bytes the run rewrites (OPTIMIZE's reads; a read-only scan, as compute-stats', rewrites none)."""
        return self.estimate.cost.bytes_rewritten if self.estimate is not None else 0

    @property
    def value(self) -> float:
        return gain_value(self.estimate.gain if self.estimate is not None else None, self.weights)

    @property
    def ratio(self) -> float:
        """Gain per predicted CPU-second."""
        return self.value / max(self.cpu_s, 1e-3)


@dataclass(frozen=True)
class Planned:
    """A candidate's place in the plan: chosen (with its rank) or waiting, and why."""

    candidate: Candidate
    chosen: bool
    reason: str
    rank: int | None = None
    #: not chosen because a chosen run of its table leaves it nothing to gain (it does not wait)
    idle: bool = False

    def as_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {"table": c.table, "job": c.job, "chosen": self.chosen, "reason": self.reason, "rank": self.rank,
                "nights_waiting": c.nights_waiting, "table_nights_waiting": c.table_nights_waiting, "gain_value": round(c.value, 3),
                "predicted_cpu_s": round(c.cpu_s, 4), "prediction_scale": round(c.scale, 6),
                "bytes_rewritten": c.bytes_rewritten,
                "estimate": c.estimate.as_dict() if c.estimate is not None else None}


@dataclass
class LakePlan:
    """The night's plan: every candidate, chosen or waiting, and the budget used."""

    budget: Budget
    entries: list[Planned] = field(default_factory=list)
    #: what each unit of gain was worth to the choice (:func:`gain_weights`)
    weights: Mapping[str, float] = field(default_factory=lambda: GAIN_WEIGHTS)

    @property
    def chosen(self) -> list[Planned]:
        return sorted((p for p in self.entries if p.chosen), key=lambda p: p.rank or 0)

    @property
    def deferred(self) -> list[Planned]:
        """The candidates that wait for a later night."""
        return [p for p in self.entries if not p.chosen and not p.idle]

    @property
    def idle(self) -> list[Planned]:
        """The candidates with nothing to gain once their table's earlier jobs have run: they do not wait."""
        return [p for p in self.entries if p.idle]

    def used(self) -> dict[str, Any]:
        chosen = [p.candidate for p in self.chosen]
        return {"cpu_s": round(sum(c.cpu_s for c in chosen), 3), "bytes_rewritten": sum(c.bytes_rewritten for c in chosen),
                "tables": len({c.table for c in chosen}), "runs": len(chosen)}

    def as_dict(self) -> dict[str, Any]:
        return {"budget": self.budget.as_dict(), "gain_weights": dict(self.weights), "used": self.used(),
                "chosen": [p.as_dict() for p in self.chosen], "deferred": [p.as_dict() for p in self.deferred],
                "nothing_to_gain": [p.as_dict() for p in self.idle]}


def _order(candidates: Sequence[Candidate], starvation_nights: int, job_starvation_nights: int,
           job_cpu_s: float | None) -> list[tuple[Candidate, str | None]]:
    """The candidates in the order they are weighed, each with why it goes first (None: by its ratio); the jobs
    that waited go first up to ``job_cpu_s`` predicted CPU-seconds (None: all of them)."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.table_nights_waiting >= starvation_nights and (c.table not in best or c.ratio > best[c.table].ratio):
            best[c.table] = c
    tables = sorted(best.values(), key=lambda c: (-c.table_nights_waiting, -c.ratio, c.table, c.job))
    first = {id(c) for c in tables}
    paying = sorted((c for c in candidates if id(c) not in first and c.pays_for_itself),
                    key=lambda c: (c.cpu_s - c.saves_cpu_s, c.table, c.job))
    first.update(id(c) for c in paying)
    jobs: list[Candidate] = []
    for c in sorted((c for c in candidates if id(c) not in first and c.nights_waiting >= job_starvation_nights),
                    key=lambda c: (-c.nights_waiting, -c.ratio, c.table, c.job)):
        if job_cpu_s is not None and c.cpu_s > job_cpu_s and jobs:
            break
        jobs.append(c)
        job_cpu_s = None if job_cpu_s is None else job_cpu_s - c.cpu_s
    first.update(id(c) for c in jobs)
    rest = sorted((c for c in candidates if id(c) not in first), key=lambda c: (-c.ratio, c.table, c.job))
    return ([(c, f"its table needed work {c.table_nights_waiting} nights without a run (at most {starvation_nights})")
             for c in tables]
            + [(c, f"pays for itself: saves the next night's reads {c.saves_cpu_s:.3g} CPU-s for {c.cpu_s:.3g}")
               for c in paying]
            + [(c, f"waited {c.nights_waiting} nights (at most {job_starvation_nights} for one job)") for c in jobs]
            + [(c, None) for c in rest])


def _over(budget: Budget, c: Candidate, cpu: float, rewritten: int, tables: set[str]) -> str | None:
    """The limit ``c`` would pass on top of what is chosen, in words, or None when it fits."""
    if budget.cpu_s is not None and cpu + c.cpu_s > budget.cpu_s:
        return f"cpu_s: {cpu:.2f} of {budget.cpu_s:g} predicted CPU-s chosen, this run needs {c.cpu_s:.2f}"
    if budget.deadline_s is not None and (cpu + c.cpu_s) / max(1, budget.cores) > budget.deadline_s:
        return (f"deadline_s: {cpu / max(1, budget.cores):.2f} of {budget.deadline_s:g} s chosen on "
                f"{budget.cores} cores, this run needs {c.cpu_s / max(1, budget.cores):.2f}")
    if budget.bytes_rewritten is not None and rewritten + c.bytes_rewritten > budget.bytes_rewritten:
        return (f"bytes_rewritten: {rewritten} of {budget.bytes_rewritten} bytes chosen, this run rewrites "
                f"{c.bytes_rewritten}")
    if budget.max_tables is not None and c.table not in tables and len(tables) >= budget.max_tables:
        return f"max_tables: {len(tables)} of {budget.max_tables} tables chosen"
    return None


def plan_lake(candidates: Sequence[Candidate], budget: Budget, starvation_nights: int = STARVATION_NIGHTS,
              job_starvation_nights: int = JOB_STARVATION_NIGHTS, *,
              weights: Mapping[str, float] = GAIN_WEIGHTS) -> LakePlan:
    """Choose the night's runs under ``budget`` (see the module's docstring); every candidate is in the plan, which
    records ``weights``, those the candidates were valued by."""
    plan = LakePlan(budget, weights=dict(weights))
    cpu, rewritten = 0.0, 0
    tables: set[str] = set()
    job_cpu_s = budget.cpu_s * JOB_STARVATION_SHARE if budget.cpu_s is not None else None
    chosen_jobs: set[tuple[str, str]] = set()
    for c, first in _order(candidates, starvation_nights, job_starvation_nights, job_cpu_s):
        if any((c.table, job) in chosen_jobs for job in c.covered_by):
            plan.entries.append(Planned(c, False, NOTHING_LEFT, idle=True))
            continue
        over = _over(budget, c, cpu, rewritten, tables)
        if over is not None and not (first and not tables):
            plan.entries.append(Planned(c, False, f"deferred: over the budget's {over}"))
            continue
        cpu, rewritten = cpu + c.cpu_s, rewritten + c.bytes_rewritten
        tables.add(c.table)
        chosen_jobs.add((c.table, c.job))
        why = first or f"gain {c.value:.3g} for {c.cpu_s:.3g} predicted CPU-s"
        if over is not None:
            why += f"; over the budget ({over}), taken as the night's first run"
        plan.entries.append(Planned(c, True, why, rank=len([p for p in plan.entries if p.chosen]) + 1))
    return plan
