"""``delta-maint plan-lake``: the night's plan under a budget on real tables, its dry run (nothing changes), its
run in this process (the chosen jobs commit, the rows stay), the deferred jobs in the history, and a job that
waited long enough going first."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.health.run_log import read_runs
from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES, Cost
from airflow_delta_maint.delta.health.lake_budget import GAIN_WEIGHTS, NOTHING_LEFT, STARVATION_NIGHTS

from tests.snapshot_serves import count_snapshot_serves


def lake(root: Path, appends: dict[str, int]) -> list[str]:
    """Tables of ``n`` appends each (two partitions, 1,000 rows an append)."""
    for name, n in appends.items():
        for k in range(n):
            rows = pa.table({"id": pa.array(range(k * 1000, (k + 1) * 1000), pa.int64()), "p": ["a", "b"] * 500})
            write_deltalake(str(root / name), rows, mode="append", partition_by=["p"])
    return [str(root / name) for name in appends]


def rows(table: str) -> list[tuple]:
    data = DeltaTable(table).to_pyarrow_table()
    return sorted(zip(*(data.column(i).to_pylist() for i in range(data.num_columns))))


def plan_lake(*args: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code, result = cli.run(["plan-lake", "--json", *args])
    assert json.loads(out.getvalue().strip().splitlines()[-1]) == json.loads(json.dumps(result, default=str))
    return code, result


def log_listing(tables: list[str]) -> list[list[str]]:
    return [sorted(p.name for p in (Path(t) / "_delta_log").iterdir()) for t in tables]


def optimize_bytes(tables: list[str]) -> dict[str, int]:
    """The bytes each table's OPTIMIZE would rewrite, by an unlimited plan (a dry run)."""
    _, unlimited = plan_lake(*tables, "--dry-run")
    assert not unlimited["plan"]["deferred"]
    return {p["table"]: p["bytes_rewritten"] for p in unlimited["plan"]["chosen"] if p["job"] == "optimize"}


def test_the_dry_run_says_what_the_night_would_cost_and_changes_nothing(tmp_path):
    tables = lake(tmp_path, {"busy": 12, "some": 6, "few": 3})
    before, listed = [rows(t) for t in tables], log_listing(tables)
    rewrites = optimize_bytes(tables)
    budget = rewrites[tables[0]] + rewrites[tables[1]]
    code, result = plan_lake(*tables, "--budget", f"bytes_rewritten={budget}", "--dry-run")
    assert (code, result["status"]) == (0, "dry_run")
    plan = result["plan"]
    assert plan["chosen"][0]["table"] == tables[0] and plan["chosen"][0]["job"] == "optimize"  # most gain per CPU-s
    assert {(p["table"], p["job"]) for p in plan["chosen"]} >= {(tables[0], "optimize"), (tables[1], "optimize")}
    assert [(p["table"], p["job"]) for p in plan["deferred"]] == [(tables[2], "optimize")]
    assert plan["deferred"][0]["reason"].startswith("deferred: over the budget's bytes_rewritten: ")
    assert plan["used"]["bytes_rewritten"] == budget
    assert all(p["predicted_cpu_s"] > 0 and p["estimate"] for p in plan["deferred"])
    assert [rows(t) for t in tables] == before and log_listing(tables) == listed


def test_the_checks_and_the_estimates_spend_the_budget_first(tmp_path):
    tables = lake(tmp_path, {"busy": 12})
    _, result = plan_lake(*tables, "--budget", "cpu_s=0.000001", "--dry-run")
    assert not result["plan"]["chosen"] and result["plan"]["budget"]["cpu_s"] == 0
    assert all("cpu_s: 0.00 of 0 predicted CPU-s chosen" in p["reason"] for p in result["plan"]["deferred"])


def test_a_budget_the_planning_spent_leaves_the_run_a_valid_spec(tmp_path):
    from airflow_delta_maint.app.fleet import FleetSpec, run_fleet
    from airflow_delta_maint.app.lake_plan import budgeted, decide_by_estimates, look_at_lake
    from airflow_delta_maint.delta.health.lake_budget import Budget

    tables = lake(tmp_path, {"busy": 12})
    before = [rows(t) for t in tables]
    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize"}]} for t in tables]})
    decision, _ = budgeted(spec, decide_by_estimates(spec, look_at_lake(spec)), Budget(cpu_s=1.0), spent_cpu_s=5.0)
    assert decision.to_run.budget == {"cpu_s": 0.001}
    again = FleetSpec.from_json(json.loads(json.dumps(decision.to_run.to_json())))  # as spark-submit reads it
    assert again.budget == {"cpu_s": 0.001}
    # the application under it: its first run may go (as the plan's first run does), none after it
    two = FleetSpec(spec.tables * 2, None, again.budget)
    _, second = (e["jobs"][0] for e in run_fleet(two, spark_allowed=False))
    assert (second["status"], second.get("left")) == ("skipped", True)
    assert [rows(t) for t in tables] == before


def test_the_night_runs_what_it_chose_and_records_what_waited(tmp_path):
    tables = lake(tmp_path / "lake", {"busy": 12, "some": 6, "few": 3})
    history = str(tmp_path / "history")
    before = [rows(t) for t in tables]
    rewrites = optimize_bytes(tables)
    budget = f"bytes_rewritten={rewrites[tables[0]] + rewrites[tables[1]]}"
    code, result = plan_lake(*tables, "--budget", budget, "--history-uri", history, "--local")
    assert code == 0, result
    by_table = {e["table"]: {j["operation"]: j for j in e["jobs"]} for e in result["tables"]}
    for table in tables[:2]:
        assert by_table[table]["optimize"]["status"] == "committed"
    waiting = [p for p in result["plan"]["deferred"]]
    assert [(p["table"], p["job"]) for p in waiting] == [(tables[2], "optimize")]
    assert by_table[tables[2]]["optimize"]["deferred"] is True
    assert [rows(t) for t in tables] == before
    recorded = read_runs(history).to_pylist()
    deferred = [r for r in recorded if r["status"] == "skipped" and json.loads(r["metrics"]).get("deferred")]
    assert [(r["table_uri"], r["operation"]) for r in deferred] == [(tables[2], "optimize")]


@pytest.mark.parametrize("nights", [STARVATION_NIGHTS])
def test_a_table_that_waited_long_enough_goes_first(tmp_path, nights):
    tables = lake(tmp_path / "lake", {"busy": 12, "quiet": 3})
    history = str(tmp_path / "history")
    one_table = ["--budget", "max_tables=1", "--history-uri", history]
    # night after night the budget buys one table: the busy one, refilled each day; the quiet one waits
    _, result = plan_lake(*tables, *one_table, "--local")
    assert {p["table"] for p in result["plan"]["chosen"]} == {tables[0]}
    lake(tmp_path / "lake", {"busy": 12})
    _, result = plan_lake(*tables, *one_table, "--dry-run")  # a dry run records nothing
    quiet = [p for p in result["plan"]["deferred"] if p["table"] == tables[1] and p["job"] == "optimize"]
    assert quiet and quiet[0]["nights_waiting"] == 1
    for _ in range(nights - 1):  # real nights: each records the wait
        plan_lake(*tables, *one_table, "--local")
        lake(tmp_path / "lake", {"busy": 12})
    _, result = plan_lake(*tables, *one_table, "--dry-run")
    first = result["plan"]["chosen"][0]
    assert (first["table"], first["nights_waiting"], first["table_nights_waiting"]) == (tables[1], nights, nights)
    assert first["reason"].startswith(f"its table needed work {nights} nights without a run")
    assert {p["table"] for p in result["plan"]["chosen"]} == {tables[1]}


def test_a_lakes_own_gain_weights_in_the_plan(tmp_path, capsys):
    """The weights the plan chose by are in its record, and its text names those that are the lake's own; a bad
    weight is one message, and nothing is read or written."""
    tables = lake(tmp_path, {"busy": 24})  # the fleet's jobs: OPTIMIZE, and a log compaction of 2 windows
    _, default = plan_lake(*tables, "--dry-run")
    assert default["plan"]["gain_weights"] == GAIN_WEIGHTS
    _, own = plan_lake(*tables, "--dry-run", "--gain-weight", "log_files_not_replayed=0.1")
    assert own["plan"]["gain_weights"] == {**GAIN_WEIGHTS, "log_files_not_replayed": 0.1}
    compaction = {p["job"]: p["gain_value"] for p in default["plan"]["chosen"]}["compact-log"]
    assert compaction > 0
    assert {p["job"]: p["gain_value"] for p in own["plan"]["chosen"]}["compact-log"] == pytest.approx(compaction / 5)
    capsys.readouterr()
    code, _ = cli.run(["plan-lake", *tables, "--dry-run", "--gain-weight", "log_files_not_replayed=0.1"])
    assert code == 0 and 'gain weights of this lake: {"log_files_not_replayed": 0.1}' in capsys.readouterr().out
    listed = log_listing(tables)
    code, result = cli.run(["plan-lake", *tables, "--gain-weight", "files=2", "--local"])
    assert code == 2 and result["error"].startswith("gain_weights: unknown gain files (gains: ")
    assert log_listing(tables) == listed


def test_bad_input_gets_one_message(tmp_path, capsys):
    code, result = cli.run(["plan-lake", str(tmp_path / "t"), "--budget", "cpu=1", "--dry-run"])
    assert code == 2 and result["error"].startswith("budget: unknown limit cpu")
    assert capsys.readouterr().err.strip().splitlines() == [f"delta-maint plan-lake: error: {result['error']}"]
    code, result = cli.run(["plan-lake", "--dry-run"])
    assert (code, result["error"]) == (2, "plan-lake needs tables or --spec")


def test_the_run_stops_starting_work_once_the_budget_is_spent_and_says_what_was_left(tmp_path):
    from airflow_delta_maint.app.fleet import FleetSpec, run_fleet

    tables = lake(tmp_path, {"one": 6, "two": 6, "three": 6})
    before = [rows(t) for t in tables]

    def night(budget: dict) -> list[dict]:
        spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize"}]} for t in tables],
                                    "budget": budget})
        assert FleetSpec.from_json(spec.to_json()) == spec
        return [e["jobs"][0] for e in run_fleet(spec, spark_allowed=False)]

    for left in night({"cpu_s": 1e-6}):  # spent before the first job starts
        assert (left["status"], left["left"], left["deferred"]) == ("skipped", True, True)
        assert left["reason"].startswith("not run: the budget ran out (cpu_s: ")
    assert [rows(t) for t in tables] == before
    ran = night({"cpu_s": 1000, "deadline_s": 1000})
    assert [m["status"] for m in ran] == ["committed"] * 3 and all(m["cpu_s"] > 0 for m in ran)
    assert [rows(t) for t in tables] == before
    with pytest.raises(Exception, match="budget: cpu_s must be above 0"):
        FleetSpec.from_json({"tables": [], "budget": {"cpu_s": -1}})


def test_a_run_predicted_beyond_what_is_left_is_not_started_and_smaller_ones_still_run(tmp_path):
    from airflow_delta_maint.app.fleet import FleetSpec, run_fleet

    tables = lake(tmp_path, {"first": 6, "big": 6, "small": 6})
    before = [rows(t) for t in tables]
    predicted = {tables[0]: 1000.0, tables[1]: 1000.0, tables[2]: 0.001}
    spec = FleetSpec.from_json({"budget": {"cpu_s": 100}, "tables": [
        {"table": t, "jobs": [{"job": "optimize", "expect": {"predicted_cpu_s": predicted[t]}},
                              {"job": "compute-stats", "expect": {"predicted_cpu_s": 0.001}}]} for t in tables]})
    first, big, small = (e["jobs"] for e in run_fleet(spec, spark_allowed=False))
    # the night's first run goes even when it alone is over the budget (as the plan chooses it)
    assert first[0]["status"] == "committed" and not first[1].get("left")
    assert [(m["status"], m.get("left"), m.get("deferred")) for m in big] == [("skipped", True, True)] * 2
    assert big[0]["reason"].startswith("not run: it would pass the budget (cpu_s: predicted 1000.000 of ")
    assert big[1]["reason"] == "not run: optimize was left before it"
    assert big[0]["predicted_cpu_s"] == 1000.0
    assert small[0]["status"] == "committed" and not small[1].get("left")  # after the left one: it fits
    assert [rows(t) for t in tables] == before


def test_each_run_records_its_prediction_beside_its_measure_and_the_model_learns(tmp_path):
    from airflow_delta_maint.app.lake_plan import lake_history

    tables = lake(tmp_path / "lake", {"busy": 12, "some": 6})
    history = str(tmp_path / "history")
    code, result = plan_lake(*tables, "--history-uri", history, "--local")
    assert code == 0, result
    ran = [j for e in result["tables"] for j in e["jobs"] if j["status"] == "committed"]
    assert ran and all(j["predicted_cpu_s"] > 0 and j["cpu_s"] > 0 for j in ran)
    (first_scale,) = {j["prediction_scale"] for j in ran}  # no run measured yet: the machine's speed from the look
    assert first_scale != 1.0
    recorded = [json.loads(r["metrics"]) for r in read_runs(history).to_pylist() if r["status"] == "committed"]
    assert sorted(m["predicted_cpu_s"] for m in recorded) == sorted(j["predicted_cpu_s"] for j in ran)
    model = lake_history(history).model
    def by_defaults(m: dict) -> float:  # the default rates' prediction, from the units the estimate kept
        units = Cost(**{k: v for k, v in m["estimate"]["cost"].items() if k != "cpu_s"})
        return sum(units.terms(DEFAULT_RATES).values())

    optimize = [m for m in recorded if m["operation"] == "optimize"]
    assert all(m["predicted_cpu_s"] == pytest.approx(by_defaults(m) * first_scale, abs=1e-4) for m in optimize)
    expected = sorted(m["cpu_s"] / by_defaults(m) for m in optimize)
    assert model.scale("optimize") == pytest.approx(expected[len(expected) // 2] if len(expected) % 2 else
                                                    (expected[0] + expected[1]) / 2)
    lake(tmp_path / "lake", {"busy": 12})  # the next night has work again
    _, again = plan_lake(*tables, "--history-uri", history, "--dry-run")
    (planned,) = [p for p in again["plan"]["chosen"] if p["job"] == "optimize"]
    assert planned["prediction_scale"] == round(model.scale("optimize"), 6) != 1.0


def _fleet_and_history(tmp_path):
    from airflow_delta_maint.app.fleet import FleetSpec

    tables = lake(tmp_path / "lake", {"one": 6, "two": 6})
    history = tmp_path / "history"
    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize"}, {"job": "checkpoint"}]}
                                           for t in tables], "history_uri": str(history)})
    return tables, history, spec


def test_a_fleet_records_its_runs_in_one_append(tmp_path):
    from airflow_delta_maint.app.fleet import run_fleet

    tables, history, spec = _fleet_and_history(tmp_path)
    entries = run_fleet(spec, spark_allowed=False)
    recorded = read_runs(str(history)).to_pylist()
    assert sorted((r["table_uri"], r["operation"], r["status"]) for r in recorded) == sorted(
        (t, job, "committed") for t in tables for job in ("optimize", "checkpoint"))
    commits = sorted(p.name for p in (history / "_delta_log").glob("*.json"))
    assert len(commits) == 2  # the history's creation, then one append for the fleet's runs
    assert [m["history"]["version"] for e in entries for m in e["jobs"]] == [1, 1, 1, 1]


def test_a_long_fleet_appends_once_the_batch_has_waited_its_time(tmp_path, monkeypatch):
    from airflow_delta_maint.app import history_batch
    from airflow_delta_maint.app.fleet import run_fleet

    monkeypatch.setattr(history_batch, "FLUSH_S", 0.0)  # every table's runs have waited long enough
    tables, history, spec = _fleet_and_history(tmp_path)
    entries = run_fleet(spec, spark_allowed=False)
    assert [m["history"]["version"] for e in entries for m in e["jobs"]] == [1, 1, 2, 2]
    assert len(read_runs(str(history))) == 4


def test_a_fleet_that_fails_part_way_still_records_what_ran(tmp_path, monkeypatch):
    from airflow_delta_maint.app import fleet

    tables, history, spec = _fleet_and_history(tmp_path)
    real = fleet.run_table
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("stopped")
        return real(*args, **kwargs)

    monkeypatch.setattr(fleet, "run_table", second_fails)
    with pytest.raises(KeyboardInterrupt):
        fleet.run_fleet(spec, spark_allowed=False)
    recorded = read_runs(str(history)).to_pylist()
    assert sorted((r["table_uri"], r["operation"]) for r in recorded) == [(tables[0], "checkpoint"),
                                                                          (tables[0], "optimize")]


def test_the_report_shows_each_nights_budget_and_what_waits(tmp_path):
    from airflow_delta_maint.app.report.budget import budget_nights, waiting_now

    tables = lake(tmp_path / "lake", {"busy": 12, "some": 6, "few": 3})
    history = str(tmp_path / "history")
    rewrites = optimize_bytes(tables)
    code, _ = plan_lake(*tables, "--budget", f"bytes_rewritten={rewrites[tables[0]]}", "--history-uri", history,
                        "--local")
    assert code == 0
    runs = read_runs(history).to_pylist()
    (night,) = budget_nights(runs)
    assert night["committed"] >= 1 and night["deferred"] == 2 and night["predicted_cpu_s"] > 0
    assert night["measured_cpu_s"] > 0 and night["median_error"] is not None
    assert sorted((w["table"], w["job"], w["nights_waiting"]) for w in waiting_now(runs)) == [
        (tables[2], "optimize", 1), (tables[1], "optimize", 1)]  # few, some: sorted by path
    out = tmp_path / "report.html"
    assert cli.run(["report", "--history", history, "--out", str(out)])[0] == 0
    page = out.read_text()
    assert 'id="budget-nights"' in page and 'id="budget-waiting"' in page
    assert "deferred: over the budget&#x27;s bytes_rewritten" in page


def test_one_look_at_each_table_answers_for_the_checks(tmp_path):
    from airflow_delta_maint.app.fleet import FleetSpec, decide
    from airflow_delta_maint.app.lake_plan import decide_by_estimates, look_at_lake

    tables = lake(tmp_path, {"busy": 8, "done": 1})
    missing = str(tmp_path / "missing")
    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize"}, {"job": "cleanup-log"}]}
                                           for t in [*tables, missing]]})
    look = look_at_lake(spec)
    assert set(look.errors) == {missing}
    by_look, by_checks = decide_by_estimates(spec, look), decide(spec)
    assert [k[0] is None for k in by_look.known[:2]] == [k[0] is None for k in by_checks.known[:2]]
    busy, done, gone = by_look.known
    assert busy[0] is None  # optimize has work on the busy table
    assert done[0]["reason"] == "nothing to gain, by the estimate from the log"
    # the look planned each table's log cleanup: no commit is older than the retention, so it has nothing to do
    # (the fleet's checks have none for it: it runs, and finds that out)
    assert busy[1]["reason"] == done[1]["reason"] == "nothing to gain, by the estimate from the log"
    assert by_checks.known[0][1] is None and by_checks.known[1][1] is None
    assert [j.job for t in by_look.to_run.tables for j in t.jobs] == ["optimize"]
    assert gone[0]["status"] == "failed" and gone[1]["reason"] == "not run: optimize failed on this table"
    assert by_checks.known[2][0]["status"] == "failed"


def test_the_plan_holds_no_storage_option(tmp_path, capsys):
    tables = lake(tmp_path, {"busy": 6})
    code, result = plan_lake(*tables, "--storage-option", "AWS_SECRET_ACCESS_KEY=plan-secret-77aa", "--dry-run")
    assert code == 0 and result["plan"]["chosen"]
    out = capsys.readouterr()
    assert "plan-secret-77aa" not in json.dumps(result) + out.out + out.err


def test_a_night_on_this_process_starts_each_chosen_job_from_the_plans_read_of_its_log(tmp_path, monkeypatch):
    from airflow_delta_maint.delta.log import snapshot_cache

    served = count_snapshot_serves(monkeypatch)
    tables = lake(tmp_path / "lake", {"one": 6, "two": 6})
    before = [rows(t) for t in tables]
    code, result = plan_lake(*tables, "--budget", "cpu_s=600", "--local")
    assert code == 0 and {p["table"] for p in result["plan"]["chosen"] if p["job"] == "optimize"} == set(tables)
    assert len(set(served)) == len(tables)  # each table's first job read nothing of its log again
    assert [rows(t) for t in tables] == before
    assert [len(DeltaTable(t).file_uris()) for t in tables] == [2, 2]  # one file a partition
    code, _ = plan_lake(*tables, "--budget", "cpu_s=600", "--dry-run")  # a dry run keeps nothing
    assert code == 0 and snapshot_cache.kept_snapshots() is None


def test_a_checkpoint_saves_the_next_nights_reads_of_the_commits_it_covers():
    from airflow_delta_maint.app.lake_plan import READS_PER_NIGHT, REPLAY_NIGHTS, reads_saved_cpu_s
    from airflow_delta_maint.delta.health.cost_model import CostModel
    from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES, Cost, Estimate, Gain

    model = CostModel({}, prior=0.5)
    checkpoint = Estimate("checkpoint", Gain(log_files_not_replayed=10), Cost())
    assert reads_saved_cpu_s(checkpoint, model) == 10 * DEFAULT_RATES.per_commit_replayed * 0.5 * READS_PER_NIGHT * REPLAY_NIGHTS
    assert reads_saved_cpu_s(Estimate("optimize", Gain(files_removed=9), Cost()), model) == 0.0
    assert reads_saved_cpu_s(None, model) == 0.0



def _estimate_inputs(commits: int = 3, files_with_deletion_vectors: int = 0) -> Any:
    from airflow_delta_maint.delta.health.estimates import EstimateInputs
    from airflow_delta_maint.delta.health.score import HealthInputs

    mib = 1 << 20
    health = HealthInputs(num_files=20, size_bytes=20 * mib, target_file_bytes=128 * mib, num_small_files=20,
                          small_files_bytes=20 * mib, excess_small_files=19, num_records=20_000, deleted_rows=500,
                          tombstone_bytes=0, commits_since_checkpoint=commits, checkpoint_interval=10,
                          uncovered_commits=commits, compaction_interval=100)
    return EstimateInputs(health, num_files_with_deletion_vectors=files_with_deletion_vectors)


def test_a_checkpoint_pays_for_itself_only_when_its_replays_cost_more_than_it_does():
    """A reader replays a small commit far cheaper than a job reads one: a checkpoint of a few commits waits
    for its ratio, one of many commits goes first."""
    from airflow_delta_maint.app.lake_plan import reads_saved_cpu_s
    from airflow_delta_maint.delta.health.cost_model import CostModel
    from airflow_delta_maint.delta.health.estimates import estimate
    from airflow_delta_maint.delta.health.lake_budget import Candidate

    model = CostModel({}, prior=1.0)

    def checkpoint(commits: int) -> Candidate:
        e = estimate("checkpoint", _estimate_inputs(commits))
        return Candidate("t", "checkpoint", e, saves_cpu_s=reads_saved_cpu_s(e, model))

    assert not checkpoint(5).pays_for_itself
    assert checkpoint(1000).pays_for_itself


def test_a_first_night_prices_its_runs_at_the_machine_speed_its_look_measured():
    """Before the history has measured a run, the look's own CPU-seconds against what the default rates price its
    reads at give the machine's speed; a history with runs keeps its own."""
    from airflow_delta_maint.app.lake_plan import LakeLook
    from airflow_delta_maint.delta.health.cost_model import CostModel
    from airflow_delta_maint.delta.health.estimates import DEFAULT_RATES

    inputs = {"a": _estimate_inputs(commits=3), "b": _estimate_inputs(commits=7), "gone": None}
    priced = 2 * DEFAULT_RATES.per_table_read + 10 * DEFAULT_RATES.per_commit_replayed
    look = LakeLook(inputs=inputs, cpu_s=0.25 * priced)
    assert look.machine_scale(CostModel({})) == pytest.approx(0.25)
    assert LakeLook(inputs=inputs).machine_scale(CostModel({})) is None  # nothing measured
    assert LakeLook(inputs=inputs, cpu_s=1e6).machine_scale(CostModel({})) == 10.0  # bounded
    learnt = CostModel({("optimize", "native"): 0.3}).with_prior(0.25)
    assert (learnt.scale("optimize"), learnt.scale("vacuum"), learnt.measured) == (0.3, 0.25, True)


def test_a_first_checkpoint_gains_only_the_commits_beyond_its_own_read():
    """A table's first checkpoint is a parquet file each read opens in place of the commits, which costs what
    replaying some ten commits does: it gains only the commits beyond; a later checkpoint replaces one and gains
    every commit since."""
    import dataclasses

    from airflow_delta_maint.delta.health.estimates import FIRST_CHECKPOINT_COMMITS, estimate

    for commits in (5, 40):
        again = estimate("checkpoint", _estimate_inputs(commits))
        first = estimate("checkpoint", dataclasses.replace(_estimate_inputs(commits), checkpointed=False))
        assert (again.gain.log_files_not_replayed, again.gain.checkpoint_files_added) == (commits, 0)
        saved = max(0, commits - FIRST_CHECKPOINT_COMMITS)
        assert (first.gain.log_files_not_replayed, first.gain.checkpoint_files_added) == (saved, int(saved > 0))
    few = estimate("checkpoint", dataclasses.replace(_estimate_inputs(FIRST_CHECKPOINT_COMMITS), checkpointed=False))
    assert not few.gain.any  # skipped by its estimate: the reads would get dearer

def test_an_optimize_estimate_counts_the_deletion_vectors_it_drops():
    from airflow_delta_maint.delta.health.estimates import estimate

    gain = estimate("optimize", _estimate_inputs(files_with_deletion_vectors=3)).gain
    assert gain.deletion_vectors_dropped == 3 and gain.dv_bytes_purged > 0
    assert estimate("optimize", _estimate_inputs()).gain.deletion_vectors_dropped == 0


def test_a_plan_reads_an_object_store_history_with_its_options_and_keeps_the_secret(tmp_path, monkeypatch, caplog,
                                                                                     capsys):
    """The second night's plan reads the first night's runs from a history on S3 (its recent files, the plan's
    columns) with the options given: it learns from them, starts no process (no argument can carry the secret),
    and the secret is in no output, log line or history row."""
    import logging
    import subprocess

    from tests.storage.servers import start_moto

    server = start_moto(tmp_path)
    try:
        key_id, secret = "AKIDPLANHISTORY", "plan-history-secret-4e81c0"
        opts = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
        import boto3

        boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
                     region_name="us-east-1").create_bucket(Bucket="lake")
        tables, history = ["s3://lake/one", "s3://lake/two"], "s3://lake/history"

        def night(start: int) -> tuple[int, dict]:
            for uri in tables:
                for i in range(start, start + 4):
                    write_deltalake(uri, pa.table({"id": [i, i + 100], "part": ["p", "q"]}), mode="append",
                                    partition_by=["part"], storage_options=opts)
            options = [x for k, v in opts.items() for x in ("--storage-option", f"{k}={v}")]
            return plan_lake(*tables, "--budget", "cpu_s=600", "--local", "--history-uri", history, *options)

        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"a process was started: {a}"))
        caplog.set_level(logging.DEBUG)
        first_code, first = night(0)
        code, second = night(4)
        assert first_code == code == 0
        assert len({p["prediction_scale"] for p in first["plan"]["chosen"]}) == 1  # no history yet: the look's
        assert {p["prediction_scale"] for p in second["plan"]["chosen"] if p["job"] == "optimize"} != {1.0}  # learnt
        rows = read_runs(history, opts).to_pylist()
        assert sum(r["operation"] == "optimize" and r["status"] == "committed" for r in rows) == 4
        from airflow_delta_maint.app.lake_plan import table_inputs

        from airflow_delta_maint.delta.storage.store_calls import StoreCalls, counting

        with counting(StoreCalls()) as calls:
            assert table_inputs(tables[0], opts).expired_log_files == 0  # the look planned the log's cleanup on S3
        # its snapshot, log state, size check and cleanup plan share the listings: from the checkpoint, and the
        # whole log for the cleanup
        assert calls.counts()["list"]["calls"] <= 2
        with counting(StoreCalls()) as calls:
            table_inputs(tables[0], opts, with_expired_log=False)
        assert calls.counts()["list"]["calls"] == 1
        out = capsys.readouterr()
        seen = json.dumps([first, second], default=str) + json.dumps(rows, default=str) + caplog.text + out.out \
            + out.err
        assert secret not in seen and key_id not in seen
    finally:
        server.stop()


def _age_commits(table: str, versions: range, days: int) -> None:
    """Commit files of ``versions`` made ``days`` old (their modification time is their commit time)."""
    import os
    import time

    when = time.time() - days * 86400
    for v in versions:
        os.utime(Path(table) / "_delta_log" / f"{v:020d}.json", (when, when))


def test_the_look_counts_the_expired_log_files_its_cleanup_then_deletes(tmp_path):
    from airflow_delta_maint.app.execution import run_in_process
    from airflow_delta_maint.app.fleet import FleetSpec
    from airflow_delta_maint.app.lake_plan import decide_by_estimates, look_at_lake, table_inputs
    from airflow_delta_maint.app.job_definitions import definition

    expired, fresh = lake(tmp_path, {"expired": 6, "fresh": 6})
    for t in (expired, fresh):
        DeltaTable(t).create_checkpoint()  # at version 5: the boundary the cleanup may delete up to
    _age_commits(expired, range(0, 6), days=40)  # older than the 30 days of the default log retention
    before = rows(expired)
    inputs = table_inputs(expired, {})  # the commits before the checkpoint go
    assert inputs.expired_log_files == 5 and inputs.expired_log_bytes == sum(
        (Path(expired) / "_delta_log" / f"{v:020d}.json").stat().st_size for v in range(5))
    estimate = definition("cleanup-log").estimate(inputs)
    assert estimate is not None and estimate.gain.bytes_freed == inputs.expired_log_bytes
    assert estimate.cost.files_deleted == 5
    # a retention or versions of its own: the look's plan (the table's retention) does not hold
    assert definition("cleanup-log").estimate(inputs, params={"retention_hours": 1.0, "keep_versions": None}) is None
    assert definition("cleanup-log").estimate(inputs, params={"retention_hours": None, "keep_versions": "1"}) is None

    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "cleanup-log"}]} for t in (expired, fresh)]})
    decision = decide_by_estimates(spec, look_at_lake(spec))
    assert decision.known[0] == [None] and decision.known[1][0]["reason"] == "nothing to gain, by the estimate from the log"
    without = FleetSpec.from_json({"tables": [{"table": expired, "jobs": [{"job": "optimize"}]}]})
    assert look_at_lake(without).inputs[expired].expired_log_files is None  # no cleanup asked: no whole-log listing
    own = FleetSpec.from_json({"tables": [{"table": fresh, "jobs": [{"job": "cleanup-log", "args": ["--retention-hours", "1"]}]}]})
    assert decide_by_estimates(own, look_at_lake(own)).known == [[None]]  # its own retention: it runs its own plan

    code, metrics = run_in_process("cleanup-log", expired, [])
    assert code == 0 and metrics["numLogFilesDeleted"] == inputs.expired_log_files
    assert rows(expired) == before and table_inputs(expired, {}).expired_log_files == 0


def test_a_job_is_planned_on_the_table_its_earlier_jobs_leave(tmp_path):
    """A log compaction listed after a checkpoint that covers the same commits gains nothing: the plan says so
    instead of reserving its CPU, the night runs the checkpoint alone, and nothing waits. (The table has a checkpoint
    already: its next one gains every commit since, more per CPU-second than the compaction, and goes first.)"""
    (table,) = lake(tmp_path / "lake", {"long": 1})
    DeltaTable(table).create_checkpoint()
    lake(tmp_path / "lake", {"long": 24})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tables": [{"table": table, "jobs": [{"job": "checkpoint"}, {"job": "compact-log"}]}]}))
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps({"tables": [{"table": table, "jobs": [{"job": "compact-log"}]}]}))
    _, by_itself = plan_lake("--spec", str(alone), "--dry-run")  # it has work: the checkpoint covers it
    assert [p["job"] for p in by_itself["plan"]["chosen"]] == ["compact-log"]
    _, dry = plan_lake("--spec", str(spec), "--dry-run", "--budget", "cpu_s=100")
    plan = dry["plan"]
    assert [p["job"] for p in plan["chosen"]] == ["checkpoint"] and not plan["deferred"]
    (idle,) = plan["nothing_to_gain"]
    assert (idle["job"], idle["reason"]) == ("compact-log", NOTHING_LEFT) and idle["gain_value"] > 0  # on its own
    before = rows(table)
    code, ran = plan_lake("--spec", str(spec), "--budget", "cpu_s=100", "--history-uri", str(tmp_path / "h"), "--local")
    assert code == 0, ran
    jobs = {j["operation"]: j for j in ran["tables"][0]["jobs"]}
    assert jobs["checkpoint"]["status"] == "committed"
    assert (jobs["compact-log"]["status"], jobs["compact-log"]["reason"]) == ("skipped", NOTHING_LEFT)
    assert not jobs["compact-log"].get("deferred")
    assert rows(table) == before


def test_the_plan_keeps_of_each_history_row_whether_it_waited_and_the_metrics_of_the_runs_it_learns_from():
    from airflow_delta_maint.app.lake_plan import plan_rows

    metrics = [json.dumps({"deferred": True, "estimate": {"gain": {}}}),
               json.dumps({"reason": "not run", "left": True, "deferred": True}, sort_keys=True),  # as run_record
               json.dumps({"reason": "nothing to gain"}), json.dumps({"cpu_s": 0.1, "predicted_cpu_s": 0.2}),
               json.dumps({"cpu_s": 0.1}), None]
    rows = pa.table({"table_uri": ["t"] * 6, "operation": ["optimize"] * 6,
                     "status": ["skipped", "skipped", "skipped", "committed", "committed", "failed"],
                     "metrics": metrics})
    kept = plan_rows(rows).to_pydict()
    assert kept["deferred"] == [True, True, False, False, False, False]
    assert kept["metrics"] == [None, None, None, metrics[3], None, None]
