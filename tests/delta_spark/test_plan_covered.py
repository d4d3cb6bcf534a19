"""delta-spark judges the night a plan ran a checkpoint and left the log compaction it covers: the table it reads
is the same, the checkpoint loads without the commits before it, the table keeps being written, and the
maintenance history the night appended to (the covered compaction recorded as skipped, not deferred) reads in
delta-spark as our reader reads it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.health.lake_budget import NOTHING_LEFT
from airflow_delta_maint.delta.health.run_log import read_runs
from tests.delta_spark.judge import assert_keeps_writing, assert_log_files_load, assert_same_table, read_state

pytestmark = pytest.mark.delta_spark

APPENDS = 24


def test_a_plan_runs_the_checkpoint_leaves_the_compaction_it_covers_and_delta_spark_reads_both(spark, tmp_path: Path):
    path = tmp_path / "table"
    # delta-spark's own checkpoints every 10 commits would leave the compaction nothing: only ours here
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '1000')")
    spark.range(0, 100).selectExpr("id", "concat('s', id) AS s").write.format("delta").mode("append").save(str(path))
    code, first = run_in_process("checkpoint", str(path), [])
    assert code == 0 and first["status"] == "committed", first
    for k in range(1, APPENDS + 1):  # the next checkpoint gains every commit since: it goes before the compaction
        spark.range(k * 100, (k + 1) * 100).selectExpr("id", "concat('s', id) AS s").write.format("delta") \
            .mode("append").save(str(path))
    before = read_state(spark, str(path))
    history = tmp_path / "history"

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tables": [{"table": str(path),
                                            "jobs": [{"job": "checkpoint"}, {"job": "compact-log"}]}]}))
    with contextlib.redirect_stdout(io.StringIO()):
        code, result = cli.run(["plan-lake", "--json", "--spec", str(spec), "--budget", "cpu_s=600",
                                "--history-uri", str(history), "--local"])
    assert code == 0, result
    assert [p["job"] for p in result["plan"]["chosen"]] == ["checkpoint"], result["plan"]
    assert [p["job"] for p in result["plan"]["nothing_to_gain"]] == ["compact-log"]
    jobs = {j["operation"]: j for j in result["tables"][0]["jobs"]}
    assert jobs["checkpoint"]["status"] == "committed", jobs
    assert (jobs["compact-log"]["status"], jobs["compact-log"]["reason"]) == ("skipped", NOTHING_LEFT)
    assert not list((path / "_delta_log").glob("*.compacted.json"))

    after = read_state(spark, str(path))
    assert_same_table(before, after)
    assert_log_files_load(spark, str(path), after)  # the night's checkpoint loads without the commits before it
    assert_keeps_writing(spark, str(path), before.version, kept_versions=[before.version], every_statement=False)

    ours = read_runs(str(history)).to_pylist()
    theirs = [r.asDict() for r in spark.read.format("delta").load(str(history)).collect()]
    assert sorted(r["record_id"] for r in theirs) == sorted(r["record_id"] for r in ours)
    skipped = [r for r in theirs if r["operation"] == "compact-log"]
    assert [(r["status"], json.loads(r["metrics"])["reason"]) for r in skipped] == [("skipped", NOTHING_LEFT)]
    assert not json.loads(skipped[0]["metrics"]).get("deferred")
