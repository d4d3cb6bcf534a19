"""The cost model learns from the maintenance history: how far each job's CPU-seconds were from the model's.

Every run a plan chose records ``predicted_cpu_s`` (what the plan expected), ``prediction_scale`` (its job's one
scale of the default rates), its estimate (whose units the default rates price again here) and ``cpu_s`` (what it
measured, wherever it ran: its process, its Spark tasks' Python workers, its executors). The default rates of
:class:`~.estimates.CpuRates` are this machine's; a lake's machines, engines and tables differ. So each (job,
engine) gets a scale: the median, over its last :data:`WINDOW` measured runs, of measured ÷ the default
rates' prediction. The median keeps one slow night (a busy cluster, a cold cache) from moving the next
night's plan. A (job, engine) with no measured run yet takes the median over every measured run (the machine's
own speed against the defaults'), and 1 on an empty history.

One scale keeps the defaults' shape: on a lake of small tables a run's start outweighs its bytes, so every OPTIMIZE
is priced alike, whether it opens 2 files or 50. Once a (job, engine) has :data:`MIN_TERM_RUNS` runs whose estimate
the history kept, each kind of work (:data:`~.estimates.COST_TERMS`: the run's start, bytes rewritten, files read,
log files, ...) gets a scale of its own, fitted to those runs' relative errors (:func:`_fit_terms`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from airflow_delta_maint.delta.health.estimates import COST_TERMS, COST_UNITS, DEFAULT_RATES, Cost, CpuRates

__all__ = ["MAX_TERM_SPREAD", "MAX_TOTAL_BIAS", "MIN_RUNS", "MIN_TERM_RUNS", "RAN", "WINDOW", "CostModel",
           "PredictionError", "prediction_errors"]

#: runs a (job, engine) needs before its own scale replaces 1
MIN_RUNS = 1
#: the newest runs the scale is taken from: about one night of a lake of a few hundred tables. A night runs its best
#: runs first, so its last few runs are its smallest: a scale from those alone mispredicts the next night's (with 20,
#: a median error of 38% on the lake benchmark's nights against 26% with 200)
WINDOW = 200


#: the status of the runs the model learns from: a run that commits nothing (the log's cleanup, a job that found
#: its work done) costs about a millisecond, below what its gain without an estimate (``UNESTIMATED_GAIN``) was
#: weighed against; learnt, such runs would outrank compaction
RAN = ("committed",)


#: measured runs with their estimate a (job, engine) needs before each kind of work gets a scale of its own
MIN_TERM_RUNS = 20
#: how far a kind of work's scale may go from its job's one scale, either way: a fit on a night of small tables does
#: not price a large table's run at a tenth of what one scale would
MAX_TERM_SPREAD = 4.0
#: the pull of each kind of work's scale towards its job's one scale, per run fitted, against the runs' squared
#: relative errors: a kind of work the runs barely vary in keeps about the one scale (on the lake benchmark's history
#: a pull of 1 in 20 runs predicted the next night's checkpoints better than one of 1 in 200)
TERM_PULL = 0.05
#: a run's relative error beyond which it weighs less in the fit (Huber): one slow run does not move the scales
ROBUST_ERROR = 0.5


class _Run(NamedTuple):
    """A measured run: its CPU-seconds, the default rates' prediction, and that prediction by kind of work (None: the
    history kept no estimate of it)."""

    cpu_s: float
    by_defaults: float
    terms: tuple[float, ...] | None


def _default_terms(metrics: Mapping[str, Any], base: CpuRates) -> tuple[float, ...] | None:
    """The default rates' prediction of a run by kind of work, from the estimate its metrics kept."""
    estimate = metrics.get("estimate")
    cost = estimate.get("cost") if isinstance(estimate, dict) else None
    if not isinstance(cost, dict):
        return None
    units = Cost(**{k: int(v) for k, v in cost.items()
                    if k in COST_UNITS and isinstance(v, (int, float)) and math.isfinite(v)})
    terms = units.terms(base)
    return tuple(terms[t] for t in COST_TERMS)


def _measured(row: Mapping[str, Any]) -> tuple[dict[str, Any], float, float] | None:
    """(metrics, measured CPU-s, predicted CPU-s) of a history row of a chosen run that committed and recorded
    both, or None (a deferred run recorded a prediction, but no measure)."""
    text = row.get("metrics") or "{}"
    if row.get("status") not in RAN or "predicted_cpu_s" not in text or '"cpu_s"' not in text:  # most rows: no parse
        return None
    metrics = json.loads(text)
    cpu, predicted = metrics.get("cpu_s"), metrics.get("predicted_cpu_s")
    if metrics.get("deferred") or not isinstance(cpu, (int, float)) or not isinstance(predicted, (int, float)):
        return None
    return metrics, float(cpu), float(predicted)


@dataclass(frozen=True)
class CostModel:
    """Scales of the default rates by (job, engine), learnt from the history."""

    scales: Mapping[tuple[str, str], float]
    base: CpuRates = DEFAULT_RATES
    #: the scale of a (job, engine) that has none of its own
    prior: float = 1.0
    #: what the runs measured together over what this model predicts for them together (1: as predicted). The
    #: median prices each run best, but a night's runs skew (a cold read, a busy moment, a large table): their sum
    #: is above the sum of their medians, and a plan that fills its budget with medians leaves runs undone
    total_bias: float = 1.0
    #: each kind of work's scale by (job, engine), where the history has enough runs with their estimates (a kind
    #: missing takes its job's one scale)
    term_scales: Mapping[tuple[str, str], Mapping[str, float]] = field(default_factory=dict)

    @classmethod
    def learn(cls, rows: Iterable[Mapping[str, Any]], base: CpuRates = DEFAULT_RATES) -> CostModel:
        """The model from history rows (oldest first, as :func:`~.run_log.read_runs` gives them)."""
        runs: dict[tuple[str, str], list[_Run]] = {}
        for row in rows:
            seen = _measured(row)
            if seen is None:
                continue
            metrics, cpu, predicted = seen
            terms = _default_terms(metrics, base)
            # the default rates' prediction: from the units the estimate kept, else the recorded one unscaled
            by_defaults = sum(terms) if terms else predicted / float(metrics.get("prediction_scale") or 1.0)
            if by_defaults > 0:
                key = (str(row.get("operation")), str(metrics.get("engine") or "native"))
                runs.setdefault(key, []).append(_Run(cpu, by_defaults, terms))
        windows = {key: r[-WINDOW:] for key, r in runs.items()}
        every = [r.cpu_s / r.by_defaults for w in windows.values() for r in w]
        scales = {key: statistics.median(r.cpu_s / r.by_defaults for r in w)
                  for key, w in windows.items() if len(w) >= MIN_RUNS}
        prior = statistics.median(every) if every else 1.0
        term_scales = {key: fitted for key, w in windows.items() if key in scales
                       for fitted in [_fit_terms(w, scales[key])] if fitted}
        model = cls(scales, base, prior, 1.0, term_scales)
        return dataclasses.replace(model, total_bias=_total_bias(windows, model))

    @property
    def measured(self) -> bool:
        """Whether any run was measured (else every scale is the prior)."""
        return bool(self.scales)

    def with_prior(self, prior: float) -> CostModel:
        """This model with another scale for the (job, engine) pairs without their own."""
        return dataclasses.replace(self, prior=prior)

    def scale(self, job: str, engine: str = "native") -> float:
        return float(self.scales.get((job, engine), self.prior))

    def term_scale(self, job: str, engine: str, term: str) -> float:
        """The scale of one kind of work (a rate of :class:`~.estimates.CpuRates`) of ``job``: its own, else the job's."""
        return float(self.term_scales.get((job, engine), {}).get(term, self.scale(job, engine)))

    def rates(self, job: str, engine: str = "native") -> CpuRates:
        """The rates a plan prices ``job`` with: each default times its kind of work's scale."""
        b = self.base
        return dataclasses.replace(b, **{f.name: getattr(b, f.name) * self.term_scale(job, engine, f.name)
                                         for f in dataclasses.fields(b)})

    def _predict(self, job: str, engine: str, run: _Run) -> float:
        """What this model predicts for a measured run."""
        if run.terms is None:
            return self.scale(job, engine) * run.by_defaults
        return sum(self.term_scale(job, engine, t) * x for t, x in zip(COST_TERMS, run.terms))


#: the bias a plan corrects for at most (and at least its inverse): a history of a few odd runs moves it little
MAX_TOTAL_BIAS = 2.0


def _fit_terms(runs: Sequence[_Run], scale: float) -> dict[str, float]:
    """Each kind of work's scale from ``runs`` (those that kept their estimate, at least :data:`MIN_TERM_RUNS`): the
    scales minimizing the runs' squared relative errors, each pulled towards the job's one ``scale`` by
    :data:`TERM_PULL` per run and kept within :data:`MAX_TERM_SPREAD` of it; a few passes weigh down the runs whose error
    is beyond :data:`ROBUST_ERROR` (Huber). Only the kinds of work some run did are fitted. Empty: too few runs."""
    kept = [r for r in runs if r.terms is not None and r.cpu_s > 0]
    if len(kept) < MIN_TERM_RUNS or scale <= 0:
        return {}
    x = np.array([r.terms for r in kept]) / np.array([r.cpu_s for r in kept])[:, None]  # each run's terms ÷ its measure
    done = np.flatnonzero(x.any(axis=0))
    x = x[:, done] * scale  # in units of the one scale: theta 1 is the one-scale model
    weights = np.ones(len(kept))
    theta = np.ones(len(done))
    pull = TERM_PULL * len(kept)
    for _ in range(10):
        wx = x * weights[:, None]
        theta = np.linalg.solve(wx.T @ x + pull * np.eye(len(done)), wx.sum(axis=0) + pull)
        theta = np.clip(theta, 1 / MAX_TERM_SPREAD, MAX_TERM_SPREAD)
        errors = np.abs(x @ theta - 1.0)
        weights = np.minimum(1.0, ROBUST_ERROR / np.maximum(errors, 1e-12))
    return {COST_TERMS[i]: float(scale * t) for i, t in zip(done, theta)}


def _total_bias(windows: Mapping[tuple[str, str], list[_Run]], model: CostModel) -> float:
    """Σ measured ÷ Σ predicted by ``model`` over each (job, engine)'s last :data:`WINDOW` runs, bounded by
    :data:`MAX_TOTAL_BIAS`."""
    measured = sum(r.cpu_s for w in windows.values() for r in w)
    predicted = sum(model._predict(job, engine, r) for (job, engine), w in windows.items() for r in w)
    if measured <= 0 or predicted <= 0:
        return 1.0
    return min(MAX_TOTAL_BIAS, max(1 / MAX_TOTAL_BIAS, measured / predicted))


@dataclass(frozen=True)
class PredictionError:
    """One run's prediction against what it measured."""

    job: str
    table: str
    started_at: str
    predicted_cpu_s: float
    cpu_s: float

    @property
    def relative(self) -> float:
        """|predicted − measured| ÷ measured."""
        return abs(self.predicted_cpu_s - self.cpu_s) / self.cpu_s if self.cpu_s else 0.0


def prediction_errors(rows: Iterable[Mapping[str, Any]]) -> list[PredictionError]:
    """Every chosen run that committed and recorded a prediction and a measure, oldest first."""
    out = []
    for row in rows:
        seen = _measured(row)
        if seen is not None:
            out.append(PredictionError(str(row.get("operation")), str(row.get("table_uri")),
                                       str(row.get("started_at")), seen[2], seen[1]))
    return out
