"""The score alone is the full report's score."""

from __future__ import annotations

import itertools

from airflow_delta_maint.delta.health.score import HealthInputs, health_score, score_of


def test_the_score_alone_is_the_reports_score():
    for small, commits, deleted, without in itertools.product((0, 5, 400), (0, 30, 900), (0, 10, 900), (0, 7)):
        h = HealthInputs(num_files=500, size_bytes=5 << 30, target_file_bytes=1 << 30, num_small_files=small,
                         small_files_bytes=small << 20, excess_small_files=max(0, small - 1), num_records=1000,
                         deleted_rows=deleted, tombstone_bytes=1 << 30, commits_since_checkpoint=commits,
                         checkpoint_interval=10, uncovered_commits=commits, compaction_interval=10,
                         files_without_stats=without)
        assert score_of(h) == health_score(h)["score"]
