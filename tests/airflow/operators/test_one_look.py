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


def test_the_run_plans_on_the_version_the_check_saw(tmp_path, log_reads):
    """No commit since the check: the run reports the version the check saw and no second planning."""
    table = tmp_path / "t"
    write_appends(table, 6)
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="local")
    assert op.task.check(op.job_params(), "local") is None
    metrics = op.task.run_locally(op.job_params(), None)
    assert metrics["status"] == "committed"
    assert (metrics["version_checked"], metrics["version_read"], metrics["replanned"]) == (5, 5, False)


def test_a_commit_after_the_check_is_planned_again_and_said(tmp_path, log_reads):
    """A writer commits between the task's check and its run: the run plans on the newer version, says so, and
    rewrites the new file too (nothing the check saw is taken as the plan)."""
    from deltalake import DeltaTable, write_deltalake

    table = tmp_path / "t"
    write_appends(table, 6)
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="local")
    assert op.task.check(op.job_params(), "local") is None
    rows = DeltaTable(str(table)).to_pyarrow_table()
    write_deltalake(str(table), rows.slice(0, 3).cast(rows.schema), mode="append")
    before = sorted_rows(DeltaTable(str(table)).to_pyarrow_table())
    files_before = len(DeltaTable(str(table)).file_uris())
    metrics = op.task.run_locally(op.job_params(), None)
    assert (metrics["version_checked"], metrics["version_read"], metrics["replanned"]) == (5, 6, True)
    after = DeltaTable(str(table))
    assert sorted_rows(after.to_pyarrow_table()) == before
    assert metrics["numRemovedFiles"] == files_before  # the new commit's file too
    assert len(after.file_uris()) == metrics["numAddedFiles"] < files_before


def test_the_submitted_application_gets_the_version_the_check_saw(tmp_path, submits):
    table = tmp_path / "t"
    write_appends(table, 6)
    op = OptimizeOperator(task_id="o", table_uri=str(table), execution="spark")
    op.execute({})
    ((_, _, argv),) = submits
    assert argv[argv.index("--seen-version") + 1] == "5"
    from airflow_delta_maint.app.cli import build_parser

    assert build_parser().parse_args(["optimize", str(table), *argv]).seen_version == 5


def sorted_rows(rows) -> list[tuple]:
    """A table's rows as sorted tuples (a rewrite may reorder rows)."""
    return sorted(zip(*(rows.column(i).to_pylist() for i in range(rows.num_columns))))
