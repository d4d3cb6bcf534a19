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
from airflow_delta_maint.delta.log.checkpoint_read import read_checkpoint
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.app.settings import STREAM_MIN_FILES_ENV
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_vacuum import aged_table, make_old, make_young, rows

pytestmark = pytest.mark.spark
VOLATILE = ("started_at", "duration_s", "cpu_s", "cpu_driver_s", "cpu_tasks_s", "cpu_executors_s", "cpu_missing",
            "finished_at", "cutoff_timestamp")


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
    original = job.full_at_scale
    monkeypatch.setattr(job, "full_at_scale", lambda *a, **k: used.append(1) or original(*a, **k))
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
    for argv in (["cleanup-log", "--retention-hours", "24", "--dry-run"],
                 ["cleanup-log", "--retention-hours", "24"]):
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
    DELTA_MAINT_SCRATCH_DIR the large-table path is not taken, decided from the session's master before
    anything is listed, streamed or deleted."""
    import airflow_delta_maint.app.jobs.vacuum as job
    from airflow_delta_maint.app.context import JobContext
    from airflow_delta_maint.app.runners import vacuum_antijoin as aj

    monkeypatch.delenv(aj.SCRATCH_ENV, raising=False)
    remote = "spark://10.0.0.7:7077"
    assert JobContext("t").session_master() == spark.sparkContext.master  # the running session's
    assert aj.scratch_shared(spark.sparkContext.master) and not aj.scratch_shared(remote)
    monkeypatch.setenv(aj.SCRATCH_ENV, str(tmp_path / "shared"))
    assert aj.scratch_shared(remote)
    monkeypatch.delenv(aj.SCRATCH_ENV)

    reasons = []
    at_scale = _spy(monkeypatch, job, "full_at_scale")
    monkeypatch.setattr(JobContext, "session_master", lambda self: remote)
    monkeypatch.setattr(job, "fell_back", lambda what, exc: reasons.append(str(exc)))
    path = _with_checkpoint(tmp_path)
    make_old(path, "orphan-top.parquet", "p=p1/orphan-a.parquet")
    before = rows(path)
    a, b = _run_both(monkeypatch, path, ["vacuum"])
    assert reasons == [aj.scratch_unshared_reason(remote)] and at_scale == []
    assert "set DELTA_MAINT_SCRATCH_DIR to a folder every machine" in reasons[0]
    assert a == b and a["status"] == "committed" and a["numFilesDeleted"] >= 2
    assert rows(Path(str(path) + "-streamed")) == before


# -- VACUUM full with an inventory and with kept versions, streamed ---------------------------------
def _spy(monkeypatch, module, name: str) -> list[tuple]:
    """Record the calls of ``module.name`` (positional arguments) and let them through."""
    calls: list[tuple] = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def _files_left(path: Path) -> list[tuple[str, ...]]:
    """The files and folders of both copies outside the log (each side's list)."""
    return [sorted(str(p.relative_to(root)) for p in root.rglob("*") if "_delta_log" not in p.parts)
            for root in (Path(str(path) + "-memory"), Path(str(path) + "-streamed"))]


def _table_with_orphans(tmp_path: Path) -> Path:
    path = _with_checkpoint(tmp_path)
    make_old(path, "orphan-top.parquet", "p=p1/orphan-a.parquet", "p=p2/deep/orphan-b.parquet", "empty/old.bin",
             "_hidden/orphan.parquet")
    make_young(path, "p=p0/young.parquet")
    return path


def _inventory(path: Path, target: Path) -> Path:
    """An inventory of every object under the table (relative paths, the log and folders included,
    as an object store's inventory lists them), one orphan listed twice, and rows of another table."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from tests.app.jobs.test_retention import inventory_of

    table = inventory_of(path, absolute=False)
    twice = table.filter(pa.compute.equal(table.column("path"), "p=p1/orphan-a.parquet"))
    elsewhere = inventory_of(path, absolute=True).slice(0, 5).set_column(
        0, "path", pa.array([f"file:/elsewhere/t/x-{i}.parquet" for i in range(5)]))
    table = pa.concat_tables([table, twice, elsewhere])
    if target.suffix == ".csv":
        pacsv.write_csv(table, target)
    else:
        pq.write_table(table, target, row_group_size=7)  # several batches
    return target


def test_vacuum_full_with_an_inventory_streams_it_into_the_anti_join(tmp_path, spark, monkeypatch):
    """The inventory's rows become the anti-join's listing, read by the driver a batch at a time:
    the same metrics as the in-memory path (counts, sizes, folders, the dry run's list, a key the
    inventory lists twice), and the same files left on disk."""
    import airflow_delta_maint.app.jobs.vacuum as job
    import airflow_delta_maint.app.jobs.vacuum_at_scale as at_scale_job
    from airflow_delta_maint.app.runners import vacuum_antijoin as aj

    at_scale = _spy(monkeypatch, job, "full_at_scale")
    streamed = _spy(monkeypatch, at_scale_job, "write_inventory_listing")
    listed = _spy(monkeypatch, aj, "list_into_spark")
    in_memory = _spy(monkeypatch, job, "read_inventory")
    path = _table_with_orphans(tmp_path)
    before = rows(path)
    for n, inventory in enumerate((_inventory(path, tmp_path / "inventory.parquet"),
                                   _inventory(path, tmp_path / "inventory.csv"))):
        a, b = _run_both(monkeypatch, path, ["vacuum", "--inventory", str(inventory), "--dry-run"])
        assert len(at_scale) == len(streamed) == n + 1 and not listed and len(in_memory) == n + 1
        assert a == b and a["inventory"] == str(inventory) and a["inventoryTakenAt"] > 0
        assert a["files_to_delete"].count("p=p1/orphan-a.parquet") == 2
        assert "_hidden/orphan.parquet" not in a["files_to_delete"] and a["numFilesToDelete"] >= 5
    a, b = _run_both(monkeypatch, path, ["vacuum", "--inventory", str(tmp_path / "inventory.parquet")])
    assert len(at_scale) == 3 and not listed
    assert a == b and a["status"] == "committed" and a["numDeletedFiles"] == a["numFilesToDelete"] - 1
    assert a["numVacuumedDirectories"] > 1 and a["numDeletedDirectories"] >= 1
    left = _files_left(path)
    assert left[0] == left[1] and "_hidden/orphan.parquet" in left[1] and "p=p0/young.parquet" in left[1]
    assert "orphan-top.parquet" not in left[1]
    assert rows(Path(str(path) + "-streamed")) == before


def test_vacuum_full_keeps_the_versions_asked_for_from_streamed_keys(tmp_path, spark, monkeypatch):
    """--keep-versions on the streamed path: each kept version's live keys streamed to parquet
    (version 1 from its commits, version 5 from the checkpoint), no set on the driver; alone and
    with an inventory, dry run and real, the same metrics and files as in memory."""
    import airflow_delta_maint.app.jobs.vacuum as job
    import airflow_delta_maint.app.jobs.vacuum_at_scale as at_scale_job

    at_scale = _spy(monkeypatch, job, "full_at_scale")
    streamed = _spy(monkeypatch, at_scale_job, "write_kept_keys")
    whole = _spy(monkeypatch, job, "kept_version_keys")
    path = _table_with_orphans(tmp_path)
    before, kept_rows = rows(path), rows(path, 1)
    inventory = _inventory(path, tmp_path / "inventory.parquet")
    for argv in (["vacuum", "--keep-versions", "1,5", "--dry-run"],
                 ["vacuum", "--keep-versions", "1,5", "--inventory", str(inventory), "--dry-run"]):
        a, b = _run_both(monkeypatch, path, argv)
        assert a == b and a["keepVersions"] == [1, 5] and a["numFilesKeptForVersions"] > 0
    plain, _ = _run_both(monkeypatch, path, ["vacuum", "--dry-run"])
    assert plain["numFilesToDelete"] == a["numFilesToDelete"] + a["numFilesKeptForVersions"] - 1  # the duplicate
    assert len(streamed) == 2 and all(str(s.root).rstrip("/").endswith("-memory") for s, *_ in whole)
    for argv in (["vacuum", "--keep-versions", "1,5"], ["vacuum", "--keep-versions", "1", "--inventory", str(inventory)]):
        a, b = _run_both(monkeypatch, path, argv)
        assert a == b and a["status"] == "committed" and a["numFilesKeptForVersions"] > 0
        left = _files_left(path)
        assert left[0] == left[1]
        streamed_copy = Path(str(path) + "-streamed")
        assert rows(streamed_copy) == before and rows(streamed_copy, 1) == kept_rows
    assert len(at_scale) == 5 and len(streamed) == 4


def test_a_kept_version_the_stream_cannot_read_is_loaded_whole(tmp_path, spark, monkeypatch):
    import airflow_delta_maint.app.jobs.vacuum_at_scale as at_scale_job
    from airflow_delta_maint.delta.log import table_state
    from airflow_delta_maint.delta.log.state_stream import StreamFallback

    original = table_state.open_state

    def open_state(storage, version=None, *args):
        if version == 1:
            raise StreamFallback("a distrusted compaction file")
        return original(storage, version, *args)

    monkeypatch.setattr(table_state, "open_state", open_state)
    written = []
    write_kept_keys = at_scale_job.write_kept_keys
    monkeypatch.setattr(at_scale_job, "write_kept_keys", lambda *a: written.append(write_kept_keys(*a)) or written[-1])
    path = _table_with_orphans(tmp_path)
    a, b = _run_both(monkeypatch, path, ["vacuum", "--keep-versions", "1,5", "--dry-run"])
    assert a == b and a["numFilesKeptForVersions"] > 0
    assert [w.loaded_whole for w in written] == [[1]]  # streamed: version 1 loaded whole, version 5 streamed


def test_bad_input_on_the_streamed_path_fails_before_any_work(tmp_path, spark, monkeypatch):
    """A stale inventory, an inventory with lite mode, a version out of range or no longer
    readable: one clear error on the large-table path, and the table is left as it was."""
    import os

    import airflow_delta_maint.app.jobs.vacuum as job
    from tests.app.jobs.test_vacuum import tree

    at_scale = _spy(monkeypatch, job, "full_at_scale")
    path = _table_with_orphans(tmp_path)
    stale = _inventory(path, tmp_path / "stale.parquet")
    eight_days_ago = os.path.getmtime(stale) - 8 * 86_400
    os.utime(stale, (eight_days_ago, eight_days_ago))
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    files = tree(path)
    for argv, error in (
            (["--inventory", str(stale)], "before the retention cut-off"),
            (["--inventory", str(stale), "--mode", "lite"], "mode='lite'"),
            (["--inventory", str(tmp_path / "nowhere.parquet")], "does not exist"),
            (["--keep-versions", "99"], "cannot keep version 99: the table has versions 0 to 7"),
            (["--keep-versions", "1", "--inventory", str(stale)], "before the retention cut-off")):
        code, m = run(["vacuum", str(path), "--json", *argv])
        assert code == 2 and error in m["error"], (argv, m)
        assert tree(path) == files
    bad = tmp_path / "bad.csv"
    bad.write_text("path,length,isDir,modificationTime\nx.parquet,not a number,false,1\n")
    code, m = run(["vacuum", str(path), "--json", "--inventory", str(bad)])
    assert code == 2 and "cannot read the inventory file" in m["error"] and tree(path) == files
    assert len(at_scale) == 1  # only the bad CSV got that far: found while streaming it, before any deletion
    code, m = run(["cleanup-log", str(path), "--json", "--retention-hours", "24"])
    assert code == 0 and m["status"] == "committed"
    files = tree(path)
    code, m = run(["vacuum", str(path), "--json", "--keep-versions", "1"])
    assert code == 2 and "cannot keep version 1: it can no longer be read" in m["error"], m
    assert tree(path) == files and len(at_scale) == 1


def test_vacuum_with_an_inventory_falls_back_when_the_executors_cannot_see_the_scratch_folder(
        tmp_path, spark, monkeypatch):
    import airflow_delta_maint.app.jobs.vacuum as job
    from airflow_delta_maint.app.jobs.vacuum_at_scale import LATE_FALLBACK
    from airflow_delta_maint.app.runners import vacuum_antijoin as aj

    reasons: list[str] = []
    monkeypatch.setattr(aj, "scratch_shared", lambda master: False)
    monkeypatch.setattr(job, "fell_back", lambda what, exc: reasons.append(str(exc)))
    path = _table_with_orphans(tmp_path)
    before = rows(path)
    inventory = _inventory(path, tmp_path / "inventory.parquet")
    a, b = _run_both(monkeypatch, path, ["vacuum", "--inventory", str(inventory), "--keep-versions", "1"])
    assert len(reasons) == 1 and aj.SCRATCH_ENV in reasons[0] and not reasons[0].startswith(LATE_FALLBACK)
    assert a == b and a["status"] == "committed" and a["numFilesDeleted"] >= 4
    left = _files_left(path)
    assert left[0] == left[1] and rows(Path(str(path) + "-streamed")) == before
