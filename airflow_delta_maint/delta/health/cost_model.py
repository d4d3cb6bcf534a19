"""The cost model learns from the maintenance history: how far each job's CPU-seconds were from the model's.

Every run a plan chose records ``predicted_cpu_s`` (what the plan expected), ``prediction_scale`` (the scale
the plan applied to the default rates) and ``cpu_s`` (what it measured, wherever it ran: its process, its Spark
tasks' Python workers, its executors). The default rates of
:class:`~.estimates.CpuRates` are this machine's; a lake's machines, engines and tables differ. So each (job,
engine) gets a scale: the median, over its last :data:`WINDOW` measured runs, of measured ÷ the default
rates' prediction. The median keeps one slow night (a busy cluster, a cold cache) from moving the next
night's plan. A (job, engine) with no measured run yet takes the median over every measured run (the machine's
own speed against the defaults'), and 1 on an empty history.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES, CpuRates

__all__ = ["MAX_TOTAL_BIAS", "MIN_RUNS", "RAN", "WINDOW", "CostModel", "PredictionError", "prediction_errors"]

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

    @classmethod
    def learn(cls, rows: Iterable[Mapping[str, Any]], base: CpuRates = DEFAULT_RATES) -> CostModel:
        """The model from history rows (oldest first, as :func:`~.run_log.read_runs` gives them)."""
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (measured, the default rates' prediction)
        for row in rows:
            seen = _measured(row)
            if seen is None:
                continue
            metrics, cpu, predicted = seen
            by_defaults = predicted / float(metrics.get("prediction_scale") or 1.0)  # the default rates' prediction
            if by_defaults > 0:
                key = (str(row.get("operation")), str(metrics.get("engine") or "native"))
                runs.setdefault(key, []).append((cpu, by_defaults))
        windows = {key: r[-WINDOW:] for key, r in runs.items()}
        every = [cpu / d for w in windows.values() for cpu, d in w]
        scales = {key: statistics.median(cpu / d for cpu, d in w) for key, w in windows.items() if len(w) >= MIN_RUNS}
        prior = statistics.median(every) if every else 1.0
        return cls(scales, base, prior, _total_bias(windows, scales, prior))

    @property
    def measured(self) -> bool:
        """Whether any run was measured (else every scale is the prior)."""
        return bool(self.scales)

    def with_prior(self, prior: float) -> CostModel:
        """This model with another scale for the (job, engine) pairs without their own."""
        return CostModel(self.scales, self.base, prior, self.total_bias)

    def scale(self, job: str, engine: str = "native") -> float:
        return float(self.scales.get((job, engine), self.prior))

    def rates(self, job: str, engine: str = "native") -> CpuRates:
        """The rates a plan prices ``job`` with: the defaults times its scale."""
        k = self.scale(job, engine)
        b = self.base
        return CpuRates(per_gib_rewritten=b.per_gib_rewritten * k, per_gib_read=b.per_gib_read * k,
                        per_file_deleted=b.per_file_deleted * k, per_file_listed=b.per_file_listed * k,
                        per_log_file=b.per_log_file * k, fixed_s=b.fixed_s * k,
                        per_commit_replayed=b.per_commit_replayed * k, per_table_read=b.per_table_read * k)


#: the bias a plan corrects for at most (and at least its inverse): a history of a few odd runs moves it little
MAX_TOTAL_BIAS = 2.0


def _total_bias(windows: Mapping[tuple[str, str], list[tuple[float, float]]],
                scales: Mapping[tuple[str, str], float], prior: float) -> float:
    """Σ measured ÷ Σ predicted by this model over each (job, engine)'s last :data:`WINDOW` runs (``windows``: each
    run's measure and the default rates' prediction), bounded by :data:`MAX_TOTAL_BIAS`."""
    measured = sum(cpu for w in windows.values() for cpu, _ in w)
    predicted = sum(scales.get(key, prior) * d for key, w in windows.items() for _, d in w)
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
