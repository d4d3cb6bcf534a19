"""The compact-log job: command line, metrics contract, concurrent runs, no Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.delta.log.compaction import reconcile_window, render_window
from airflow_delta_maint.delta.log.listing import commit_key, parse_json_lines
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage

REPO = Path(__file__).resolve().parents[3]
CONTRACT = {"operation", "table", "status", "version_read", "version_committed", "started_at", "duration_s"}


def _table(path: Path, commits: int) -> Path:
    for i in range(commits):
        write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64())}), mode="append")
    return path


def _compactions(path: Path) -> list[str]:
    return sorted(f for f in os.listdir(path / "_delta_log") if f.endswith(".compacted.json"))


def test_metrics_contract_and_json_output(tmp_path: Path, capsys) -> None:
    t = _table(tmp_path / "t", 12)
    code, m = run(["compact-log", str(t), "--json", "--interval", "4"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(m, default=str))
    assert CONTRACT <= set(m)
    assert m["operation"] == "compact-log" and m["status"] == "committed"
    assert m["version_read"] == 11 and m["version_committed"] is None
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(1, 4), (5, 8)]
    assert m["numWindowsWritten"] == 2 and m["numCommitsReconciled"] == 8 and m["numActionsReconciled"] >= 8
    assert m["numBytesWritten"] == sum(os.path.getsize(t / "_delta_log" / f) for f in _compactions(t))
    assert m["windows_skipped"] == [] and m["checkpoint"] is None and m["numFilesCleaned"] == 0
    assert isinstance(m["duration_s"], float)


def test_human_output_and_rerun(tmp_path: Path, capsys) -> None:
    t = _table(tmp_path / "t", 7)
    assert run(["compact-log", str(t)])[0] == 0
    out = capsys.readouterr().out
    assert "windows written  1" in out and "1..5" in out
    code, m = run(["compact-log", str(t)])
    assert code == 0 and m["status"] == "skipped" and m["numWindowsWritten"] == 0


def test_checkpoint_interval_and_size_guard_options(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 9)
    code, m = run(["compact-log", str(t), "--max-window-bytes", "10"])
    assert code == 0 and m["status"] == "skipped"
    assert [(w["start"], w["end"]) for w in m["windows_skipped"]] == [(1, 5)]
    assert "max_window_bytes" in m["windows_skipped"][0]["reason"]
    code, m = run(["compact-log", str(t), "--checkpoint-interval", "5"])
    assert code == 0 and m["status"] == "committed" and m["version_committed"] == 8
    assert m["checkpoint"]["version"] == 8 and m["checkpoint"]["already_existed"] is False
    assert DeltaTable(str(t)).version() == 8


def test_bad_input_fails_with_one_message(tmp_path: Path, capsys) -> None:
    code, m = run(["compact-log", str(tmp_path / "missing"), "--json"])
    assert code == 2 and m["status"] == "failed" and "does not exist" in m["error"]
    t = _table(tmp_path / "t", 3)
    code, m = run(["compact-log", str(t), "--interval", "1"])
    assert code == 2 and m["error_type"] == "InvalidArgumentError"
    assert _compactions(t) == []


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "airflow_delta_maint.app.cli", "compact-log", *args, "--json"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_concurrent_runs_leave_one_valid_file_per_window(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 61)
    procs = [_cli(str(t), "--interval", "2"), _cli(str(t), "--interval", "2")]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    expected = [(s, s + 1) for s in range(1, 60, 2)]
    # each window was created by exactly one of the two runs
    assert sum(r["numWindowsWritten"] for r in results) == len(expected)
    names = [f"{s:020d}.{e:020d}.compacted.json" for s, e in expected]
    assert _compactions(t) == names
    storage = Storage(str(t))
    for s, e in expected:
        commits = [parse_json_lines(storage.read(commit_key(v)), str(v)) for v in range(s, e + 1)]
        assert (t / "_delta_log" / f"{s:020d}.{e:020d}.compacted.json").read_bytes() == \
            render_window(reconcile_window(commits, storage.root))
    with_c, without = Snapshot.load(str(t), compactions="trust"), Snapshot.load(str(t), compactions="ignore")
    assert sorted(with_c.paths) == sorted(without.paths) and len(with_c.segment.compactions) == 30
    assert DeltaTable(str(t)).version() == 60 and len(DeltaTable(str(t)).file_uris()) == 61


def test_the_job_does_not_start_spark(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 6)
    code = (
        "import sys\n"
        "from airflow_delta_maint.app.cli import run\n"
        f"code, m = run(['compact-log', {str(t)!r}])\n"
        "ps = sys.modules.get('pyspark')\n"
        "print(code, m['numWindowsWritten'], ps is not None and ps.SparkContext._active_spark_context is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 1 False"
