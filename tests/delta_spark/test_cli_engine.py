"""``delta-maint optimize --engine delta-spark`` run directly, outside spark-submit: the command line starts its
SparkSession with delta-spark's packages, extension and catalog, as the operators' submissions carry them, and
its standard output is the result alone. delta-spark (this process's session) judges the table afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_delta_maint.app.engines.delta_spark_jars import IVY_SETTINGS
from tests.delta_spark import judge
from tests.delta_spark_session import CACHE

BIN = Path(sys.executable).parent


def test_the_command_line_sets_up_delta_spark_for_its_own_session(spark, tmp_path):
    path = tmp_path / "events"
    spark.range(0, 400).selectExpr("id", "id % 7 AS v").repartition(6).write.format("delta").save(str(path))
    spark.range(400, 600).selectExpr("id", "id % 7 AS v").repartition(4).write.format("delta").mode("append") \
        .save(str(path))
    before = judge.read_state(spark, str(path))
    assert before.num_files == 10
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.update(DELTA_MAINT_CACHE_DIR=str(cache), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    # the table as a user types it, relative to the working folder; Ivy's cache: the machine's (no download)
    done = subprocess.run([str(BIN / "delta-maint"), "optimize", "events", "--engine", "delta-spark", "--master",
                           "local[1]", "--conf", f"spark.jars.ivy={CACHE / 'ivy'}", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout  # Ivy's ":: loading settings ::" went to standard error
    metrics = json.loads(lines[0])
    assert metrics["status"] == "committed" and metrics["engine"] == "delta-spark", metrics
    assert metrics["statement"] == f"OPTIMIZE delta.`{path}`"
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"]) == (10, 1)
    assert metrics["version_read"] == before.version and metrics["version_committed"] == before.version + 1
    # delta-spark's packages resolved with the hook's Ivy settings (Maven Central only), written into the cache
    assert (cache / "ivysettings-maven-central.xml").read_text() == IVY_SETTINGS
    assert ":: loading settings :: file = " + str(cache / "ivysettings-maven-central.xml") in done.stderr
    after = judge.read_state(spark, str(path))
    judge.assert_same_table(before, after)
    assert after.version == metrics["version_committed"] and after.num_files == 1
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    assert (history["version"], history["operation"]) == (after.version, "OPTIMIZE")
