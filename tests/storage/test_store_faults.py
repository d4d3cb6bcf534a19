"""Every job through a fault-injecting proxy in front of moto's S3 and Azurite (``fault_proxy.py``).

Each seed runs the jobs in turn on a small table (24 files in two partitions, written straight to the
store by delta-rs) with about 5% of requests of every kind failing: 503 and 500 answers in the store's
format, connections reset before the answer or in its body, and lost replies (applied, then dropped).
After each run, whatever it ended with (success or a clean one-line failure), delta-rs reads the same
rows straight from the store (every live file is there), no commit is duplicated, and a rerun without
faults ends the work. The default run takes a few seeds; ``DELTA_MAINT_FAULT_SEEDS=20`` sweeps twenty.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter

import pytest

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.fault_harness import Table, clean_env, commits, data_files, new_table, proxied, removed_files

__all__ = ["clean_env", "proxied"]  # fixtures

pytestmark = pytest.mark.timeout(600)
log = logging.getLogger(__name__)

SEEDS = list(range(1, 1 + int(os.environ.get("DELTA_MAINT_FAULT_SEEDS", "2"))))
RETENTION = ["--retention-hours", "0", "--ignore-retention-check"]
#: (job, options, most new versions one run may commit)
JOBS: list[tuple[str, list[str], int]] = [
    ("inspect", [], 0),
    ("compact-log", ["--interval", "3"], 0),
    ("checkpoint", [], 0),
    ("compute-stats", [], 1),
    ("optimize", [], 1),
    ("vacuum", ["--mode", "lite", *RETENTION], 2),
    ("vacuum", ["--mode", "full", *RETENTION], 2),
    ("cleanup-log", ["--retention", "0 hours"], 0),
]


def assert_clean_failure(job: str, code: int, m: dict) -> None:
    """A failed run ended with one line naming the table, never the client's debug dump."""
    assert code == 2 and m["status"] == "failed", (job, m)
    error = m["error"]
    assert "\n" not in error and "Debug source" not in error and "RetryError" not in error, error
    assert len(error) < 400 and m["table"] in error, error


def is_done(table: Table, job: str, argv: list[str]) -> None:
    """After the rerun without faults, the job has nothing left to do."""
    uri, options = table.uri, table.options
    if job in ("optimize", "compute-stats", "compact-log"):
        code, m = run_in_process(job, uri, argv, options)
        assert code == 0 and m["status"] == "skipped", (job, m)
    elif job == "checkpoint":
        storage = Storage(uri, options)
        hint = json.loads(storage.read("_delta_log/_last_checkpoint"))
        assert hint["version"] == table.check()
        assert storage.exists(f"_delta_log/{hint['version']:020d}.checkpoint.parquet")
    elif job == "cleanup-log":
        code, m = run_in_process(job, uri, argv, options)
        assert (code, m["status"], m["numLogFilesDeleted"]) == (0, "skipped", 0), m
        assert not Storage(uri, options).exists(f"_delta_log/{0:020d}.json")  # the expired commits went
    elif job == "vacuum":
        left = data_files(uri, options) - table.live()
        if "full" in argv:
            assert left == set(), left
        else:
            assert not left & table.removed, left & table.removed


def run_with_faults(table: Table, job: str, argv: list[str], most: int, seed: int) -> tuple[Counter, int]:
    """One job with faults, then without; the table checked after each. Returns the faults drawn and the
    faulty run's exit code."""
    version = table.check()
    if job == "vacuum":
        table.removed = removed_files(table.uri, table.options)
        if "full" in argv:
            Storage(table.uri, table.options).put("part=0/part-00000-orphan.parquet", b"not referenced")
    code, m = table.run(job, argv, seed=seed)
    faults = Counter(table.stats["faults"])
    if code != 0:
        assert_clean_failure(job, code, m)
    after = table.check()
    assert after - version <= most, (job, after - version, m)
    code, m = table.run(job, argv)  # no faults: the rerun ends the work
    assert code == 0, (job, m)
    final = table.check()
    mine = commits(table.uri, table.options, version)
    assert len(mine) == final - version and len({c["txnId"] for c in mine}) == len(mine), mine
    operations = Counter(c["operation"] for c in mine)
    if job in ("optimize", "compute-stats"):  # the work is committed once, by one run or the other
        assert sum(operations.values()) == 1, operations
    is_done(table, job, argv)
    return faults, code


@pytest.mark.parametrize("seed", SEEDS)
def test_every_job_on_a_failing_store(proxied, clean_env, seed):
    """Every job with ~5% seeded faults; the table keeps its rows and files, and a clean rerun ends each job.
    The faults drawn and the runs that failed are logged (``--log-cli-level=INFO`` shows them)."""
    store, proxy = proxied
    table = new_table(store, proxy, f"faults/seed-{seed}")
    drawn: Counter = Counter()
    failed = []
    for i, (job, argv, most) in enumerate(JOBS):
        faults, code = run_with_faults(table, job, argv, most, seed * 100 + i)
        drawn += faults
        if code:
            failed.append(f"{job} {' '.join(argv[:2])}".strip())
    log.info("%s seed %d: faults %s; runs that failed: %s", store.name, seed, json.dumps(dict(drawn), sort_keys=True),
             ", ".join(failed) or "none")
    assert sum(drawn.values()) > 0, "no fault was drawn: the test proves nothing"
