"""Snapshots kept for the next reader of the same version, inside ``keeping_snapshots`` only."""

from __future__ import annotations

import os
import time

import pyarrow as pa
from deltalake import write_deltalake

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.snapshot_cache import SnapshotCache, keeping_snapshots, kept_snapshots
from airflow_delta_maint.delta.storage.store import Storage


def table(tmp_path, name="t", rows=3):
    path = str(tmp_path / name)
    write_deltalake(path, pa.table({"a": list(range(rows))}))
    return path


def test_the_next_reader_of_the_same_version_gets_a_copy_through_its_own_storage(tmp_path):
    path = table(tmp_path)
    with keeping_snapshots() as kept:
        first = Snapshot.load(path)
        mine = Storage(path)
        second = Snapshot.load(mine)
    assert (kept.hits, kept.misses) == (1, 1)
    assert second is not first and second.storage is mine
    assert second.version == first.version and second.files.equals(first.files)
    assert second.metadata == first.metadata and second.protocol == first.protocol
    second.txns["app"] = {"appId": "app", "version": 1}  # its own mappings: the kept one is untouched
    with keeping_snapshots(kept):
        assert "app" not in Snapshot.load(path).txns


def test_a_new_commit_or_a_rewritten_log_file_is_read_anew(tmp_path):
    path = table(tmp_path)
    with keeping_snapshots() as kept:
        Snapshot.load(path)
        write_deltalake(path, pa.table({"a": [9]}), mode="append")
        assert Snapshot.load(path).files.num_rows == 2
        commit = os.path.join(path, "_delta_log", "00000000000000000001.json")
        later = time.time() + 5
        os.utime(commit, (later, later))  # the same version, another file: not the state kept
        assert Snapshot.load(path).files.num_rows == 2
    assert (kept.hits, kept.misses) == (0, 3)


def test_nothing_is_kept_outside_the_block(tmp_path):
    path = table(tmp_path)
    assert kept_snapshots() is None
    with keeping_snapshots() as kept:
        Snapshot.load(path)
    assert kept_snapshots() is None
    Snapshot.load(path)
    assert (kept.hits, kept.misses) == (0, 1)


def test_a_whole_read_serves_a_read_of_paths_only_not_the_other_way(tmp_path):
    path = table(tmp_path)
    with keeping_snapshots() as kept:
        Snapshot.load(path, paths_only=True)
        Snapshot.load(path)
        Snapshot.load(path, paths_only=True)
    assert (kept.hits, kept.misses) == (1, 2)


def test_large_snapshots_are_not_kept_and_the_least_recent_leave_first(tmp_path):
    small, other, large = table(tmp_path, "small"), table(tmp_path, "other"), table(tmp_path, "large")
    for _ in range(3):
        write_deltalake(large, pa.table({"a": [1]}), mode="append")
    with keeping_snapshots(SnapshotCache(max_files=2, max_total_files=1)) as kept:
        Snapshot.load(large)  # 4 files: over one snapshot's bound
        Snapshot.load(large)
        Snapshot.load(small)
        Snapshot.load(other)  # pushes the small table out
        Snapshot.load(other)
        Snapshot.load(small)
    assert (kept.hits, kept.misses) == (1, 5)
