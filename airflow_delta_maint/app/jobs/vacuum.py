"""Delete files no table version inside the retention window needs (VACUUM full or lite).

Full mode lists the table root with Spark (the driver lists the top folders, Spark tasks list
the subtrees; under local execution threads of this process, or one stream on local disk), keeps untracked files younger than the cutoff and everything the snapshot still
references, and deletes the rest in parallel Spark tasks. On a large table (see
:mod:`airflow_delta_maint.app.state_reading`) neither the listing nor the valid set comes to the
driver: the valid keys are streamed from the log to parquet and anti-joined with the listing in
Spark (:mod:`airflow_delta_maint.app.runners.vacuum_antijoin`); an inventory is streamed to parquet
a batch at a time and read by Spark as the listing, and the versions ``keep_versions`` keeps have
their keys streamed to parquet too; lite mode looks its candidates up in the streamed state. Lite mode reads the candidates from
the log instead of listing. Both commit ``VACUUM START`` and ``VACUUM END`` (no file actions,
so they never conflict with writers) and then record the watermark in ``_last_vacuum_info``.

This module holds the job's entry points and its choice of path; the listing is
:mod:`.vacuum_listing`, the deletions and their commits :mod:`.vacuum_deletion`, the large-table
path :mod:`.vacuum_at_scale`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import time
from typing import Any, Mapping

from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.plans.vacuum import VacuumPlan, lite_candidates, plan_vacuum, remove_empty_dirs
from airflow_delta_maint.delta.plans.vacuum_inventory import Inventory, check_fresh, open_inventory, read_inventory
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions
from airflow_delta_maint.delta.plans.vacuum_keep import kept_version_keys, readable_kept_versions
from airflow_delta_maint.delta.storage.prefetch import PrefetchedListing
from airflow_delta_maint.delta.plans.vacuum_valid import valid_keys
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

from ..context import JobContext
from ..job_definitions.vacuum import VACUUM
from ..engines import DELTA_SPARK, check_engine
from ..state_reading import fell_back, read_state
from .vacuum_at_scale import full_at_scale
from .vacuum_background import Background
from .vacuum_deletion import DRY_RUN_LIST_CAP, delete_between_markers, delete_parallel
from .vacuum_listing import inventory_listing, list_table

NAME = VACUUM.name

log = logging.getLogger("delta_maint.vacuum")




def options_from(params: Mapping[str, Any]) -> VacuumOptions:
    """The run's typed options from its parsed command line (``vars`` of the namespace); a bad value, or
    an option the chosen engine has no counterpart for, raises ``InvalidArgumentError`` before anything is read."""
    return VacuumOptions.from_mapping({**params, "engine": check_engine(NAME, params.get("engine"))})


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Run VACUUM with the parsed command line; the job's metrics."""
    return run_vacuum(ctx, options_from(vars(args)))


def run_vacuum(ctx: JobContext, options: VacuumOptions) -> dict[str, Any]:
    """Run VACUUM with ``options``; the job's metrics."""
    if options.engine == DELTA_SPARK:
        return _run_delta_spark(options, ctx)
    storage = ctx.storage
    # a full VACUUM of an object-store table starts listing it now: reading the log waits on the store too
    prefetch = PrefetchedListing(storage) if options.mode == "full" and not options.inventory and \
        not storage.is_local else None
    return read_state(storage, functools.partial(_vacuum, options, ctx, prefetch), what="VACUUM", paths_only=True)


def _vacuum(options: VacuumOptions, ctx: JobContext, prefetch: PrefetchedListing | None,
            state: TableState) -> dict[str, Any]:
    """VACUUM on the table's state, eager or streamed (a large table's, whose full mode goes to
    :func:`~.vacuum_at_scale.full_at_scale` where the executors see the driver's scratch folder)."""
    storage = ctx.storage
    ctx.version_read = state.version
    check_supported(state.protocol, Operation.VACUUM, state.metadata)
    listing_log = list_log(storage)
    plan = plan_vacuum(state, options.retention_hours, options.mode, options.ignore_retention_check,
                       listing=listing_log, with_valid=False)
    keep_versions = list(options.keep_versions)
    if isinstance(state, StreamedState) and plan.mode == "full" and ctx.spark_allowed and not ctx.connect \
            and _executors_see_scratch(ctx):
        return _full_at_scale(ctx, options, state, plan, keep_versions, prefetch)
    kept = kept_version_keys(storage, keep_versions, state.version) if keep_versions else set()
    # full mode builds the valid set beside the listing, in memory: the whole state, at the version planned from
    snapshot = state.eager(paths_only=True) if plan.mode == "full" else state
    inventory = None
    if options.inventory:
        inventory = read_inventory(options.inventory, ctx.storage_options)
        check_fresh(inventory, plan.cutoff_ms)
    listing_job = _start_listing(ctx, plan, snapshot, inventory, prefetch)
    if listing_job is not None:  # lite mode looks up only its candidates
        plan.valid = valid_keys(snapshot, plan.cutoff_ms)
    metrics = _first_metrics(storage, plan, snapshot, listed=listing_job is not None)
    if listing_job is not None:
        found = _untracked_files(listing_job, plan, listed_dirs=inventory is None, metrics=metrics)
    else:
        found = _lite_files(plan, storage, state, metrics)
    files = found.files
    if keep_versions:  # files the kept versions read stay, and are never counted as deletable
        before = len(files)
        files = [f for f in files if f.key not in kept]
        metrics.update(keepVersions=keep_versions, numFilesKeptForVersions=before - len(files))
    if inventory is not None:
        metrics.update(inventory=inventory.source, inventoryTakenAt=inventory.taken_at_ms)
    files.sort(key=lambda f: f.key)
    size = sum(f.size for f in files)
    metrics.update(numFilesToDelete=len(files), sizeOfDataToDelete=size)

    if options.dry_run:
        metrics.update(status="dry_run", numFilesDeleted=0, numDeletedFiles=0, numVacuumedDirectories=0,
                       files_to_delete=[f.key for f in files[:DRY_RUN_LIST_CAP]],
                       files_to_delete_truncated=len(files) > DRY_RUN_LIST_CAP)
        return metrics
    delete = functools.partial(_delete_files, ctx, [f.key for f in files], plan, found.listed_dirs)
    return delete_between_markers(storage, snapshot, plan, metrics, len(files), size, found.dirs_vacuumed,
                                  found.watermark, delete)


def _full_at_scale(ctx: JobContext, options: VacuumOptions, state: StreamedState, plan: VacuumPlan,
                   keep_versions: list[int], prefetch: PrefetchedListing | None) -> dict[str, Any]:
    """Full mode of a large table as an anti-join in Spark; the driver's own listing is cancelled
    and bad input (a version that cannot be kept, a stale inventory) fails before any work."""
    if prefetch is not None:
        prefetch.cancel()
    kept_versions = readable_kept_versions(ctx.storage, keep_versions, state.version) if keep_versions else []
    source = None
    if options.inventory:
        source = open_inventory(options.inventory, ctx.storage_options)
        check_fresh(source, plan.cutoff_ms)
    return full_at_scale(ctx, options, state, plan, keep_versions, kept_versions, source)


def _start_listing(ctx: JobContext, plan: VacuumPlan, snapshot: TableState, inventory: Inventory | None,
                   prefetch: PrefetchedListing | None) -> Background | None:
    """Full mode: list the table (or read the inventory) in the background while the driver builds
    the valid set; None in lite mode."""
    if plan.mode != "full":
        return None
    if inventory is not None:
        return Background(inventory_listing, inventory, ctx.storage, plan.cutoff_ms, plan.partition_columns)
    assert isinstance(snapshot, Snapshot)
    return Background(list_table, ctx, ctx.storage, plan.cutoff_ms, plan.partition_columns,
                      snapshot.num_files + snapshot.tombstones.num_rows, prefetch)


def _first_metrics(storage: Storage, plan: VacuumPlan, snapshot: TableState, listed: bool) -> dict[str, Any]:
    """The metrics known before any file is found (the valid set's size when the table is listed);
    logs what the run deletes."""
    retention_hours = plan.retention_ms / 3_600_000
    metrics: dict[str, Any] = {
        "version_read": snapshot.version,
        "mode": plan.mode,
        "retention_hours": retention_hours,
        "cutoff_timestamp": plan.cutoff_ms,
    }
    if listed:
        metrics["numValidFiles"] = len(plan.valid)
    log.info("VACUUM %s of %s at version %d: deleting untracked files older than %s (retention %g hours)",
             plan.mode, storage.root, snapshot.version,
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(plan.cutoff_ms / 1000)), retention_hours)
    return metrics


@dataclasses.dataclass
class _Deletable:
    """The files a run would delete, and what its commits and watermark record of how it found them."""

    files: list[FileInfo]
    #: folders the run covered (VACUUM END's ``numVacuumedDirectories``)
    dirs_vacuumed: int
    #: the lite-mode watermark recorded after the run (None: none)
    watermark: int | None
    #: the folders a listing found, for removing the emptied ones (None: walk for them)
    listed_dirs: dict[str, int] | None = None


def _untracked_files(listing_job: Background, plan: VacuumPlan, listed_dirs: bool,
                     metrics: dict[str, Any]) -> _Deletable:
    """Full mode: the listed files that are untracked and older than the cutoff; ``listed_dirs``:
    the listing's folders are the table's (not an inventory's)."""
    found = listing_job.join()
    files = found.untracked(plan.valid)
    log.info("%d files are untracked and older than the cutoff", len(files))
    metrics.update(numFilesListed=found.files, sizeOfFilesListed=found.bytes)
    return _Deletable(files, len(found.dirs) + 1, plan.latest_outside, found.dirs if listed_dirs else None)


def _lite_files(plan: VacuumPlan, storage: Storage, state: TableState, metrics: dict[str, Any]) -> _Deletable:
    """Lite mode: the expired files the commits past the watermark removed and no version needs."""
    assert plan.lite is not None
    lite = lite_candidates(plan, storage, state)
    metrics.update(eligibleStartCommitVersion=plan.lite.start if not plan.lite.empty else None,
                   eligibleEndCommitVersion=plan.lite.end if not plan.lite.empty else None,
                   numCommitsRead=lite.commits_read, numTombstonesNotExpired=lite.skipped_young)
    log.info("read commits %d to %d: %d files to delete", plan.lite.start, plan.lite.end, len(lite.files))
    return _Deletable(lite.files, 1, lite.watermark)


def _delete_files(ctx: JobContext, keys: list[str], plan: VacuumPlan,
                  listed_dirs: dict[str, int] | None) -> tuple[int, int]:
    """Delete ``keys`` in parallel, then the folders they left empty; (files, folders) deleted."""
    deleted = delete_parallel(ctx, ctx.storage, keys)
    return deleted, remove_empty_dirs(ctx.storage, keys, plan.cutoff_ms, plan.partition_columns, walk=False,
                                      listed_dirs=listed_dirs)


def _executors_see_scratch(ctx: JobContext) -> bool:
    """Whether the session's executors can read the driver's scratch folder (the anti-join's valid
    keys), decided before any listing or streaming so that a fallback does neither twice; logs why not."""
    from ..runners import vacuum_antijoin as aj

    master = ctx.session_master()
    if aj.scratch_shared(master):
        return True
    fell_back("VACUUM", aj.scratch_unshared_reason(master))
    return False


def _run_delta_spark(options: VacuumOptions, ctx: JobContext) -> dict[str, Any]:
    """Plan and check with our core (retention, features, inventory freshness), then delta-spark's VACUUM."""
    from ..engines import delta_spark

    snapshot = Snapshot.load(ctx.storage, paths_only=True)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, Operation.VACUUM, snapshot.metadata)
    plan = plan_vacuum(snapshot, options.retention_hours, options.mode, options.ignore_retention_check,
                       listing=list_log(ctx.storage), with_valid=False)
    if options.inventory:
        check_fresh(read_inventory(options.inventory, ctx.storage_options), plan.cutoff_ms)
    metrics: dict[str, Any] = {"version_read": snapshot.version, "mode": plan.mode,
                               "retention_hours": plan.retention_ms / 3_600_000, "cutoff_timestamp": plan.cutoff_ms}
    return delta_spark.vacuum(ctx, options, snapshot, plan, metrics)


def format_human(m: dict[str, Any]) -> str:
    """The run's metrics as a few lines for a terminal."""
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


def nothing_to_do(table: str, storage_options: Mapping[str, str] | None, options: VacuumOptions) -> str | None:
    """Without Spark: lite mode's reason when nothing expired would be deleted and the watermark
    stays; full mode: None (only a listing proves there are no orphans). Bad input raises."""
    from airflow_delta_maint.delta.plans.vacuum import nothing_to_do as vacuum_nothing_to_do

    return vacuum_nothing_to_do(table, storage_options, options)
