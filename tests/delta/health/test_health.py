"""The health score's parts on corpus tables, against values worked out by hand from their logs."""

from __future__ import annotations

import pytest

from airflow_delta_maint.delta.health.score import HealthInputs, health_inputs, health_score
from airflow_delta_maint.delta.log.history import log_state
from airflow_delta_maint.delta.log.snapshot import Snapshot

from tests.conftest import corpus_path

MIB128 = 128 * 1024 * 1024


def score_of(name: str) -> dict:
    snapshot = Snapshot.load(str(corpus_path(name)))
    return health_score(health_inputs(snapshot, MIB128, log_state(snapshot.storage)))


def test_dv_partitioned_with_checkpoint():
    # Checkpoint at 10, commits 11-15 after it. Replaying checkpoint + commits: 15 live files,
    # 11007 bytes, numRecords summing to 37, two deletion vectors of cardinality 1 each; 15
    # tombstones, those whose path is no longer live totalling 9549 bytes. The files lie in 10
    # partitions (`part`): five hold one file, five hold two.
    h = score_of("golden/dv-partitioned-with-checkpoint")
    p = h["parts"]
    assert h["inputs"]["num_files"] == 15 and h["inputs"]["size_bytes"] == 11007
    # small files: all 15 below 128 MiB; compaction leaves one file per partition -> 5 excess
    assert p["small_files"]["excess_small_files"] == 5
    assert p["small_files"]["points_lost"] == pytest.approx(30 * 5 / 15, abs=0.01)       # 10
    # statistics: every file has numRecords, bounds and null counts of every column
    assert (p["statistics"]["files_without_stats"], p["statistics"]["files_missing_stats_columns"]) == (0, 0)
    # deletion vectors: 2 of 37 rows deleted; 0.0541 / 0.2 = 0.2703 of 20 points
    assert (p["deletion_vectors"]["deleted_rows"], p["deletion_vectors"]["num_records"]) == (2, 37)
    assert p["deletion_vectors"]["points_lost"] == pytest.approx(20 * (2 / 37) / 0.2, abs=0.01)  # 5.41
    # tombstones: 9549 / (9549 + 11007) of 15 points
    assert p["tombstones"]["tombstone_bytes"] == 9549
    assert p["tombstones"]["points_lost"] == pytest.approx(15 * 9549 / 20556, abs=0.01)    # 6.97
    # checkpoint: 5 commits since, interval 10 -> 5 / 20 of 15 points
    assert p["checkpoint"]["commits_since_checkpoint"] == 5
    assert p["checkpoint"]["points_lost"] == 3.75
    # log compaction: 5 uncovered commits, window 5 -> 1 complete window of 4 -> 2.5 of 10 points
    assert p["log_compaction"]["uncompacted_windows"] == 1
    assert p["log_compaction"]["points_lost"] == 2.5
    # 100 - 10 - 5.41 - 6.97 - 3.75 - 2.5 = 71.37
    assert h["score"] == 71


def test_dv_small_tombstone_of_a_live_path_is_not_debt():
    # Version 1 removes the file and adds it back with a deletion vector of cardinality 2 (of 10
    # rows): the file stays, so its tombstone holds no bytes VACUUM could free.
    h = score_of("rs/table-with-dv-small")
    p = h["parts"]
    assert p["tombstones"]["tombstone_bytes"] == 0 and p["tombstones"]["points_lost"] == 0
    assert p["small_files"]["excess_small_files"] == 0          # one small file: nothing to compact
    assert p["deletion_vectors"]["deleted_ratio"] == 0.2        # 2 / 10: the full 20 points
    assert p["deletion_vectors"]["points_lost"] == 20
    assert p["checkpoint"]["points_lost"] == 1.5                # 2 commits, no checkpoint: 2 / 20 x 15
    assert p["log_compaction"]["points_lost"] == 0              # 2 commits: no complete window of 5
    assert h["score"] == 79                                     # 100 - 20 - 1.5 = 78.5, halves round up


def test_simple_table_without_stats():
    # rs/simple_table: versions 0-4, 5 live files of 1811 bytes in all, no statistics (so no
    # deleted-row ratio), removes without sizes.
    h = score_of("rs/simple_table")
    p = h["parts"]
    assert p["small_files"]["excess_small_files"] == 4 and p["small_files"]["points_lost"] == 24  # 4 / 5 x 30
    assert p["statistics"]["files_without_stats"] == 5 and p["statistics"]["points_lost"] == 10  # 5 / 5 x 10
    assert p["deletion_vectors"]["num_records"] == 0 and p["deletion_vectors"]["points_lost"] == 0
    assert p["checkpoint"]["points_lost"] == 3.75 and p["log_compaction"]["points_lost"] == 2.5
    assert h["score"] == 60                                     # 100 - 24 - 10 - 3.75 - 2.5 = 59.75


def test_bounds_and_a_healthy_table():
    healthy = HealthInputs(num_files=3, size_bytes=3 * MIB128, target_file_bytes=MIB128, num_small_files=0,
                           small_files_bytes=0, excess_small_files=0, num_records=300, deleted_rows=0, tombstone_bytes=0,
                           commits_since_checkpoint=0, checkpoint_interval=10, uncovered_commits=0,
                           compaction_interval=5)
    assert health_score(healthy)["score"] == 100
    worst = HealthInputs(num_files=1000, size_bytes=1000, target_file_bytes=MIB128, num_small_files=1000,
                         small_files_bytes=1000, excess_small_files=999, num_records=10, deleted_rows=10, tombstone_bytes=10**12,
                         commits_since_checkpoint=1000, checkpoint_interval=10, uncovered_commits=1000,
                         compaction_interval=5, files_without_stats=600, files_missing_stats_columns=400)
    h = health_score(worst)
    assert all(0 <= part["penalty"] <= 1 for part in h["parts"].values())
    assert h["score"] == 0  # 30 x 0.999 + 10 + 20 + 15 + 15 + 10 = 99.97 lost
    empty = HealthInputs(0, 0, MIB128, 0, 0, 0, 0, 0, 0, 1, 10, 1, 5)
    assert health_score(empty)["parts"]["small_files"]["penalty"] == 0


def test_inspect_reports_the_score(capsys):
    from airflow_delta_maint.app.cli import run

    code, metrics = run(["inspect", str(corpus_path("rs/table-with-dv-small")), "--json"])
    assert code == 0 and metrics["health"]["score"] == 79
    code, _ = run(["inspect", str(corpus_path("rs/table-with-dv-small"))])
    assert "health           79/100 (deletion_vectors -20, checkpoint -1.5)" in capsys.readouterr().out
