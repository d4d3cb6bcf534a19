"""End to end: ``airflow dags test`` of the example DAGs with real spark-submit in local mode, and
failures that must be clear and change nothing."""

from __future__ import annotations

import json
import socket

import pyarrow.parquet as pq
import pytest
from delta_maint_testing import dags_test, log_files, task_results, write_appends
from deltalake import DeltaTable

pytestmark = pytest.mark.e2e


def rows(path) -> list[int]:
    """The table's ids at its latest version, read through delta-rs' file list."""
    ids: list[int] = []
    for uri in DeltaTable(str(path)).file_uris():
        ids += pq.read_table(uri.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def test_nightly_dag(airflow_home, tmp_path):
    table = tmp_path / "nightly"
    write_appends(table, 10)  # versions 0..9, 20 small files in 2 partitions
    before = rows(table)
    small = [tmp_path / f"small{i}" for i in range(2)]
    for path in small:  # already compacted: their work (log compaction, lite VACUUM) runs on the worker
        write_appends(path, 6)
        DeltaTable(str(path)).optimize.compact()
    small_before = {path: rows(path) for path in small}
    conf = {"vacuum_retention_hours": 0, "vacuum_ignore_retention_check": True}
    result = dags_test(airflow_home, "delta_maintenance_nightly", conf,
                       AIRFLOW_VAR_DELTA_MAINT_TABLES=json.dumps([str(table)]),
                       AIRFLOW_VAR_DELTA_MAINT_SMALL_TABLES=json.dumps([str(p) for p in small]))
    state, tasks = task_results(airflow_home, "delta_maintenance_nightly")
    assert state == "success", result.stdout[-6000:] + result.stderr[-3000:]
    assert tasks[("list_tables", -1)]["value"] == [str(table)]

    optimize = tasks[("maintain.optimize", 0)]["value"]
    assert optimize["operation"] == "optimize" and optimize["status"] == "committed"
    assert optimize["table"] == str(table)
    assert optimize["version_read"] == 9 and optimize["version_committed"] == 10
    assert optimize["numRemovedFiles"] == 20 and optimize["numAddedFiles"] == 2

    # versions 0..10 and no checkpoint (delta-rs writes one every 100 commits, OPTIMIZE none): the default
    # interval of 5 has two whole windows, 1..5 and 6..10
    compact = tasks[("maintain.compact_log", 0)]["value"]
    assert compact["operation"] == "compact-log" and compact["status"] == "committed", compact
    assert compact["version_read"] == 10 and compact["last_checkpoint_version"] is None
    assert [(w["start"], w["end"], w["numCommits"]) for w in compact["windows_written"]] == [(1, 5, 5), (6, 10, 5)]
    assert compact["numWindowsSkipped"] == 0 and compact["version_committed"] is None
    assert {f"{s:020d}.{e:020d}.compacted.json" for s, e in [(1, 5), (6, 10)]} <= set(log_files(table))

    vacuum = tasks[("maintain.vacuum", 0)]["value"]
    assert vacuum["operation"] == "vacuum" and vacuum["status"] == "committed"
    assert vacuum["numFilesDeleted"] == 20

    assert rows(table) == before
    assert len(DeltaTable(str(table)).file_uris()) == 2

    fleet = tasks[("maintain_small_tables", -1)]["value"]
    assert [e["table"] for e in fleet] == [str(p) for p in small]
    for entry in fleet:
        optimize, compact_log, vacuum = entry["jobs"]
        assert optimize["status"] == "skipped" and "nothing to compact" in optimize["reason"]
        assert compact_log["status"] == "committed" and compact_log["numWindowsWritten"] == 1
        assert vacuum["status"] == "committed" and vacuum["numFilesDeleted"] == 12
    assert {path: rows(path) for path in small} == small_before
    assert "Every job with work is small enough for this worker" in result.stdout + result.stderr


def test_on_commits_dag(airflow_home, tmp_path):
    table = tmp_path / "on_commits"
    write_appends(table, 6)
    before = rows(table)
    result = dags_test(airflow_home, "delta_maintenance_on_commits", {"min_commits": 4},
                       AIRFLOW_VAR_DELTA_MAINT_TABLE=str(table))
    state, tasks = task_results(airflow_home, "delta_maintenance_on_commits")
    assert state == "success", result.stdout[-6000:] + result.stderr[-3000:]
    # no OPTIMIZE among the last 4 commits: the sensor saw those 4
    assert tasks[("wait_for_commits", -1)]["value"] == {"from_version": 2, "to_version": 5, "commits": 4}
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["version_read"] == 5
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    assert rows(table) == before
    assert DeltaTable(str(table)).history(1)[0]["operation"] == "OPTIMIZE"


def test_failures_are_clear_and_change_nothing(airflow_home, small_table):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    before = log_files(small_table)
    result = dags_test(
        airflow_home, "delta_maint_failures",
        DELTA_MAINT_TEST_TABLE=str(small_table),
        AIRFLOW_CONN_SPARK_UNREACHABLE=json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                   "port": closed_port}),
    )
    state, tasks = task_results(airflow_home, "delta_maint_failures")
    out = result.stdout + result.stderr
    assert state == "failed"
    assert {task_id: t["state"] for (task_id, _), t in tasks.items()} == {
        "missing_connection": "failed", "unreachable_master": "failed", "missing_table": "failed",
        "bad_option": "failed", "missing_table_in_spark": "failed"}
    assert "The Spark connection 'no_such_spark' is not defined" in out
    assert f"the Spark master spark://127.0.0.1:{closed_port} is unreachable" in out
    assert f"table path does not exist: {small_table}_missing" in out
    assert "invalid options for inspect" in out
    # the application's own message, read from the metrics file the failed driver wrote
    assert f"delta-maint inspect failed: table path does not exist: {small_table}_gone" in out
    assert log_files(small_table) == before
