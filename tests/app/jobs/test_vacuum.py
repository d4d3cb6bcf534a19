"""The VACUUM job end to end, in-process on the session's SparkSession, checked with delta-rs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.cli import run
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.log.listing import read_commit_info
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.vacuum import LAST_VACUUM_INFO, read_last_vacuum_info
from airflow_delta_maint.delta.protocol.deletion_vectors import dv_file_key
from airflow_delta_maint.delta.storage.store import Storage
from tests.conftest import corpus_path, load_manifest
from tests.data.conformance.expected import load_expected, missing_data_files, scrub
from tests.delta.plans.test_vacuum_plan import age_commit, protocol_names

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)


# -- helpers ---------------------------------------------------------------------------------------
def vacuum(path: Path, *args: str) -> tuple[int, dict]:
    return run(["vacuum", str(path), "--json", *args])


def rows(path: Path, version: int | None = None) -> list[tuple]:
    """Every row of a version with the folder of its file, read by delta-rs' file list and pyarrow."""
    dt = DeltaTable(str(path), version=version)
    out = []
    for uri in dt.file_uris():
        folder = os.path.dirname(os.path.relpath(uri.replace("file://", ""), str(path)))
        out.extend((folder, *sorted(r.items())) for r in pq.read_table(uri).to_pylist())
    return sorted(out, key=repr)


def row_tables(path: Path) -> list[tuple[str, pa.Table]]:
    """The latest version's files (relative paths, sorted) with their contents, as delta-rs lists them."""
    out = [(os.path.relpath(uri.replace("file://", ""), str(path)), pq.read_table(uri))
           for uri in DeltaTable(str(path)).file_uris()]
    return sorted(out, key=lambda item: item[0])


def same_rows(a: list[tuple[str, pa.Table]], b: list[tuple[str, pa.Table]]) -> bool:
    return [k for k, _ in a] == [k for k, _ in b] and all(x.equals(y) for (_, x), (_, y) in zip(a, b))


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under the root (the log included) with its size and modification time."""
    out = {}
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(path))] = (st.st_size, st.st_mtime_ns)
    return out


def make_old(path: Path, *names: str, days: float = 10) -> None:
    when = (NOW_MS - days * DAY_MS) / 1000
    for name in names:
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        if not f.exists():
            f.write_bytes(b"orphan")
        os.utime(f, (when, when))


def make_young(path: Path, *names: str) -> None:
    for name in names:
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"young orphan")


def aged_table(tmp_path: Path, versions: int = 5, partitions: int = 4, name: str = "t",
               configuration: dict | None = None) -> Path:
    """A partitioned delta-rs table: version 0 writes, then deletes and overwrites; versions
    0 .. versions-3 lie 12 .. days in the past, the last two are fresh."""
    path = tmp_path / name
    data = pa.table({"id": list(range(40)), "p": [f"p{i % partitions}" for i in range(40)]})
    write_deltalake(str(path), data, partition_by=["p"], configuration=configuration)
    for v in range(1, versions):
        if v % 2:
            DeltaTable(str(path)).delete(f"id % 7 = {v}")
        else:
            more = pa.table({"id": [100 + v * 10 + i for i in range(8)], "p": [f"p{i % partitions}" for i in range(8)]})
            write_deltalake(str(path), more, mode="overwrite" if v == 2 else "append", partition_by=["p"])
    for v in range(versions - 2):
        age_commit(path, v, NOW_MS - (12 - v) * DAY_MS)
    return path


def commit_infos(path: Path) -> dict[int, dict]:
    storage = Storage(str(path))
    latest = Snapshot.load(storage).version
    return {v: read_commit_info(storage, v) for v in range(latest + 1)}


# -- full mode -------------------------------------------------------------------------------------
def test_full_vacuum_deletes_old_orphans_and_keeps_what_versions_in_the_window_need(tmp_path, spark):
    path = aged_table(tmp_path)
    storage = Storage(str(path))
    before_versions = {v: rows(path, v) for v in range(5)}
    snapshot = Snapshot.load(storage)
    tombstoned_young = {storage.key_for_path(t["path"]) for t in snapshot.tombstone_actions()
                        if t["deletionTimestamp"] > NOW_MS - 7 * DAY_MS}
    assert tombstoned_young and all((path / k).exists() for k in tombstoned_young)
    old_orphans = ["orphan-root.parquet", "p=p1/orphan.parquet", "p=p2/sub/deep.parquet", "_change_data/cdc-old.parquet",
                   "gone=1/only.parquet"]
    make_old(path, *old_orphans)
    make_young(path, "young-root.parquet", "p=p0/young.parquet")
    hidden = ["_tmp/old.parquet", ".hidden/old.parquet", "p=p0/.old.parquet.crc", "p=p0/_SUCCESS"]
    make_old(path, *hidden)
    log_before = {k: v for k, v in tree(path).items() if k.startswith("_delta_log/")}

    code, m = vacuum(path)
    assert code == 0, m
    assert m["status"] == "committed" and m["operation"] == "vacuum" and m["mode"] == "full"
    assert m["retention_hours"] == 168
    assert m["version_read"] == 4 and m["version_committed"] == 6 and m["version_vacuum_start"] == 5

    after = tree(path)
    for name in old_orphans:
        assert name not in after
    assert not (path / "gone=1").exists()  # a folder left empty goes
    assert not (path / "p=p2" / "sub").exists()
    for name in ["young-root.parquet", "p=p0/young.parquet", *hidden]:
        assert name in after, name
    assert tombstoned_young <= set(after)  # removed inside the window: time travel needs them
    for key, value in log_before.items():
        assert after[key] == value  # the log is only ever appended to
    # every version the retention window can still reach reads as before
    latest_outside = 2  # versions 0..2 lie 10..12 days back, so the window starts at version 2
    for v in range(latest_outside, 5):
        assert rows(path, v) == before_versions[v], v
    assert rows(path) == before_versions[4]

    # the files of versions older than the window were deleted, so the counts add up
    deleted = m["numDeletedFiles"]
    assert deleted == m["numFilesDeleted"] == m["numFilesToDelete"]
    assert deleted >= len(old_orphans)
    assert m["sizeOfDataToDelete"] > 0 and m["numDeletedDirectories"] >= 2

    infos = commit_infos(path)
    start, end = infos[5], infos[6]
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationParameters"] == {"retentionCheckEnabled": True, "defaultRetentionMillis": 604800000}
    assert start["operationMetrics"] == {"numFilesToDelete": str(deleted), "sizeOfDataToDelete": str(m["sizeOfDataToDelete"])}
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"]["numDeletedFiles"] == str(deleted)
    assert end["operationMetrics"]["numVacuumedDirectories"] == str(m["numVacuumedDirectories"])
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "VACUUM END"
    assert read_last_vacuum_info(storage) == latest_outside
    assert json.loads((path / LAST_VACUUM_INFO).read_text()) == {"latestCommitVersionOutsideOfRetentionWindow": 2}

    # a second run finds nothing and commits nothing
    code, m2 = vacuum(path)
    assert code == 0 and m2["status"] == "skipped" and m2["numFilesToDelete"] == 0
    assert Snapshot.load(storage).version == 6
    assert rows(path) == before_versions[4]


@pytest.mark.parametrize("listing", ["spark", "driver"])
def test_many_files_are_listed_and_deleted_by_spark_tasks(tmp_path, spark, monkeypatch, caplog, listing):
    """Listed in Spark tasks (a local table past the driver's walk) or walked on the driver, deleted
    by Spark tasks (the path of a run deleting millions): the same files go."""
    import logging

    import airflow_delta_maint.app.jobs.vacuum_deletion as vacuum_deletion
    import airflow_delta_maint.app.jobs.vacuum_listing as vacuum_listing

    monkeypatch.setattr(vacuum_deletion, "SPARK_DELETE_MIN", 1000)
    monkeypatch.setattr(vacuum_listing, "LOCAL_DRIVER_LIST_MAX", 0 if listing == "spark" else 10**9)
    caplog.set_level(logging.INFO, logger="delta_maint.vacuum")
    path = aged_table(tmp_path, partitions=6)
    before = rows(path)
    orphans = [f"p=p{i % 6}/orphan-{i:05d}.parquet" for i in range(1500)]
    make_old(path, *orphans)
    code, m = vacuum(path, "--dry-run")
    assert code == 0 and m["status"] == "dry_run"
    assert m["numFilesToDelete"] >= 1500 and m["files_to_delete_truncated"] is True
    assert len(m["files_to_delete"]) == 1000
    assert all((path / k).exists() for k in m["files_to_delete"])
    code, m = vacuum(path)
    assert code == 0, m
    assert m["numDeletedFiles"] == m["numFilesToDelete"] >= 1500
    assert not any((path / o).exists() for o in orphans)
    assert rows(path) == before
    spark_listed = any("subtrees with Spark" in r.getMessage() for r in caplog.records)
    assert spark_listed is (listing == "spark")


def test_dry_run_deletes_and_commits_nothing(tmp_path, spark):
    path = aged_table(tmp_path)
    make_old(path, "orphan.parquet", "p=p3/orphan.parquet")
    before = tree(path)
    code, m = vacuum(path, "--dry-run")
    assert code == 0 and m["status"] == "dry_run"
    assert {"orphan.parquet", "p=p3/orphan.parquet"} <= set(m["files_to_delete"])
    assert m["numFilesToDelete"] == len(m["files_to_delete"]) and m["files_to_delete_truncated"] is False
    assert m["version_committed"] is None and m["numDeletedFiles"] == 0
    assert tree(path) == before


def test_a_retention_below_the_tables_is_refused_and_nothing_changes(tmp_path, spark):
    path = aged_table(tmp_path, configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    make_old(path, "orphan.parquet", days=1.5)
    before = tree(path)
    for mode in ("full", "lite"):
        code, m = vacuum(path, "--retention-hours", "24", "--mode", mode)
        assert code == 2 and m["status"] == "failed"
        assert m["error_type"] == "InvalidArgumentError"
        assert "24 hours is shorter than the table's delta.deletedFileRetentionDuration (48 hours)" in m["error"]
        assert tree(path) == before
    # the table's own 2 days apply by default: the orphan (1.5 days old) stays
    code, m = vacuum(path, "--dry-run")
    assert code == 0 and m["retention_hours"] == 48 and "orphan.parquet" not in m["files_to_delete"]
    code, m = vacuum(path, "--retention-hours", "24", "--ignore-retention-check")
    assert code == 0 and m["status"] == "committed"
    assert not (path / "orphan.parquet").exists()
    start = commit_infos(path)[m["version_vacuum_start"]]
    assert start["operationParameters"] == {"retentionCheckEnabled": False, "defaultRetentionMillis": 2 * DAY_MS,
                                            "specifiedRetentionMillis": DAY_MS}


# -- lite mode -------------------------------------------------------------------------------------
def test_lite_mode_deletes_expired_removed_files_from_the_log_only(tmp_path, spark):
    path = aged_table(tmp_path)
    storage = Storage(str(path))
    make_old(path, "untracked-orphan.parquet")
    latest = rows(path)
    in_window = {v: rows(path, v) for v in range(2, 5)}
    expired = set()
    for v in (0, 1):  # files versions 0 and 1 had that version 2 or 1 removed (10+ days ago)
        info = DeltaTable(str(path), version=v).get_add_actions(flatten=True).column("path").to_pylist()
        expired |= {storage.key_for_path(p) for p in info}
    expired -= {storage.key_for_path(p) for p in Snapshot.load(storage).paths}
    expired = {k for k in expired if (path / k).exists()}
    assert expired

    code, m = vacuum(path, "--mode", "lite")
    assert code == 0, m
    assert m["status"] == "committed" and m["mode"] == "lite"
    assert (m["eligibleStartCommitVersion"], m["eligibleEndCommitVersion"]) == (0, 2)
    assert m["numDeletedFiles"] >= len(expired)
    assert not any((path / k).exists() for k in expired)
    assert (path / "untracked-orphan.parquet").exists()  # lite mode never lists
    assert rows(path) == latest
    for v, expected in in_window.items():
        assert rows(path, v) == expected
    assert read_last_vacuum_info(storage) == 2
    infos = commit_infos(path)
    assert infos[5]["operation"] == "VACUUM START" and infos[6]["operation"] == "VACUUM END"

    # nothing new left the window: the next lite run reads no commit and commits nothing
    code, m = vacuum(path, "--mode", "lite")
    assert code == 0 and m["status"] == "skipped" and m["eligibleStartCommitVersion"] is None
    assert Snapshot.load(storage).version == 6
    # full mode still finds the untracked file
    code, m = vacuum(path)
    assert code == 0 and not (path / "untracked-orphan.parquet").exists()
    assert rows(path) == latest


def test_lite_mode_after_log_cleanup_fails_clearly_until_a_full_run(tmp_path, spark):
    path = aged_table(tmp_path)
    DeltaTable(str(path)).create_checkpoint()
    for v in (0, 1):
        (path / "_delta_log" / f"{v:020d}.json").unlink()
    before = tree(path)
    latest = rows(path)
    code, m = vacuum(path, "--mode", "lite")
    assert code == 2 and m["status"] == "failed"
    assert m["error_type"] == "VacuumLiteUnavailableError"
    assert "log now starts at version 2" in m["error"] and "Run a full VACUUM" in m["error"]
    assert tree(path) == before
    code, m = vacuum(path)
    assert code == 0 and m["status"] == "committed"
    assert read_last_vacuum_info(Storage(str(path))) == 2
    code, m = vacuum(path, "--mode", "lite")
    assert code == 0 and m["status"] == "skipped"
    assert rows(path) == latest


# -- safety ----------------------------------------------------------------------------------------
_WRITER = """
import os, sys, time
import pyarrow as pa
from deltalake import write_deltalake
path, ready, stop = sys.argv[1:4]
n = 0
deadline = time.time() + 120
while time.time() < deadline and (n < 3 or not os.path.exists(stop)):
    write_deltalake(path, pa.table({"id": [100000 + n], "p": ["p%d" % (n % 4)]}), mode="append", partition_by=["p"])
    n += 1
    if n == 1:
        open(ready, "w").close()
print(n)
"""


def test_a_concurrent_writer_loses_nothing(tmp_path, spark):
    path = aged_table(tmp_path)
    before = rows(path)
    make_old(path, *[f"p=p{i % 4}/orphan-{i:04d}.parquet" for i in range(1200)])
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(ready), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline and writer.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), writer.stderr.read() if writer.poll() is not None else "writer did not start"
        code, m = vacuum(path)
        stop.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    appended = int(out.strip())
    assert code == 0 and m["status"] == "committed", m
    assert m["numDeletedFiles"] >= 1200
    after = rows(path)
    new = [r for r in after if r not in before]
    assert sorted(r for r in after if r in before) == before
    assert sorted(dict(r[1:])["id"] for r in new) == [100000 + n for n in range(appended)]
    ops = [i["operation"] for i in commit_infos(path).values()]
    assert ops.count("VACUUM START") == 1 and ops.count("VACUUM END") == 1


def test_special_characters_in_partition_values(tmp_path, spark):
    path = tmp_path / "special"
    values = ["a b", "c:d/e", "x%y=z ü", "_lead", "100%", "plus+sign", "quote'\"", "#hash?"]
    data = pa.table({"id": list(range(len(values) * 2)), "_p": values * 2})
    write_deltalake(str(path), data, partition_by=["_p"])
    write_deltalake(str(path), data, partition_by=["_p"], mode="overwrite")  # tombstones in every folder
    age_commit(path, 0, NOW_MS - 20 * DAY_MS)
    age_commit(path, 1, NOW_MS - 19 * DAY_MS)
    write_deltalake(str(path), pa.table({"id": [99], "_p": ["a b"]}), partition_by=["_p"], mode="append")
    storage = Storage(str(path))
    folders = sorted(p.name for p in path.iterdir() if p.name.startswith("_p="))
    assert len(folders) == len(values)
    orphans = [f"{f}/orphan %20 {i}.parquet" for i, f in enumerate(folders)]
    make_old(path, *orphans)
    v1_files = {storage.key_for_path(p) for p in DeltaTable(str(path), version=1)
                .get_add_actions(flatten=True).column("path").to_pylist()}
    v0_files = {storage.key_for_path(p) for p in DeltaTable(str(path), version=0)
                .get_add_actions(flatten=True).column("path").to_pylist()}
    before, before_v1 = rows(path), rows(path, 1)
    code, m = vacuum(path)
    assert code == 0, m
    assert not any((path / o).exists() for o in orphans)
    assert not any((path / k).exists() for k in v0_files)
    assert all((path / k).exists() for k in v1_files)
    assert rows(path) == before and rows(path, 1) == before_v1
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("_p=")) == folders


# -- the conformance corpus ------------------------------------------------------------------------
# Every corpus table, with the outcome recorded for it in tests/data/conformance/expected.json.
MANIFEST = {e["table"]: e["oracle"] for e in load_manifest()}
EXPECTED = load_expected("vacuum")
ORPHAN = "vacuum-orphan.parquet"


def corpus_vacuum_copy(path: Path, snapshot: Snapshot | None) -> list[str]:
    """Age a copied corpus table for VACUUM: every file outside the log 30 days old, plus a 30-day-old
    orphan at the root and one in the first file's partition folder (the root's alone when the log
    does not load). Returns the orphans' keys."""
    old = (NOW_MS - 30 * DAY_MS) / 1000
    for p in path.rglob("*"):
        if p.is_file() and "_delta_log" not in p.parts:
            os.utime(p, (old, old))
    orphans = [ORPHAN]
    if snapshot is not None and snapshot.partition_columns and snapshot.paths:
        first = snapshot.storage.key_for_path(snapshot.paths[0])
        if first and "/" in first:
            orphans.append(first.rsplit("/", 1)[0] + "/" + ORPHAN)
    make_old(path, *orphans, days=30)
    return orphans


def _referenced(snapshot: Snapshot) -> set[str]:
    storage = snapshot.storage
    keys = {storage.key_for_path(p) for p in snapshot.paths}
    for dv in snapshot.files.column("deletionVector").to_pylist():
        keys.add(dv_file_key(storage, dv))
    return {k for k in keys if k}


def row_count(snapshot: Snapshot) -> int:
    total = 0
    for action in snapshot.add_actions():
        key = snapshot.storage.key_for_path(action["path"])
        total += pq.read_metadata(str(Path(snapshot.storage.local_root) / key)).num_rows
        total -= int((action.get("deletionVector") or {}).get("cardinality") or 0)
    return total


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_table_keeps_every_referenced_file_and_every_row(name, tmp_path, spark):
    """A corpus table, everything aged 30 days, plus old orphans: VACUUM does what expected.json
    records. It deletes only unreferenced files; rows (delta-rs, or footers minus deletion vectors
    where delta-rs cannot read) are equal before and after; refused tables and invalid logs stay
    untouched. Log-only tables (data files not in the corpus) are not vacuumed."""
    expected = EXPECTED[name]
    path = tmp_path / name.replace("/", "__")
    shutil.copytree(corpus_path(name), path)
    protocol_names(path)
    snapshot = None
    if expected["outcome"] == "invalid":
        with pytest.raises(DeltaError):
            Snapshot.load(str(path))
    else:
        snapshot = Snapshot.load(str(path))
    if expected["outcome"] == "log-only":
        assert (snapshot.num_files, missing_data_files(snapshot)) == (expected["files"], expected["missing"])
        assert expected["missing"] > 0
        return
    orphans = corpus_vacuum_copy(path, snapshot)
    listing_before = tree(path)
    if expected["outcome"] in ("refused", "invalid"):
        code, m = vacuum(path)
        assert code == 2 and m["status"] == "failed", m
        if expected["outcome"] == "refused":
            assert m["error_type"] == "UnsupportedFeatureError" and scrub(m["error"], path) == expected["reason"]
        else:
            assert (m["error_type"], scrub(m["error"], path)) == (expected["error_type"], expected["error"])
        assert tree(path) == listing_before
        return
    referenced = _referenced(snapshot)
    hidden_before = {k: v for k, v in listing_before.items()
                     if k.startswith("_delta_log/") or any(part[:1] in "._" and not part.startswith("_change_data")
                                                            and "=" not in part for part in k.split("/"))}
    readable = MANIFEST[name].get("readable")
    before = row_tables(path) if readable else row_count(snapshot)
    assert (sum(t.num_rows for _, t in before) if readable else before) == expected["rows"]
    if MANIFEST[name].get("rows") is not None:
        assert expected["rows"] == MANIFEST[name]["rows"]

    code, m = vacuum(path)
    assert code == 0 and m["status"] == expected["outcome"] == "committed", m
    assert m["version_read"] == expected["version_read"] == snapshot.version
    assert m["version_committed"] == expected["version_committed"]
    assert m["numDeletedFiles"] == expected["deleted_files"]
    after = tree(path)
    assert not any(o in after for o in orphans)
    missing = {k for k in referenced if k in listing_before and k not in after}
    assert not missing, missing
    deleted = {k for k in listing_before if k not in after}
    for key, value in hidden_before.items():
        # Hadoop's checksum sidecar (.<name>.crc) goes with its file, as Hadoop's own delete takes it
        folder, _, base = key.rpartition("/")
        sidecar_of = f"{folder}/{base[1:-4]}".lstrip("/") if base.startswith(".") and base.endswith(".crc") else None
        assert key == LAST_VACUUM_INFO or after.get(key) == value or sidecar_of in deleted, key
    latest = Snapshot.load(str(path))
    assert latest.version == snapshot.version + 2 == expected["version_committed"]
    assert _referenced(latest) == referenced and latest.num_files == expected["files"]
    if readable:
        assert same_rows(row_tables(path), before)
    else:
        assert row_count(latest) == before
