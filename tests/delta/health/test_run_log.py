"""The maintenance run log: one row per job run, concurrent appends, self-maintenance, other readers."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.health.run_log import (RUN_LOG_SCHEMA, append_runs, create_run_log, maintain_run_log,
                                                      read_runs, run_record)
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "airflow"))
from delta_maint_testing import write_appends  # noqa: E402

AIRFLOW_IDS = {"AIRFLOW_CTX_DAG_ID": "nightly", "AIRFLOW_CTX_DAG_RUN_ID": "manual__2026-01-01T00:00:00+00:00",
               "AIRFLOW_CTX_TASK_ID": "maintain.optimize", "AIRFLOW_CTX_TRY_NUMBER": "2",
               "AIRFLOW_CTX_MAP_INDEX": "0"}


def rows_read_by_delta_rs(path: Path) -> pa.Table:
    """The run log's rows as delta-rs lists its files (read with pyarrow, see DESIGN.md)."""
    from deltalake import DeltaTable

    parts = [pq.read_table(uri.removeprefix("file://")) for uri in DeltaTable(str(path)).file_uris()]
    return pa.concat_tables(parts) if parts else RUN_LOG_SCHEMA.empty_table()


def test_every_status_appends_one_row(tmp_path, monkeypatch):
    table, history = tmp_path / "t", tmp_path / "history"
    write_appends(table, 6)
    for name, value in AIRFLOW_IDS.items():
        monkeypatch.setenv(name, value)
    runs = [(["optimize", str(table), "--dry-run"], "dry_run"),
            (["compact-log", str(table)], "committed"),
            (["compact-log", str(table)], "skipped"),
            (["optimize", str(tmp_path / "missing")], "failed")]
    results = []
    for argv, status in runs:
        code, metrics = run([*argv, "--json", "--history-uri", str(history)])
        assert metrics["status"] == status and code == (2 if status == "failed" else 0)
        assert metrics["history"]["written"] is True
        results.append(metrics)

    rows = read_runs(str(history)).to_pylist()
    assert [r["status"] for r in rows] == ["dry_run", "committed", "skipped", "failed"]
    for row, metrics in zip(rows, results):
        assert row["operation"] == metrics["operation"] and row["table_uri"] == metrics["table"]
        assert row["version_read"] == metrics["version_read"]
        assert row["version_committed"] == metrics["version_committed"]
        assert row["duration_s"] == metrics["duration_s"]
        assert row["started_at"].isoformat(timespec="milliseconds").replace("+00:00", "Z") == metrics["started_at"]
        assert row["ended_at"] >= row["started_at"]
        assert json.loads(row["metrics"]) == json.loads(json.dumps({k: v for k, v in metrics.items()
                                                                    if k != "history"}, default=str))
        assert (row["dag_id"], row["dag_run_id"], row["task_id"], row["try_number"], row["map_index"]) == \
            ("nightly", "manual__2026-01-01T00:00:00+00:00", "maintain.optimize", 2, 0)
        assert row["spark_app_id"] is None  # none of these runs started Spark
        assert json.loads(row["store_calls"]) == metrics["storeCalls"]  # local disk: no call counted
    assert json.loads(rows[1]["metrics"])["numWindowsWritten"] == 1  # compaction files, no table version
    assert rows[3]["error"] and "missing" in rows[3]["error"] and rows[0]["error"] is None
    # delta-rs reads the same rows
    assert sorted(rows_read_by_delta_rs(history).column("record_id").to_pylist()) == \
        sorted(r["record_id"] for r in rows)


def test_a_broken_history_location_does_not_fail_the_job(tmp_path):
    table = tmp_path / "t"
    write_appends(table, 6)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, metrics = run(["compact-log", str(table), "--json", "--history-uri", str(blocker / "history")])
    assert code == 0 and metrics["status"] == "committed"
    assert metrics["history"]["written"] is False and metrics["history"]["error"]
    # another Delta table is not a run log: refused, not written to, and the job still succeeds
    before = sorted(os.listdir(table / "_delta_log"))
    other = tmp_path / "other"
    write_appends(other, 1)
    other_log = sorted(os.listdir(other / "_delta_log"))
    code, metrics = run(["inspect", str(table), "--json", "--history-uri", str(other)])
    assert code == 0 and metrics["history"]["written"] is False
    assert "not a maintenance run log" in metrics["history"]["error"]
    assert sorted(os.listdir(other / "_delta_log")) == other_log
    assert sorted(os.listdir(table / "_delta_log")) == before


def test_ten_concurrent_appenders_lose_no_row(tmp_path):
    history = tmp_path / "history"
    per_writer, writers = 2, 10  # 20 appends: the log maintains itself twice (every 10) while they race
    ids: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(per_writer):
                row = run_record({"operation": "optimize", "table": f"/lake/t{n}", "status": "committed",
                                  "started_at": f"2026-01-01T00:00:{n:02d}.{i:03d}Z", "duration_s": 1.0})
                ids.append(row["record_id"])
                append_runs(str(history), [row], maintain_every=10)  # maintenance races the appends too
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    rows = read_runs(str(history))
    assert sorted(rows.column("record_id").to_pylist()) == sorted(ids)  # none lost, none twice
    assert len(ids) == writers * per_writer
    listing = list_log(Storage(str(history)))
    assert sorted(listing.commits) == list(range(len(listing.commits)))  # contiguous versions
    assert listing.checkpoints  # the run log checkpointed itself
    assert sorted(rows_read_by_delta_rs(history).column("record_id").to_pylist()) == sorted(ids)
    # compaction kept the file count far below one file per append
    assert Snapshot.load(str(history)).num_files < writers * per_writer / 2


def test_maintenance_compacts_deletes_expired_files_and_checkpoints(tmp_path):
    history = tmp_path / "history"
    for i in range(7):
        append_runs(str(history), [run_record({"operation": "vacuum", "table": "/t", "status": "skipped",
                                               "started_at": f"2026-01-0{i + 1}T00:00:00Z"})], maintain_every=0)
    before = sorted(read_runs(str(history)).column("record_id").to_pylist())
    first = maintain_run_log(str(history))
    assert first["compacted_files"] == 7 and first["expired_files_deleted"] == 0
    snap = Snapshot.load(str(history))
    assert snap.num_files == 1 and first["checkpoint_version"] == snap.version
    removed = [t["path"] for t in snap.tombstone_actions()]
    assert len(removed) == 7 and all((history / p).exists() for p in removed)  # kept for time travel
    # eight days later the removed files have left the retention window: deleted, rows unchanged
    later = maintain_run_log(str(history), now_ms=int(time.time() * 1000) + 8 * 86400_000)
    assert later["compacted_files"] == 0 and later["expired_files_deleted"] == 7
    assert not any((history / p).exists() for p in removed)
    assert sorted(read_runs(str(history)).column("record_id").to_pylist()) == before
    assert sorted(rows_read_by_delta_rs(history).column("record_id").to_pylist()) == before


def test_a_run_log_written_before_a_column_was_added_is_read_and_appended_to(tmp_path, monkeypatch):
    """A run log from before ``store_calls`` keeps its columns: its rows read with the new column null, new rows
    appended in its own columns (their store calls stay in ``metrics``), and its maintenance compacts it as it is."""
    from airflow_delta_maint.delta.health import run_log

    history = tmp_path / "history"
    calls = {"get": {"calls": 2, "bytes": 10, "objects": 0}}
    old = pa.schema([f for f in RUN_LOG_SCHEMA if f.name not in run_log.ADDED_COLUMNS])
    with monkeypatch.context() as patch:
        patch.setattr(run_log, "RUN_LOG_SCHEMA", old)
        append_runs(str(history), [run_record({"operation": "optimize", "table": "/t", "status": "committed"})])
    for _ in range(2):
        append_runs(str(history), [run_record({"operation": "vacuum", "table": "/t", "status": "committed",
                                               "storeCalls": calls})], maintain_every=0)
    assert set(rows_read_by_delta_rs(history).column_names) == set(old.names)  # the files keep the old columns
    rows = read_runs(str(history)).to_pylist()
    assert [r["store_calls"] for r in rows] == [None, None, None]
    assert [json.loads(r["metrics"]).get("storeCalls") for r in rows].count(calls) == 2
    assert maintain_run_log(str(history))["compacted_files"] == 3
    assert read_runs(str(history)).num_rows == 3
    fresh = tmp_path / "fresh"  # a new run log has the column
    append_runs(str(fresh), [run_record({"operation": "vacuum", "table": "/t", "status": "committed",
                                         "storeCalls": calls})])
    assert json.loads(read_runs(str(fresh)).to_pylist()[0]["store_calls"]) == calls


def test_refuses_what_is_not_a_run_log(tmp_path):
    other = tmp_path / "other"
    write_appends(other, 1)
    with pytest.raises(InvalidArgumentError, match="not a maintenance run log"):
        append_runs(str(other), [run_record({"operation": "inspect", "table": "/t", "status": "skipped"})])
    with pytest.raises(InvalidArgumentError, match="no run log rows"):
        append_runs(str(tmp_path / "h"), [])
    create_run_log(str(tmp_path / "h"))
    assert read_runs(str(tmp_path / "h")).num_rows == 0


@pytest.mark.spark
def test_spark_reads_the_run_log(tmp_path, spark):
    history = tmp_path / "history"
    ids = []
    for status in ("committed", "skipped", "dry_run", "failed"):
        row = run_record({"operation": "optimize", "table": "/t", "status": status, "duration_s": 2.5,
                          "started_at": "2026-01-01T00:00:00Z", "version_read": 3})
        ids.append(row["record_id"])
        append_runs(str(history), [row])
    from deltalake import DeltaTable

    files = DeltaTable(str(history)).file_uris()
    df = spark.read.parquet(*files)
    got = {r["record_id"]: r for r in df.collect()}
    assert sorted(got) == sorted(ids)
    assert {r["status"] for r in got.values()} == {"committed", "skipped", "dry_run", "failed"}
    assert all(r["version_read"] == 3 and r["duration_s"] == 2.5 for r in got.values())
    assert dict(df.dtypes)["started_at"] == "timestamp" and dict(df.dtypes)["try_number"] == "int"


def test_the_run_s_cpu_seconds_have_columns_of_their_own_and_older_run_logs_keep_theirs(tmp_path, monkeypatch):
    """``cpu_s``, its parts and the prediction beside it are columns (null where a run did not measure one); a run log
    written before they were added is read with them null and appended to in its own columns."""
    from airflow_delta_maint.delta.health import run_log

    measured = {"operation": "optimize", "table": "/t", "status": "committed", "started_at": "2026-11-28T01:00:00Z",
                "cpu_s": 7.5, "cpu_driver_s": 0.5, "cpu_tasks_s": 5.0, "cpu_executors_s": 2.0, "predicted_cpu_s": 6.0}
    fresh = tmp_path / "fresh"
    append_runs(str(fresh), [run_record(measured), run_record({**measured, "started_at": "2026-11-28T02:00:00Z",
                                                               "cpu_executors_s": None, "predicted_cpu_s": None,
                                                               "cpu_tasks_s": True})])
    first, second = read_runs(str(fresh)).to_pylist()
    assert [first[c] for c in run_log.CPU_COLUMNS] == [7.5, 0.5, 5.0, 2.0, 6.0]
    assert [second[c] for c in run_log.CPU_COLUMNS] == [7.5, 0.5, None, None, None]
    old = pa.schema([f for f in RUN_LOG_SCHEMA if f.name not in run_log.CPU_COLUMNS])  # with store_calls
    history = tmp_path / "history"
    with monkeypatch.context() as patch:
        patch.setattr(run_log, "RUN_LOG_SCHEMA", old)
        append_runs(str(history), [run_record(measured)])
    append_runs(str(history), [run_record(measured)], maintain_every=0)
    assert set(rows_read_by_delta_rs(history).column_names) == set(old.names)
    rows = read_runs(str(history)).to_pylist()
    assert [r["cpu_s"] for r in rows] == [None, None] and [json.loads(r["metrics"])["cpu_s"] for r in rows] == [7.5, 7.5]


def test_a_read_of_recent_runs_and_some_columns_leaves_out_only_older_files_and_other_columns(tmp_path):
    """The plan reads the last weeks of a history that grows every night, and only the columns it weighs."""
    history = tmp_path / "history"
    append_runs(str(history), [run_record({"operation": "optimize", "table": "/old", "status": "committed"})],
                maintain_every=0)
    (old_file,) = Snapshot.load(Storage(str(history))).add_actions()
    time.sleep(0.01)  # the next file is written at least a millisecond later
    append_runs(str(history), [run_record({"operation": "vacuum", "table": "/new", "status": "skipped"})],
                maintain_every=0)
    newer = max(int(a["modificationTime"]) for a in Snapshot.load(Storage(str(history))).add_actions())
    assert newer > int(old_file["modificationTime"])

    recent = read_runs(str(history), since_ms=int(old_file["modificationTime"]) + 1,
                       columns=["operation", "status"])
    assert recent.select(["table_uri", "operation", "status"]).to_pylist() == [
        {"table_uri": "/new", "operation": "vacuum", "status": "skipped"}]
    assert "metrics" not in recent.column_names
    everything = read_runs(str(history), columns=["operation"])
    assert sorted(everything.column("table_uri").to_pylist()) == ["/new", "/old"]
    assert read_runs(str(history)).num_rows == 2 and read_runs(str(history)).schema == RUN_LOG_SCHEMA
