"""The worker reads a table's log once per OPTIMIZE task: the check, the version it saw and the bytes the plan
rewrites (for the execution choice) come from one read; the choice lists the log but reads it no more."""

from __future__ import annotations

import pytest
from delta_maint_testing import write_appends

from airflow_delta_maint.app.jobs import optimize
from airflow_delta_maint.delta.log import table_state
from airflow_delta_maint.operators.maintenance import OptimizeOperator


@pytest.fixture
def log_reads(monkeypatch) -> list[str]:
    """Every full read of a log (``read_table``), by what asked for it."""
    seen: list[str] = []
    real = table_state.read_table

    def counted(*args, **kwargs):
        seen.append(kwargs.get("what", "?"))
        return real(*args, **kwargs)

    monkeypatch.setattr(table_state, "read_table", counted)
    monkeypatch.setattr(optimize, "read_table", counted, raising=False)
    return seen


def test_the_check_and_the_choice_read_the_log_once(tmp_path, log_reads):
    table = tmp_path / "t"
    write_appends(table, 6)
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="auto")
    params = op.job_params()
    assert op.task.check(params, "auto") is None  # work to do
    where, why = op.task.choose("auto", params)
    assert (where, log_reads) == ("local", ["OPTIMIZE's check"]), (why, log_reads)
    assert op.task.log_reads == 1
    planned = optimize.local_rewrite_bytes(str(table), None, params)
    assert why.startswith(f"{planned} bytes to rewrite"), why  # what a second read would have planned


def test_a_skip_reports_the_version_of_its_one_read(tmp_path, log_reads):
    table = tmp_path / "t"
    write_appends(table, 1)  # one file per partition: nothing to compact
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="auto")
    skipped = op.task.check(op.job_params(), "auto")
    assert skipped is not None and (skipped["status"], skipped["version_read"]) == ("skipped", 0)
    assert log_reads == ["OPTIMIZE's check"]


def test_without_auto_the_look_plans_no_bytes(tmp_path, log_reads):
    table = tmp_path / "t"
    write_appends(table, 6)
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="spark")
    assert op.task.check(op.job_params(), "spark") is None
    assert op.task.looked is None and op.task.choose("spark", op.job_params()) == ("spark", "execution 'spark'")
    assert log_reads == ["OPTIMIZE's check"]
