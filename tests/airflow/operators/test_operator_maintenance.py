"""The maintenance operators: job options, templated fields, the cheap "nothing to do" path."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import log_files
from deltalake import DeltaTable

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.plans.vacuum import LAST_VACUUM_INFO
from airflow_delta_maint.hooks.delta_maint import APPLICATION
from airflow_delta_maint.operators.maintenance import (
    DeltaMaintenanceOperator,
    InspectTableOperator,
    LogCompactionOperator,
    OptimizeOperator,
    VacuumOperator,
    available_jobs,
)
from tests.airflow.operators.conftest import argv_of


def _app_args(op: DeltaMaintenanceOperator) -> list[str]:
    cmd = op.get_hook().build_command(op.job, op.table_uri, argv_of(op), "/tmp/m.json", op.table_storage_options)
    return cmd[cmd.index(str(APPLICATION)) + 1:]


def test_optimize_command():
    op = OptimizeOperator(task_id="o", table_uri="s3://b/t", where="day >= '2024-01-01'", zorder_by=["a", "b"],
                          min_file_size=1000, target_file_size=2 << 20, max_concurrent_bins=4, batch_bytes=10 << 30,
                          dry_run=True, storage_options={"AWS_REGION": "eu-west-1"})
    assert _app_args(op) == [
        "optimize", "s3://b/t", "--where", "day >= '2024-01-01'", "--zorder-by", "a,b", "--min-file-size", "1000",
        "--target-file-size", str(2 << 20), "--max-concurrent-bins", "4", "--batch-bytes", str(10 << 30), "--dry-run",
        "--json", "--metrics-out", "/tmp/m.json", "--storage-option", "AWS_REGION=eu-west-1"]
    assert argv_of(OptimizeOperator(task_id="o", table_uri="/t")) == []
    modern = OptimizeOperator(task_id="o", table_uri="/t", full="true", min_cube_size=1 << 30,
                              target_cube_size=2 << 30, rewrite_type_widened=True)
    assert argv_of(modern) == ["--full", "--min-cube-size", str(1 << 30), "--target-cube-size", str(2 << 30),
                                 "--rewrite-type-widened"]
    auto = OptimizeOperator(task_id="o", table_uri="/t", policy="auto", min_num_files=10, max_partitions=4,
                            lease_seconds=0)
    assert argv_of(auto) == ["--policy", "auto", "--min-num-files", "10", "--max-partitions", "4",
                             "--lease-seconds", "0"]
    assert auto.job_params()["policy"] == "auto"
    assert OptimizeOperator(task_id="o", table_uri="/t", target_files=4).job_params()["target_files"] == 4
    with pytest.raises(AirflowException, match="policy must be"):
        argv_of(OptimizeOperator(task_id="o", table_uri="/t", policy="sometimes"))
    params = modern.job_params()
    assert params["full"] is True and params["rewrite_type_widened"] is True and params["min_cube_size"] == 1 << 30


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
    assert argv_of(InspectTableOperator(task_id="i", table_uri="/t", version=3)) == ["--version", "3"]


def test_template_fields():
    base = {"table_uri", "storage_options", "conf", "metrics_uri"}
    assert base <= set(OptimizeOperator.template_fields)
    assert {"where", "zorder_by", "min_file_size", "target_file_size", "max_concurrent_bins", "batch_bytes",
            "dry_run_only"} <= set(OptimizeOperator.template_fields)
    assert {"retention_hours", "mode", "dry_run_only", "ignore_retention_check"} <= set(VacuumOperator.template_fields)
    assert {"interval", "max_window_bytes", "checkpoint_interval"} <= set(LogCompactionOperator.template_fields)


def test_job_params_come_from_the_jobs_own_parser():
    assert {"inspect", "optimize", "vacuum", "compact-log"} <= set(available_jobs())
    params = OptimizeOperator(task_id="o", table_uri="/t", where="p = 'a'", zorder_by="x").job_params()
    assert params["where"] == "p = 'a'" and params["zorder_by"] == "x" and params["dry_run"] is False
    params = VacuumOperator(task_id="v", table_uri="/t", retention_hours=12).job_params()
    assert params["retention_hours"] == 12
    with pytest.raises(AirflowException, match="invalid options for inspect"):
        InspectTableOperator(task_id="i", table_uri="/t", small_file_bytes="lots").job_params()


def test_unknown_job_is_refused():
    class Reindex(DeltaMaintenanceOperator):
        job = "reindex"

    with pytest.raises(AirflowException, match="no job 'reindex'"):
        Reindex(task_id="r", table_uri="/t").execute(context={})


def _run_job(*argv: str) -> dict:
    """Run a job of the application in this process (compact-log and VACUUM lite start no Spark)."""
    code, metrics = cli.run(list(argv))
    assert code == 0, metrics
    return metrics


def test_nothing_to_do_skips_spark(tmp_path, small_table, no_spark_submit):
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


# -- VACUUM: the cheap check ------------------------------------------------------------------------
LITE_NOW = {"mode": "lite", "retention_hours": 0, "ignore_retention_check": True}


def test_vacuum_lite_nothing_outside_the_window_skips_spark(small_table, no_spark_submit):
    before = log_files(small_table)
    op = VacuumOperator(task_id="v", table_uri=str(small_table), mode="lite")  # 7 days: every commit is newer
    metrics = op.execute(context={})
    assert metrics["status"] == "skipped" and metrics["operation"] == "vacuum"
    assert metrics["version_read"] == 5 and metrics["version_committed"] is None
    assert "no commit left the retention window" in metrics["reason"]
    assert log_files(small_table) == before


def test_vacuum_lite_nothing_new_since_the_watermark_skips_spark(small_table, no_spark_submit):
    DeltaTable(str(small_table)).optimize.compact()  # version 6 removes the 12 small files
    first = _run_job("vacuum", str(small_table), "--mode", "lite", "--retention-hours", "0",
                     "--ignore-retention-check", "--json")
    assert first["status"] == "committed" and first["numDeletedFiles"] == 12
    # with no retention its own VACUUM START/END commits (7, 8) leave the window at once: the next
    # run reads them and moves the watermark to 8 without deleting anything
    second = _run_job("vacuum", str(small_table), "--mode", "lite", "--retention-hours", "0",
                      "--ignore-retention-check", "--json")
    assert second["status"] == "skipped" and second["numCommitsRead"] == 2
    before = log_files(small_table)
    metrics = VacuumOperator(task_id="v", table_uri=str(small_table), **LITE_NOW).execute(context={})
    assert metrics["status"] == "skipped"
    assert "since the last VACUUM (watermark 8" in metrics["reason"]
    assert metrics["version_read"] == 8  # VACUUM START and END were versions 7 and 8
    assert log_files(small_table) == before


def test_vacuum_lite_with_files_to_delete_submits(small_table, submits):
    DeltaTable(str(small_table)).optimize.compact()
    metrics = VacuumOperator(task_id="v", table_uri=str(small_table), **LITE_NOW).execute(context={})
    assert metrics["status"] == "committed"
    assert [c[0] for c in submits] == ["vacuum"]
    assert submits[0][2][:3] == ["--retention-hours", "0", "--mode"]


def test_vacuum_lite_with_a_watermark_to_advance_submits(small_table, submits):
    # Appends only: nothing to delete, but the job records the watermark so the next run reads only
    # newer commits (and lite mode survives the cleanup of old commits); skipping would lose that.
    assert not (small_table / LAST_VACUUM_INFO).exists()
    VacuumOperator(task_id="v", table_uri=str(small_table), **LITE_NOW).execute(context={})
    assert len(submits) == 1


def test_vacuum_full_mode_always_submits(small_table, submits):
    # Only a listing of the table (a Spark job) can prove there are no orphan files.
    VacuumOperator(task_id="v", table_uri=str(small_table)).execute(context={})
    VacuumOperator(task_id="v", table_uri=str(small_table), mode="full", retention_hours=200).execute(context={})
    assert [c[0] for c in submits] == ["vacuum", "vacuum"]


def test_vacuum_bad_retention_fails_before_spark(small_table, no_spark_submit):
    before = log_files(small_table)
    op = VacuumOperator(task_id="v", table_uri=str(small_table), retention_hours=1)
    with pytest.raises(AirflowException, match="shorter than the table's delta.deletedFileRetentionDuration"):
        op.execute(context={})
    assert log_files(small_table) == before


def test_vacuum_without_the_check_submits(small_table, submits):
    VacuumOperator(task_id="v", table_uri=str(small_table), mode="lite", skip_if_nothing_to_do=False).execute({})
    assert len(submits) == 1


# -- log compaction: the cheap check ----------------------------------------------------------------
def test_compact_log_no_complete_window_skips_spark(small_table, no_spark_submit):
    before = log_files(small_table)
    metrics = LogCompactionOperator(task_id="c", table_uri=str(small_table), interval=10).execute(context={})
    assert metrics["status"] == "skipped" and metrics["operation"] == "compact-log"
    assert metrics["version_read"] == 5 and metrics["version_committed"] is None
    assert "no log compaction window is due" in metrics["reason"]
    assert log_files(small_table) == before


def test_compact_log_written_windows_skip_spark(small_table, no_spark_submit):
    done = _run_job("compact-log", str(small_table), "--interval", "5", "--json")
    assert done["status"] == "committed" and done["numWindowsWritten"] == 1
    before = log_files(small_table)
    metrics = LogCompactionOperator(task_id="c", table_uri=str(small_table), interval=5).execute(context={})
    assert metrics["status"] == "skipped"
    assert log_files(small_table) == before


def test_compact_log_with_a_window_due_submits(small_table, submits):
    LogCompactionOperator(task_id="c", table_uri=str(small_table), interval=5).execute(context={})
    assert submits == [("compact-log", str(small_table), ["--interval", "5"])]


def test_compact_log_with_a_checkpoint_due_submits(small_table, submits):
    LogCompactionOperator(task_id="c", table_uri=str(small_table), interval=10,
                          checkpoint_interval=3).execute(context={})
    assert len(submits) == 1


def test_compact_log_bad_interval_fails_before_spark(small_table, no_spark_submit):
    with pytest.raises(AirflowException, match="invalid interval 1"):
        LogCompactionOperator(task_id="c", table_uri=str(small_table), interval=1).execute(context={})


def test_dry_run_argument_is_templated_without_hiding_the_method():
    for cls in (OptimizeOperator, VacuumOperator):
        op = cls(task_id="t", table_uri="/t", dry_run="{{ params.plan }}")
        assert callable(op.dry_run) and op.dry_run_only == "{{ params.plan }}"
        op.render_template_fields({"params": {"plan": True}})
        assert op.dry_run_only == "True" and "--dry-run" in argv_of(op)


def test_a_former_keyword_is_taken_for_one_release_with_a_deprecation_warning():
    from airflow.exceptions import AirflowProviderDeprecationWarning

    with pytest.warns(AirflowProviderDeprecationWarning,
                      match="OptimizeOperator: max_file_size is deprecated .*; use target_file_size"):
        op = OptimizeOperator(task_id="o", table_uri="/t", max_file_size=1 << 20)
    assert op.target_file_size == 1 << 20 and argv_of(op) == ["--target-file-size", str(1 << 20)]
    with pytest.warns(AirflowProviderDeprecationWarning):  # the new name wins
        both = OptimizeOperator(task_id="o", table_uri="/t", max_file_size=1, target_file_size=2)
    assert both.job_params()["target_file_size"] == 2
    with pytest.raises(AirflowException, match="target_file_size must be a whole number"), \
            pytest.warns(AirflowProviderDeprecationWarning):
        OptimizeOperator(task_id="o", table_uri="/t", max_file_size="big").job_params()
