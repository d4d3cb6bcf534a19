"""VACUUM full's listing: every visible file under the table root, listed on the driver in one
stream or in parallel (Spark tasks, threads under local execution), or read from an inventory."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Sequence

from airflow_delta_maint.delta.storage.table_files import Subtree, list_subtree
from airflow_delta_maint.delta.plans.vacuum_inventory import Inventory, inventory_files
from airflow_delta_maint.delta.storage.prefetch import PrefetchedListing
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

from ..context import JobContext
from airflow_delta_maint.app.runners.vacuum_tasks import list_partition, split_keys, summarize
from airflow_delta_maint.app.runners.vacuum_antijoin import top_folders

#: an object-store table whose log references fewer files is listed on the driver in one stream:
#: at most some 20-40 pages of 1,000 keys (about a second or two on S3), less than a Spark job costs
DRIVER_LIST_MAX = 20_000
#: a local table whose log references fewer files is walked on the driver in one stream: a walk costs
#: some 4 us a file, a Spark job over its subtrees half a second and more (its Python workers' start
#: on the application's first job)
LOCAL_DRIVER_LIST_MAX = 200_000

log = logging.getLogger("delta_maint.vacuum")


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
