"""OPTIMIZE's feature gate follows the engine, on the Airflow worker's check and in the job: a table
with variant columns (a delta-spark table's log) is planned by both engines (the native rewrite writes
variant columns), from the log for delta-spark; neither check changes the log."""

from __future__ import annotations

import shutil

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from tests.conftest import corpus_path


@pytest.fixture
def variant_table(tmp_path):
    path = tmp_path / "variant"
    shutil.copytree(corpus_path("rs/spark-variant-stable-feature-checkpoint"), path)
    return path


def _log(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "_delta_log").iterdir()}


def test_the_workers_check_plans_variant_tables_for_both_engines(variant_table):
    before = _log(variant_table)
    # four small files: work for either engine, so the worker submits
    assert nothing_to_do(str(variant_table), None, options_from({})) is None
    assert nothing_to_do(str(variant_table), None, options_from({"engine": "delta-spark"})) is None
    assert _log(variant_table) == before


def test_the_job_plans_a_dry_run_for_either_engine(variant_table):
    before = _log(variant_table)
    code, m = cli.run(["optimize", str(variant_table), "--json", "--dry-run"])
    assert code == 0 and m["status"] == "dry_run" and m["plan"]["num_files_to_rewrite"] == 4, m
    code, m = cli.run(["optimize", str(variant_table), "--json", "--dry-run", "--engine", "delta-spark"])
    assert code == 0 and m["status"] == "dry_run" and m["engine"] == "delta-spark"
    assert m["plan"]["num_files_to_rewrite"] == 4 and m["plan"]["predicted_output_files"] == 1
    assert _log(variant_table) == before
