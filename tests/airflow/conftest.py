"""Fixtures of the Airflow-side tests: an Airflow home with a migrated SQLite database and small
Delta tables written by delta-rs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from delta_maint_testing import BIN, LOCAL_SPARK, REPO, airflow_env, write_appends  # noqa: E402

# In-process Airflow (hooks, operators, sensors) must not touch a real Airflow home.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-delta-maint-tests-"))
# Connections for in-process hooks and operators: the Airflow SDK reads AIRFLOW_CONN_* variables.
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_SPARK)


@pytest.fixture
def small_table(tmp_path) -> Path:
    """A partitioned table of 6 commits x 2 partitions of tiny files."""
    path = tmp_path / "events"
    write_appends(path, 6)
    return path


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    """An Airflow home with a migrated SQLite database; the DAGs folder holds the example DAGs."""
    home = tmp_path_factory.mktemp("airflow_home")
    dags = home / "dags"
    dags.mkdir()
    for dag_file in (REPO / "dags_example").glob("*.py"):
        shutil.copy(dag_file, dags / dag_file.name)
    for dag_file in (Path(__file__).parent / "dags").glob("*.py"):
        shutil.copy(dag_file, dags / dag_file.name)
    env = airflow_env(home)
    result = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return home


