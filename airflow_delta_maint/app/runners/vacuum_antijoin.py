"""VACUUM full of a large table as a distributed anti-join: the listing and the valid set stay in
Spark, never in the driver's memory.

The driver streams the valid keys from the log into parquet files in a scratch folder
(:func:`~airflow_delta_maint.delta.plans.vacuum_valid_stream.write_valid_keys`), and the keys of
the versions ``keep_versions`` keeps
(:func:`~airflow_delta_maint.delta.plans.vacuum_keep.write_kept_keys`); Spark tasks list the
table's subtrees into a DataFrame of files and folders
(:func:`~airflow_delta_maint.app.runners.vacuum_tasks.list_rows`), or, with ``inventory``, the
driver streams the inventory's visible files into the scratch folder
(:func:`~airflow_delta_maint.delta.plans.vacuum_inventory.write_inventory_listing`) and Spark
reads them as the listing. The files older than the cutoff that no valid key names (a left
anti-join) are the files to delete, less those a kept version reads; Spark tasks delete them. The
driver holds the folders (for removing emptied ones), the counts and at most
``DRY_RUN_LIST_CAP`` keys of a dry run.

The scratch folder must be readable by the executors: a local temporary folder serves a local or
single-machine cluster; elsewhere set ``DELTA_MAINT_SCRATCH_DIR`` to a folder every machine
mounts. pyspark is imported inside the functions only.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from airflow_delta_maint.delta.storage.table_files import Subtree, list_folder
from airflow_delta_maint.delta.storage import scratch
from airflow_delta_maint.delta.storage.scratch import make_scratch
from airflow_delta_maint.delta.storage.store import Storage

from .scratch_shuffle import SCRATCH_ENV, scratch_shared
from .store_call_tasks import count_into, spark_task_calls
from .vacuum_tasks import delete_rows, list_rows

__all__ = ["SCRATCH_ENV", "ScaledListing", "Untracked", "delete_untracked", "list_into_spark", "listing_from_parquet",
           "scratch_folder", "scratch_shared", "scratch_unshared_reason", "untracked_files"]

log = logging.getLogger("delta_maint.vacuum")
_LISTING_SCHEMA = "kind string, key string, size long, mtime long"


def scratch_folder() -> str:
    """A fresh folder for this run's temporary files (under ``DELTA_MAINT_SCRATCH_DIR`` when set)."""
    base = os.environ.get(SCRATCH_ENV) or None
    if base:
        os.makedirs(base, exist_ok=True)
    return make_scratch("delta-vacuum-", base)


def scratch_unshared_reason(master: str) -> str:
    """Why the anti-join cannot run under ``master`` (see :func:`scratch_shared`)."""
    return (f"the executors of {master} may not see the driver's scratch folder: set {SCRATCH_ENV} to a folder "
            "every machine of the cluster mounts for VACUUM in bounded memory")


def remove_scratch(folder: str) -> None:
    scratch.remove_scratch(folder)


def top_folders(storage: Storage, partition_columns: Sequence[str], parallelism: int) -> tuple[Subtree, list[str]]:
    """The files of the top folders (listed on the driver) and the subtrees left for the tasks:
    one or two levels more while there are fewer folders than twice the parallelism."""
    top = Subtree()
    frontier = [""]
    for _ in range(3):
        nxt: list[str] = []
        for prefix in frontier:
            dirs, files = list_folder(storage, prefix, partition_columns)
            for f in files:
                top.add(f)
            top.dirs.update(dirs)
            nxt.extend(dirs)
        frontier = nxt
        if len(frontier) >= 2 * parallelism or not frontier:
            break
    return top, frontier


@dataclass
class ScaledListing:
    """The listing as a persisted DataFrame ``(kind, key, size, mtime)``, and what the driver keeps."""

    frame: Any
    files: int
    bytes: int
    dirs: dict[str, int]


def list_into_spark(spark: Any, storage: Storage, partition_columns: Sequence[str]) -> ScaledListing:
    """List every visible file and folder under the table root into a DataFrame (Spark tasks)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    parallelism = max(1, sc.defaultParallelism)
    top, frontier = top_folders(storage, partition_columns, parallelism)
    top_rows = [("f", k, s, m) for k, s, m in zip(top.keys, top.sizes, top.mtimes)]
    top_rows += [("d", k, 0, m) for k, m in top.dirs.items()]
    rdd = sc.parallelize(top_rows, 1)
    with spark_task_calls(sc) as calls:  # the listing tasks' store calls, added to the job's
        if frontier:
            task = functools.partial(list_rows, storage=storage, partition_columns=list(partition_columns))
            listed = sc.parallelize(frontier, max(1, min(len(frontier), parallelism * 4))) \
                .mapPartitions(count_into(task, calls))
            rdd = rdd.union(listed)
        frame = spark.createDataFrame(rdd, _LISTING_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
        totals = frame.where(F.col("kind") == "f").agg(F.count("*").alias("n"), F.sum("size").alias("b")).first()
    dirs = {r["key"]: int(r["mtime"]) for r in frame.where(F.col("kind") == "d").select("key", "mtime").collect()}
    files, size = int(totals["n"] or 0), int(totals["b"] or 0)
    log.info("listed %d files (%d bytes) in %d folders with Spark", files, size, len(dirs) + 1)
    return ScaledListing(frame, files, size, dirs)


def listing_from_parquet(spark: Any, folder: str, files: int, size: int, dirs: dict[str, int]) -> ScaledListing:
    """The listing of an inventory: the parquet files ``(key, size, mtime)`` the driver wrote into
    ``folder`` (its files older than the cutoff) as a DataFrame ``(kind, key, size, mtime)``; the
    counts and folders as the driver found them while writing."""
    from pyspark.sql import functions as F

    frame = spark.read.parquet(folder).select(F.lit("f").alias("kind"), "key", "size", "mtime")
    log.info("the inventory's %d files (%d bytes) in %d folders are read by Spark", files, size, len(dirs) + 1)
    return ScaledListing(frame, files, size, dirs)


@dataclass
class Untracked:
    """The files to delete as a persisted DataFrame ``(key, n, size)`` (``n``: how many listed
    files have that key, 1 but for an inventory that lists a key twice; ``size``: their bytes),
    with their count and bytes, and how many old untracked files a kept version reads."""

    frame: Any
    files: int
    bytes: int
    kept_for_versions: int


def untracked_files(spark: Any, listing: ScaledListing, valid_folder: str, cutoff_ms: int,
                    kept_folder: str | None = None) -> tuple[Untracked, int]:
    """The listed files older than the cutoff that no valid key (nor a kept version's key in
    ``kept_folder``) names; and how many distinct valid keys there are.

    One shuffle does it all: the valid keys, the kept keys and the old listed files are grouped by
    key (keys combined map-side), each key flagged valid, kept and how often listed; the anti-join
    is the keys listed and neither valid nor kept, and the listed keys that are only kept are the
    files kept for the versions. Every listed file counts, as the in-memory path counts them.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    def keys(folder: str, valid: bool) -> Any:
        return spark.read.parquet(folder).select(
            "key", F.lit(valid).alias("valid"), F.lit(not valid).alias("kept"), F.lit(0).cast("long").alias("n"),
            F.lit(None).cast("long").alias("size"))

    frames = [keys(valid_folder, True)]
    if kept_folder is not None:
        frames.append(keys(kept_folder, False))
    frames.append(listing.frame.where((F.col("kind") == "f") & (F.col("mtime") < cutoff_ms)).select(
        "key", F.lit(False).alias("valid"), F.lit(False).alias("kept"), F.lit(1).cast("long").alias("n"), "size"))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    grouped = union.groupBy("key").agg(
        F.max("valid").alias("valid"), F.max("kept").alias("kept"), F.sum("n").alias("n"),
        F.sum("size").alias("size")).persist(StorageLevel.MEMORY_AND_DISK)
    orphan = (F.col("n") > 0) & ~F.col("valid")
    counts = grouped.agg(F.sum(F.col("valid").cast("long")).alias("valid"),
                         F.sum(F.when(orphan & F.col("kept"), F.col("n"))).alias("kept")).first()
    valid_count = int(counts["valid"] or 0)
    untracked = grouped.where(orphan & ~F.col("kept")).select("key", "n", "size").persist(StorageLevel.MEMORY_AND_DISK)
    totals = untracked.agg(F.sum("n").alias("n"), F.sum("size").alias("b")).first()
    grouped.unpersist()
    return Untracked(untracked, int(totals["n"] or 0), int(totals["b"] or 0), int(counts["kept"] or 0)), valid_count


def first_keys(untracked: Untracked, limit: int) -> list[str]:
    """The first ``limit`` files to delete, in key order (a dry run's list; a key the listing
    holds twice is there twice)."""
    out: list[str] = []
    for r in untracked.frame.select("key", "n").orderBy("key").limit(limit).collect():
        out.extend([r["key"]] * int(r["n"]))
    return out[:limit]


def emptied_folders(untracked: Untracked) -> list[str]:
    """The folders that held a file to delete (the driver removes them once empty)."""
    from pyspark.sql import functions as F

    parent = F.regexp_extract(F.col("key"), r"^(.*)/[^/]*$", 1)
    return [r["d"] for r in untracked.frame.select(parent.alias("d")).distinct().collect() if r["d"]]


def delete_untracked(spark: Any, storage: Storage, untracked: Untracked) -> int:
    """Delete the files in Spark tasks; how many were deleted."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    counter = sc.accumulator(0)
    sc.setJobGroup(f"delta-maint-{uuid.uuid4().hex[:8]}", f"VACUUM {storage.root}: deleting", interruptOnCancel=True)
    task = functools.partial(delete_rows, storage=storage, counter=counter)
    # a key listed twice (an inventory's duplicate rows) is deleted twice, as the in-memory path does
    keys = untracked.frame.select(F.explode(F.array_repeat("key", F.col("n").cast("int"))).alias("key"))
    with spark_task_calls(sc) as calls:  # the tasks' store calls, added to the job's
        deleted = sum(keys.rdd.mapPartitions(count_into(task, calls)).collect())
    log.info("deleted %d / %d files in Spark tasks", deleted, untracked.files)
    return int(deleted)
