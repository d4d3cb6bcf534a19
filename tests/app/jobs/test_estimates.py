"""Each job's estimate (gain and cost from the log alone) against what the job then does on the same table, in
the worker's process: files removed, deleted rows purged, files given statistics, log files no longer
replayed, bytes freed, and the health score after. The rows stay the same through every run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.app.job_definitions import JOBS, definition
from airflow_delta_maint.delta.health.estimates import FIRST_CHECKPOINT_COMMITS, CpuRates, EstimateInputs, estimate
from airflow_delta_maint.delta.health.score import HealthInputs
from tests.delta.plans.test_compute_stats_plan import make_table, strip_stats


def run(job: str, table: Path, *argv: str) -> dict:
    code, metrics = run_in_process(job, str(table), list(argv))
    assert code == 0, metrics
    return metrics


def rows(table: Path) -> list[tuple]:
    data = DeltaTable(str(table)).to_pyarrow_table()
    return sorted(zip(*(data.column(i).to_pylist() for i in range(data.num_columns))))


def appends(table: Path, commits: int) -> None:
    """``commits`` appends of 20,000 rows over two partitions (files of some 100 KiB: their footers are a
    small share of their bytes, as in real tables)."""
    for i in range(commits):
        n = 20_000
        batch = pa.table({"id": pa.array(range(i * n, (i + 1) * n), pa.int64()),
                          "value": pa.array([(j * 7919) % 100_003 for j in range(n)], pa.int64()),
                          "kind": pa.array(["a", "b"] * (n // 2))})
        write_deltalake(str(table), batch, mode="append", partition_by=["kind"])


def test_optimize_then_vacuum_do_what_their_estimates_say(tmp_path):
    table = tmp_path / "t"
    appends(table, 8)
    before = rows(table)
    estimates = run("inspect", table)["estimates"]
    optimize = estimates["optimize"]
    done = run("optimize", table)
    assert done["numRemovedFiles"] - done["numAddedFiles"] == optimize["gain"]["files_removed"] == 14
    assert optimize["cost"]["bytes_read"] == done["numRemovedBytes"]
    after = run("inspect", table)
    assert abs(after["health"]["score"] - optimize["gain"]["score_after"]) <= 2, (after["health"], optimize)
    assert optimize["gain"]["score_after"] > optimize["gain"]["score_before"]

    vacuum = after["estimates"]["vacuum"]
    assert vacuum["gain"]["bytes_freed"] == done["numRemovedBytes"] and vacuum["cost"]["files_deleted"] == 16
    cleaned = run("vacuum", table, "--retention-hours", "0", "--ignore-retention-check", "--mode", "full")
    assert cleaned["numDeletedFiles"] == vacuum["cost"]["files_deleted"]
    assert rows(table) == before
    assert run("inspect", table)["estimates"]["vacuum"]["gain"]["bytes_freed"] == 0


def test_checkpoint_and_log_compaction_gain_the_log_files_they_say(tmp_path):
    table = tmp_path / "t"
    appends(table, 7)
    estimates = run("inspect", table)["estimates"]
    # versions 0-6, no checkpoint yet: a first checkpoint's read costs what replaying 10 commits does
    assert estimates["checkpoint"]["gain"]["log_files_not_replayed"] == 0
    appends(table, 5)
    before = rows(table)
    estimates = run("inspect", table)["estimates"]
    assert estimates["checkpoint"]["gain"]["log_files_not_replayed"] == 12 - FIRST_CHECKPOINT_COMMITS
    assert estimates["checkpoint"]["gain"]["checkpoint_files_added"] == 1
    assert estimates["checkpoint"]["cost"]["log_files_read"] == 12
    run("checkpoint", table)
    after = run("inspect", table)
    assert after["commits_since_checkpoint"] == 0
    assert after["estimates"]["checkpoint"]["gain"]["log_files_not_replayed"] == 0
    assert after["health"]["score"] == estimates["checkpoint"]["gain"]["score_after"]
    assert rows(table) == before
    appends(table, 3)  # a checkpoint after the first replaces it: every commit since is saved
    again = run("inspect", table)["estimates"]["checkpoint"]["gain"]
    assert (again["log_files_not_replayed"], again["checkpoint_files_added"]) == (3, 0)


def test_compute_stats_gives_the_files_it_counts_statistics(tmp_path):
    table = make_table(tmp_path / "t")
    strip_stats(table, 0)  # the first commit's files lose their statistics
    before = rows(table)
    estimated = run("inspect", table)["estimates"]["compute-stats"]
    assert estimated["gain"]["files_given_stats"] == 2
    done = run("compute-stats", table)
    assert done["numFilesUpdated"] == estimated["gain"]["files_given_stats"]
    after = run("inspect", table)
    assert after["estimates"]["compute-stats"]["gain"]["files_given_stats"] == 0
    assert after["health"]["score"] == estimated["gain"]["score_after"] > estimated["gain"]["score_before"]
    assert rows(table) == before


def test_every_job_that_writes_has_an_estimate_or_says_why_not():
    estimated = {name for name, job in JOBS.items() if job.writes and job.estimate(_inputs()) is not None}
    assert estimated == {"optimize", "vacuum", "checkpoint", "compact-log", "compute-stats"}
    # the expired log files are not in the aggregates: only a look that planned the cleanup knows them
    assert definition("cleanup-log").estimate(_inputs()) is None
    assert definition("inspect").estimate(_inputs()) is None  # changes nothing


def test_the_log_cleanup_gains_the_bytes_of_the_files_it_deletes():
    import dataclasses

    nothing = estimate("cleanup-log", dataclasses.replace(_inputs(), expired_log_files=0))
    assert nothing is not None and not nothing.gain.any  # a plan found nothing expired: skipped by the estimate
    some = estimate("cleanup-log", dataclasses.replace(_inputs(), expired_log_files=7, expired_log_bytes=7000))
    assert some is not None and (some.gain.bytes_freed, some.cost.files_deleted) == (7000, 7)
    assert some.gain.score_after == some.gain.score_before  # the score reads no expired file
    assert some.cost.cpu_s > nothing.cost.cpu_s


def test_cpu_seconds_follow_the_rates():
    slow = estimate("optimize", _inputs(), CpuRates(per_gib_rewritten=100.0, fixed_s=0.0, per_file_read=0.0))
    fast = estimate("optimize", _inputs(), CpuRates(per_gib_rewritten=10.0, fixed_s=0.0, per_file_read=0.0))
    assert slow is not None and fast is not None
    assert slow.cost.cpu_s == pytest.approx(10 * fast.cost.cpu_s)
    assert fast.cost.cpu_s == pytest.approx(10.0 * (3 << 30) / (1 << 30), rel=1e-3)
    # the small files are priced by their number too: 30 opened
    files = estimate("optimize", _inputs(), CpuRates(per_gib_rewritten=0.0, fixed_s=0.0, per_file_read=0.5))
    assert files is not None and files.cost.files_read == 30 and files.cost.cpu_s == pytest.approx(15.0)
    assert sum(files.cost.terms(CpuRates(per_gib_rewritten=0.0, fixed_s=0.0, per_file_read=0.5)).values()) == 15.0
    stats = estimate("compute-stats", _inputs(), CpuRates(per_gib_read=0.0, fixed_s=0.0, per_file_read=0.5))
    assert stats is not None and stats.cost.files_read == 4 and stats.cost.cpu_s == pytest.approx(2.0)


def _inputs() -> EstimateInputs:
    gib = 1 << 30
    health = HealthInputs(num_files=100, size_bytes=10 * gib, target_file_bytes=gib, num_small_files=30,
                          small_files_bytes=3 * gib, excess_small_files=27, num_records=1000, deleted_rows=0,
                          tombstone_bytes=gib, commits_since_checkpoint=12, checkpoint_interval=10,
                          uncovered_commits=12, compaction_interval=5, files_without_stats=4)
    return EstimateInputs(health, num_files_with_deletion_vectors=0, num_tombstones=9)


def test_the_table_an_estimate_says_a_run_leaves_is_the_table_the_run_leaves(tmp_path):
    """A job listed after another is planned on ``Estimate.after``: after a real OPTIMIZE, the VACUUM and checkpoint
    estimates on the table it left are those on what the estimate said it would leave."""
    import dataclasses

    from airflow_delta_maint.app.lake_plan import table_inputs

    table = tmp_path / "t"
    appends(table, 12)  # a first checkpoint gains the commits beyond FIRST_CHECKPOINT_COMMITS
    before = rows(table)
    optimize = estimate("optimize", table_inputs(str(table), {}))
    assert optimize is not None and optimize.after is not None
    run("optimize", table)
    left = table_inputs(str(table), {})
    for job in ("vacuum", "checkpoint", "compact-log"):
        said, found = estimate(job, optimize.after), estimate(job, left)
        assert said is not None and found is not None
        unscored = {"score_before": 0, "score_after": 0}  # the score is an approximation: within 2, as above
        assert dataclasses.replace(said.gain, **unscored) == dataclasses.replace(found.gain, **unscored), job
        assert said.cost == found.cost and abs(said.gain.score_before - found.gain.score_before) <= 2, job
    checkpoint = estimate("checkpoint", left)
    assert checkpoint is not None and checkpoint.gain.any and checkpoint.after is not None
    assert estimate("compact-log", left).gain.any and not estimate("compact-log", checkpoint.after).gain.any
    assert rows(table) == before


@pytest.mark.parametrize("job", ["optimize", "vacuum", "checkpoint", "compact-log", "compute-stats", "cleanup-log"])
def test_whether_a_run_gains_is_what_its_whole_estimate_says(job):
    import dataclasses

    from airflow_delta_maint.delta.health.estimates import gains

    h = _inputs().health
    nothing = dataclasses.replace(h, excess_small_files=0, num_small_files=0, small_files_bytes=0, deleted_rows=0,
                                  tombstone_bytes=0, commits_since_checkpoint=0, uncovered_commits=0,
                                  files_without_stats=0)
    for health in (h, nothing):
        for expired in (None, 0, 3):
            inputs = dataclasses.replace(_inputs(), health=health, expired_log_files=expired, num_tombstones=0)
            whole = estimate(job, inputs)
            assert gains(job, inputs) == (None if whole is None else whole.gain.any), (job, health, expired)
