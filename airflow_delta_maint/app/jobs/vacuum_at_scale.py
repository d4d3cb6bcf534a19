"""VACUUM full of a large table: the valid set (and the kept versions' keys) streamed from the log to
parquet while Spark lists the table (or reads an inventory streamed to parquet), the files to delete
found by an anti-join and deleted by Spark tasks (:mod:`airflow_delta_maint.app.runners.vacuum_antijoin`)."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from airflow_delta_maint.delta.log.state_stream import StreamedState, StreamFallback
from airflow_delta_maint.delta.plans.vacuum import VacuumPlan, remove_empty_dirs
from airflow_delta_maint.delta.plans.vacuum_inventory import InventorySource, write_inventory_listing
from airflow_delta_maint.delta.plans.vacuum_keep import write_kept_keys
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions
from airflow_delta_maint.delta.plans.vacuum_valid_stream import write_valid_keys
from airflow_delta_maint.delta.storage.store import Storage

from ..context import JobContext
from ..state_reading import warm_up_spark
from .vacuum_background import Background
from .vacuum_deletion import DRY_RUN_LIST_CAP, delete_between_markers

log = logging.getLogger("delta_maint.vacuum")

#: how a fallback found only once the session is up (its master other than foreseen) begins its reason
LATE_FALLBACK = "found after the listing: "


def full_at_scale(ctx: JobContext, options: VacuumOptions, state: StreamedState, plan: VacuumPlan,
                   keep_versions: list[int], kept_states: list[int],
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
    snapshot = state
    scratch = aj.scratch_folder()
    valid_folder, kept_folder, listing_folder = (os.path.join(scratch, n) for n in ("valid", "kept", "listing"))
    if inventory is None:  # Spark starts and lists the table while the driver streams the valid keys
        listing_job = Background(lambda: aj.list_into_spark(ctx.spark("VACUUM"), storage, plan.partition_columns))
    else:  # Spark starts while a driver thread streams the inventory's files into the scratch folder
        warm_up_spark(ctx)
        listing_job = Background(_inventory_into_spark, ctx, inventory, storage, plan, listing_folder)
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
        if options.dry_run:
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

        return delete_between_markers(storage, snapshot, plan, metrics, untracked.files, untracked.bytes, dirs_vacuumed,
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
