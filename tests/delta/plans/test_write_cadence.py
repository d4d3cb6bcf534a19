"""The writers' cadence read from the newest commits: when OPTIMIZE takes the busy path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_delta_maint.delta.log.listing import commit_key
from airflow_delta_maint.delta.plans.write_cadence import (ENOUGH_WRITER_COMMITS, MIN_WRITER_COMMITS, WINDOW_S,
                                                           read_write_cadence)
from airflow_delta_maint.delta.storage.store import Storage

NOW = 1_800_000_000_000


def table(path: Path, commits: list[tuple[float, str]], ict: bool = False) -> Storage:
    """A log of commits made ``seconds`` before ``NOW`` with the given operations (oldest first)."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    for version, (ago_s, operation) in enumerate(commits):
        when = NOW - int(ago_s * 1000)
        info: dict = {"timestamp": 0 if ict else when, "operation": operation}
        if ict:
            info["inCommitTimestamp"] = when
        actions = [{"commitInfo": info}]
        if version == 0:
            actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                        {"metaData": {"id": "x", "format": {"provider": "parquet"}, "schemaString": "{}",
                                      "partitionColumns": [], "configuration": {}}}]
        (log / commit_key(version).split("/")[-1]).write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return Storage(str(path))


@pytest.mark.parametrize("commits, active, counted", [
    # a streaming writer: one commit every 10 s, the newest 4 s ago
    ([(64, "WRITE"), (54, "WRITE"), (44, "MERGE"), (34, "WRITE"), (24, "DELETE"), (14, "WRITE"), (4, "WRITE")],
     True, 7),
    # an hourly batch writer: one commit in the window
    ([(7200, "WRITE"), (3600, "WRITE"), (60, "WRITE")], False, 1),
    # a burst of appends that ended a minute ago (one every 0.2 s): the writer has stopped
    ([(61.0 - 0.2 * i, "WRITE") for i in range(6)], False, 6),
    # a batch job's burst that has just ended (twenty appends in 4 s): one burst, no cadence
    ([(4.2 - 0.2 * i, "WRITE") for i in range(20)], False, 8),
    # our own maintenance is nobody's writing
    ([(300, "WRITE"), (30, "OPTIMIZE"), (20, "VACUUM START"), (19, "VACUUM END"), (10, "OPTIMIZE")], False, 1),
    # two writer commits make no cadence
    ([(20, "WRITE"), (10, "WRITE")], False, 2),
    # a writer every 4 minutes whose newest commit is 2 minutes old: still at work
    ([(WINDOW_S + 100, "WRITE"), (600, "WRITE"), (360, "WRITE"), (120, "WRITE")], True, 3),
])
def test_cadence(tmp_path: Path, commits: list, active: bool, counted: int) -> None:
    cadence = read_write_cadence(table(tmp_path / "t", commits), len(commits) - 1, NOW)
    assert cadence.active is active, cadence.reason()
    assert cadence.writer_commits == counted
    assert cadence.reason()
    assert set(cadence.metrics()) == {"writerCommitsInWindow", "windowSeconds", "newestWriterCommitAgeSeconds",
                                      "writerIntervalSeconds"}


def test_in_commit_timestamps_are_the_commit_times(tmp_path: Path) -> None:
    storage = table(tmp_path / "t", [(40, "WRITE"), (30, "WRITE"), (20, "WRITE"), (10, "WRITE"), (1, "WRITE")],
                    ict=True)
    cadence = read_write_cadence(storage, 4, NOW)
    assert cadence.active and cadence.writer_commits == 5 and cadence.interval_s == pytest.approx(10, abs=0.5)


def test_a_quiet_table_costs_one_read_and_a_busy_one_a_bounded_few(tmp_path: Path) -> None:
    reads: list[str] = []
    quiet = table(tmp_path / "quiet", [(86_400 * 2 - i, "WRITE") for i in range(50)])
    busy = table(tmp_path / "busy", [(250 - 5 * i, "WRITE") for i in range(50)])
    for storage in (quiet, busy):
        original = storage.read_range

        def counting(key: str, start: int, end: int, _orig=original) -> bytes:
            reads.append(key)
            return _orig(key, start, end)

        storage.read_range = counting  # type: ignore[method-assign]
    assert not read_write_cadence(quiet, 49, NOW).active
    assert reads == [commit_key(49)]
    reads.clear()
    assert read_write_cadence(busy, 49, NOW).active
    assert len(reads) == ENOUGH_WRITER_COMMITS >= MIN_WRITER_COMMITS


def test_commits_gone_end_the_scan(tmp_path: Path) -> None:
    storage = table(tmp_path / "t", [(30, "WRITE"), (20, "WRITE"), (10, "WRITE"), (5, "WRITE")])
    (tmp_path / "t" / commit_key(2)).unlink()
    cadence = read_write_cadence(storage, 3, NOW)
    assert cadence.writer_commits == 1 and not cadence.active
