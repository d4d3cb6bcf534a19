"""The DataFrame runner (``mapInArrow`` over one partition per slice, the Spark Connect way) on a classic
session: the same OPTIMIZE (bin-packing, ``--target-files``) and full VACUUM as the RDD runner, rows
unchanged, results in slice order, a worker's core error raised as itself; and Spark Connect's shuffle for
Z-order and liquid clustering, which writes the RDD shuffle's files row for row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.context import JobContext
from airflow_delta_maint.app.rewrite.zorder import SHUFFLE_ENV
from airflow_delta_maint.app.runners.connect_tasks import DataFrameTasks
from airflow_delta_maint.app.runners.tasks import SparkTasks
from airflow_delta_maint.delta.errors import CorruptLogError
from tests.app.jobs.test_optimize import make_table, rows_deltars
from tests.app.jobs.test_optimize_auto import Partitioned
from tests.app.jobs.test_optimize_liquid import ClusteredTable


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


def test_optimize_and_vacuum_with_the_dataframe_runner(spark, dataframe_tasks, tmp_path: Path, monkeypatch):
    import airflow_delta_maint.app.jobs.vacuum_listing as vacuum_listing

    monkeypatch.setattr(vacuum_listing, "LOCAL_DRIVER_LIST_MAX", 0)  # VACUUM lists in tasks too
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


#: the shuffles of Z-order and clustering: through the scratch folder (a local master's default), the
#: RDD shuffle (a cluster's), and Spark Connect's DataFrames
SHUFFLES = ("scratch", "rdd", "dataframe")


def use_shuffle(monkeypatch, kind: str) -> None:
    monkeypatch.setenv("DELTA_MAINT_SPARK_TASKS", "dataframe" if kind == "dataframe" else "rdd")
    if kind == "rdd":
        monkeypatch.setenv(SHUFFLE_ENV, "spark")
    else:
        monkeypatch.delenv(SHUFFLE_ENV, raising=False)


def _files_as_rows(path: Path) -> list[list[tuple]]:
    """Each live file's rows in file order, the files in a canonical order."""
    files = [pq.read_table(u.removeprefix("file://"), columns=["id", "x", "y"]).to_pylist()
             for u in DeltaTable(str(path)).file_uris()]
    return sorted([tuple(r.values()) for r in f] for f in files)


@pytest.mark.parametrize("args", [["--zorder-by", "x,y"], ["--zorder-by", "x", "--where", "p = 'b'"]])
def test_zorder_through_dataframes_writes_what_the_rdd_shuffle_writes(spark, monkeypatch, tmp_path: Path, args):
    """Spark Connect's shuffle (mapInArrow, then groupBy(output file).applyInArrow) on a classic session
    and the RDD shuffle: the same files, row for row and in the same order, as the shuffle through the
    scratch folder, and the rows of the table unchanged."""
    source = make_table(tmp_path / "source", ["a", "b"], 6, 700)
    outputs = {}
    for kind in SHUFFLES:
        path = tmp_path / kind
        shutil.copytree(source, path)
        before = rows_deltars(path)
        use_shuffle(monkeypatch, kind)
        code, m = cli.run(["optimize", str(path), "--json", "--target-file-size", "60000", *args])
        assert code == 0 and m["status"] == "committed" and m["numAddedFiles"] >= 2, m
        assert rows_deltars(path) == before
        outputs[kind] = (_files_as_rows(path), m["numAddedFiles"], m["numRemovedFiles"])
    assert outputs["dataframe"] == outputs["rdd"], "dataframe vs rdd"
    assert outputs["scratch"] == outputs["rdd"], "scratch vs rdd"


def test_liquid_clustering_through_dataframes_writes_what_the_rdd_shuffle_writes(spark, monkeypatch, tmp_path):
    source = ClusteredTable(tmp_path / "source", files=12, rows=800).path
    outputs = {}
    for kind in SHUFFLES:
        path = tmp_path / kind
        shutil.copytree(source, path)
        before = rows_deltars(path)
        use_shuffle(monkeypatch, kind)
        code, m = cli.run(["optimize", str(path), "--json", "--target-file-size", "40000", "--full"])
        assert code == 0 and m["status"] == "committed" and m["numAddedFiles"] >= 2, m
        assert rows_deltars(path) == before
        outputs[kind] = (_files_as_rows(path), m["numAddedFiles"])
    assert outputs["dataframe"] == outputs["rdd"], "dataframe vs rdd"
    assert outputs["scratch"] == outputs["rdd"], "scratch vs rdd"
