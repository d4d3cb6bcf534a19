"""End to end: ``airflow dags test`` with the OpenLineage provider and a file transport; the table is
an outlet of OPTIMIZE (committed: an asset event with the metrics) and of log compaction (skipped: none)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from delta_maint_testing import dags_test, task_results, write_appends

pytestmark = pytest.mark.e2e


def test_lineage_and_asset_events(airflow_home, tmp_path):
    table = tmp_path / "lineage"
    write_appends(table, 6)  # versions 0..5, 12 small files
    lineage_file = tmp_path / "openlineage.jsonl"
    result = dags_test(
        airflow_home, "delta_maint_lineage",
        DELTA_MAINT_LINEAGE_TABLE=str(table),
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(lineage_file),
                                                    "append": True}),
        AIRFLOW__OPENLINEAGE__NAMESPACE="delta_maint_tests",
        AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="True",
    )
    out = result.stdout + result.stderr
    state, tasks = task_results(airflow_home, "delta_maint_lineage")
    assert state == "success", out[-6000:]
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["numAddedFiles"] == 2
    assert tasks[("compact_log", -1)]["value"]["status"] == "skipped"

    # one asset event: OPTIMIZE's, carrying its metrics; the skipped compaction emitted none
    with sqlite3.connect(airflow_home / "airflow.db") as conn:
        rows = conn.execute(
            "SELECT e.source_task_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.uri = ? ORDER BY e.id", (f"file://{table}",)).fetchall()
    assert [task for task, _ in rows] == ["optimize"]
    assert json.loads(rows[0][1]) == optimize

    # OpenLineage: start and complete events of both tasks with the table as input and output
    events = [json.loads(line) for line in lineage_file.read_text().splitlines() if line.strip()]
    by_task = {}
    for event in events:
        job = event["job"]["name"]
        if job.startswith("delta_maint_lineage."):
            by_task.setdefault(job.split(".", 1)[1], {})[event["eventType"]] = event
    assert set(by_task["optimize"]) >= {"START", "COMPLETE"}, sorted(by_task)
    complete = by_task["optimize"]["COMPLETE"]
    assert complete["inputs"][0]["namespace"] == "file" and complete["inputs"][0]["name"] == str(table)
    output = complete["outputs"][0]
    assert (output["namespace"], output["name"]) == ("file", str(table))
    stats = output["outputFacets"]["outputStatistics"]
    assert stats["fileCount"] == 2 and stats["size"] == optimize["numAddedBytes"]
    facet = complete["run"]["facets"]["deltaMaintenance"]["metrics"]
    assert facet["numRemovedFiles"] == 12 and facet["version_committed"] == optimize["version_committed"]
    assert by_task["compact_log"]["COMPLETE"]["run"]["facets"]["deltaMaintenance"]["metrics"]["status"] == "skipped"

    # the parent job reached spark-submit's conf (the run id of the optimize task's START event)
    run_id = by_task["optimize"]["START"]["run"]["runId"]
    submitted = out + _task_log(airflow_home, "optimize")  # the logged spark-submit command
    assert f"spark.openlineage.parentRunId={run_id}" in submitted
    assert "spark.openlineage.parentJobName=delta_maint_lineage.optimize" in submitted


def _task_log(home, task_id: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*.log")
                     if f"task_id={task_id}" in str(p) and "delta_maint_lineage" in str(p))
