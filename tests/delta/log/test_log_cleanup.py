"""Expired log cleanup: exactly the files the protocol's rules allow go, every remaining version
reads the same rows in delta-rs and in our reader, and protected or disabled tables are respected."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.errors import InvalidArgumentError, MissingVersionError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.cleanup import cleanup_expired_log, plan_log_cleanup, retention_hours_of
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.features import check_checkpoint_allowed
from airflow_delta_maint.delta.storage.store import Storage
from tests.conftest import corpus_path

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
LOG = "_delta_log"


# -- helpers ---------------------------------------------------------------------------------------
def history(tmp_path: Path, versions: int, checkpoints: tuple[int, ...] = (), name: str = "t") -> Path:
    """A delta-rs table: version v appends ids v*10 .. v*10+2 (every third version deletes one
    row), with delta-rs checkpoints after the listed versions."""
    path = tmp_path / name
    for v in range(versions):
        if v and v % 3 == 0:
            DeltaTable(str(path)).delete(f"id = {(v - 1) * 10}")
        else:
            write_deltalake(str(path), pa.table({"id": pa.array([v * 10 + i for i in range(3)], pa.int64())}),
                            mode="append")
        if v in checkpoints:
            DeltaTable(str(path)).create_checkpoint()
    return path


def age(path: Path, version: int, days: float) -> None:
    """Set the modification time of every log file of ``version`` ``days`` into the past."""
    when = (NOW_MS - days * DAY_MS) / 1000
    for f in (path / LOG).iterdir():
        if f.is_file() and f.name.lstrip(".").startswith(f"{version:020d}."):
            os.utime(f, (when, when))


def log_files(path: Path) -> set[str]:
    return {str(p.relative_to(path / LOG)) for p in (path / LOG).rglob("*") if p.is_file()}


def ours(path: Path, version: int) -> list:
    snap = Snapshot.load(str(path), version)
    out = []
    for p in snap.paths:
        out.extend(pq.read_table(os.path.join(path, unquote(p))).column(0).to_pylist())
    return sorted(out)


def theirs(path: Path, version: int) -> list:
    out = []
    for uri in DeltaTable(str(path), version=version).file_uris():
        out.extend(pq.read_table(unquote(uri.replace("file://", ""))).column(0).to_pylist())
    return sorted(out)


def all_rows(path: Path, versions) -> dict[int, list]:
    return {v: ours(path, v) for v in versions}


def assert_same_after(path: Path, before: dict[int, list], kept_from: int, latest: int,
                      delta_rs: bool = True) -> None:
    for v in range(kept_from, latest + 1):
        assert ours(path, v) == before[v], v
        if delta_rs:
            assert theirs(path, v) == before[v], v
    for v in range(0, kept_from):
        with pytest.raises(MissingVersionError):
            Snapshot.load(str(path), v)


def versions_of(names: set[str], kind: str) -> set[int]:
    out = set()
    for n in names:
        if "/" in n or n.startswith("."):
            continue
        if kind == "commit" and n.endswith(".json") and n[:20].isdigit() and len(n) == 25:
            out.add(int(n[:20]))
        if kind == "checkpoint" and ".checkpoint." in n:
            out.add(int(n[:20]))
    return out


def hand_commit(path: Path, version: int, actions: list[dict], when_ms: int | None = None) -> None:
    info = {"commitInfo": {"timestamp": when_ms or NOW_MS, "operation": "SET TBLPROPERTIES"}}
    body = "\n".join(json.dumps(a) for a in [info, *actions]) + "\n"
    (path / LOG / f"{version:020d}.json").write_text(body)


def protect(path: Path, before_version: int) -> int:
    """Commit checkpointProtection with delta.requireCheckpointProtectionBeforeVersion; returns its version."""
    snap = Snapshot.load(str(path))
    meta = json.loads([line for line in (path / LOG / f"{0:020d}.json").read_text().splitlines()
                       if '"metaData"' in line][0])["metaData"]
    meta["configuration"] = {**meta.get("configuration", {}),
                             "delta.requireCheckpointProtectionBeforeVersion": str(before_version)}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7,
                "writerFeatures": ["appendOnly", "invariants", "checkpointProtection"]}
    version = snap.version + 1
    hand_commit(path, version, [{"protocol": protocol}, {"metaData": meta}])
    return version


# -- the rules -------------------------------------------------------------------------------------
def test_deletes_everything_before_the_newest_checkpoint_at_or_before_the_cutoff_commit(tmp_path):
    path = history(tmp_path, 12, checkpoints=(3, 7, 10))
    for v in range(12):
        age(path, v, 40 - v if v <= 8 else 0)  # 0..8 older than 30 days, 9..11 fresh
    before = all_rows(path, range(12))
    names = log_files(path)

    m = cleanup_expired_log(Storage(str(path)))

    after = log_files(path)
    assert m["status"] == "committed" and m["cutoffCommitVersion"] == 8 and m["checkpointVersion"] == 7
    assert m["checkpointWritten"] is None
    assert versions_of(after, "commit") == set(range(7, 12))
    assert versions_of(after, "checkpoint") == {7, 10}
    gone = names - after
    assert all(int(n.lstrip(".")[:20]) < 7 for n in gone)
    assert m["numLogFilesDeleted"] == len(gone) == m["numLogFilesToDelete"]
    assert m["numCommitFilesDeleted"] == 7 and m["numCheckpointFilesDeleted"] == 1
    assert "_last_checkpoint" in after
    assert_same_after(path, before, 7, 11)
    # a second run finds nothing more to do
    again = cleanup_expired_log(Storage(str(path)))
    assert again["status"] == "skipped" and log_files(path) == after


def test_a_later_commit_never_looks_older_than_an_earlier_one(tmp_path):
    """Commit 5 looks 40 days old but follows a fresh commit 4: it counts as newer than 4."""
    path = history(tmp_path, 7, checkpoints=(2, 5))
    for v in range(7):
        age(path, v, {4: 0, 6: 0}.get(v, 40))
    before = all_rows(path, range(7))
    m = cleanup_expired_log(Storage(str(path)))
    assert m["cutoffCommitVersion"] == 3 and m["checkpointVersion"] == 2
    assert versions_of(log_files(path), "commit") == set(range(2, 7))
    assert_same_after(path, before, 2, 6)


def test_in_commit_timestamps_decide_age_where_the_table_has_them(tmp_path):
    """Every commit file is fresh, but the in-commit timestamps of 0..5 are 40 days old."""
    path = history(tmp_path, 8)
    old, fresh = NOW_MS - 40 * DAY_MS, NOW_MS
    for v in range(8):
        f = path / LOG / f"{v:020d}.json"
        lines = []
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                action["commitInfo"]["inCommitTimestamp"] = (old if v <= 5 else fresh) + v
            if v == 0 and "metaData" in action:
                action["metaData"]["configuration"] = {"delta.enableInCommitTimestamps": "true",
                                                       "delta.inCommitTimestampEnablementVersion": "0",
                                                       "delta.inCommitTimestampEnablementTimestamp": str(old)}
            if v == 0 and "protocol" in action:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["appendOnly", "invariants", "inCommitTimestamp"]}
            lines.append(json.dumps(action))
        f.write_text("\n".join(lines) + "\n")
    write_checkpoint(Snapshot.load(str(path), 4))
    before = all_rows(path, range(8))
    m = cleanup_expired_log(Storage(str(path)))
    assert m["cutoffCommitVersion"] == 5 and m["checkpointVersion"] == 4
    assert versions_of(log_files(path), "commit") == set(range(4, 8))
    assert_same_after(path, before, 4, 7)


def test_a_checkpoint_is_written_first_when_none_is_at_or_before_the_cutoff(tmp_path):
    path = history(tmp_path, 6)
    for v in range(6):
        age(path, v, 40 if v < 5 else 0)
    before = all_rows(path, range(6))
    m = cleanup_expired_log(Storage(str(path)))
    assert m["checkpointWritten"] == 4 and m["checkpointVersion"] == 4
    assert versions_of(log_files(path), "commit") == {4, 5}
    assert versions_of(log_files(path), "checkpoint") == {4}
    assert_same_after(path, before, 4, 5)


def test_dry_run_and_disabled_cleanup_change_nothing(tmp_path):
    path = history(tmp_path, 6, checkpoints=(3,))
    for v in range(6):
        age(path, v, 40 if v < 5 else 0)
    names = {p: p.stat().st_mtime_ns for p in (path / LOG).rglob("*")}
    m = cleanup_expired_log(Storage(str(path)), dry_run=True)
    assert m["status"] == "dry_run" and m["numLogFilesDeleted"] == 0
    assert sorted(m["log_files_to_delete"]) == sorted(
        f"{LOG}/{n}" for n in log_files(path) if n[:20].isdigit() and int(n[:20]) < 3
        or n.startswith(".") and n[1:21].isdigit() and int(n[1:21]) < 3)
    assert m["files_to_delete_by_kind"]["numCommitFilesDeleted"] == 3
    assert {p: p.stat().st_mtime_ns for p in (path / LOG).rglob("*")} == names

    off = tmp_path / "off"
    shutil.copytree(path, off)
    meta = json.loads([line for line in (off / LOG / f"{0:020d}.json").read_text().splitlines()
                       if '"metaData"' in line][0])["metaData"]
    meta["configuration"] = {"delta.enableExpiredLogCleanup": "false"}
    hand_commit(off, 6, [{"metaData": meta}])
    before = log_files(off)
    m = cleanup_expired_log(Storage(str(off)))
    assert m["status"] == "skipped" and "enableExpiredLogCleanup" in m["reason"]
    assert log_files(off) == before


def test_a_short_retention_is_read_from_the_table_or_the_caller(tmp_path):
    path = history(tmp_path, 5, checkpoints=(2,))
    for v in range(5):
        age(path, v, 3 if v < 4 else 0)  # three days old: within 30 days, outside 2
    assert plan_log_cleanup(Storage(str(path))).boundary is None
    plan = plan_log_cleanup(Storage(str(path)), retention_hours=48)
    assert plan.cutoff_commit == 3 and plan.boundary == 2
    with pytest.raises(InvalidArgumentError, match="retention_hours"):
        plan_log_cleanup(Storage(str(path)), retention_hours=-1)
    assert retention_hours_of("interval 2 days") == 48
    with pytest.raises(InvalidArgumentError, match="log retention"):
        retention_hours_of("soon")


def test_keep_versions_holds_the_boundary_at_or_before_the_oldest(tmp_path):
    path = history(tmp_path, 10, checkpoints=(3, 7))
    for v in range(10):
        age(path, v, 40 if v < 9 else 0)
    before = all_rows(path, range(10))
    m = cleanup_expired_log(Storage(str(path)), keep_versions=[5])
    assert m["checkpointVersion"] == 3
    assert_same_after(path, before, 3, 9)
    with pytest.raises(InvalidArgumentError, match="cannot be kept readable"):
        plan_log_cleanup(Storage(str(path)), keep_versions=[1])
    with pytest.raises(InvalidArgumentError, match="between 0 and"):
        plan_log_cleanup(Storage(str(path)), keep_versions=[99])


# -- checkpointProtection ---------------------------------------------------------------------------
def test_protected_table_cleans_up_only_as_the_protocol_allows(tmp_path):
    # boundary 7 >= protected version 2: history before it goes in one go
    path = history(tmp_path, 10, checkpoints=(3, 7), name="a")
    p = protect(path, 2)
    for v in range(p + 1):
        age(path, v, 40 if v <= 8 else 0)
    before = all_rows(path, range(p + 1))
    m = cleanup_expired_log(Storage(str(path)))
    assert m["checkpointVersion"] == 7 and m["checkpointWritten"] is None
    assert_same_after(path, before, 7, p)

    # protected up to 9, boundary 7: allowed only because no checkpoint is written (exception a)
    path = history(tmp_path, 10, checkpoints=(3, 7), name="b")
    p = protect(path, 9)
    for v in range(p + 1):
        age(path, v, 40 if v <= 8 else 0)
    before = all_rows(path, range(p + 1))
    m = cleanup_expired_log(Storage(str(path)))
    assert m["checkpointVersion"] == 7 and m["checkpointWritten"] is None
    assert_same_after(path, before, 7, p)

    # no checkpoint: one would have to be written before the protected version, which is refused
    path = history(tmp_path, 10, name="c")
    p = protect(path, 9)
    for v in range(p + 1):
        age(path, v, 40 if v <= 8 else 0)
    names = log_files(path)
    m = cleanup_expired_log(Storage(str(path)))
    assert m["status"] == "skipped" and "checkpointProtection" in m["reason"]
    assert log_files(path) == names
    snap = Snapshot.load(str(path))
    with pytest.raises(UnsupportedFeatureError, match="before version 9"):
        check_checkpoint_allowed(snap.protocol, snap.metadata, 8)
    check_checkpoint_allowed(snap.protocol, snap.metadata, 9)


# -- V2 checkpoints with sidecars -------------------------------------------------------------------
def test_v2_checkpoint_sidecars_go_with_their_checkpoint_and_only_then(tmp_path):
    path = tmp_path / "v2"
    shutil.copytree(corpus_path("golden/v2-checkpoint-json"), path)
    sidecars = sorted(p.name for p in (path / LOG / "_sidecars").iterdir() if not p.name.startswith("."))
    assert len(sidecars) == 2
    count = len(ours(path, 2))
    for v in range(3):
        age(path, v, 40)
    for p in (path / LOG / "_sidecars").iterdir():
        os.utime(p, ((NOW_MS - 40 * DAY_MS) / 1000,) * 2)
    # an old sidecar no checkpoint names goes; a young one (a checkpoint being written) stays
    (path / LOG / "_sidecars" / "orphan-old.parquet").write_bytes(b"x")
    os.utime(path / LOG / "_sidecars" / "orphan-old.parquet", ((NOW_MS - 40 * DAY_MS) / 1000,) * 2)
    (path / LOG / "_sidecars" / "orphan-young.parquet").write_bytes(b"x")
    m = cleanup_expired_log(Storage(str(path)))
    assert m["checkpointVersion"] == 2 and m["numSidecarFilesDeleted"] == 1
    left = log_files(path)
    assert all(f"_sidecars/{s}" in left for s in sidecars)
    assert "_sidecars/orphan-old.parquet" not in left and "_sidecars/orphan-young.parquet" in left
    assert versions_of(left, "commit") == {2}
    assert len(ours(path, 2)) == count

    # a newer checkpoint (inline, no sidecars) past the cut-off: the old V2 checkpoint and its sidecars go
    hand_commit(path, 3, [], when_ms=NOW_MS - 35 * DAY_MS)
    write_checkpoint(Snapshot.load(str(path), 3))
    age(path, 3, 35)
    hand_commit(path, 4, [])
    m = cleanup_expired_log(Storage(str(path)))
    left = log_files(path)
    assert m["checkpointVersion"] == 3 and m["numSidecarFilesDeleted"] == 4  # two sidecars, two .crc
    assert not any(f"_sidecars/{s}" in left for s in sidecars)
    assert versions_of(left, "checkpoint") == {3} and versions_of(left, "commit") == {3, 4}
    assert len(ours(path, 3)) == len(ours(path, 4)) == count
