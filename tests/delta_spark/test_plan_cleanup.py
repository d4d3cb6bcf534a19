"""delta-spark judges the log a night's plan left after it chose the log's cleanup by its estimate from the look: the
files the look counted are the files the run deleted, and delta-spark reads the same table, loads its checkpoint
without the commits before it and keeps writing it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.lake_plan import table_inputs
from tests.delta_spark.judge import assert_log_files_load, assert_same_table, read_state

pytestmark = pytest.mark.delta_spark

APPENDS = 6


def test_a_plan_deletes_the_expired_log_its_look_counted_and_delta_spark_reads_the_same_table(spark, tmp_path: Path):
    path = tmp_path / "table"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING) USING delta")
    for k in range(APPENDS):
        spark.range(k * 100, (k + 1) * 100).selectExpr("id", "concat('s', id) AS s").write.format("delta") \
            .mode("append").save(str(path))
    code, checkpoint = run_in_process("checkpoint", str(path), [])
    assert code == 0 and checkpoint["status"] == "committed", checkpoint
    old = time.time() - 40 * 86400  # older than the 30 days of the default log retention
    for v in range(APPENDS + 1):
        os.utime(path / "_delta_log" / f"{v:020d}.json", (old, old))
    before = read_state(spark, str(path))
    counted = table_inputs(str(path), {})
    # the versions before the checkpoint's: their commits, delta-spark's version checksums, Hadoop's checksum files
    expired = [f for f in os.listdir(path / "_delta_log") if f.lstrip(".")[:20].isdigit() and int(f.lstrip(".")[:20]) < APPENDS]
    assert counted.expired_log_files == len(expired) >= 2 * APPENDS

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tables": [{"table": str(path), "jobs": [{"job": "cleanup-log"}]}]}))
    with contextlib.redirect_stdout(io.StringIO()):
        code, result = cli.run(["plan-lake", "--json", "--spec", str(spec), "--budget", "cpu_s=600", "--local"])
    assert code == 0 and [p["job"] for p in result["plan"]["chosen"]] == ["cleanup-log"], result
    (ran,) = result["tables"][0]["jobs"]
    assert ran["status"] == "committed" and ran["numLogFilesDeleted"] == counted.expired_log_files, ran
    assert not any((path / "_delta_log" / f).exists() for f in expired)

    after = read_state(spark, str(path))
    assert_same_table(before, after)
    assert_log_files_load(spark, str(path), after)  # its checkpoint loads without the commits before it
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (100000, 'new')")
    assert spark.read.format("delta").load(str(path)).count() == APPENDS * 100 + 1
