"""End to end: OptimizeOperator(engine="delta-spark") through a real spark-submit (local[2]); the hook
resolves delta-spark's jars with --packages and its Maven Central Ivy settings (Ivy's cache: the one
this folder's session filled, so no download is repeated)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-delta-maint-tests-"))

from airflow_delta_maint.delta.log.snapshot import Snapshot  # noqa: E402
from tests.delta_spark_session import CACHE  # noqa: E402

pytestmark = [pytest.mark.delta_spark, pytest.mark.e2e]


def test_optimize_operator_runs_delta_spark_through_spark_submit(spark, tmp_path, monkeypatch):
    from airflow_delta_maint.operators.maintenance import OptimizeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("DELTA_MAINT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "events"
    spark.sql("SELECT id, CAST(id % 2 AS STRING) AS p, id * 3 AS v FROM range(0, 400)").repartition(4) \
        .write.format("delta").partitionBy("p").option("delta.enableDeletionVectors", "true").save(str(path))
    for i in range(2):
        spark.sql(f"SELECT id, CAST(id % 2 AS STRING) AS p, id * 3 AS v FROM range({400 + i * 50}, {450 + i * 50})") \
            .repartition(2).write.format("delta").mode("append").save(str(path))
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0")
    rows = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    before = Snapshot.load(str(path))

    op = OptimizeOperator(task_id="optimize", table_uri=str(path), engine="delta-spark",
                          conf={"spark.jars.ivy": str(CACHE / "ivy")})
    metrics = op.execute(context={})

    hook = op._hook
    assert hook is not None and hook._packages == "io.delta:delta-spark_2.13:4.4.0"
    settings = Path(hook._conf["spark.jars.ivySettings"])
    assert settings.parent == tmp_path / "cache" and "https://repo1.maven.org/maven2/" in settings.read_text()
    assert hook._conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert metrics["engine"] == "delta-spark" and metrics["status"] == "committed", metrics
    assert metrics["statement"] == f"OPTIMIZE delta.`{path}`"
    after = Snapshot.load(str(path))
    assert after.version == metrics["version_committed"] == before.version + 1
    assert after.num_files == before.num_files - metrics["numRemovedFiles"] + metrics["numAddedFiles"]
    assert metrics["numRemovedFiles"] == before.num_files and metrics["numAddedFiles"] == 2
    assert metrics["numDeletionVectorsRemoved"] > 0
    assert sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect()) == rows
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
