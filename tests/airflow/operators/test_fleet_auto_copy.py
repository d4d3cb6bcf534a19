"""A fleet's ``execution="auto"`` weighs OPTIMIZE's row-group copy as a single table's does: a fleet whose plans
are past the re-encoding budget but would nearly only copy large row groups runs in the worker's process (rows
unchanged, read by delta-rs and pyarrow); tiny files past the budget, or plans past the copy bound together, go
to Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_delta_maint.app import execution
from airflow_delta_maint.app.jobs import optimize
from airflow_delta_maint.app.rewrite.copy_estimate import PlannedRewrite
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from tests.app.jobs.copy_tables import ROW_GROUP_BYTES, live_row_groups, make_table, rows

pytestmark = pytest.mark.timeout(600)

#: the re-encoding budget of these tests: below every test table, so only the copy can keep a plan on the worker
BUDGET = 4096
OPTIMIZE = {"optimize": {"row_group_bytes": ROW_GROUP_BYTES}}


class Submitted(Exception):
    """The fleet was handed to spark-submit."""


class RecordingTI:
    """The task instance's XCom push, at the unit's edge."""

    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = json.loads(json.dumps(value))


@pytest.fixture(autouse=True)
def small_budget(monkeypatch) -> None:
    monkeypatch.setattr(execution, "LOCAL_MAX_REWRITE_BYTES", BUDGET)


@pytest.fixture
def submissions(monkeypatch) -> list[list[str]]:
    """The tables of each fleet handed to spark-submit (the hook's edge: nothing is submitted)."""
    seen: list[list[str]] = []

    def run_fleet(self, spec, storage_options=None):
        seen.append([t["table"] for t in spec["tables"]])
        raise Submitted

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", run_fleet)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    return seen


def planned(path: Path, **params) -> PlannedRewrite:
    plan = optimize.local_rewrite(str(path), None, {"row_group_bytes": ROW_GROUP_BYTES, **params})
    assert plan is not None
    return plan


def fleet(paths: list[Path], **options) -> MaintainTablesOperator:
    jobs = {"optimize": {**OPTIMIZE["optimize"], **options}}
    return MaintainTablesOperator(task_id="fleet", tables=[str(p) for p in paths], jobs=jobs, execution="auto")


def test_a_fleet_that_only_copies_runs_on_the_worker(tmp_path: Path, submissions, capsys) -> None:
    paths = [tmp_path / "a", tmp_path / "b"]
    for path in paths:
        make_table(path, big=4, small=0)  # four files of one large snappy row group each
    before = {p: rows(str(p)) for p in paths}
    plans = [planned(p) for p in paths]
    total = sum(p.bytes for p in plans)
    assert all(p.bytes > BUDGET and p.copied_bytes() == p.bytes for p in plans)  # each past the budget alone
    where, why = fleet(paths).where_to_run(fleet(paths).fleet_spec())
    assert where == "local" and f"{total} bytes to rewrite, {total} of them copied row groups" in why, why
    assert "0 re-encoded" in why
    results = fleet(paths).execute(context={"ti": RecordingTI()})  # the worker's run allows no Spark
    assert submissions == []
    logged = capsys.readouterr().out  # the task's logger writes there
    assert f"small enough for this worker ({why}): running them in this process" in logged, logged
    for entry in results:
        (m,) = entry["jobs"]
        assert m["status"] == "committed" and (m["numRemovedFiles"], m["numAddedFiles"]) == (4, 1)
        assert (m["numRowGroupsCopied"], m["numRowGroupsReencoded"]) == (4, 0)
    assert {p: rows(str(p)) for p in paths} == before  # delta-rs' file list, read with pyarrow
    assert all(len(live_row_groups(str(p))) == 4 for p in paths)


def test_a_fleet_without_the_copy_goes_to_spark(tmp_path: Path, submissions, capsys) -> None:
    """The same copy-only tables with ``copy_row_groups="never"``, and a fleet with a table of tiny files past the
    budget, are submitted whole; nothing is written."""
    copying, tiny = tmp_path / "copying", tmp_path / "tiny"
    make_table(copying, big=4, small=0)
    make_table(tiny, big=0, small=12)
    before = {p: rows(str(p)) for p in (copying, tiny)}
    assert planned(tiny).bytes > BUDGET and planned(tiny).candidates() == []
    op = fleet([copying], copy_row_groups="never")
    where, why = op.where_to_run(op.fleet_spec())
    assert where == "spark" and f"of them re-encoded: more than {BUDGET}" in why, why
    with pytest.raises(Submitted):
        op.execute(context={"ti": RecordingTI()})
    op = fleet([copying, tiny])
    where, why = op.where_to_run(op.fleet_spec())
    assert where == "spark" and f"{planned(tiny).bytes} of them re-encoded" in why, why
    with pytest.raises(Submitted):
        op.execute(context={"ti": RecordingTI()})
    assert submissions == [[str(copying)], [str(copying), str(tiny)]]
    assert f"Submitting the fleet to Spark: {why}" in capsys.readouterr().out
    assert {p: rows(str(p)) for p in (copying, tiny)} == before


def test_the_fleets_plans_together_stay_within_the_copy_bound(tmp_path: Path, monkeypatch) -> None:
    """Each table alone within the copy bound, the fleet past it: Spark, as for one table past it."""
    paths = [tmp_path / "a", tmp_path / "b"]
    for path in paths:
        make_table(path, big=4, small=0)
    plans = [planned(p) for p in paths]
    monkeypatch.setattr(execution, "LOCAL_MAX_COPY_BYTES", max(p.bytes for p in plans))
    assert [execution.rewrite_execution(p, 0, BUDGET)[0] for p in plans] == ["local", "local"]
    op = fleet(paths)
    where, why = op.where_to_run(op.fleet_spec())
    assert where == "spark" and f"more than {max(p.bytes for p in plans)} to copy" in why, why


def test_a_plan_copying_under_the_share_counts_whole(tmp_path: Path) -> None:
    """Of the fleet's plans, one that copies under ``LOCAL_MIN_COPY_SHARE`` counts every byte as re-encoded, even
    when its re-encoded part alone would fit: the single table's rule, plan by plan."""
    mixed = tmp_path / "mixed"
    make_table(mixed, big=1, small=12)
    plan = planned(mixed)
    weight = execution.weigh_rewrite(plan)
    assert 0 < weight.copied < execution.LOCAL_MIN_COPY_SHARE * plan.bytes
    assert not weight.counted and weight.reencoded == plan.bytes
    assert execution.rewrites_execution([plan], plan.bytes - weight.copied)[0] == "spark"
    copying = tmp_path / "copying"
    make_table(copying, big=4, small=0)
    whole = execution.weigh_rewrite(planned(copying))
    assert whole.counted and whole.reencoded == 0
    assert execution.rewrites_execution([planned(copying)], BUDGET)[0] == "local"
    assert execution.rewrites_execution([planned(copying), plan], BUDGET)[0] == "spark"
