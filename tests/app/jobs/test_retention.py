"""The retention jobs end to end, in-process: cleanup-log, VACUUM --keep-versions, VACUUM --inventory."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.features import unsupported_features
from tests.app.jobs.test_vacuum import aged_table, make_old, make_young, rows, tree
from tests.conftest import corpus_path
from tests.delta.log.test_log_cleanup import age, history, log_files, ours, theirs, versions_of
from tests.airflow.operators.conftest import argv_of

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)


def cli(*argv: str) -> tuple[int, dict]:
    return run([*argv[:2], "--json", *argv[2:]])


# -- cleanup-log ---------------------------------------------------------------------------------------
def test_cleanup_log_job_dry_run_then_run(tmp_path):
    path = history(tmp_path, 8, checkpoints=(2, 5))
    for v in range(8):
        age(path, v, 40 if v < 7 else 0)
    before = {v: ours(path, v) for v in range(8)}
    names = log_files(path)
    code, m = cli("cleanup-log", str(path), "--dry-run")
    assert code == 0 and m["status"] == "dry_run" and m["operation"] == "cleanup-log"
    assert m["version_read"] == 7 and m["checkpointVersion"] == 5 and log_files(path) == names
    code, m = cli("cleanup-log", str(path))
    assert code == 0 and m["status"] == "committed" and m["numLogFilesDeleted"] == m["numCommitFilesDeleted"] + \
        m["numCheckpointFilesDeleted"] + m["numChecksumFilesDeleted"] + m["numCompactionFilesDeleted"] + \
        m["numSidecarFilesDeleted"] > 0
    assert versions_of(log_files(path), "commit") == {5, 6, 7}
    for v in range(5, 8):
        assert ours(path, v) == theirs(path, v) == before[v]
    # VACUUM lite needs the commits since its watermark: it says so, and changes nothing
    names = log_files(path)
    code, m = cli("vacuum", str(path), "--mode", "lite")
    assert code == 2 and "VACUUM lite cannot find every file" in m["error"] and log_files(path) == names
    code, m = cli("cleanup-log", str(path), "--retention-hours", "-1")
    assert code == 2 and "retention_hours must not be negative" in m["error"] and log_files(path) == names
    code, m = cli("cleanup-log", str(path), "--keep-versions", "1")
    assert code == 2 and "cannot be kept readable" in m["error"]


# -- VACUUM --keep-versions -----------------------------------------------------------------------------
@pytest.mark.spark
def test_vacuum_keeps_the_files_of_chosen_versions(tmp_path, spark):
    path = aged_table(tmp_path, versions=6)
    kept_rows = rows(path, 1)
    snapshot1 = Snapshot.load(str(path), 1)
    needed = {snapshot1.storage.key_for_path(p) for p in snapshot1.paths}
    code, plain = cli("vacuum", str(path), "--dry-run")
    assert code == 0 and needed & set(plain["files_to_delete"])  # without keeping, some would go
    code, m = cli("vacuum", str(path), "--dry-run", "--keep-versions", "1")
    assert code == 0 and not needed & set(m["files_to_delete"])
    assert m["numFilesKeptForVersions"] == len(needed & set(plain["files_to_delete"]))
    assert m["numFilesToDelete"] == plain["numFilesToDelete"] - m["numFilesKeptForVersions"]
    latest = rows(path)
    code, m = cli("vacuum", str(path), "--keep-versions", "1")
    assert code == 0 and m["status"] == "committed" and m["numDeletedFiles"] > 0
    assert rows(path, 1) == kept_rows and rows(path) == latest
    assert rows(path, DeltaTable(str(path)).version()) == latest
    code, m = cli("vacuum", str(path), "--keep-versions", "99")
    assert code == 2 and "cannot keep version 99" in m["error"]


# -- VACUUM --inventory ----------------------------------------------------------------------------------
def inventory_of(path: Path, absolute: bool = True, skip: set[str] = frozenset()) -> pa.Table:
    """Every object under the table (the log included, as S3 Inventory would list it)."""
    out = {"path": [], "length": [], "isDir": [], "modificationTime": []}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if rel in skip:
            continue
        st = p.stat()
        out["path"].append(f"file:{p}" if absolute else rel)
        out["length"].append(st.st_size if p.is_file() else 0)
        out["isDir"].append(p.is_dir())
        out["modificationTime"].append(int(st.st_mtime * 1000))
    return pa.table(out)


def aged_copy(tmp_path: Path, name: str, dest: str) -> Path:
    path = tmp_path / dest
    shutil.copytree(corpus_path(name), path)
    old = (NOW_MS - 30 * DAY_MS) / 1000
    for p in path.rglob("*"):
        if p.is_file() and "_delta_log" not in p.parts:
            os.utime(p, (old, old))
    make_old(path, "orphan-1.parquet", "sub/orphan-2.parquet", "_hidden/orphan.parquet", days=30)
    make_young(path, "young.parquet")
    return path


CORPUS = ["golden/basic-with-inserts-updates", "golden/snapshot-vacuumed", "golden/data-reader-partition-values",
          "rs/table-with-dv-small", "golden/canonicalized-paths-special-a"]


@pytest.mark.spark
def test_inventory_vacuum_equals_a_listing_vacuum_on_corpus_copies(tmp_path, spark):
    compared = 0
    for n, name in enumerate(CORPUS):
        snap = Snapshot.load(str(corpus_path(name)))
        if unsupported_features(snap.protocol, "vacuum", snap.metadata):
            continue
        listed = aged_copy(tmp_path, name, f"l{n}")
        inv = aged_copy(tmp_path, name, f"i{n}")
        inv_file = tmp_path / f"inventory-{n}.parquet"
        pq.write_table(inventory_of(inv, absolute=n % 2 == 0), inv_file)
        code_l, ml = cli("vacuum", str(listed))
        code_i, mi = cli("vacuum", str(inv), "--inventory", str(inv_file))
        assert code_l == code_i == 0, (name, ml, mi)
        assert mi["numDeletedFiles"] == ml["numDeletedFiles"] >= 2, name
        assert mi["numFilesListed"] == ml["numFilesListed"], name
        assert set(tree(listed)) - {k for k in tree(listed) if k.startswith("_delta_log")} == \
            set(tree(inv)) - {k for k in tree(inv) if k.startswith("_delta_log")}, name
        assert mi["numDeletedDirectories"] == ml["numDeletedDirectories"], name
        assert mi["numVacuumedDirectories"] == ml["numVacuumedDirectories"], name
        assert {str(d.relative_to(listed)) for d in listed.rglob("*") if d.is_dir()} == \
            {str(d.relative_to(inv)) for d in inv.rglob("*") if d.is_dir()}, name
        assert (inv / "_hidden" / "orphan.parquet").exists() and (inv / "young.parquet").exists()
        compared += 1
    assert compared >= 4


def test_inventory_forms_stale_and_partial_inventories(tmp_path):
    path = aged_table(tmp_path, versions=6)
    make_old(path, "orphan-a.parquet", "orphan-b.parquet", days=30)
    latest = rows(path)
    # a stale inventory is refused and nothing changes
    stale = tmp_path / "stale.parquet"
    pq.write_table(inventory_of(path), stale)
    os.utime(stale, ((NOW_MS - 8 * DAY_MS) / 1000,) * 2)
    before = tree(path)
    code, m = cli("vacuum", str(path), "--inventory", str(stale))
    assert code == 2 and "before the retention cut-off" in m["error"] and tree(path) == before
    # a missing or malformed inventory: one clear error
    code, m = cli("vacuum", str(path), "--inventory", str(tmp_path / "nowhere.parquet"))
    assert code == 2 and "does not exist" in m["error"]
    bad = tmp_path / "bad.csv"
    bad.write_text("path,size\nx,1\n")
    code, m = cli("vacuum", str(path), "--inventory", str(bad))
    assert code == 2 and "lacks the column(s) length, isDir, modificationTime" in m["error"]
    code, m = cli("vacuum", str(path), "--inventory", str(stale), "--mode", "lite")
    assert code == 2 and "mode='lite'" in m["error"]
    assert tree(path) == before

    # a partial inventory (CSV) deletes only what it lists
    code, full = cli("vacuum", str(path), "--dry-run")
    assert full["numFilesToDelete"] >= 3
    unlisted = set(full["files_to_delete"][::2])
    partial = tmp_path / "partial.csv"
    pacsv.write_csv(inventory_of(path, skip=unlisted), partial)
    code, m = cli("vacuum", str(path), "--inventory", str(partial))
    assert code == 0 and m["numDeletedFiles"] == full["numFilesToDelete"] - len(unlisted)
    assert all((path / k).exists() for k in unlisted)
    assert rows(path) == latest

    # a Delta table inventory: the rest goes
    inv_table = tmp_path / "inventory-table"
    write_deltalake(str(inv_table), inventory_of(path))
    code, m = cli("vacuum", str(path), "--inventory", str(inv_table))
    assert code == 0 and m["numDeletedFiles"] == len(unlisted) and m["inventory"] == str(inv_table)
    assert not any((path / k).exists() for k in unlisted)
    assert rows(path) == latest
    assert json.loads(json.dumps(m))["inventoryTakenAt"] > NOW_MS - DAY_MS


# -- the option of compact-log, checkpoint and LogCompactionOperator --------------------------------
def test_compact_log_and_checkpoint_clean_up_expired_log_on_request(tmp_path):
    from airflow_delta_maint.operators.maintenance import LogCompactionOperator

    path = history(tmp_path, 8, checkpoints=(3,))
    for v in range(8):
        age(path, v, 40 if v < 7 else 0)
    op = LogCompactionOperator(task_id="c", table_uri=str(path), cleanup_expired_log=True, interval=100)
    assert "--cleanup-expired-log" in argv_of(op)
    assert op.nothing_to_do(op.typed_options(op.job_params())) is None  # compaction has nothing to do, cleanup has
    plain = LogCompactionOperator(task_id="p", table_uri=str(path), interval=100)
    assert "--cleanup-expired-log" not in argv_of(plain) and plain.nothing_to_do(plain.typed_options(plain.job_params()))

    code, m = cli("compact-log", str(path), "--interval", "100")
    assert code == 0 and "expired_log_cleanup" not in m and 0 in versions_of(log_files(path), "commit")
    before = {v: ours(path, v) for v in range(3, 8)}
    code, m = cli("compact-log", str(path), "--interval", "100", "--cleanup-expired-log")
    assert code == 0 and m["status"] == "committed" and m["expired_log_cleanup"]["checkpointVersion"] == 3
    assert versions_of(log_files(path), "commit") == set(range(3, 8))
    assert {v: ours(path, v) for v in range(3, 8)} == before
    assert op.nothing_to_do(op.typed_options(op.job_params()))  # nothing left for either

    other = history(tmp_path, 5, name="cp")
    for v in range(5):
        age(other, v, 40)
    code, m = cli("checkpoint", str(other), "--cleanup-expired-log")
    assert code == 0 and m["checkpoint_version"] == 4 and m["expired_log_cleanup"]["checkpointVersion"] == 4
    assert versions_of(log_files(other), "commit") == {4} and ours(other, 4) == theirs(other, 4)
