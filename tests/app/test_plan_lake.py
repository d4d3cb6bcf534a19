"""``delta-maint plan-lake``: the night's plan under a budget on real tables, its dry run (nothing changes), its
run in this process (the chosen jobs commit, the rows stay), the deferred jobs in the history, and a job that
waited long enough going first."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.health.run_log import read_runs
from airflow_delta_maint.delta.plans.lake_budget import STARVATION_NIGHTS


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


def test_the_dry_run_says_what_the_night_would_cost_and_changes_nothing(tmp_path):
    tables = lake(tmp_path, {"busy": 12, "some": 6, "few": 3})
    before, listed = [rows(t) for t in tables], log_listing(tables)
    code, result = plan_lake(*tables, "--budget", "cpu_s=2.5", "--dry-run")
    assert (code, result["status"]) == (0, "dry_run")
    plan = result["plan"]
    chosen = [(p["table"], p["job"]) for p in plan["chosen"]]
    assert chosen == [(tables[0], "optimize"), (tables[1], "optimize")]  # most files removed per CPU-second first
    assert plan["used"]["cpu_s"] <= 2.5 and plan["used"]["runs"] == 2
    assert {p["reason"].split(":")[0] for p in plan["deferred"]} == {"deferred"}
    assert all(p["predicted_cpu_s"] > 0 and p["estimate"] for p in plan["deferred"])
    assert [rows(t) for t in tables] == before and log_listing(tables) == listed


def test_the_night_runs_what_it_chose_and_records_what_waited(tmp_path):
    tables = lake(tmp_path / "lake", {"busy": 12, "some": 6, "few": 3})
    history = str(tmp_path / "history")
    before = [rows(t) for t in tables]
    code, result = plan_lake(*tables, "--budget", "cpu_s=2.5", "--history-uri", history, "--local")
    assert code == 0, result
    by_table = {e["table"]: {j["operation"]: j for j in e["jobs"]} for e in result["tables"]}
    for table, job in ((tables[0], "optimize"), (tables[1], "optimize")):
        assert by_table[table][job]["status"] == "committed"
    waiting = [p for p in result["plan"]["deferred"]]
    assert waiting and all(by_table[p["table"]][p["job"]]["deferred"] is True for p in waiting)
    assert [rows(t) for t in tables] == before
    recorded = read_runs(history).to_pylist()
    deferred = [r for r in recorded if r["status"] == "skipped" and json.loads(r["metrics"]).get("deferred")]
    assert sorted((r["table_uri"], r["operation"]) for r in deferred) == sorted((p["table"], p["job"]) for p in waiting)


@pytest.mark.parametrize("nights", [STARVATION_NIGHTS])
def test_a_job_that_waited_long_enough_goes_first(tmp_path, nights):
    tables = lake(tmp_path / "lake", {"busy": 12, "quiet": 3})
    history = str(tmp_path / "history")
    # night after night the budget buys one run: the busy table's OPTIMIZE; the quiet one waits
    for night in range(nights):
        _, result = plan_lake(*tables, "--budget", "cpu_s=1.2", "--budget", "max_tables=1", "--history-uri",
                              history, "--dry-run" if night else "--local")
        if night == 0:
            assert [p["table"] for p in result["plan"]["chosen"]] == [tables[0]]
            lake(tmp_path / "lake", {"busy": 12})  # the busy table fills up again
    # the dry runs recorded nothing: the quiet table has waited one night
    _, result = plan_lake(*tables, "--budget", "cpu_s=1.2", "--budget", "max_tables=1", "--history-uri", history,
                          "--dry-run")
    quiet = [p for p in result["plan"]["deferred"] if p["table"] == tables[1] and p["job"] == "optimize"]
    assert quiet and quiet[0]["nights_waiting"] == 1
    for _ in range(nights - 1):  # real nights: each records the wait
        plan_lake(*tables, "--budget", "cpu_s=1.2", "--budget", "max_tables=1", "--history-uri", history, "--local")
        lake(tmp_path / "lake", {"busy": 12})
    _, result = plan_lake(*tables, "--budget", "cpu_s=1.2", "--budget", "max_tables=1", "--history-uri", history,
                          "--dry-run")
    first = result["plan"]["chosen"][0]
    assert (first["table"], first["nights_waiting"]) == (tables[1], nights)
    assert first["reason"].startswith(f"waited {nights} nights")


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
    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize"}]} for t in tables],
                                "budget": {"cpu_s": 1e-6}})
    entries = run_fleet(spec, spark_allowed=False)
    first, *rest = [e["jobs"][0] for e in entries]
    assert first["status"] == "committed" and first["cpu_s"] > 0
    for left in rest:
        assert (left["status"], left["left"]) == ("skipped", True)
        assert left["reason"].startswith("not run: the budget ran out (cpu_s: ")
    assert [rows(t) for t in tables] == before
    assert FleetSpec.from_json(spec.to_json()) == spec
    with pytest.raises(Exception, match="budget: cpu_s must be above 0"):
        FleetSpec.from_json({"tables": [], "budget": {"cpu_s": -1}})


def test_each_run_records_its_prediction_beside_its_measure_and_the_model_learns(tmp_path):
    from airflow_delta_maint.app.lake_plan import lake_history

    tables = lake(tmp_path / "lake", {"busy": 12, "some": 6})
    history = str(tmp_path / "history")
    code, result = plan_lake(*tables, "--history-uri", history, "--local")
    assert code == 0, result
    ran = [j for e in result["tables"] for j in e["jobs"] if j["status"] == "committed"]
    assert ran and all(j["predicted_cpu_s"] > 0 and j["cpu_s"] > 0 and j["prediction_scale"] == 1.0 for j in ran)
    recorded = [json.loads(r["metrics"]) for r in read_runs(history).to_pylist() if r["status"] == "committed"]
    assert sorted(m["predicted_cpu_s"] for m in recorded) == sorted(j["predicted_cpu_s"] for j in ran)
    model = lake_history(history).model
    optimize = [j for j in ran if j["operation"] == "optimize"]
    expected = sorted(j["cpu_s"] / j["predicted_cpu_s"] for j in optimize)
    assert model.scale("optimize") == pytest.approx(expected[len(expected) // 2] if len(expected) % 2 else
                                                    (expected[0] + expected[1]) / 2)
    lake(tmp_path / "lake", {"busy": 12})  # the next night has work again
    _, again = plan_lake(*tables, "--history-uri", history, "--dry-run")
    (planned,) = [p for p in again["plan"]["chosen"] if p["job"] == "optimize"]
    assert planned["prediction_scale"] == round(model.scale("optimize"), 4) != 1.0
