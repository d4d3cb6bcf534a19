"""The DataFrame runner (``mapInArrow`` over one partition per slice, the Spark Connect way) on a classic
session: the same OPTIMIZE (bin-packing, ``--target-files``) and full VACUUM as the RDD runner, rows
unchanged, results in slice order, a worker's core error raised as itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.context import JobContext
from airflow_delta_maint.app.runners.connect_tasks import DataFrameTasks
from airflow_delta_maint.app.runners.tasks import SparkTasks
from airflow_delta_maint.delta.errors import CorruptLogError
from tests.app.test_optimize import rows_deltars
from tests.app.test_optimize_auto import Partitioned


@pytest.fixture
def dataframe_tasks(monkeypatch):
    monkeypatch.setenv("DELTA_MAINT_SPARK_TASKS", "dataframe")


def test_slices_in_order_and_errors_as_themselves(spark, dataframe_tasks, tmp_path):
    tasks = JobContext(table=str(tmp_path)).tasks("test")
    assert isinstance(tasks, DataFrameTasks) and tasks.parallelism == spark.sparkContext.defaultParallelism
    items = list(range(23))
    assert tasks.map_slices(lambda part: [(i, i * i) for i in part], items, 5, "squares") == [(i, i * i) for i in items]
    # contiguous slices of sizes at most one apart, each one task's, in order
    assert tasks.map_slices(lambda part: [(len(p), sum(p)) for p in [list(part)]], items, 5, "sums") == [
        (4, 6), (5, 30), (4, 42), (5, 75), (5, 100)]
    assert tasks.map_slices(lambda part: [i * i for i in part], items, 5, "squares") == \
        SparkTasks(spark).map_slices(lambda part: [i * i for i in part], items, 5, "squares")
    assert tasks.map_slices(lambda part: part, [], 3, "nothing") == []
    def raise_corrupt(part):  # defined here: pickled by value, as the jobs' functions are
        for item in part:
            if item == 7:
                raise CorruptLogError("file 7 is not parquet")
            yield item

    with pytest.raises(CorruptLogError, match="file 7 is not parquet"):
        tasks.map_slices(raise_corrupt, items, 4, "broken")


def test_optimize_and_vacuum_with_the_dataframe_runner(spark, dataframe_tasks, tmp_path: Path):
    t = Partitioned(tmp_path / "t")
    t.add("a", 6, rows=30)
    t.add("b", 5, rows=40)
    rows = rows_deltars(t.path)
    code, m = cli.run(["optimize", str(t.path), "--json"])
    assert code == 0 and m["status"] == "committed" and m["numRemovedFiles"] == 11 and m["numAddedFiles"] == 2, m
    assert rows_deltars(t.path) == rows
    code, m = cli.run(["optimize", str(t.path), "--json", "--target-files", "3"])
    assert code == 0 and m["status"] == "committed" and m["numAddedFiles"] == 6, m
    assert rows_deltars(t.path) == rows
    code, m = cli.run(["vacuum", str(t.path), "--json", "--retention-hours", "0", "--ignore-retention-check"])
    assert code == 0 and m["status"] == "committed" and m["numFilesDeleted"] == 13, m
    assert rows_deltars(t.path) == rows


def test_classic_default_is_the_rdd_runner(spark, monkeypatch, tmp_path):
    monkeypatch.delenv("DELTA_MAINT_SPARK_TASKS", raising=False)
    assert isinstance(JobContext(table=str(tmp_path)).tasks("test"), SparkTasks)
