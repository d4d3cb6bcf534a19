"""Delete files no table version inside the retention window needs (VACUUM full or lite).

Full mode lists the table root with Spark (the driver lists the top folders, Spark tasks list
the subtrees; under local execution threads of this process, or one stream on local disk), keeps untracked files younger than the cutoff and everything the snapshot still
references, and deletes the rest in parallel Spark tasks. On a large table (see
:mod:`airflow_delta_maint.app.state_reading`) neither the listing nor the valid set comes to the
driver: the valid keys are streamed from the log to parquet and anti-joined with the listing in
Spark (:mod:`airflow_delta_maint.app.runners.vacuum_antijoin`); an inventory is streamed to parquet
a batch at a time and read by Spark as the listing, and the versions ``--keep-versions`` keeps have
their keys streamed to parquet too; lite mode looks its candidates up in the streamed state. Lite mode reads the candidates from
the log instead of listing. Both commit ``VACUUM START`` and ``VACUUM END`` (no file actions,
so they never conflict with writers) and then record the watermark in ``_last_vacuum_info``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from airflow_delta_maint.delta.errors import CommitFailedError, InvalidArgumentError
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState, StreamFallback
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction, winning_commits
from airflow_delta_maint.delta.plans.vacuum import (
    VacuumPlan, lite_candidates, plan_vacuum, remove_empty_dirs, table_retention_ms, valid_among, valid_among_streamed,
    valid_keys, write_last_vacuum_info,
)
from airflow_delta_maint.delta.plans.vacuum_files import Subtree, delete_files_parallel, list_subtree
from airflow_delta_maint.delta.plans.vacuum_inventory import (
    Inventory, InventorySource, check_fresh, inventory_files, open_inventory, read_inventory, write_inventory_listing,
)
from airflow_delta_maint.delta.plans.vacuum_keep import kept_version_keys, open_kept_states, write_kept_keys
from airflow_delta_maint.delta.plans.vacuum_prefetch import PrefetchedListing
from airflow_delta_maint.delta.plans.vacuum_valid_stream import write_valid_keys
from airflow_delta_maint.delta.protocol.features import check_supported
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

from ..context import JobContext
from ..engines import DELTA_SPARK, add_engine_argument, check_engine
from ..state_reading import fell_back, streamed_state, warm_up_spark
from .cleanup_log import parse_versions
from airflow_delta_maint.app.runners.vacuum_tasks import DELETE_BATCH, TASK_THREADS, delete_partition, list_partition, split_keys, summarize
from airflow_delta_maint.app.runners.vacuum_antijoin import top_folders

NAME = "vacuum"
DRY_RUN_LIST_CAP = 1000
SPARK_DELETE_MIN = 1_000_000  # this many files or more are deleted by Spark tasks, fewer by the driver
#: an object-store table whose log references fewer files is listed on the driver in one stream:
#: at most some 20-40 pages of 1,000 keys (about a second or two on S3), less than a Spark job costs
DRIVER_LIST_MAX = 20_000
#: a local table whose log references fewer files is walked on the driver in one stream: a walk costs
#: some 4 us a file, a Spark job over its subtrees half a second and more (its Python workers' start
#: on the application's first job)
LOCAL_DRIVER_LIST_MAX = 200_000
DRIVER_DELETE_THREADS = 16
STORE_DELETE_BATCH_MAX = 1000  # keys in one bulk delete request (S3's limit)
LOCAL_DELETE_BATCH = 50
_PROGRESS_EVERY_S = 5.0
_MARKER_ROUNDS = 30

log = logging.getLogger("delta_maint.vacuum")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retention-hours", type=float, default=None,
                        help="keep files needed by versions of the last H hours (default: the table's "
                             "delta.deletedFileRetentionDuration, 7 days if unset)")
    parser.add_argument("--mode", choices=("full", "lite"), default="full",
                        help="full lists every file under the table; lite reads the files to delete from the log")
    parser.add_argument("--dry-run", action="store_true", help="report what would be deleted; delete and commit nothing")
    parser.add_argument("--ignore-retention-check", action="store_true",
                        help="allow a retention shorter than the table's (unsafe while others read or write)")
    parser.add_argument("--keep-versions", metavar="V1,V2",
                        help="also keep every file these versions read, so time travel to them keeps working")
    parser.add_argument("--inventory", metavar="PATH",
                        help="read the files under the table from this inventory (parquet, CSV or Delta; "
                             "columns path, length, isDir, modificationTime) instead of listing (full mode)")
    add_engine_argument(parser)


# -- listing with Spark ----------------------------------------------------------------------------
@dataclass
class Listing:
    """What full mode found under the table root: the visible files older than the cutoff and
    every visible folder (key -> modification time in ms) in ``old``, and how many visible
    files and bytes there were."""

    old: Subtree
    files: int
    bytes: int

    @property
    def dirs(self) -> dict[str, int]:
        return self.old.dirs

    def untracked(self, valid: set[str] | frozenset[str]) -> list[FileInfo]:
        """The old files not in the valid set."""
        old = self.old
        return [FileInfo(k, s, m) for k, s, m in zip(old.keys, old.sizes, old.mtimes) if k not in valid]


def list_table(ctx: JobContext, storage: Storage, cutoff_ms: int, partition_columns: Sequence[str],
               known_files: int | None = None, prefetched: PrefetchedListing | None = None) -> Listing:
    """List every visible file under the table root: on the driver in one stream for a small
    table on an object store, else in parallel.

    ``known_files`` (the files the log references, live and tombstoned) sizes the table before
    listing. Below :data:`LOCAL_DRIVER_LIST_MAX` on local disk the driver walks the table in one
    stream. Below :data:`DRIVER_LIST_MAX` on an object store, one recursive listing on the
    driver (a page per 1,000 objects, as delta-rs lists) costs less than a Spark job's tasks and
    its extra per-prefix requests; that listing is ``prefetched`` when given (started before the
    log was read), which is cancelled when the table is listed in parallel instead.

    The driver lists the top folders (and one or two levels more while there are fewer folders
    than twice Spark's parallelism); Spark tasks list the subtrees and send back the visible
    files older than the cutoff. The valid set stays on the driver: shipping it to every task
    costs more than shipping the old files back.
    """
    # local execution lists local disk in one stream too: the walk is CPU-bound Python, which
    # threads of one process would only serialize
    local_disk = storage.is_local and (not ctx.spark_allowed or (
        known_files is not None and known_files < LOCAL_DRIVER_LIST_MAX))
    if local_disk or (not storage.is_local and known_files is not None and known_files < DRIVER_LIST_MAX):
        found = prefetched.subtree(partition_columns) if prefetched is not None else None
        if found is None:
            found = list_subtree(storage, "", partition_columns)
        keys, sizes, mtimes, count, size, dirs = summarize(found, cutoff_ms)
        old = Subtree()
        old.keys, old.sizes, old.mtimes = split_keys(keys), list(sizes), list(mtimes)
        old.dirs.update(dirs)
        log.info("listed %d files (%d bytes) on the driver; %d are older than the cutoff", count, size, len(old.keys))
        return Listing(old, count, size)
    if prefetched is not None:
        prefetched.cancel()
    tasks = ctx.tasks(f"VACUUM {storage.root}")
    parallelism = tasks.parallelism
    top, frontier = top_folders(storage, partition_columns, parallelism)
    results = [summarize(top, cutoff_ms)]
    log.info("listed %d files in the top folders; listing %d subtrees %s", results[0][3], len(frontier),
             "on threads" if tasks.local else "with Spark")
    if frontier:
        task = functools.partial(list_partition, storage=storage, cutoff_ms=cutoff_ms,
                                 partition_columns=list(partition_columns))
        results.extend(tasks.map_slices(task, frontier, parallelism * 2, "listing"))
    old = Subtree()
    listing = Listing(old, 0, 0)
    for keys, sizes, mtimes, count, size, dirs in results:
        listing.files += count
        listing.bytes += size
        listing.dirs.update(dirs)
        old.keys.extend(split_keys(keys))
        old.sizes.extend(sizes)
        old.mtimes.extend(mtimes)
    log.info("listed %d files (%d bytes) in %d folders; %d are older than the cutoff",
             listing.files, listing.bytes, len(listing.dirs) + 1, len(old.keys))
    return listing


def inventory_listing(inventory: Inventory, storage: Storage, cutoff_ms: int,
                      partition_columns: Sequence[str]) -> Listing:
    """The listing an inventory stands for: its visible files under the table root."""
    files, outside = inventory_files(inventory, storage, tuple(partition_columns))
    old = Subtree()
    total = 0
    for f in files:
        total += f.size
        if f.mtime_ms < cutoff_ms:
            old.add(f)
        folder = f.key.rpartition("/")[0] if storage.is_local else ""  # object stores have no folders
        while folder and folder not in old.dirs:  # the folders it names (counted, never listed)
            old.dirs[folder] = 0
            folder = folder.rpartition("/")[0]
    log.info("the inventory lists %d files (%d bytes) under the table (%d rows elsewhere); %d are older than the "
             "cutoff", len(files), total, outside, len(old.keys))
    return Listing(old, len(files), total)


class _Background:
    """Run a function on a thread (a Spark job, while the driver does other work) and join it."""

    def __init__(self, fn, *args: Any) -> None:
        self._result: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn, *args), name="vacuum-spark-job", daemon=True)
        self._thread.start()

    def _run(self, fn, *args: Any) -> None:
        try:
            self._result["value"] = fn(*args)
        except BaseException as exc:  # re-raised on the joining thread
            self._result["error"] = exc

    def running_after(self, seconds: float) -> bool:
        """Wait up to ``seconds``; whether it is still running."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def join(self) -> Any:
        self._thread.join()
        if "error" in self._result:
            raise self._result["error"]
        return self._result["value"]


# -- deleting ----------------------------------------------------------------------------------------
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
        done = [0]
        last = [time.monotonic()]

        def progress(n: int) -> None:
            done[0] += n
            if time.monotonic() - last[0] >= _PROGRESS_EVERY_S:
                last[0] = time.monotonic()
                log.info("deleted %d / %d files", done[0], total)

        # object stores: one bulk request per batch, the keys spread over the threads in as few
        # requests as the store takes (S3: 1,000 keys); local disk: small batches keep every thread busy
        batch = LOCAL_DELETE_BATCH if storage.is_local else \
            min(STORE_DELETE_BATCH_MAX, max(DELETE_BATCH, math.ceil(total / DRIVER_DELETE_THREADS)))
        deleted = delete_files_parallel(storage, keys, DRIVER_DELETE_THREADS, batch, progress)
        log.info("deleted %d / %d files", deleted, total)
        return deleted
    sc = ctx.spark().sparkContext
    slices = max(1, min(math.ceil(total / (DELETE_BATCH * TASK_THREADS)), sc.defaultParallelism * 4))
    counter = sc.accumulator(0)
    task = functools.partial(delete_partition, storage=storage, counter=counter)
    job = _Background(lambda: sum(sc.parallelize(keys, slices).mapPartitions(task).collect()))
    while job.running_after(_PROGRESS_EVERY_S):
        log.info("deleted %d / %d files", counter.value, total)
    deleted = int(job.join())
    log.info("deleted %d / %d files", deleted, total)
    return deleted


# -- commits -----------------------------------------------------------------------------------------
def _fast_forward(snapshot: Snapshot, plan: VacuumPlan | None) -> Snapshot:
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
            check_supported(fresh.protocol, "vacuum", fresh.metadata)
            if plan is not None and plan.retention_check_enabled \
                    and plan.retention_ms < table_retention_ms(fresh.metadata):
                raise InvalidArgumentError(
                    "the table's delta.deletedFileRetentionDuration grew longer than this VACUUM's retention while "
                    "it was planning; nothing was deleted, run it again")
            return fresh
    moved = copy.copy(snapshot)
    moved.version = latest
    return moved


def _commit_marker(snapshot: Snapshot, operation: str, parameters: dict, metrics: dict,
                   plan: VacuumPlan | None = None) -> tuple[int, Snapshot]:
    """Commit a VACUUM marker (no file actions) on top of whatever others committed meanwhile.

    Returns the committed version and a snapshot to base the next marker on.
    """
    last_error: Exception | None = None
    for _ in range(_MARKER_ROUNDS):
        snapshot = _fast_forward(snapshot, plan)
        try:
            version = Transaction(snapshot, operation, parameters, job="vacuum", max_retries=3).commit(metrics)
        except (ConflictError, CommitFailedError) as exc:
            log.info("%s lost to concurrent commits (%s); trying again on top of them", operation, exc)
            last_error = exc
            continue
        moved = copy.copy(snapshot)
        moved.version = version
        return version, moved
    raise CommitFailedError(f"could not commit {operation} in {_MARKER_ROUNDS} rounds: {last_error}")


# -- the job -----------------------------------------------------------------------------------------
def _check_engine_options(params: dict[str, Any]) -> str:
    """The run's engine; options delta-spark's VACUUM has no counterpart for fail before anything is read."""
    engine = check_engine(NAME, params.get("engine"))
    if engine == DELTA_SPARK and params.get("keep_versions"):
        raise InvalidArgumentError("VACUUM with the delta-spark engine does not take --keep-versions (native engine "
                                   "only)")
    return engine


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    storage = ctx.storage
    engine = _check_engine_options(vars(args))
    if engine == DELTA_SPARK:
        return _run_delta_spark(args, ctx)
    # a full VACUUM of an object-store table starts listing it now: reading the log waits on the store too
    prefetch = PrefetchedListing(storage) if args.mode == "full" and not args.inventory and not storage.is_local \
        else None
    state = streamed_state(storage, None, "VACUUM")
    snapshot = state.shell() if state is not None else Snapshot.load(storage, paths_only=True)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, "vacuum", snapshot.metadata)
    listing_log = list_log(storage)
    plan = plan_vacuum(snapshot, args.retention_hours, args.mode, args.ignore_retention_check,
                       listing=listing_log, with_valid=False)
    keep_versions = parse_versions(args.keep_versions)
    if state is not None and plan.mode == "full" and ctx.spark_allowed and not ctx.connect \
            and _executors_see_scratch(ctx):
        if prefetch is not None:
            prefetch.cancel()
        # bad input fails here, before any work: a version that cannot be kept, a stale inventory
        kept_states = open_kept_states(storage, keep_versions, snapshot.version) if keep_versions else []
        source = None
        if args.inventory:
            source = open_inventory(args.inventory, ctx.storage_options)
            check_fresh(source, plan.cutoff_ms)
        try:
            return _full_at_scale(ctx, args, state, plan, keep_versions, kept_states, source)
        except StreamFallback as exc:
            fell_back("VACUUM", exc)
    kept = kept_version_keys(storage, keep_versions, snapshot.version) if keep_versions else set()
    lookup = None
    if state is not None and plan.mode == "lite":
        lookup = functools.partial(_valid_among, state, plan.cutoff_ms)
    elif state is not None:  # full mode the stream cannot serve: the whole state, at the version planned from
        snapshot = Snapshot.load(storage, state.version, paths_only=True)
    inventory = None
    if args.inventory:
        if plan.mode != "full":
            raise InvalidArgumentError("--inventory replaces the listing of a full VACUUM; it cannot be used with "
                                       "--mode lite")
        inventory = read_inventory(args.inventory, ctx.storage_options)
        check_fresh(inventory, plan.cutoff_ms)
    listing_job = None
    if plan.mode == "full" and inventory is not None:
        listing_job = _Background(inventory_listing, inventory, storage, plan.cutoff_ms, plan.partition_columns)
    elif plan.mode == "full":  # list while the driver builds the valid set
        listing_job = _Background(list_table, ctx, storage, plan.cutoff_ms, plan.partition_columns,
                                  snapshot.num_files + snapshot.tombstones.num_rows, prefetch)
    if listing_job is not None:  # lite mode looks up only its candidates
        plan.valid = valid_keys(snapshot, plan.cutoff_ms)
    retention_hours = plan.retention_ms / 3_600_000
    metrics: dict[str, Any] = {
        "version_read": snapshot.version,
        "mode": plan.mode,
        "retention_hours": retention_hours,
        "cutoff_timestamp": plan.cutoff_ms,
    }
    if listing_job is not None:
        metrics["numValidFiles"] = len(plan.valid)
    log.info("VACUUM %s of %s at version %d: deleting untracked files older than %s (retention %g hours)",
             plan.mode, storage.root, snapshot.version,
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(plan.cutoff_ms / 1000)), retention_hours)

    watermark: int | None
    listed_dirs: dict[str, int] | None = None
    if listing_job is not None:
        found = listing_job.join()
        files = found.untracked(plan.valid)
        log.info("%d files are untracked and older than the cutoff", len(files))
        listed_dirs = found.dirs if inventory is None else None  # an inventory: the emptied folders
        dirs_vacuumed = len(found.dirs) + 1
        watermark = plan.latest_outside
        metrics.update(numFilesListed=found.files, sizeOfFilesListed=found.bytes)
    else:
        assert plan.lite is not None
        lite = lite_candidates(plan, storage, snapshot if lookup is None else None, lookup=lookup)
        files = lite.files
        dirs_vacuumed = 1
        watermark = lite.watermark
        metrics.update(eligibleStartCommitVersion=plan.lite.start if not plan.lite.empty else None,
                       eligibleEndCommitVersion=plan.lite.end if not plan.lite.empty else None,
                       numCommitsRead=lite.commits_read, numTombstonesNotExpired=lite.skipped_young)
        log.info("read commits %d to %d: %d files to delete", plan.lite.start, plan.lite.end, len(files))

    if keep_versions:  # files the kept versions read stay, and are never counted as deletable
        before = len(files)
        files = [f for f in files if f.key not in kept]
        metrics.update(keepVersions=keep_versions, numFilesKeptForVersions=before - len(files))
    if inventory is not None:
        metrics.update(inventory=inventory.source, inventoryTakenAt=inventory.taken_at_ms)
    files.sort(key=lambda f: f.key)
    size = sum(f.size for f in files)
    metrics.update(numFilesToDelete=len(files), sizeOfDataToDelete=size)

    if args.dry_run:
        metrics.update(status="dry_run", numFilesDeleted=0, numDeletedFiles=0, numVacuumedDirectories=0,
                       files_to_delete=[f.key for f in files[:DRY_RUN_LIST_CAP]],
                       files_to_delete_truncated=len(files) > DRY_RUN_LIST_CAP)
        return metrics

    keys = [f.key for f in files]

    def delete() -> tuple[int, int]:
        deleted = delete_parallel(ctx, storage, keys)
        return deleted, remove_empty_dirs(storage, keys, plan.cutoff_ms, plan.partition_columns, walk=False,
                                          listed_dirs=listed_dirs)

    return _delete_between_markers(storage, snapshot, plan, metrics, len(files), size, dirs_vacuumed, watermark, delete)


def _delete_between_markers(storage: Storage, snapshot: Snapshot, plan: VacuumPlan, metrics: dict[str, Any],
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


def _executors_see_scratch(ctx: JobContext) -> bool:
    """Whether the session's executors can read the driver's scratch folder (the anti-join's valid
    keys), decided before any listing or streaming so that a fallback does neither twice; logs why not."""
    from ..runners import vacuum_antijoin as aj

    master = ctx.session_master()
    if aj.scratch_shared(master):
        return True
    fell_back("VACUUM", StreamFallback(aj.scratch_unshared_reason(master)))
    return False


def _valid_among(state: StreamedState, cutoff_ms: int, keys: set[str]) -> set[str]:
    """Lite mode's lookup of its candidates in a large table's state, streamed; the whole state
    when the stream cannot vouch for it."""
    try:
        return valid_among_streamed(state, cutoff_ms, keys)
    except StreamFallback as exc:
        fell_back("VACUUM lite", exc)
        return valid_among(Snapshot.load(state.storage, state.version, paths_only=True), cutoff_ms, keys)


#: how a fallback found only once the session is up (its master other than foreseen) begins its reason
LATE_FALLBACK = "found after the listing: "


def _full_at_scale(ctx: JobContext, args: argparse.Namespace, state: StreamedState, plan: VacuumPlan,
                   keep_versions: list[int], kept_states: list[tuple[int, StreamedState | None]],
                   inventory: InventorySource | None = None) -> dict[str, Any]:
    """Full mode on a large table: the valid set (and the kept versions' keys) streamed to parquet
    while Spark lists the table, or while a driver thread streams the inventory's files to parquet
    for Spark to read; the files to delete found by an anti-join and deleted by Spark tasks
    (:mod:`airflow_delta_maint.app.runners.vacuum_antijoin`). Same metrics as the in-memory path.

    Raises:
        StreamFallback: the streamed state cannot be vouched for, or the executors may not see the
            scratch folder (before anything is deleted).
    """
    from ..runners import vacuum_antijoin as aj

    storage = state.storage
    snapshot = state.shell()
    scratch = aj.scratch_folder()
    valid_folder, kept_folder, listing_folder = (os.path.join(scratch, n) for n in ("valid", "kept", "listing"))
    if inventory is None:  # Spark starts and lists the table while the driver streams the valid keys
        listing_job = _Background(lambda: aj.list_into_spark(ctx.spark("VACUUM"), storage, plan.partition_columns))
    else:  # Spark starts while a driver thread streams the inventory's files into the scratch folder
        warm_up_spark(ctx)
        listing_job = _Background(_inventory_into_spark, ctx, inventory, storage, plan, listing_folder)
    frames: list[Any] = []
    try:
        try:
            write_valid_keys(state, plan.cutoff_ms, valid_folder)
            if kept_states:
                kept = write_kept_keys(storage, kept_states, kept_folder)
                log.info("the kept versions %s read %d keys%s", keep_versions, kept.written,
                         f" (versions {kept.loaded_whole} loaded whole)" if kept.loaded_whole else "")
        except BaseException:
            with contextlib.suppress(BaseException):
                listing_job.join().frame.unpersist()
            raise
        found = listing_job.join()
        spark = ctx.spark("VACUUM")
        frames.append(found.frame)
        if not aj.scratch_shared(spark.sparkContext.master):  # the session got another master than foreseen
            raise StreamFallback(f"{LATE_FALLBACK}{aj.scratch_unshared_reason(spark.sparkContext.master)}")
        untracked, valid_count = aj.untracked_files(spark, found, valid_folder, plan.cutoff_ms,
                                                    kept_folder if kept_states else None)
        frames.append(untracked.frame)
        retention_hours = plan.retention_ms / 3_600_000
        metrics: dict[str, Any] = {"version_read": snapshot.version, "mode": plan.mode,
                                   "retention_hours": retention_hours, "cutoff_timestamp": plan.cutoff_ms,
                                   "numValidFiles": valid_count}
        log.info("VACUUM full of %s at version %d (large table: anti-join in Spark): %d files are untracked and "
                 "older than the cutoff", storage.root, snapshot.version, untracked.files)
        metrics.update(numFilesListed=found.files, sizeOfFilesListed=found.bytes)
        if keep_versions:
            metrics.update(keepVersions=keep_versions, numFilesKeptForVersions=untracked.kept_for_versions)
        if inventory is not None:
            metrics.update(inventory=inventory.source, inventoryTakenAt=inventory.taken_at_ms)
        metrics.update(numFilesToDelete=untracked.files, sizeOfDataToDelete=untracked.bytes)
        dirs_vacuumed = len(found.dirs) + 1
        watermark = plan.latest_outside
        if args.dry_run:
            listed = aj.first_keys(untracked, DRY_RUN_LIST_CAP)
            metrics.update(status="dry_run", numFilesDeleted=0, numDeletedFiles=0, numVacuumedDirectories=0,
                           files_to_delete=listed, files_to_delete_truncated=untracked.files > DRY_RUN_LIST_CAP)
            return metrics
        # an inventory's folders were never listed: only those that held a deleted file are tried
        listed_dirs = found.dirs if inventory is None else None

        def delete() -> tuple[int, int]:
            deleted = aj.delete_untracked(spark, storage, untracked)
            emptied = [f"{d}/" for d in aj.emptied_folders(untracked)] if storage.is_local else []
            return deleted, remove_empty_dirs(storage, emptied, plan.cutoff_ms, plan.partition_columns,
                                              walk=False, listed_dirs=listed_dirs)

        return _delete_between_markers(storage, snapshot, plan, metrics, untracked.files, untracked.bytes, dirs_vacuumed,
                                       watermark, delete)
    finally:
        for frame in frames:
            with contextlib.suppress(Exception):
                frame.unpersist()
        aj.remove_scratch(scratch)


def _inventory_into_spark(ctx: JobContext, inventory: InventorySource, storage: Storage, plan: VacuumPlan,
                          folder: str) -> Any:
    """The inventory streamed into ``folder`` (its visible files older than the cutoff), then read
    by Spark as the listing of the anti-join."""
    from ..runners import vacuum_antijoin as aj

    found = write_inventory_listing(inventory, storage, plan.partition_columns, plan.cutoff_ms, folder)
    return aj.listing_from_parquet(ctx.spark("VACUUM"), folder, found.files, found.bytes, found.dirs)


def _run_delta_spark(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Plan and check with our core (retention, features, inventory freshness), then delta-spark's VACUUM."""
    from ..engines import delta_spark

    snapshot = Snapshot.load(ctx.storage, paths_only=True)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, "vacuum", snapshot.metadata)
    plan = plan_vacuum(snapshot, args.retention_hours, args.mode, args.ignore_retention_check,
                       listing=list_log(ctx.storage), with_valid=False)
    if args.inventory:
        if plan.mode != "full":
            raise InvalidArgumentError("--inventory replaces the listing of a full VACUUM; it cannot be used with "
                                       "--mode lite")
        check_fresh(read_inventory(args.inventory, ctx.storage_options), plan.cutoff_ms)
    metrics: dict[str, Any] = {"version_read": snapshot.version, "mode": plan.mode,
                               "retention_hours": plan.retention_ms / 3_600_000, "cutoff_timestamp": plan.cutoff_ms}
    return delta_spark.vacuum(ctx, args, snapshot, plan, metrics)


def format_human(m: dict[str, Any]) -> str:
    lines = [f"VACUUM {m.get('mode')} of {m['table']}: {m['status']}",
             f"  version read       {m.get('version_read')}",
             f"  retention          {m.get('retention_hours'):g} hours"]
    if m.get("mode") == "full":
        lines.append(f"  files listed       {m.get('numFilesListed')}")
    else:
        lines.append(f"  commits read       {m.get('eligibleStartCommitVersion')} to {m.get('eligibleEndCommitVersion')}")
    lines.append(f"  files to delete    {m.get('numFilesToDelete')} ({m.get('sizeOfDataToDelete')} bytes)")
    if m["status"] == "dry_run":
        lines.extend(f"    {k}" for k in m.get("files_to_delete", []))
        if m.get("files_to_delete_truncated"):
            lines.append(f"    ... and {m['numFilesToDelete'] - len(m['files_to_delete'])} more")
    else:
        lines.append(f"  files deleted      {m.get('numDeletedFiles')}")
        lines.append(f"  empty folders      {m.get('numDeletedDirectories', 0)} removed")
    if m.get("version_committed") is not None:
        lines.append(f"  committed          VACUUM END at version {m['version_committed']}")
    return "\n".join(lines)


def nothing_to_do(table: str, storage_options: dict[str, str] | None, params: dict[str, Any]) -> str | None:
    """Without Spark: lite mode's reason when nothing expired would be deleted and the watermark
    stays; full mode: None (only a listing proves there are no orphans). Bad input raises."""
    from airflow_delta_maint.delta.plans.vacuum import nothing_to_do as vacuum_nothing_to_do

    _check_engine_options(dict(params))
    return vacuum_nothing_to_do(table, storage_options, params)
