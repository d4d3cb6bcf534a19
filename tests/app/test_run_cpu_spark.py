"""A run on Spark counts the CPU its tasks' Python workers spent and, where Spark's status API is on, its
executors'; the maintenance history records the parts in columns of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.health.run_log import read_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "airflow"))
from delta_maint_testing import write_appends  # noqa: E402

DELTA_MAINT = Path(sys.executable).parent / "delta-maint"
PARTS = ("cpu_driver_s", "cpu_tasks_s", "cpu_executors_s")


def rows(path: Path) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    for uri in DeltaTable(str(path)).file_uris():
        t = pq.read_table(uri.removeprefix("file://"), columns=["id", "value"])
        out += zip(t.column("id").to_pylist(), t.column("value").to_pylist())
    return sorted(out)


def test_optimize_on_spark_counts_its_tasks_cpu_and_records_the_parts(tmp_path, spark):
    table, history = tmp_path / "t", tmp_path / "history"
    write_appends(table, 8, partitions=4, rows=2000)
    before = rows(table)
    code, m = cli.run(["optimize", str(table), "--json", "--history-uri", str(history)])
    assert code == 0 and m["status"] == "committed" and m["numRemovedFiles"] == 32, m.get("error")
    assert rows(table) == before
    assert m["cpu_tasks_s"] > 0 and m["cpu_s"] >= m["cpu_driver_s"] + m["cpu_tasks_s"] - 0.001  # each rounded to ms
    # the test session has no UI: the executors' part is unknown, not 0, and the metrics say why
    assert "cpu_executors_s" not in m and "spark.ui.enabled=false" in m["cpu_missing"]["cpu_executors_s"]
    row = read_runs(str(history)).to_pylist()[-1]
    assert [row[p] for p in ("cpu_s", *PARTS)] == [m["cpu_s"], m["cpu_driver_s"], m["cpu_tasks_s"], None]
    assert json.loads(row["metrics"])["cpu_missing"] == m["cpu_missing"]


@pytest.mark.e2e
def test_zorder_with_the_spark_ui_on_counts_its_executors_cpu(tmp_path):
    table, history = tmp_path / "t", tmp_path / "history"
    write_appends(table, 8, partitions=2, rows=5000)
    before = rows(table)
    done = subprocess.run([str(DELTA_MAINT), "optimize", str(table), "--zorder-by", "id,value", "--master", "local[2]",
                           "--conf", "spark.ui.enabled=true", "--conf", "spark.ui.port=0", "--json",
                           "--history-uri", str(history)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    m = json.loads(done.stdout)
    assert m["status"] == "committed" and rows(table) == before
    assert m["cpu_tasks_s"] > 0 and m["cpu_executors_s"] > 0 and "cpu_missing" not in m
    assert m["cpu_s"] == pytest.approx(sum(m[p] for p in PARTS), abs=0.002)
    row = read_runs(str(history)).to_pylist()[-1]
    assert [row[p] for p in ("cpu_s", *PARTS)] == [m["cpu_s"], *(m[p] for p in PARTS)]
