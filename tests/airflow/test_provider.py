"""Airflow finds the provider; the Airflow side never imports pyspark."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from delta_maint_testing import BIN, REPO, airflow_env

from airflow_delta_maint.provider_info import get_provider_info


def test_provider_info_modules_import():
    info = get_provider_info()
    assert info["package-name"] == "airflow-delta-maint"
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


@pytest.mark.e2e
def test_airflow_providers_list_finds_it(tmp_path):
    result = subprocess.run([str(BIN / "airflow"), "providers", "list", "--output", "json"],
                            env=airflow_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    providers = {p["package_name"]: p for p in json.loads(result.stdout[result.stdout.index("["):])}
    assert "airflow-delta-maint" in providers
    assert "apache-airflow-providers-apache-spark" in providers  # discovery of the others still works


def test_airflow_side_does_not_import_pyspark(tmp_path):
    code = (
        "import sys\n"
        "import airflow_delta_maint.hooks.delta_maint, airflow_delta_maint.operators.maintenance\n"
        "import airflow_delta_maint.sensors.commit_interval, airflow_delta_maint.triggers.commit_interval\n"
        "sys.path.insert(0, 'dags_example')\n"
        "import delta_maintenance_nightly, delta_maintenance_on_commits\n"
        "from airflow_delta_maint.operators.maintenance import available_jobs, OptimizeOperator\n"
        "from airflow_delta_maint.operators.maintenance import VacuumOperator, LogCompactionOperator\n"
        "for op in (OptimizeOperator, VacuumOperator, LogCompactionOperator):\n"
        "    op(task_id='t', table_uri='/t').job_params()\n"
        "assert 'pyspark' not in sys.modules, 'pyspark was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env=airflow_env(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
