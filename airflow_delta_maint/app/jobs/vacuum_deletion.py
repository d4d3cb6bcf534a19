"""VACUUM's deletions between its two commits: ``VACUUM START``, the files deleted in parallel
(threads of the driver, Spark tasks from a million files on), ``VACUUM END``; each marker (no file
actions) committed on top of whatever others committed meanwhile, then the watermark recorded."""

from __future__ import annotations

import copy
import functools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from airflow_delta_maint.delta.errors import CommitFailedError, InvalidArgumentError
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction, winning_commits
from airflow_delta_maint.delta.plans.vacuum import VacuumPlan, table_retention_ms, write_last_vacuum_info
from airflow_delta_maint.delta.storage.table_files import delete_files_parallel
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.storage.store import Storage

from ..context import JobContext
from .vacuum_background import Background
from airflow_delta_maint.app.runners.store_call_tasks import count_into, spark_task_calls
from airflow_delta_maint.app.runners.vacuum_tasks import DELETE_BATCH, TASK_THREADS, delete_partition

#: a dry run lists at most this many of the files it would delete
DRY_RUN_LIST_CAP = 1000
SPARK_DELETE_MIN = 1_000_000  # this many files or more are deleted by Spark tasks, fewer by the driver
DRIVER_DELETE_THREADS = 16
STORE_DELETE_BATCH_MAX = 1000  # keys in one bulk delete request (S3's limit)
LOCAL_DELETE_BATCH = 50
_PROGRESS_EVERY_S = 5.0
_MARKER_ROUNDS = 30

log = logging.getLogger("delta_maint.vacuum")


@dataclass
class _DeleteProgress:
    """The driver's deletions so far, logged at most every ``_PROGRESS_EVERY_S`` seconds."""

    total: int
    done: int = 0
    last_logged: float = field(default_factory=time.monotonic)

    def note(self, n: int) -> None:
        """Count ``n`` more files deleted; log the progress when it is time to."""
        self.done += n
        if time.monotonic() - self.last_logged >= _PROGRESS_EVERY_S:
            self.last_logged = time.monotonic()
            log.info("deleted %d / %d files", self.done, self.total)


def delete_parallel(ctx: JobContext, storage: Storage, keys: list[str]) -> int:
    """Delete ``keys`` (sorted) in parallel and log progress.

    Deleting waits on storage, not on the CPU: up to ``SPARK_DELETE_MIN`` files (any number under
    local execution) go from the driver on ``DRIVER_DELETE_THREADS`` threads (object stores: bulk
    requests of ``DELETE_BATCH`` keys), which beats shipping every key to Spark tasks; more than
    that are spread over Spark tasks, each deleting on a few threads.
    """
    if not keys:
        return 0
    total = len(keys)
    if total < SPARK_DELETE_MIN or not ctx.spark_allowed or ctx.connect:  # Spark Connect: no RDDs
        progress = _DeleteProgress(total)
        # object stores: one bulk request per batch, the keys spread over the threads in as few
        # requests as the store takes (S3: 1,000 keys); local disk: small batches keep every thread busy
        batch = LOCAL_DELETE_BATCH if storage.is_local else \
            min(STORE_DELETE_BATCH_MAX, max(DELETE_BATCH, math.ceil(total / DRIVER_DELETE_THREADS)))
        deleted = delete_files_parallel(storage, keys, DRIVER_DELETE_THREADS, batch, progress.note)
        log.info("deleted %d / %d files", deleted, total)
        return deleted
    sc = ctx.spark().sparkContext
    slices = max(1, min(math.ceil(total / (DELETE_BATCH * TASK_THREADS)), sc.defaultParallelism * 4))
    counter = sc.accumulator(0)
    task = functools.partial(delete_partition, storage=storage, counter=counter)
    with spark_task_calls(sc) as calls:  # the tasks' store calls, added to the job's
        job = Background(lambda: sum(sc.parallelize(keys, slices).mapPartitions(count_into(task, calls)).collect()))
        while job.running_after(_PROGRESS_EVERY_S):
            log.info("deleted %d / %d files", counter.value, total)
        deleted = int(job.join())
    log.info("deleted %d / %d files", deleted, total)
    return deleted


def _fast_forward(snapshot: TableHeader, plan: VacuumPlan | None) -> TableHeader:
    """The snapshot moved to the latest version when the commits since only touched files (a
    marker commit cannot conflict with them); reloaded and re-checked when one changed the
    protocol or metadata."""
    storage = snapshot.storage
    later = [v for v in list_log(storage, snapshot.version + 1).commits if v > snapshot.version]
    if not later:
        return snapshot
    latest = max(later)
    for winner in winning_commits(storage, snapshot.version, latest):
        if winner.protocol_changed or winner.metadata_changed:
            fresh = Snapshot.load(storage, paths_only=True)
            check_supported(fresh.protocol, Operation.VACUUM, fresh.metadata)
            if plan is not None and plan.retention_check_enabled \
                    and plan.retention_ms < table_retention_ms(fresh.metadata):
                raise InvalidArgumentError(
                    "the table's delta.deletedFileRetentionDuration grew longer than this VACUUM's retention while "
                    "it was planning; nothing was deleted, run it again")
            return fresh
    moved = copy.copy(snapshot)
    moved.version = latest
    return moved


def _commit_marker(snapshot: TableHeader, operation: str, parameters: dict, metrics: dict,
                   plan: VacuumPlan | None = None) -> tuple[int, TableHeader]:
    """Commit a VACUUM marker (no file actions) on top of whatever others committed meanwhile.

    Returns the committed version and a snapshot to base the next marker on.
    """
    last_error: Exception | None = None
    for _ in range(_MARKER_ROUNDS):
        snapshot = _fast_forward(snapshot, plan)
        try:
            version = Transaction(snapshot, operation, parameters, job=Operation.VACUUM, max_retries=3).commit(metrics)
        except (ConflictError, CommitFailedError) as exc:
            log.info("%s lost to concurrent commits (%s); trying again on top of them", operation, exc)
            last_error = exc
            continue
        moved = copy.copy(snapshot)
        moved.version = version
        return version, moved
    raise CommitFailedError(f"could not commit {operation} in {_MARKER_ROUNDS} rounds: {last_error}")


def delete_between_markers(storage: Storage, snapshot: TableHeader, plan: VacuumPlan, metrics: dict[str, Any],
                            num_files: int, size: int, dirs_vacuumed: int, watermark: int | None,
                            delete: Callable[[], tuple[int, int]]) -> dict[str, Any]:
    """Nothing to delete: skipped (the watermark moved on). Else ``VACUUM START``, ``delete()`` (files
    deleted, folders removed), ``VACUUM END`` (``FAILED`` if the deletion raised); the metrics."""
    if not num_files:
        if watermark is not None and watermark != (plan.lite.watermark if plan.lite else None):
            write_last_vacuum_info(storage, watermark)
        metrics.update(status="skipped", numFilesDeleted=0, numDeletedFiles=0, numVacuumedDirectories=0,
                       numDeletedDirectories=0, reason="no file to delete")
        return metrics
    start_version, base = _commit_marker(snapshot, "VACUUM START", plan.commit_parameters(),
                                         {"numFilesToDelete": num_files, "sizeOfDataToDelete": size}, plan)
    metrics["version_vacuum_start"] = start_version
    try:
        deleted, removed_dirs = delete()
    except BaseException:
        _commit_marker(base, "VACUUM END", {"status": "FAILED"}, {})
        raise
    end_version, _ = _commit_marker(base, "VACUUM END", {"status": "COMPLETED"},
                                    {"numDeletedFiles": deleted, "numVacuumedDirectories": dirs_vacuumed})
    if watermark is not None:
        write_last_vacuum_info(storage, watermark)
    log.info("deleted %d files (%d bytes planned) and %d empty folders; committed VACUUM END at version %d",
             deleted, size, removed_dirs, end_version)
    metrics.update(status="committed", version_committed=end_version, numFilesDeleted=deleted,
                   numDeletedFiles=deleted, numVacuumedDirectories=dirs_vacuumed,
                   numDeletedDirectories=removed_dirs, lastVacuumWatermark=watermark)
    return metrics
