"""The jobs never write an impossible table state, and leave nothing behind when they fail.

On the hand-written table whose log holds a non-conforming compaction file (see
tests/delta/log/test_reconciliation.py), ``checkpoint``, ``compact-log``, ``inspect`` and
``optimize`` see the commits' two files and five rows, and delta-rs reads the same rows after
each job. Also: a complete multi-part checkpoint is left alone, OPTIMIZE refuses a ``void``
column before Spark starts, a failed OPTIMIZE deletes what it wrote, and batches commit one on
top of the other.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.jobs import optimize as optimize_job
from airflow_delta_maint.app.jobs import optimize_execution
from airflow_delta_maint.delta.log.checkpoint import build_checkpoint_table, last_checkpoint_checksum
from airflow_delta_maint.delta.log.listing import commit_key, read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage
from tests.delta.log.test_reconciliation import (BAD_COMPACTION, EXPECTED_IDS, NOW, deltars_ids, dv_history,
                                             write_bad_compaction, write_log_file)


def run(*argv: str) -> tuple[int, dict]:
    return cli.run([*argv, "--json"])


def files_under(root: Path) -> dict[str, int]:
    return {os.path.relpath(os.path.join(d, n), root): os.path.getsize(os.path.join(d, n))
            for d, _, names in os.walk(root) for n in names}


def data_files(root: Path) -> set[str]:
    return {p for p in files_under(root) if p.endswith(".parquet") and not p.startswith("_delta_log")}


@pytest.fixture
def bad_table(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    write_bad_compaction(root, dv_history(root))
    return root


# -- the table with a non-conforming compaction file --------------------------------------------------

def test_inspect_reports_the_commits_state_and_the_distrusted_file(bad_table: Path):
    code, m = run("inspect", str(bad_table))
    assert code == 0 and m["num_files"] == 2 and m["version_read"] == 5
    assert [d["file"] for d in m["distrusted_log_files"]] == [BAD_COMPACTION]


def test_checkpoint_writes_the_commits_state(bad_table: Path):
    code, m = run("checkpoint", str(bad_table))
    assert code == 0 and m["status"] == "committed" and m["checkpoint"]["num_add_files"] == 2
    assert deltars_ids(bad_table) == EXPECTED_IDS
    code, again = run("checkpoint", str(bad_table))
    assert code == 0 and again["status"] == "skipped"


def test_compact_log_removes_the_bad_file_and_writes_good_windows(bad_table: Path):
    from airflow_delta_maint.delta.log.compaction import nothing_to_do
    from airflow_delta_maint.delta.log.compaction_options import LogCompactionOptions

    assert nothing_to_do(str(bad_table), None, LogCompactionOptions(interval=2)) is None  # the operator does not skip it
    code, m = run("compact-log", str(bad_table), "--interval", "2")
    assert code == 0 and m["status"] == "committed"
    assert [d["file"] for d in m["distrustedFilesRemoved"]] == [BAD_COMPACTION]
    assert not (bad_table / BAD_COMPACTION).exists()
    assert [(w["start"], w["end"]) for w in m["windows_written"]] == [(1, 2), (3, 4)]
    snap = Snapshot.load(str(bad_table), compactions="trust")
    assert len(snap.segment.compactions) == 2 and snap.num_files == 2 and snap.distrusted == []
    assert deltars_ids(bad_table) == EXPECTED_IDS  # delta-rs 1.6.0 reads the new compaction files
    assert nothing_to_do(str(bad_table), None, LogCompactionOptions(interval=2)) is not None
    code, m = run("compact-log", str(bad_table), "--checkpoint-interval", "1")
    assert code == 0 and m["checkpoint"]["num_add_files"] == 2
    assert deltars_ids(bad_table) == EXPECTED_IDS


def test_jobs_refuse_a_bad_compaction_file_whose_commits_are_gone(bad_table: Path, capsys):
    for v in range(5):
        os.remove(bad_table / "_delta_log" / f"{v:020d}.json")
    before = files_under(bad_table)
    for job in ("inspect", "checkpoint", "compact-log"):
        code, m = run(job, str(bad_table))
        assert code == 2 and m["status"] == "failed" and m["error_type"] == "CorruptLogError"
        assert "00000000000000000000.00000000000000000005.compacted.json" in m["error"]
        assert "\n" not in m["error"]
    assert files_under(bad_table) == before
    err = capsys.readouterr().err
    assert err.count("error:") == 3


@pytest.mark.spark
def test_optimize_rewrites_the_commits_state(bad_table: Path, spark):
    code, m = run("optimize", str(bad_table))
    assert code == 0 and m["status"] == "committed"
    assert m["numRemovedFiles"] == 2 and m["numAddedFiles"] == 1 and m["numDeletionVectorsRemoved"] == 2
    snap = Snapshot.load(str(bad_table))
    (added,) = snap.add_actions()
    assert json.loads(added["stats"])["numRecords"] == 5
    assert sorted(pq.read_table(bad_table / added["path"]).column("id").to_pylist()) == EXPECTED_IDS
    # the nightly order: optimize, then compact-log, which takes the bad file out of other readers' way
    code, m = run("compact-log", str(bad_table))
    assert code == 0 and m["numDistrustedFilesRemoved"] == 1
    assert deltars_ids(bad_table) == EXPECTED_IDS


# -- multi-part checkpoints -----------------------------------------------------------------------------

def multipart_table(root: Path, parts: int = 3) -> int:
    """A delta-rs table whose latest version has a complete ``parts``-part checkpoint (rows of one
    checkpoint split across the parts, as delta-spark writes them) and a hint naming it."""
    for i in range(6):
        write_deltalake(str(root), pa.table({"id": pa.array([i, i + 100], pa.int64())}), mode="append")
    snap = Snapshot.load(str(root))
    table, num_adds = build_checkpoint_table(snap, now_ms=NOW, v2_spec=False)
    bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
    total = 0
    for n in range(parts):
        name = f"{snap.version:020d}.checkpoint.{n + 1:010d}.{parts:010d}.parquet"
        pq.write_table(table.slice(bounds[n], bounds[n + 1] - bounds[n]), root / "_delta_log" / name)
        total += (root / "_delta_log" / name).stat().st_size
    hint = {"version": snap.version, "size": table.num_rows, "parts": parts, "sizeInBytes": total,
            "numOfAddFiles": num_adds}
    hint["checksum"] = last_checkpoint_checksum(hint)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps(hint))
    return snap.version


def _open_ten_times(root: Path, version: int) -> None:
    for _ in range(10):
        dt = DeltaTable(str(root))
        assert dt.version() == version and len(dt.file_uris()) == 6


def test_checkpoint_leaves_a_complete_multipart_checkpoint_alone(tmp_path: Path):
    root = tmp_path / "t"
    version = multipart_table(root)
    before = files_under(root)
    hint_before = (root / "_delta_log" / "_last_checkpoint").read_bytes()
    code, m = run("checkpoint", str(root))
    assert code == 0 and m["status"] == "skipped" and m["checkpoint"]["kind"] == "multipart"
    assert m["checkpoint"]["already_existed"] and not m["checkpoint"]["last_checkpoint_updated"]
    assert files_under(root) == before
    assert (root / "_delta_log" / "_last_checkpoint").read_bytes() == hint_before
    _open_ten_times(root, version)


def test_checkpoint_points_a_missing_hint_at_the_multipart_checkpoint(tmp_path: Path):
    root = tmp_path / "t"
    version = multipart_table(root)
    os.remove(root / "_delta_log" / "_last_checkpoint")
    code, m = run("checkpoint", str(root))
    assert code == 0 and m["status"] == "skipped" and m["checkpoint"]["last_checkpoint_updated"]
    hint = json.loads((root / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == version and hint["parts"] == 3 and hint["numOfAddFiles"] == 6
    assert hint["checksum"] == last_checkpoint_checksum(hint)
    assert not (root / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    _open_ten_times(root, version)


def test_a_new_v2_checkpoint_hint_names_its_file(tmp_path: Path):
    from tests.conftest import corpus_path
    import shutil

    root = tmp_path / "t"
    shutil.copytree(corpus_path("golden/v2-checkpoint-json"), root)
    write_log_file(root, f"{3:020d}.json", [{"commitInfo": {"timestamp": NOW, "operation": "SET TBLPROPERTIES"}}])
    code, m = run("checkpoint", str(root))
    assert code == 0 and m["status"] == "committed" and m["checkpoint"]["kind"] == "v2"
    hint = json.loads((root / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == 3 and "parts" not in hint
    assert "_delta_log/" + hint["v2Checkpoint"]["path"] == m["checkpoint"]["path"]
    assert hint["v2Checkpoint"]["sizeInBytes"] == m["checkpoint"]["size_bytes"]


# -- void columns -----------------------------------------------------------------------------------------

def void_table(root: Path) -> None:
    """Spark writes a void (NullType) column into the schema only; data files lack it."""
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "s", "type": {"type": "struct", "fields": [{"name": "nothing", "type": "void", "nullable": True,
                                                             "metadata": {}}]}, "nullable": True, "metadata": {}}]}
    root.mkdir(parents=True)
    commits = [[{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                {"metaData": {"id": "void", "format": {"provider": "parquet", "options": {}},
                              "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                              "createdTime": 1}}]]
    for i in range(3):
        name = f"part-{i}.parquet"
        pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), root / name)
        commits.append([{"add": {"path": name, "partitionValues": {}, "size": (root / name).stat().st_size,
                                 "modificationTime": NOW, "dataChange": True,
                                 "stats": json.dumps({"numRecords": 1})}}])
    for v, actions in enumerate(commits):
        write_log_file(root, f"{v:020d}.json", [{"commitInfo": {"timestamp": NOW + v, "operation": "WRITE"}}, *actions])


def test_optimize_refuses_a_void_column_before_spark_starts(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    void_table(root)

    def no_spark(*_a, **_k):
        raise AssertionError("Spark must not start for a refused table")

    monkeypatch.setattr("airflow_delta_maint.app.context.JobContext.spark", no_spark)
    before = files_under(root)
    code, m = run("optimize", str(root))
    assert code == 2 and m["error_type"] == "UnsupportedFeatureError" and m["version_read"] == 3
    assert "'s.nothing'" in m["error"] and "void" in m["error"]
    assert files_under(root) == before
    with pytest.raises(Exception, match="s.nothing"):
        optimize_job.nothing_to_do(str(root), None, optimize_job.options_from({}))  # the operator's worker-side check
    for job in ("inspect", "checkpoint", "compact-log"):
        code, m = run(job, str(root))
        assert code == 0, m


# -- failures and batches -------------------------------------------------------------------------------

def small_table(root: Path, files: int = 4) -> None:
    for i in range(files):
        write_deltalake(str(root), pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), mode="append")


@pytest.mark.spark
def test_a_failed_optimize_deletes_what_it_wrote_and_keeps_version_read(tmp_path: Path, spark, monkeypatch):
    root = tmp_path / "t"
    small_table(root)
    v0 = DeltaTable(str(root)).version()
    before_data = data_files(root)
    original = optimize_execution.execute_bins

    def execute_then_change_metadata(*args, **kwargs):
        out = original(*args, **kwargs)
        assert data_files(root) - before_data  # the rewritten files are on disk now
        snap = Snapshot.load(str(root))
        md = dict(snap.metadata.raw, configuration={"delta.appendOnly": "false"})
        write_log_file(root, f"{v0 + 1:020d}.json",
                       [{"commitInfo": {"timestamp": NOW, "operation": "SET TBLPROPERTIES"}}, {"metaData": md}])
        return out

    monkeypatch.setattr(optimize_execution, "execute_bins", execute_then_change_metadata)
    code, m = run("optimize", str(root))
    assert code == 2 and m["status"] == "failed" and "MetadataChanged" in m["error"]
    assert m["version_read"] == v0
    assert data_files(root) == before_data  # nothing left behind for VACUUM to find
    assert DeltaTable(str(root)).version() == v0 + 1
    assert sorted(pq.read_table(DeltaTable(str(root)).file_uris()).column("id").to_pylist()) == list(range(40))


@pytest.mark.spark
def test_batches_commit_on_top_of_each_other(tmp_path: Path, spark, caplog):
    root = tmp_path / "t"
    for part in ("a", "b", "c"):
        for i in range(2):
            write_deltalake(str(root), pa.table({"id": pa.array([i], pa.int64()), "p": [part]}), mode="append",
                            partition_by=["p"])
    v0 = DeltaTable(str(root)).version()
    with caplog.at_level(logging.INFO, logger="airflow_delta_maint.delta.log.transaction"):
        code, m = run("optimize", str(root), "--batch-bytes", "1")
    assert code == 0 and m["versions_committed"] == [v0 + 1, v0 + 2, v0 + 3]
    assert "rebased" not in caplog.text
    for v in m["versions_committed"]:
        info = next(a["commitInfo"] for a in read_commit(Storage(str(root)), v) if "commitInfo" in a)
        assert info["readVersion"] == v0
    assert not (root / commit_key(v0 + 4)).exists()
    assert sorted(pq.read_table(DeltaTable(str(root)).file_uris()).column("id").to_pylist()) == [0, 0, 0, 1, 1, 1]


@pytest.mark.spark
def test_a_failed_rewrite_deletes_the_files_its_finished_tasks_wrote(tmp_path: Path, spark):
    """Bins run one at a time, largest first: partition b's bin writes its file, then a's fails on
    a data file storage lost. The run deletes b's output too: nothing is left for VACUUM."""
    root = tmp_path / "t"
    for part, rows in (("a", 20), ("b", 40)):
        for i in range(3):
            ids = pa.array(range(i * 100, i * 100 + rows), pa.int64())
            write_deltalake(str(root), pa.table({"id": ids, "p": [part] * rows}), mode="append", partition_by=["p"])
    victim = next(a["path"] for a in Snapshot.load(str(root)).add_actions() if a["partitionValues"]["p"] == "a")
    os.remove(root / victim)
    before = data_files(root)
    log_before = sorted(os.listdir(root / "_delta_log"))
    code, m = run("optimize", str(root), "--max-concurrent-bins", "1")
    assert code == 2 and m["error_type"] == "CorruptLogError" and victim in m["error"]
    assert data_files(root) == before
    assert sorted(os.listdir(root / "_delta_log")) == log_before
