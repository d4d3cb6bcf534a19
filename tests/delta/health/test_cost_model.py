"""The cost model learns each job's scale from the history rows that recorded a prediction and a measure."""

from __future__ import annotations

import json

import pytest

from airflow_delta_maint.delta.health.cost_model import MAX_TOTAL_BIAS, WINDOW, CostModel, prediction_errors
from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES


def row(job: str, cpu: float | None, predicted: float | None, scale: float = 1.0, status: str = "committed",
        engine: str | None = None, table: str = "t") -> dict:
    metrics = {"cpu_s": cpu, "predicted_cpu_s": predicted, "prediction_scale": scale}
    if engine:
        metrics["engine"] = engine
    return {"operation": job, "table_uri": table, "status": status, "started_at": "2026-11-28T00:00:00Z",
            "metrics": json.dumps(metrics)}


def test_each_job_and_engine_gets_the_median_of_measured_over_the_default_prediction():
    rows = [row("optimize", 4.0, 2.0), row("optimize", 9.0, 3.0), row("optimize", 100.0, 2.0),  # one slow night
            row("vacuum", 1.0, 2.0), row("optimize", 6.0, 2.0, engine="delta-spark"),
            row("optimize", 50.0, 1.0, status="failed"), row("checkpoint", None, 1.0)]
    model = CostModel.learn(rows)
    assert model.scale("optimize") == 3.0  # median of 2, 3, 50
    assert model.scale("optimize", "delta-spark") == 3.0 and model.scale("vacuum") == 0.5
    assert model.scale("checkpoint") == 3.0  # nothing measured: the median of every run (0.5, 2, 3, 3, 50)
    assert CostModel.learn([]).scale("checkpoint") == 1.0  # no history: the defaults
    assert model.rates("vacuum").per_file_deleted == pytest.approx(DEFAULT_RATES.per_file_deleted * 0.5)


def test_a_prediction_already_scaled_is_unscaled_before_it_is_compared():
    # the plan predicted 6 CPU-s with scale 3 (2 by the defaults); 4 were measured: the defaults are 2x off
    assert CostModel.learn([row("optimize", 4.0, 6.0, scale=3.0)]).scale("optimize") == 2.0


def test_only_the_newest_runs_count():
    rows = [row("optimize", 10.0, 1.0)] * 50 + [row("optimize", 1.0, 1.0)] * WINDOW
    assert CostModel.learn(rows).scale("optimize") == 1.0


def test_prediction_errors():
    errors = prediction_errors([row("optimize", 4.0, 5.0), row("vacuum", None, 1.0), row("optimize", 2.0, 1.0)])
    assert [round(e.relative, 2) for e in errors] == [0.25, 0.5]



def test_a_run_that_committed_nothing_or_was_deferred_teaches_nothing():
    """A run of the log's cleanup deletes files and commits nothing: about a millisecond, noise against its
    prediction; a deferred run recorded a prediction and no measure."""
    deferred = {"operation": "optimize", "table_uri": "t", "status": "skipped", "started_at": "2026-11-28",
                "metrics": json.dumps({"predicted_cpu_s": 9.0, "prediction_scale": 1.0, "deferred": True})}
    rows = [row("optimize", 2.0, 1.0), row("cleanup-log", 0.001, 10.0, status="skipped"), deferred]
    model = CostModel.learn(rows)
    assert model.scales == {("optimize", "native"): 2.0} and model.scale("cleanup-log") == 2.0
    assert [e.job for e in prediction_errors(rows)] == ["optimize"]


def test_the_total_bias_is_what_the_runs_measured_together_over_what_the_model_predicts_for_them():
    # each run's median scale is 1, but one run in four costs five times its prediction: together, 8 for 4 of 1
    rows = [row("optimize", 1.0, 1.0), row("optimize", 1.0, 1.0), row("optimize", 1.0, 1.0), row("optimize", 5.0, 1.0)]
    model = CostModel.learn(rows)
    assert model.scale("optimize") == 1.0 and model.total_bias == pytest.approx(8 / 4)
    assert model.with_prior(0.5).total_bias == model.total_bias
    # weighed by size: a big run's bias weighs more than a small one's
    sized = CostModel.learn([row("vacuum", 2.0, 1.0), row("vacuum", 100.0, 100.0), row("vacuum", 100.0, 100.0)])
    assert sized.scale("vacuum") == 1.0 and sized.total_bias == pytest.approx(202 / 201)
    assert CostModel.learn([]).total_bias == 1.0
    skewed = [row("optimize", 1.0, 1.0)] * 3 + [row("optimize", 100.0, 1.0)]  # 103 for 4: bounded
    assert CostModel.learn(skewed).total_bias == MAX_TOTAL_BIAS


def _estimated_row(job: str, cpu: float, cost: dict, scale: float = 1.0) -> dict:
    """A measured run whose metrics kept its estimate's units (as a chosen run's do)."""
    from airflow_delta_maint.delta.health.estimates import Cost

    predicted = sum(Cost(**cost).terms(DEFAULT_RATES).values()) * scale
    metrics = {"cpu_s": cpu, "predicted_cpu_s": predicted, "prediction_scale": scale,
               "estimate": {"operation": job, "gain": {}, "cost": {**cost, "cpu_s": predicted}}}
    return {"operation": job, "table_uri": "t", "status": "committed", "started_at": "2026-11-28T00:00:00Z",
            "metrics": json.dumps(metrics)}


def test_each_kind_of_work_gets_its_own_scale_once_enough_runs_kept_their_estimate():
    """OPTIMIZEs of 2 to 60 small files: the defaults price their start far above their files, this machine the
    other way round. One scale prices them all alike; a scale per kind of work follows the files."""
    from airflow_delta_maint.delta.health.cost_model import MIN_TERM_RUNS
    from airflow_delta_maint.delta.health.estimates import Cost, CpuRates

    d = DEFAULT_RATES
    truth = {"fixed_s": 0.05, "per_file_read": 0.2}  # this machine's scales of the two defaults
    runs = []
    for files in [2, 3, 5, 8, 12, 20, 30, 45, 60] * 10:
        cpu = d.fixed_s * truth["fixed_s"] + d.per_file_read * files * truth["per_file_read"]
        runs.append(_estimated_row("optimize", cpu, {"files_read": files, "bytes_read": 4096 * files,
                                                      "bytes_written": 4096 * files}))
    model = CostModel.learn(runs)
    own = model.term_scales[("optimize", "native")]
    assert own["fixed_s"] < model.scale("optimize") < own["per_file_read"]
    rates = model.rates("optimize")
    assert rates.per_file_read == pytest.approx(d.per_file_read * own["per_file_read"])
    assert rates.per_file_listed == pytest.approx(d.per_file_listed * model.scale("optimize"))  # no run listed files

    def errors(rates: CpuRates) -> float:
        """The largest relative error of the runs' predictions at ``rates``, as a plan prices them."""
        out = []
        for r in runs:
            metrics = json.loads(r["metrics"])
            units = Cost(**{k: v for k, v in metrics["estimate"]["cost"].items() if k != "cpu_s"})
            out.append(abs(units.priced(rates).cpu_s - metrics["cpu_s"]) / metrics["cpu_s"])
        return max(out)

    one_scale = errors(CostModel(model.scales, prior=model.prior).rates("optimize"))
    assert errors(model.rates("optimize")) < 0.2 < 0.5 < one_scale
    assert model.total_bias == pytest.approx(1.0, abs=0.1)
    # too few runs: the one scale only; runs without their estimate count for the one scale alone
    assert CostModel.learn(runs[:MIN_TERM_RUNS - 1]).term_scales == {}
    assert CostModel.learn([row("optimize", 1.0, 1.0)] * 40).term_scales == {}


def test_a_kind_of_works_scale_stays_within_its_spread_of_the_jobs_scale():
    from airflow_delta_maint.delta.health.cost_model import MAX_TERM_SPREAD

    # runs that cost by their files alone: the fit would price a run's start at 0, it keeps a quarter of the one scale
    runs = [_estimated_row("optimize", DEFAULT_RATES.per_file_read * files, {"files_read": files}) for files in range(1, 201)]
    model = CostModel.learn(runs)
    own, k = model.term_scales[("optimize", "native")], model.scale("optimize")
    assert all(k / MAX_TERM_SPREAD - 1e-12 <= s <= k * MAX_TERM_SPREAD + 1e-12 for s in own.values())
    assert own["fixed_s"] == pytest.approx(k / MAX_TERM_SPREAD)
