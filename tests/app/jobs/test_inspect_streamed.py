"""``inspect`` of a large table, its files streamed into aggregates, reports exactly what the
in-memory report says, on random histories (every kind of checkpoint, deletion vectors, re-adds,
tombstones, VACUUM runs) and through the job's entry point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.hypothesis_profiles import examples

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.app.jobs import inspect as inspect_job
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.app.settings import STREAM_MIN_FILES_ENV
from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state
from tests.delta.log.test_state_stream import NOW, histories, write_history


def _add_vacuum(root: Path) -> None:
    """A completed VACUUM after the history, so that some tombstones count as deleted."""
    log = root / "_delta_log"
    latest = max(int(p.name[:20]) for p in log.glob("*.json"))
    start = {"commitInfo": {"timestamp": NOW, "operation": "VACUUM START",
                            "operationParameters": {"retentionCheckEnabled": True, "specifiedRetentionMillis": 0,
                                                    "defaultRetentionMillis": 0}}}
    end = {"commitInfo": {"timestamp": NOW + 1, "operation": "VACUUM END", "operationParameters": {"status": "COMPLETED"}}}
    (log / f"{latest + 1:020d}.json").write_text(json.dumps(start) + "\n")
    (log / f"{latest + 2:020d}.json").write_text(json.dumps(end) + "\n")


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(history=histories())
def test_streamed_report_equals_the_in_memory_one(tmp_path_factory, history):
    root = tmp_path_factory.mktemp("t")
    write_history(root, *history)
    if history[2] and len(history[2]) % 2:
        _add_vacuum(root)
    snapshot = Snapshot.load(str(root))
    for small in (50, 1_000, 10**9):
        expected = inspect_job.inspect_table(snapshot, small)
        try:
            got = inspect_job.inspect_table(open_state(str(root)), small)
        except StreamFallback:
            assert snapshot.distrusted
            return
        assert got == expected


def test_inspect_job_streams_large_tables(tmp_path, monkeypatch):
    commits = [[{"commitInfo": {"timestamp": NOW, "operation": "WRITE"}}] +
               [{"add": {"path": f"p={i % 3}/f{v}-{i}.parquet", "partitionValues": {"p": str(i % 3)},
                         "size": 10 * i, "modificationTime": NOW, "dataChange": True,
                         "stats": json.dumps({"numRecords": i})}} for i in range(30)] for v in range(1, 4)]
    commits.append([{"commitInfo": {"timestamp": NOW, "operation": "DELETE"}},
                    {"remove": {"path": "p=1/f1-1.parquet", "deletionTimestamp": NOW, "dataChange": True, "size": 10}}])
    write_history(tmp_path / "t", True, 1000, commits, {3: "multipart"})
    other = tmp_path / "u"
    shutil.copytree(tmp_path / "t", other)
    used = []
    original = inspect_job.inspect_table
    monkeypatch.setattr(inspect_job, "inspect_table",
                        lambda state, *a: used.append(type(state).__name__) or original(state, *a))
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, str(10**12))
    code, a = run(["inspect", str(tmp_path / "t"), "--json"])
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "1")
    code2, b = run(["inspect", str(other), "--json"])
    assert code == code2 == 0 and used == ["Snapshot", "StreamedState"]
    for m in (a, b):
        for k in ("table", "started_at", "duration_s", "cpu_s", "cpu_driver_s"):
            m.pop(k, None)
    assert a == b and a["num_files"] == 89
