"""delta-spark judges OPTIMIZE's row-group copy (``copy_row_groups="always"``) on the files it wrote
(parquet-java: timestamps as INT96, decimals as INT32/INT64, its own key-value metadata): the same rows and statistics as a
full rewrite of a copy of the table, what could not be copied counted per reason; delta-spark reads
the result, skips files by its statistics and keeps writing it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_delta_maint.delta.log.snapshot import Snapshot
from tests.app.jobs.copy_tables import run, stats_by_partition
from tests.delta_spark.test_row_group_copy import APPENDS, ROWS, rows, write_table

pytestmark = pytest.mark.delta_spark


def test_delta_spark_files_copied_as_a_full_rewrite_would_write_them(spark, tmp_path: Path):
    path = tmp_path / "table"
    write_table(spark, path)
    full = tmp_path / "never"
    shutil.copytree(path, full)
    before = rows(spark, path)
    code, m = run(path, local=False, copy_row_groups="always")
    assert code == 0 and m["status"] == "committed", m
    code, never = run(full, local=False, copy_row_groups="never")
    assert code == 0 and never["status"] == "committed", never
    assert rows(spark, path) == before == rows(spark, full)
    assert stats_by_partition(str(path)) == stats_by_partition(str(full))
    assert m["numRemovedFiles"] == APPENDS and m["numAddedFiles"] == 1
    # INT96 timestamps, INT32/INT64 decimals: the output takes an input's footer, which reads as the table's schema
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (APPENDS, {}), m
    add = Snapshot.load(str(path)).add_actions()[0]
    assert json.loads(add["stats"])["numRecords"] == APPENDS * ROWS
    assert spark.read.format("delta").load(str(path)).where("id > 100000").count() == 0
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 10 = 0")
    assert len(rows(spark, path)) == APPENDS * ROWS - APPENDS * ROWS // 10


def test_partitioned_files_holding_their_partition_column_are_copied_and_keep_it(spark, tmp_path: Path):
    """delta-spark 4.4 writes the partition columns into a partitioned table's files (its default): OPTIMIZE
    writes them too, so those files' row groups copy byte for byte; a file written without them (another writer)
    is re-encoded with its partition's values added. delta-spark reads the same rows and keeps writing."""
    import pyarrow.parquet as pq

    path = tmp_path / "parted"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING, p STRING) USING delta PARTITIONED BY (p)")
    for k in range(APPENDS):
        (spark.range(k * ROWS, (k + 1) * ROWS).selectExpr("id", "concat('s', id) AS s",
                                                          "IF(id % 2 = 0, 'even', 'odd') AS p")
         .repartition(1).write.format("delta").mode("append").save(str(path)))
    live = Snapshot.load(str(path)).add_actions()
    assert all("p" in pq.read_schema(str(path / a["path"])).names for a in live)   # delta-spark's default
    before = rows(spark, path)
    code, m = run(path, local=False, copy_row_groups="always")
    assert code == 0 and m["status"] == "committed", m
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (2 * APPENDS, {}), m
    assert m["numRemovedFiles"] == 2 * APPENDS and m["numAddedFiles"] == 2
    for add in Snapshot.load(str(path)).add_actions():
        column = pq.read_table(str(path / add["path"]), columns=["p"]).column("p").to_pylist()
        assert set(column) == {add["partitionValues"]["p"]}
        assert "p" not in json.loads(add["stats"])["minValues"]
    assert rows(spark, path) == before
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (-1, 'x', 'even')")
    assert len(rows(spark, path)) == len(before) + 1


def test_chunks_the_kernel_moved_read_back_in_delta_spark(spark, tmp_path: Path, monkeypatch):
    """Between local files every chunk is moved by the kernel (the copy through the interpreter fails here), with
    the statistics a full rewrite gives; delta-spark reads the same rows, skips files by them and keeps writing."""
    from airflow_delta_maint.delta.parquet import row_group_copy

    path = tmp_path / "table"
    write_table(spark, path)
    full = tmp_path / "never"
    shutil.copytree(path, full)
    before = rows(spark, path)
    moved: list[int] = []
    kernel = row_group_copy.copy_file_range
    monkeypatch.setattr(row_group_copy, "copy_file_range", lambda *a: moved.append(a[3]) or kernel(*a))
    monkeypatch.setattr(row_group_copy, "copy_chunk",
                        lambda *a, **k: pytest.fail("a chunk went through the interpreter"))
    code, m = run(path, local=True, copy_row_groups="always")
    assert code == 0 and m["status"] == "committed", m
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (APPENDS, {}), m
    assert moved and all(n > 0 for n in moved)
    monkeypatch.undo()
    code, never = run(full, local=True, copy_row_groups="never")
    assert code == 0 and never["status"] == "committed", never
    assert rows(spark, path) == before == rows(spark, full)
    assert stats_by_partition(str(path)) == stats_by_partition(str(full))
    assert spark.read.format("delta").load(str(path)).where("id > 100000").count() == 0
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 10 = 0")
    assert len(rows(spark, path)) == APPENDS * ROWS - APPENDS * ROWS // 10


def test_a_fleets_batched_history_reads_in_delta_spark(spark, tmp_path: Path):
    """A fleet's runs land in the history in one append; delta-spark reads every run of it."""
    from airflow_delta_maint.app.fleet import FleetSpec, run_fleet

    tables = []
    for name in ("one", "two"):
        path = tmp_path / name
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta")
        for k in range(3):
            spark.range(k * 10, (k + 1) * 10).coalesce(1).write.format("delta").mode("append").save(str(path))
        tables.append(str(path))
    history = tmp_path / "history"
    spec = FleetSpec.from_json({"tables": [{"table": t, "jobs": [{"job": "optimize", "args": ["--lease-seconds", "0"]},
                                                                 {"job": "checkpoint"}]} for t in tables],
                                "history_uri": str(history)})
    entries = run_fleet(spec, spark_allowed=False)
    assert [m["history"]["version"] for e in entries for m in e["jobs"]] == [1, 1, 1, 1]
    read = spark.read.format("delta").load(str(history))
    assert sorted((r.table_uri.rsplit("/", 1)[-1], r.operation, r.status) for r in read.collect()) == [
        (n, job, "committed") for n in ("one", "two") for job in ("checkpoint", "optimize")]
    assert spark.sql(f"DESCRIBE HISTORY delta.`{history}`").count() == 2  # its creation, one append
    for t in tables:
        assert spark.read.format("delta").load(t).count() == 30
