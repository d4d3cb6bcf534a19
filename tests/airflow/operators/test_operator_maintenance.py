"""The maintenance operators: job options, templated fields, the cheap "nothing to do" path."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files
from deltalake import DeltaTable

from airflow_delta_maint.hooks.delta_maint import APPLICATION
from airflow_delta_maint.operators.maintenance import (
    DeltaMaintenanceOperator,
    InspectTableOperator,
    LogCompactionOperator,
    OptimizeOperator,
    VacuumOperator,
    available_jobs,
)


def _app_args(op: DeltaMaintenanceOperator) -> list[str]:
    cmd = op.get_hook().build_command(op.job, op.table_uri, op.job_args(), "/tmp/m.json", op.table_storage_options)
    return cmd[cmd.index(str(APPLICATION)) + 1:]


def test_optimize_command():
    op = OptimizeOperator(task_id="o", table_uri="s3://b/t", where="day >= '2024-01-01'", zorder_by=["a", "b"],
                          min_file_size=1000, max_file_size=2 << 20, max_concurrent_bins=4, batch_bytes=10 << 30,
                          dry_run=True, storage_options={"AWS_REGION": "eu-west-1"})
    assert _app_args(op) == [
        "optimize", "s3://b/t", "--where", "day >= '2024-01-01'", "--zorder-by", "a,b", "--min-file-size", "1000",
        "--max-file-size", str(2 << 20), "--max-concurrent-bins", "4", "--batch-bytes", str(10 << 30), "--dry-run",
        "--json", "--metrics-out", "/tmp/m.json", "--storage-option", "AWS_REGION=eu-west-1"]
    assert OptimizeOperator(task_id="o", table_uri="/t").job_args() == []


def test_vacuum_command():
    op = VacuumOperator(task_id="v", table_uri="/t", retention_hours=24, mode="lite", dry_run="False",
                        ignore_retention_check="true")
    assert _app_args(op)[:7] == ["vacuum", "/t", "--retention-hours", "24", "--mode", "lite",
                                 "--ignore-retention-check"]


def test_compact_log_command():
    op = LogCompactionOperator(task_id="c", table_uri="/t", interval=10, max_window_bytes=1 << 20,
                               checkpoint_interval=100)
    assert _app_args(op)[:8] == ["compact-log", "/t", "--interval", "10", "--max-window-bytes", str(1 << 20),
                                 "--checkpoint-interval", "100"]
    assert InspectTableOperator(task_id="i", table_uri="/t", version=3).job_args() == ["--version", "3"]


def test_template_fields():
    base = {"table_uri", "storage_options", "conf", "metrics_uri"}
    assert base <= set(OptimizeOperator.template_fields)
    assert {"where", "zorder_by", "min_file_size", "max_file_size", "max_concurrent_bins", "batch_bytes",
            "dry_run"} <= set(OptimizeOperator.template_fields)
    assert {"retention_hours", "mode", "dry_run", "ignore_retention_check"} <= set(VacuumOperator.template_fields)
    assert {"interval", "max_window_bytes", "checkpoint_interval"} <= set(LogCompactionOperator.template_fields)


def test_job_params_come_from_the_jobs_own_parser():
    assert {"inspect", "optimize", "vacuum", "compact-log"} <= set(available_jobs())
    params = OptimizeOperator(task_id="o", table_uri="/t", where="p = 'a'", zorder_by="x").job_params()
    assert params["predicate"] == "p = 'a'" and params["zorder_by"] == "x" and params["dry_run"] is False
    params = VacuumOperator(task_id="v", table_uri="/t", retention_hours=12).job_params()
    assert params["retention_hours"] == 12
    with pytest.raises(AirflowException, match="invalid options for inspect"):
        InspectTableOperator(task_id="i", table_uri="/t", small_file_bytes="lots").job_params()


def test_unknown_job_is_refused():
    class Reindex(DeltaMaintenanceOperator):
        job = "reindex"

    with pytest.raises(AirflowException, match="no job 'reindex'"):
        Reindex(task_id="r", table_uri="/t").execute(context={})


def test_nothing_to_do_skips_spark(tmp_path, small_table):
    DeltaTable(str(small_table)).optimize.compact()  # one file per partition left
    before = log_files(small_table)
    # a connection that does not exist proves no Spark application was prepared
    op = OptimizeOperator(task_id="o", table_uri=str(small_table), conn_id="no_such_spark")
    metrics = op.execute(context={})
    assert metrics["status"] == "skipped"
    assert metrics["operation"] == "optimize" and metrics["table"] == str(small_table)
    assert metrics["version_read"] == 6 and metrics["version_committed"] is None
    assert "nothing to compact" in metrics["reason"]
    assert {"started_at", "duration_s"} <= set(metrics)
    assert log_files(small_table) == before


def test_missing_table_fails_before_spark(tmp_path):
    op = OptimizeOperator(task_id="o", table_uri=str(tmp_path / "gone"), conn_id="no_such_spark")
    with pytest.raises(AirflowException, match="table path does not exist"):
        op.execute(context={})


def test_missing_connection_fails_clearly(small_table):
    before = log_files(small_table)
    op = OptimizeOperator(task_id="o", table_uri=str(small_table), conn_id="no_such_spark")
    with pytest.raises(AirflowException, match="'no_such_spark' is not defined"):
        op.execute(context={})  # 6 commits of small files: there is work, so Spark is needed
    assert log_files(small_table) == before


def test_on_kill_before_execute_is_harmless():
    OptimizeOperator(task_id="o", table_uri="/t").on_kill()
