"""OPTIMIZE's feature gate follows the engine, on the Airflow worker's check and in the job: a table
with variant columns (a delta-spark table's log) is refused natively with the reason and the engine
that can, and planned from the log for delta-spark; neither path changes the log."""

from __future__ import annotations

import shutil

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs.optimize import nothing_to_do, options_from
from airflow_delta_maint.delta.errors import UnsupportedFeatureError
from tests.conftest import corpus_path


@pytest.fixture
def variant_table(tmp_path):
    path = tmp_path / "variant"
    shutil.copytree(corpus_path("rs/spark-variant-stable-feature-checkpoint"), path)
    return path


def _log(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path / "_delta_log").iterdir()}


def test_the_workers_check_refuses_natively_and_plans_for_delta_spark(variant_table):
    before = _log(variant_table)
    with pytest.raises(UnsupportedFeatureError) as exc:
        nothing_to_do(str(variant_table), None, options_from({}))
    assert "(the native rewrite does not write variant columns)" in str(exc.value)
    assert str(exc.value).endswith("run it with engine='delta-spark'")
    # four small files: work for delta-spark, so the worker submits
    assert nothing_to_do(str(variant_table), None, options_from({"engine": "delta-spark"})) is None
    assert _log(variant_table) == before


def test_the_job_refuses_natively_and_plans_a_dry_run_for_delta_spark(variant_table):
    before = _log(variant_table)
    code, m = cli.run(["optimize", str(variant_table), "--json"])
    assert code == 2 and "engine='delta-spark'" in m["error"]
    code, m = cli.run(["optimize", str(variant_table), "--json", "--dry-run", "--engine", "delta-spark"])
    assert code == 0 and m["status"] == "dry_run" and m["engine"] == "delta-spark"
    assert m["plan"]["num_files_to_rewrite"] == 4 and m["plan"]["predicted_output_files"] == 1
    assert _log(variant_table) == before
