"""OPTIMIZE of a large table in rounds (the streaming threshold forced down so that small tables
take that path) commits what the whole plan commits: the same files removed, the same rows, the
same counts; a concurrent delete during a round is carried onto its output; Z-order runs in
rounds on Spark. Rows are compared with the writer's model before and after every run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.jobs import optimize_large
from airflow_delta_maint.app.rewrite import commit as optimize_commit
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.app.settings import STREAM_MIN_FILES_ENV
from airflow_delta_maint.delta.protocol.actions import dv_unique_id
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize_rebase import before_commit, check, ids_in, left_behind, optimize_local
from tests.dv_writer import DVTable, read_rows

ROUND_ENV = "DELTA_MAINT_OPTIMIZE_ROUND_FILES"


def _table(path: Path) -> DVTable:
    table = DVTable(path).create(["a", "b", "c", "d"], 4, 10)
    table.delete(ids_in(table.path, "a")[:3] + ids_in(table.path, "c")[5:7])
    table.append("b", 5)
    return table


def _copy(table: DVTable, dest: Path) -> DVTable:
    shutil.copytree(table.path, dest)
    twin = DVTable.__new__(DVTable)
    twin.__dict__.update(table.__dict__)
    twin.path = dest
    twin.rows = dict(table.rows)
    return twin


def _removed(path: Path, versions: list[int]) -> list[tuple[str, str]]:
    storage = Storage(str(path))
    return sorted((a["remove"]["path"], dv_unique_id(a["remove"].get("deletionVector")))
                  for v in versions for a in read_commit(storage, v) if "remove" in a)


def _spy(monkeypatch) -> list[int]:
    used: list[int] = []
    original = optimize_large._rounds
    monkeypatch.setattr(optimize_large, "_rounds", lambda *a, **k: used.append(1) or original(*a, **k))
    return used


def test_rounds_commit_what_the_whole_plan_commits(tmp_path, monkeypatch):
    table = _table(tmp_path / "t")
    whole, rounds = _copy(table, tmp_path / "whole"), _copy(table, tmp_path / "rounds")
    used = _spy(monkeypatch)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, str(10**12))
    a = optimize_local(whole.path)
    assert used == [] and "numRounds" not in a
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv(ROUND_ENV, "5")
    dry = optimize_local(rounds.path, "--dry-run")
    b = optimize_local(rounds.path)
    assert used == [1, 1]
    assert dry["plan"]["num_files_to_rewrite"] == b["numRemovedFiles"] == a["numRemovedFiles"] == 17
    assert b["numRounds"] == 4 and len(b["versions_committed"]) >= 4  # a partition per round here
    for key in ("status", "numRemovedFiles", "numAddedFiles", "numRemovedBytes", "numDeletionVectorsRemoved",
                "numBins", "totalConsideredFiles", "totalFilesSkipped", "minFileSize", "maxFileSize"):
        assert a[key] == b[key], key
    assert _removed(whole.path, a["versions_committed"]) == _removed(rounds.path, b["versions_committed"])
    check(whole)
    check(rounds)
    assert read_rows(whole.path)[0] == read_rows(rounds.path)[0] == table.rows
    assert left_behind(rounds.path) == set()
    again = optimize_local(rounds.path)
    assert again["status"] == "skipped" and again["numRemovedFiles"] == 0


def test_auto_and_purge_in_rounds(tmp_path, monkeypatch):
    table = _table(tmp_path / "t")
    whole, rounds = _copy(table, tmp_path / "whole"), _copy(table, tmp_path / "rounds")
    used = _spy(monkeypatch)
    for args in (["--purge"], ["--policy", "auto", "--all-partitions", "--min-num-files", "5", "--max-partitions", "2"]):
        monkeypatch.setenv(STREAM_MIN_FILES_ENV, str(10**12))
        a = optimize_local(whole.path, *args)
        monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
        monkeypatch.setenv(ROUND_ENV, "1")
        b = optimize_local(rounds.path, *args)
        assert a["status"] == b["status"] == "committed", (a, b)
        assert a.get("autoCompaction") == b.get("autoCompaction")
        assert _removed(whole.path, a["versions_committed"]) == _removed(rounds.path, b["versions_committed"])
        check(whole)
        check(rounds)
    assert len(used) == 2


def test_a_concurrent_delete_during_a_round_is_carried(tmp_path, monkeypatch):
    table = _table(tmp_path / "t")
    victims = ids_in(table.path, "b")[1:4]
    seen: list[int] = []
    bases: list[int] = []
    original = optimize_large.live_files_among
    monkeypatch.setattr(optimize_large, "live_files_among",
                        lambda state, paths: bases.append(state.version) or original(state, paths))

    def writer(attempt: optimize_commit.CommitAttempt) -> None:
        seen.append(attempt.base_version)
        if any(b.partition_values == {"p": "b"} for b in attempt.bins) and not bases:
            table.delete(victims)

    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv(ROUND_ENV, "1")
    with before_commit(writer):
        m = optimize_local(table.path, "--bins-per-commit", "1")
    assert m["status"] == "committed" and m["numBinsRebased"] == 1 and m["numDeletionVectorsCarried"] == 1
    assert len(bases) == 1  # the rebase read the live inputs at the writer's version, streamed
    check(table)
    assert left_behind(table.path) == set()


def test_a_run_killed_between_rounds_keeps_its_rows_and_the_next_run_removes_its_spill(tmp_path, monkeypatch):
    """SIGKILL after the first round committed: the rows are the model's, the spill folder stays
    only until the next run, which finishes the work."""
    table = _table(tmp_path / "t")
    version_before = Snapshot.load(str(table.path)).version
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]), TMPDIR=str(scratch_dir),
               **{STREAM_MIN_FILES_ENV: "0", ROUND_ENV: "5"})
    child = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os, signal, sys
        from airflow_delta_maint.app.execution import run_in_process
        from airflow_delta_maint.app.jobs import optimize_large
        first = optimize_large._run_round
        calls = []
        def killed_at_the_second(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return first(*args, **kwargs)
        optimize_large._run_round = killed_at_the_second
        run_in_process("optimize", sys.argv[1], [], spark_allowed=False)
    """), str(table.path)], env=env, timeout=300, capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    spills = [p for p in scratch_dir.iterdir() if p.name.startswith("delta-maint-optimize-")]
    assert len(spills) == 1 and any(spills[0].glob("round-*.parquet"))
    assert Snapshot.load(str(table.path)).version > version_before  # the first round committed
    check(table)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_dir))
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv(ROUND_ENV, "5")
    m = optimize_local(table.path)
    assert m["status"] == "committed"
    assert not spills[0].exists() and list(scratch_dir.iterdir()) == []
    check(table)
    assert optimize_local(table.path)["status"] == "skipped"


@pytest.mark.spark
def test_zorder_in_rounds_on_spark(tmp_path, spark, monkeypatch):
    table = _table(tmp_path / "t")
    used = _spy(monkeypatch)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv(ROUND_ENV, "9")  # partitions a and b (4 and 5 files), then c and d
    code, m = cli.run(["optimize", str(table.path), "--json", "--zorder-by", "v"])
    assert code == 0, m
    files_before = 4 * 4 + 1
    assert used == [1] and m["status"] == "committed" and m["numRounds"] == 2
    assert m["numRemovedFiles"] == files_before and m["numAddedFiles"] == 4
    check(table)
    assert Snapshot.load(str(table.path)).num_files == 4


@pytest.mark.spark
def test_liquid_clustering_in_rounds_makes_the_zcubes_of_the_whole_plan(tmp_path, spark, monkeypatch):
    from tests.app.jobs.test_optimize_liquid import ClusteredTable

    source = ClusteredTable(tmp_path / "t", files=12, rows=50)
    size = max(a["size"] for a in Snapshot.load(str(source.path)).add_actions())
    whole, rounds = tmp_path / "whole", tmp_path / "rounds"
    shutil.copytree(source.path, whole)
    shutil.copytree(source.path, rounds)
    before = read_table_rows(source.path)
    args = ["--target-cube-size", str(3 * size)]  # ZCubes of three files: four of them
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, str(10**12))
    code, a = cli.run(["optimize", str(whole), "--json", *args])
    assert code == 0, a
    used = _spy(monkeypatch)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv(ROUND_ENV, "5")
    code, b = cli.run(["optimize", str(rounds), "--json", *args])
    assert code == 0, b
    assert used == [1] and b["numRounds"] == 2  # two ZCubes of three files, then two more
    assert a["clusteringStats"] == b["clusteringStats"] and b["clusteringStats"]["numOutputZCubes"] == 4
    assert "clusteringQualityBefore" in a and "clusteringQualityBefore" not in b
    assert a["numRemovedFiles"] == b["numRemovedFiles"] == 12
    cubes = []
    for path in (whole, rounds):
        live = Snapshot.load(str(path)).add_actions()
        cubes.append(sorted(len([x for x in live if x["tags"]["ZCUBE_ID"] == c])
                            for c in {x["tags"]["ZCUBE_ID"] for x in live}))
        assert all(x.get("clusteringProvider") == "liquid" for x in live)
        assert read_table_rows(path) == before
    assert cubes[0] == cubes[1]


def read_table_rows(path: Path) -> list[tuple]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(path)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("args, message", [
    (["--batch-bytes", "0"], "batch_bytes must be positive, got 0"),
    (["--max-concurrent-bins", "0"], "max_concurrent_bins must be positive, got 0"),
    (["--lease-seconds", "-1"], "lease_seconds must be 0 (no reservation) or positive, got -1"),
    (["--wait-for-writer", "-2"], "wait_for_writer must not be negative, got -2.0"),
    (["--bins-per-commit", "-1"], "bins_per_commit must be 0 (one commit per batch) or positive, got -1"),
])
def test_bad_run_options_are_refused_before_the_table_is_read(tmp_path, monkeypatch, args, message):
    table = _table(tmp_path / "t")
    log_before = sorted(p.name for p in (table.path / "_delta_log").iterdir())
    used = _spy(monkeypatch)
    opened: list[str] = []
    from airflow_delta_maint.delta.log import table_state

    monkeypatch.setattr(table_state, "open_state", lambda *a, **k: opened.append("state"))
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    code, m = run_in_process("optimize", str(table.path), args, spark_allowed=False)
    assert code == 2 and m["error"] == message and m["error_type"] == "InvalidArgumentError", m
    assert used == [] and opened == []  # neither pass over the log ran
    assert sorted(p.name for p in (table.path / "_delta_log").iterdir()) == log_before
    check(table)
