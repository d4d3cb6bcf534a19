"""ComputeStatsOperator: its command line, templated fields, the check on the worker that skips Spark
when every live file has statistics, bad input failing before Spark, and a run in the worker's process."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files
from deltalake import DeltaTable

from airflow_delta_maint.hooks.delta_maint import APPLICATION, DeltaMaintHook
from airflow_delta_maint.operators.maintenance import ComputeStatsOperator, available_jobs
from tests.app.jobs.test_optimize import rows_deltars
from tests.airflow.operators.conftest import argv_of


def _app_args(op: ComputeStatsOperator) -> list[str]:
    cmd = op.get_hook().build_command(op.job, op.table_uri, argv_of(op), "/tmp/m.json", op.table_storage_options)
    return cmd[cmd.index(str(APPLICATION)) + 1:]


def strip_stats(path, version: int) -> None:
    name = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in name.read_text().splitlines()]
    for a in actions:
        a.get("add", {}).pop("stats", None)
    name.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_command_and_templated_fields():
    op = ComputeStatsOperator(task_id="s", table_uri="s3://b/t", where="part = 'p0'", columns=["value", "id"],
                              max_files=500, dry_run="true", storage_options={"AWS_REGION": "eu-west-1"})
    assert _app_args(op) == ["compute-stats", "s3://b/t", "--where", "part = 'p0'", "--columns", "value,id",
                             "--max-files", "500", "--dry-run", "--json", "--metrics-out", "/tmp/m.json",
                             "--storage-option", "AWS_REGION=eu-west-1"]
    assert argv_of(ComputeStatsOperator(task_id="s", table_uri="/t", columns="a, b")) == ["--columns", "a, b"]
    assert argv_of(ComputeStatsOperator(task_id="s", table_uri="/t")) == []
    assert {"where", "columns", "max_files", "dry_run_only", "table_uri"} <= set(ComputeStatsOperator.template_fields)
    assert "compute-stats" in available_jobs()
    params = ComputeStatsOperator(task_id="s", table_uri="/t", max_files="7", dry_run=True).job_params()
    assert params["max_files"] == 7 and params["dry_run"] is True


def test_every_file_with_statistics_skips_spark(small_table, no_spark_submit):
    before = log_files(small_table)
    metrics = ComputeStatsOperator(task_id="s", table_uri=str(small_table), conn_id="no_such_spark").execute(context={})
    assert (metrics["status"], metrics["operation"], metrics["version_read"]) == ("skipped", "compute-stats", 5)
    assert metrics["reason"] == "all 12 live files have statistics of the 2 covered columns"
    assert log_files(small_table) == before


def test_files_without_statistics_submit(small_table, submits):
    strip_stats(small_table, 2)
    op = ComputeStatsOperator(task_id="s", table_uri=str(small_table), where="part = 'p1'")
    assert op.execute(context={})["status"] == "committed"
    assert submits == [("compute-stats", str(small_table), ["--where", "part = 'p1'"])]


def test_bad_input_fails_before_spark(small_table, no_spark_submit):
    strip_stats(small_table, 0)
    for kwargs, message in (({"columns": ["part"]}, "is a partition column"),
                            ({"columns": "nope"}, "column 'nope' not found"),
                            ({"max_files": 0}, "at least 1")):
        op = ComputeStatsOperator(task_id="s", table_uri=str(small_table), conn_id="no_such_spark", **kwargs)
        with pytest.raises(AirflowException, match=message):
            op.execute(context={})


def test_a_run_in_the_workers_process(small_table, no_spark_submit):
    for version in range(3):
        strip_stats(small_table, version)
    rows = rows_deltars(small_table)
    op = ComputeStatsOperator(task_id="s", table_uri=str(small_table), execution="local", max_files=4)
    metrics = op.execute(context={})
    assert (metrics["status"], metrics["numFilesWithoutStats"], metrics["numFilesUpdated"],
            metrics["numFilesLeftForLaterRuns"], metrics["version_committed"]) == ("committed", 6, 4, 2, 6)
    assert rows_deltars(small_table) == rows
    assert DeltaTable(str(small_table)).history(1)[0]["operation"] == "COMPUTE STATS"


def test_a_fleet_submits_compute_stats_only_for_the_tables_that_need_it(tmp_path, monkeypatch):
    from delta_maint_testing import write_appends

    from airflow_delta_maint.operators.fleet import MaintainTablesOperator

    specs: list[dict] = []

    def run_fleet(self, spec, storage_options=None):
        specs.append(json.loads(json.dumps(spec)))
        return {"status": "committed", "tables": [
            {"table": t["table"], "status": "committed",
             "jobs": [{"operation": "compute-stats", "table": t["table"], "status": "committed"}]}
            for t in spec["tables"]]}

    monkeypatch.setattr(DeltaMaintHook, "run_fleet", run_fleet)
    monkeypatch.setattr(DeltaMaintHook, "submit", lambda *a, **k: pytest.fail("spark-submit was called"))
    tables = []
    for i in range(3):
        write_appends(tmp_path / f"t{i}", 2)
        tables.append(str(tmp_path / f"t{i}"))
    strip_stats(tmp_path / "t1", 1)

    class TI:
        def xcom_push(self, key, value):
            pass

    op = MaintainTablesOperator(task_id="fleet", tables=tables, jobs={"compute-stats": {"max_files": 10}})
    results = op.execute(context={"ti": TI()})
    assert [t["table"] for t in specs[0]["tables"]] == [tables[1]]
    assert [e["status"] for e in results] == ["skipped", "committed", "skipped"]
    assert "have statistics of the 2 covered columns" in results[0]["jobs"][0]["reason"]


def test_the_store_calls_reach_the_xcom_value_and_the_history(small_table, no_spark_submit, tmp_path):
    """A run's ``storeCalls`` (every kind, zero on local disk) is in the task's return value and in its history row;
    a run the check skipped carries the check's."""
    from airflow_delta_maint.delta.health.run_log import read_runs
    from airflow_delta_maint.delta.storage.store_calls import KINDS

    strip_stats(small_table, 0)
    history = tmp_path / "history"
    for status in ("committed", "skipped"):
        op = ComputeStatsOperator(task_id="s", table_uri=str(small_table), execution="local", history_uri=str(history))
        metrics = op.execute(context={})
        assert metrics["status"] == status and metrics["history"]["written"], metrics
        calls = metrics["storeCalls"]
        assert set(calls) == set(KINDS) and calls["get"] == {"calls": 0, "bytes": 0, "objects": 0}, calls
        row = read_runs(str(history)).to_pylist()[-1]
        assert json.loads(row["store_calls"]) == calls and json.loads(row["metrics"])["storeCalls"] == calls
