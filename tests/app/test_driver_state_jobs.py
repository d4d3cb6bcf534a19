"""The driver's jobs on large tables (the threshold forced down so that small tables take that
path) answer exactly as on the in-memory path: checkpoint, expired-log cleanup and VACUUM full and
lite, run in-process through the application's entry point on the session's SparkSession."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot, read_checkpoint
from airflow_delta_maint.delta.log.state_size import STREAM_MIN_FILES_ENV
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.test_vacuum import aged_table, make_old, make_young, rows

pytestmark = pytest.mark.spark
VOLATILE = ("started_at", "duration_s", "finished_at", "cutoff_timestamp")


def _stable(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in VOLATILE}


def _run_both(monkeypatch, path: Path, argv: list[str]) -> tuple[dict, dict]:
    """The job on a copy of the table in memory (``<path>-memory``) and on another streamed
    (``<path>-streamed``); both metrics."""
    small, large = Path(str(path) + "-memory"), Path(str(path) + "-streamed")
    shutil.rmtree(small, ignore_errors=True)
    shutil.rmtree(large, ignore_errors=True)
    shutil.copytree(path, small, copy_function=shutil.copy2)
    shutil.copytree(path, large, copy_function=shutil.copy2)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, str(10**12))
    code, a = run([argv[0], str(small), "--json", *argv[1:]])
    assert code == 0, a
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    code, b = run([argv[0], str(large), "--json", *argv[1:]])
    assert code == 0, b
    a["table"] = b["table"] = None
    return _stable(a), _stable(b)


def _with_checkpoint(tmp_path: Path) -> Path:
    path = aged_table(tmp_path, versions=6)
    code, m = run(["checkpoint", str(path), "--json"])
    assert code == 0, m
    from deltalake import DeltaTable, write_deltalake
    import pyarrow as pa

    DeltaTable(str(path)).delete("id % 5 = 1")
    write_deltalake(str(path), pa.table({"id": [900, 901], "p": ["p0", "p1"]}), mode="append", partition_by=["p"])
    return path


def test_checkpoint_in_parts_reads_back_as_the_in_memory_one(tmp_path, spark, monkeypatch):
    import airflow_delta_maint.app.jobs.checkpoint as job

    used = []
    monkeypatch.setattr(job, "write_in_parts", lambda ctx, state, _f=job.write_in_parts: used.append(1) or
                        _f(ctx, state))
    path = _with_checkpoint(tmp_path)
    a, b = _run_both(monkeypatch, path, ["checkpoint"])
    assert used == [1]
    assert a["checkpoint"]["kind"] == "classic" and b["checkpoint"]["kind"] == "multipart"
    assert a["checkpoint"]["num_add_files"] == b["checkpoint"]["num_add_files"]
    assert a["checkpoint_version"] == b["checkpoint_version"]
    version = a["checkpoint_version"]
    read = []
    for side in ("memory", "streamed"):
        storage = Storage(str(path) + "-" + side)
        cp = [c for c in list_log(storage, version).checkpoints if c.version == version][0]
        data = read_checkpoint(storage, cp)
        read.append((sorted(json.dumps(x, sort_keys=True, default=str) for x in data.adds.to_pylist()),
                     sorted(json.dumps(x, sort_keys=True, default=str) for x in data.removes.to_pylist()),
                     data.protocol, data.metadata, data.txns, data.domains))
    assert read[0] == read[1]
    assert rows(Path(str(path) + "-streamed")) == rows(path)


def test_vacuum_full_by_anti_join_deletes_what_the_in_memory_run_deletes(tmp_path, spark, monkeypatch):
    import airflow_delta_maint.app.jobs.vacuum as job

    used = []
    original = job._full_at_scale
    monkeypatch.setattr(job, "_full_at_scale", lambda *a, **k: used.append(1) or original(*a, **k))
    path = _with_checkpoint(tmp_path)
    make_old(path, "orphan-top.parquet", "p=p1/orphan-a.parquet", "p=p2/deep/orphan-b.parquet", "empty/old.bin")
    make_young(path, "p=p0/young.parquet")
    before = rows(path)
    a, b = _run_both(monkeypatch, path, ["vacuum", "--dry-run"])
    assert used == [1]
    assert a == b and a["numFilesToDelete"] >= 4
    a, b = _run_both(monkeypatch, path, ["vacuum", "--keep-versions", "0"])
    assert a == b and a["status"] == "committed"
    trees = [sorted(str(p.relative_to(root)) for p in root.rglob("*") if "_delta_log" not in str(p))
             for root in (Path(str(path) + "-memory"), Path(str(path) + "-streamed"))]
    assert trees[0] == trees[1]
    assert rows(Path(str(path) + "-streamed")) == before


def test_vacuum_lite_looks_candidates_up_in_the_streamed_state(tmp_path, spark, monkeypatch):
    path = _with_checkpoint(tmp_path)
    a, b = _run_both(monkeypatch, path, ["vacuum", "--mode", "lite", "--dry-run"])
    assert a == b and a["numFilesToDelete"] > 0
    a, b = _run_both(monkeypatch, path, ["vacuum", "--mode", "lite"])
    assert a == b and a["status"] == "committed"


def test_expired_log_cleanup_decides_alike(tmp_path, spark, monkeypatch):
    path = _with_checkpoint(tmp_path)
    for argv in (["cleanup-log", "--retention", "interval 1 day", "--dry-run"],
                 ["cleanup-log", "--retention", "interval 1 day"]):
        a, b = _run_both(monkeypatch, path, argv)
        assert a == b
    assert Snapshot.load(str(path) + "-streamed").version == Snapshot.load(str(path) + "-memory").version


def test_log_compaction_reads_only_the_head_of_a_large_log(tmp_path, spark, monkeypatch):
    """compact-log on a large log loads no file of the state: it reads the streamed state's head, writes
    the same compaction files, and its due checkpoint in parts."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_delta_maint.delta.log import compaction

    path = _with_checkpoint(tmp_path)
    for i in range(7):
        write_deltalake(str(path), pa.table({"id": [1000 + i], "p": [f"p{i % 2}"]}), mode="append",
                        partition_by=["p"])
    loaded: list[str] = []

    class Spy(Snapshot):
        @classmethod
        def load(cls, table, *args, **kwargs):
            loaded.append(str(getattr(table, "root", table)))
            return Snapshot.load(table, *args, **kwargs)

    monkeypatch.setattr(compaction, "Snapshot", Spy)
    a, b = _run_both(monkeypatch, path, ["compact-log", "--interval", "3", "--checkpoint-interval", "5",
                                         "--cleanup-expired-log"])
    assert loaded and all(root.rstrip("/").endswith("-memory") for root in loaded)
    assert a["checkpoint"]["kind"] == "classic" and b["checkpoint"]["kind"] == "multipart"
    assert a["checkpoint"]["version"] == b["checkpoint"]["version"]
    assert a["checkpoint"]["num_add_files"] == b["checkpoint"]["num_add_files"]
    for key in ("status", "windows_written", "windows_skipped", "numActionsWritten", "numFilesCleaned",
                "expired_log_cleanup"):
        assert a[key] == b[key], key
    a, b = _run_both(monkeypatch, path, ["compact-log", "--interval", "2"])
    assert a == b and a["numWindowsWritten"] >= 1
    assert rows(Path(str(path) + "-streamed")) == rows(path)


def test_a_checkpoint_the_stream_cannot_vouch_for_falls_back_to_the_whole_state(tmp_path, spark, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = _with_checkpoint(tmp_path)
    cp = next((path / "_delta_log").glob("*.checkpoint.parquet"))
    table = pq.read_table(cp)
    adds = table.filter(table.column("add").is_valid())
    pq.write_table(pa.concat_tables([table, adds.slice(0, 1)]), cp)  # one file live twice
    make_old(path, "orphan.parquet")
    a, b = _run_both(monkeypatch, path, ["vacuum", "--dry-run"])
    assert a == b and "orphan.parquet" in a["files_to_delete"]
    a, b = _run_both(monkeypatch, path, ["inspect"])
    assert a == b and a["distrusted_log_files"]
    a, b = _run_both(monkeypatch, path, ["checkpoint"])
    assert a == b and a["checkpoint"]["kind"] == "classic"


def test_vacuum_full_keeps_the_valid_set_in_memory_when_the_executors_cannot_see_the_scratch_folder(
        tmp_path, spark, monkeypatch):
    """On a cluster that shares nothing, the driver's scratch folder is not the executors': without
    DELTA_MAINT_SCRATCH_DIR the large-table path falls back before anything is deleted."""
    import types

    import airflow_delta_maint.app.jobs.vacuum as job
    from airflow_delta_maint.app.runners import vacuum_antijoin as aj

    monkeypatch.delenv(aj.SCRATCH_ENV, raising=False)
    remote = types.SimpleNamespace(sparkContext=types.SimpleNamespace(master="spark://10.0.0.7:7077"))
    assert aj.scratch_shared(spark) and not aj.scratch_shared(remote)
    monkeypatch.setenv(aj.SCRATCH_ENV, str(tmp_path / "shared"))
    assert aj.scratch_shared(remote)
    monkeypatch.delenv(aj.SCRATCH_ENV)

    reasons = []
    monkeypatch.setattr(aj, "scratch_shared", lambda session: False)
    monkeypatch.setattr(job, "fell_back", lambda what, exc: reasons.append(str(exc)))
    path = _with_checkpoint(tmp_path)
    make_old(path, "orphan-top.parquet", "p=p1/orphan-a.parquet")
    before = rows(path)
    a, b = _run_both(monkeypatch, path, ["vacuum"])
    assert len(reasons) == 1 and "set DELTA_MAINT_SCRATCH_DIR to a folder every machine" in reasons[0]
    assert a == b and a["status"] == "committed" and a["numFilesDeleted"] >= 2
    assert rows(Path(str(path) + "-streamed")) == before
