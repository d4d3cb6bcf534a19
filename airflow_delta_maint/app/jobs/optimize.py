"""Compact small files (bin-packing) or Z-order them; commits with dataChange=false."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
import uuid
from typing import Any, Sequence

from airflow_delta_maint.delta.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                       DEFAULT_MIN_NUM_FILES, AutoDecision, choose_partitions,
                                                       partition_key, partition_label)
from airflow_delta_maint.delta.clustering import clustering_quality, is_clustered, tag_clustered_files
from airflow_delta_maint.delta.partition_reservation import DEFAULT_LEASE_SECONDS, reserve_partitions
from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.features import check_supported, table_features
from airflow_delta_maint.delta.optimize_plan import (DEFAULT_DV_RATIO, Bin, OptimizePlan, file_size_settings,
                                                     plan_optimize, size_percentiles)
from airflow_delta_maint.delta.row_tracking import PRESERVED_TAG, row_tracking
from airflow_delta_maint.delta.snapshot import Snapshot
from airflow_delta_maint.delta.storage import Storage
from airflow_delta_maint.delta.transaction import ConflictError, Transaction, conflicting_files, winning_commits

from ..context import JobContext
from ..rewrite import RewriteSpec, delete_run_outputs, output_dir, rewrite_bin
from ..tasks import Tasks, raise_worker_error

NAME = "optimize"
DEFAULT_BATCH_BYTES = 50 << 30
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
# delta-spark's (Spark's) default: the fastest to write and read; zstd writes files about a
# quarter smaller for some 10-15% more time (docs/benchmarks.md).
DEFAULT_COMPRESSION = "snappy"
log = logging.getLogger("delta_maint.optimize")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--where", dest="predicate", help="partition predicate, e.g. \"date >= '2024-01-01'\"")
    parser.add_argument("--zorder-by", default="", help="comma-separated data columns to Z-order by")
    parser.add_argument("--min-file-size", type=int, help="files below this many bytes are compacted "
                        "(default: delta.targetFileSize, else 1 GiB)")
    parser.add_argument("--max-file-size", type=int, help="target size of output files in bytes "
                        "(default: delta.targetFileSize, else 1 GiB)")
    parser.add_argument("--max-concurrent-bins", type=int, help="at most this many bins in one Spark job")
    parser.add_argument("--batch-bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help="commit after each this many input bytes (default 50 GiB)")
    parser.add_argument("--dv-ratio", type=float, default=DEFAULT_DV_RATIO,
                        help="also rewrite files whose deletion vector deletes more than this share of rows")
    parser.add_argument("--compression", default=None, choices=list(COMPRESSIONS),
                        help=f"parquet compression of the written files (default {DEFAULT_COMPRESSION})")
    parser.add_argument("--full", action="store_true",
                        help="liquid-clustered tables: recluster every file (after the clustering columns changed)")
    parser.add_argument("--min-cube-size", type=int, help="liquid-clustered tables: files of a ZCube at least "
                        "this many bytes big are left alone (default 100 GiB)")
    parser.add_argument("--target-cube-size", type=int, help="liquid-clustered tables: at most this many input "
                        "bytes are clustered together (default 150 GiB)")
    parser.add_argument("--rewrite-type-widened", action="store_true",
                        help="rewrite exactly the files that still hold a widened column in its old type")
    parser.add_argument("--target-files", type=int, help="rewrite each selected partition into exactly this many "
                        "files of even row counts, splitting files that are too large")
    parser.add_argument("--auto", action="store_true", help="the auto-compaction policy: only partitions that "
                        "received data since the last OPTIMIZE and have enough small files or deleted rows")
    parser.add_argument("--all-partitions", action="store_true",
                        help="--auto: consider every partition, not only those that received data")
    parser.add_argument("--min-num-files", type=int, default=DEFAULT_MIN_NUM_FILES,
                        help=f"--auto: small files a partition needs to be chosen (default {DEFAULT_MIN_NUM_FILES})")
    parser.add_argument("--max-deleted-rows-ratio", type=float, default=DEFAULT_MAX_DELETED_ROWS_RATIO,
                        help="--auto: also choose a partition with a file whose deletion vector deletes more than "
                        "this share of its rows (default 0.05)")
    parser.add_argument("--max-partitions", type=int, default=DEFAULT_MAX_PARTITIONS,
                        help=f"--auto: at most this many partitions per run, the worst first "
                        f"(default {DEFAULT_MAX_PARTITIONS})")
    parser.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS,
                        help="partitions are reserved for this long against other OPTIMIZE runs (0: no reservation; "
                        f"default {DEFAULT_LEASE_SECONDS})")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")


def _zorder_columns(text: str | Sequence[str] | None) -> list[str]:
    if not text:
        return []
    if isinstance(text, str):
        return [c.strip() for c in text.split(",") if c.strip()]
    return list(text)


class Skip(str):
    """A reason to skip, with the details the metrics carry."""

    details: dict[str, Any]  # set on every instance nothing_to_do returns


def auto_decision(snapshot: Snapshot, params: dict[str, Any]) -> AutoDecision | None:
    """The auto-compaction policy's choice of partitions, or None when ``auto`` is off."""
    if not params.get("auto"):
        return None
    if params.get("predicate") or params.get("zorder_by") or params.get("rewrite_type_widened"):
        raise InvalidArgumentError("--auto chooses partitions itself: it takes no --where, --zorder-by or "
                                   "--rewrite-type-widened")
    min_size, _ = file_size_settings(snapshot, params.get("min_file_size"), params.get("max_file_size"))
    whole = is_clustered(snapshot.protocol) or not snapshot.partition_columns
    return choose_partitions(
        snapshot, min_file_size=min_size, min_num_files=int(params.get("min_num_files") or DEFAULT_MIN_NUM_FILES),
        max_deleted_rows_ratio=float(params["max_deleted_rows_ratio"]) if params.get("max_deleted_rows_ratio")
        is not None else DEFAULT_MAX_DELETED_ROWS_RATIO,
        max_partitions=int(params.get("max_partitions") or DEFAULT_MAX_PARTITIONS),
        all_partitions=bool(params.get("all_partitions")), whole_table=whole)


def plan_from_params(snapshot: Snapshot, params: dict[str, Any], decision: AutoDecision | None = None) -> OptimizePlan:
    if decision is None:
        decision = auto_decision(snapshot, params)
    clustered_auto = decision is not None and is_clustered(snapshot.protocol)
    return plan_optimize(snapshot, predicate=params.get("predicate"),
                         zorder_by=_zorder_columns(params.get("zorder_by")),
                         min_file_size=None if clustered_auto else params.get("min_file_size"),
                         max_file_size=params.get("max_file_size"),
                         dv_ratio=params.get("dv_ratio", DEFAULT_DV_RATIO), full=bool(params.get("full")),
                         min_cube_size=params.get("min_cube_size"), target_cube_size=params.get("target_cube_size"),
                         rewrite_type_widened=bool(params.get("rewrite_type_widened")),
                         partitions=set(decision.chosen) if decision is not None else None,
                         target_files=params.get("target_files"))


def nothing_to_do(table: str, storage_options: dict[str, str] | None, params: dict[str, Any]) -> str | None:
    """Without Spark: a reason when the plan is empty, else None. Bad input raises."""
    snapshot = Snapshot.load(table, storage_options=storage_options)
    check_supported(snapshot.protocol, "optimize", snapshot.metadata)
    decision = auto_decision(snapshot, params)
    plan = plan_from_params(snapshot, params, decision)
    if plan.is_empty and decision is not None:
        skip = Skip(f"auto compaction at version {snapshot.version}: {decision.reason()}")
        skip.details = {"autoCompaction": decision.metrics()}
        return skip
    if plan.is_empty and params.get("target_files"):
        return (f"nothing to rewrite at version {snapshot.version}: every selected partition already is "
                f"{params['target_files']} files of even row counts")
    if plan.is_empty and params.get("rewrite_type_widened"):
        return f"nothing to rewrite at version {snapshot.version}: no live file holds a widened column in its old type"
    if plan.is_empty and plan.layout == "hilbert":
        return (f"nothing to cluster at version {snapshot.version}: no unclustered file and no more than one "
                "ZCube below the minimum cube size")
    if plan.is_empty:
        return (f"nothing to compact at version {snapshot.version}: no partition has two or more files "
                f"below {plan.min_file_size} bytes or a file with deletion vectors to purge")
    return None


def _batches(bins: list[Bin], batch_bytes: int) -> list[list[Bin]]:
    out: list[list[Bin]] = [[]]
    total = 0
    for b in bins:
        if out[-1] and total + b.input_bytes > batch_bytes:
            out.append([])
            total = 0
        out[-1].append(b)
        total += b.input_bytes
    return [b for b in out if b]


def _execute_bins(tasks: Tasks, spec: RewriteSpec, bins: list[Bin], max_concurrent: int | None,
                  label: str) -> list[list[dict]]:
    """Rewrite bins, one task each (largest first); returns the add actions per bin, in order."""
    order = sorted(range(len(bins)), key=lambda i: -bins[i].input_bytes)
    waves = [order] if not max_concurrent else [order[i:i + max_concurrent] for i in range(0, len(order), max_concurrent)]
    results: dict[int, list[dict]] = {}
    for wave in waves:
        payload = [(i, bins[i].files, bins[i].partition_values) for i in wave]
        log.info("%s: rewriting %d bins (%.1f MiB)", label, len(wave), sum(bins[i].input_bytes for i in wave) / 2**20)
        results.update(tasks.map_slices(lambda items: [(i, rewrite_bin(spec, files, pvs)) for i, files, pvs in items],
                                        payload, len(payload), f"{label} bins"))
    return [results[i] for i in range(len(bins))]


def _remove_action(add: dict, now: int) -> dict:
    rm = {"path": add["path"], "deletionTimestamp": now, "dataChange": False, "extendedFileMetadata": True,
          "partitionValues": add.get("partitionValues") or {}, "size": add["size"]}
    for key in ("stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(key) is not None:
            rm[key] = add[key]
    return {"remove": rm}


def _delete_run_outputs(spec: RewriteSpec, bins: list[Bin]) -> None:
    """After a failed Spark job: delete what its finished tasks wrote (best effort; a task still
    running when its job failed may write after this, and VACUUM removes that file later)."""
    try:
        n = delete_run_outputs(spec, [output_dir(spec.storage, b.files) for b in bins])
    except Exception as exc:  # orphans are harmless: VACUUM removes them after the retention period
        log.warning("could not delete the files of the failed rewrite: %s", exc)
        return
    if n:
        log.warning("OPTIMIZE %s: the rewrite failed; deleted the %d files its tasks had written", spec.storage.root, n)


def _delete_outputs(storage: Storage, adds: list[dict]) -> None:
    """Remove files this run wrote but will never commit (best effort)."""
    keys = [k for k in (storage.key_for_path(a["path"]) for a in adds) if k]
    try:
        storage.delete_many(keys)
    except Exception as exc:  # orphans are harmless: VACUUM removes them after the retention period
        log.warning("could not delete %d uncommitted output files: %s", len(keys), exc)


def _commit_batch(snapshot: Snapshot, plan: OptimizePlan, bins: list[Bin], outputs: list[list[dict]],
                  parameters: dict, after_version: int | None = None) -> tuple[int | None, list[int]]:
    """Commit one batch; on a concurrent delete of input files, drop the bins it touched and retry.

    ``after_version`` is this run's previous batch commit: the batch goes on top of it. Whatever
    the failure, the files of bins that are not committed are deleted before the error goes on.

    Returns (committed version or None, indexes of the bins dropped).
    """
    txn_ids: list[str] = []
    try:
        return _commit_batch_once(snapshot, plan, bins, outputs, parameters, after_version, txn_ids)
    except BaseException:
        landed = _landed(snapshot.storage, after_version if after_version is not None else snapshot.version, txn_ids)
        if landed == _UNKNOWN:  # cannot tell whether it landed: keep the files (VACUUM removes orphans)
            raise
        if landed is not None:  # the store failed after writing: the commit stands, keep its files
            log.warning("OPTIMIZE %s: the commit reported a failure but landed as version %d",
                        snapshot.storage.root, landed)
            return landed, []
        uncommitted = [a for out in outputs for a in out]
        log.warning("OPTIMIZE %s: the commit failed; deleting the %d files this batch wrote",
                    snapshot.storage.root, len(uncommitted))
        _delete_outputs(snapshot.storage, uncommitted)
        raise


_UNKNOWN = -1


def _landed(storage: Storage, from_version: int, txn_ids: list[str]) -> int | None:
    """The version of a commit after ``from_version`` carrying one of ``txn_ids``, if any."""
    if not txn_ids:
        return None
    try:
        for winner in winning_commits(storage, from_version):
            if winner.commit_info.get("txnId") in txn_ids:
                return winner.version
    except Exception as exc:  # cannot tell: keep the files (VACUUM removes orphans later)
        log.warning("could not check whether the failed commit landed: %s", exc)
        return _UNKNOWN
    return None


def _commit_batch_once(snapshot: Snapshot, plan: OptimizePlan, bins: list[Bin], outputs: list[list[dict]],
                       parameters: dict, after_version: int | None,
                       txn_ids: list[str]) -> tuple[int | None, list[int]]:
    keep = list(range(len(bins)))
    dropped: list[int] = []
    while keep:
        now = int(time.time() * 1000)
        removes = [_remove_action(f, now) for i in keep for f in bins[i].files]
        adds = [{"add": a} for i in keep for a in outputs[i]]
        added_sizes = [a["add"]["size"] for a in adds]
        metrics = {
            "numRemovedFiles": len(removes), "numAddedFiles": len(adds),
            "numRemovedBytes": sum(r["remove"]["size"] for r in removes), "numAddedBytes": sum(added_sizes),
            "numDeletionVectorsRemoved": sum(bins[i].num_dvs for i in keep), "numBatches": 1,
            "totalConsideredFiles": plan.num_table_files, "totalFilesSkipped": plan.num_table_files - len(removes),
            **size_percentiles(added_sizes),
        }
        txn = Transaction(snapshot, "OPTIMIZE", parameters, job="optimize")
        if row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains).materializes:
            txn.tags[PRESERVED_TAG] = "true"  # every copied row keeps its stable id and commit version
        txn_ids.append(txn.txn_id)
        txn.add_actions(removes + adds)
        try:
            return txn.commit(metrics, after_version=after_version), dropped
        except ConflictError as exc:
            if exc.kind != "ConcurrentDeleteDelete":
                raise
            gone = conflicting_files(snapshot.storage, snapshot.version, [f["path"] for i in keep for f in bins[i].files])
            lost = [i for i in keep if any(f["path"] in gone for f in bins[i].files)]
            if not lost:
                raise
            log.warning("a concurrent commit removed input files of %d bins (e.g. %s at version %d); "
                        "dropping those bins and committing the rest", len(lost), next(iter(gone)),
                        next(iter(gone.values())))
            for i in lost:
                _delete_outputs(snapshot.storage, outputs[i])
            dropped.extend(lost)
            keep = [i for i in keep if i not in lost]
    return None, dropped


def run_optimize(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Plan, rewrite (Spark tasks, or threads of this process under local execution) and commit in
    batches. Returns the job's metrics."""
    snapshot = Snapshot.load(ctx.storage)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, "optimize", snapshot.metadata)
    decision = auto_decision(snapshot, params)
    plan = plan_from_params(snapshot, params, decision)
    batch_bytes = int(params["batch_bytes"]) if params.get("batch_bytes") is not None else DEFAULT_BATCH_BYTES
    if batch_bytes <= 0:
        raise InvalidArgumentError(f"batch bytes must be positive, got {batch_bytes}")
    if params.get("max_concurrent_bins") is not None and int(params["max_concurrent_bins"]) <= 0:
        raise InvalidArgumentError(f"max concurrent bins must be positive, got {params['max_concurrent_bins']}")
    out: dict[str, Any] = {"version_read": snapshot.version, "predicate": plan.predicate,
                           "compression": params.get("compression") or DEFAULT_COMPRESSION,
                           "zOrderBy": plan.zorder_by, "minFileSizeSetting": plan.min_file_size,
                           "maxFileSizeSetting": plan.max_file_size}
    if decision is not None:
        out["autoCompaction"] = decision.metrics()
        params = {**params, "_beyond_max": sum(1 for r in decision.skipped.values() if r.startswith("beyond"))}
    clustered = plan.layout == "hilbert"
    if clustered:
        out["clusteringBy"] = plan.clustering_by
        out["clusteringStats"] = plan.clustering_stats
        out["clusteringQualityBefore"] = clustering_quality(snapshot.add_actions(), plan.zorder_columns)
    if params.get("dry_run"):
        return {**out, "status": "dry_run", "plan": plan.summary()}
    empty = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0}
    if plan.is_empty:
        reason = decision.reason() if decision is not None else (
            "nothing to cluster" if clustered else "nothing to compact")
        return {**out, "status": "skipped", "reason": reason, **empty}
    if plan.layout in ("zorder", "hilbert") and not ctx.spark_allowed:
        what = "Liquid clustering" if clustered else "Z-order"
        raise InvalidArgumentError(f"{what} of {ctx.storage.root} needs Spark (a shuffle), which local execution "
                                   "does not start; run it with execution 'spark'")
    ctx.storage.require_put_if_absent()  # refuse a store without put-if-absent before any file is written
    lease = int(params["lease_seconds"]) if params.get("lease_seconds") is not None else DEFAULT_LEASE_SECONDS
    if lease < 0:
        raise InvalidArgumentError(f"lease seconds must be 0 (no reservation) or positive, got {lease}")
    if not lease:
        return _execute_plan(ctx, params, snapshot, plan, out)
    labels = {id(b): partition_label(partition_key(b.partition_values)) for b in plan.bins}
    with reserve_partitions(ctx.storage, sorted(set(labels.values())), lease_seconds=lease) as reservation:
        if reservation.taken_by_others:
            out["partitionsReservedByOthers"] = dict(sorted(reservation.taken_by_others.items()))
            log.info("OPTIMIZE %s: %d partitions are being optimized by another run; leaving them out",
                     ctx.storage.root, len(reservation.taken_by_others))
            plan.bins = [b for b in plan.bins if labels[id(b)] in reservation.held]
            params = {**params, "_deferred": len(reservation.taken_by_others)}
            if plan.is_empty:
                return {**out, "status": "skipped", **empty,
                        "reason": "every partition of the plan is reserved by another OPTIMIZE run"}
        return _execute_plan(ctx, params, snapshot, plan, out)


def _execute_plan(ctx: JobContext, params: dict[str, Any], snapshot: Snapshot, plan: OptimizePlan,
                  out: dict[str, Any]) -> dict[str, Any]:
    """Rewrite the plan's bins and commit them in batches."""
    clustered = plan.layout == "hilbert"
    batch_bytes = int(params["batch_bytes"]) if params.get("batch_bytes") is not None else DEFAULT_BATCH_BYTES
    # On a table with deletion vectors every file's stats say whether they are exact; ours are.
    tight_bounds = True if "deletionVectors" in table_features(snapshot.protocol)[1] else None
    compression = params.get("compression") or DEFAULT_COMPRESSION
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"unknown compression {compression!r}; one of {', '.join(COMPRESSIONS)}")
    rows = row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains)
    spec = RewriteSpec(ctx.storage, snapshot.metadata.to_action(), compression=compression,
                       target_file_bytes=plan.max_file_size, tight_bounds=tight_bounds,
                       run_token=uuid.uuid4().hex[:8], row_tracking=rows,
                       required_stats_columns=tuple(c.logical_path for c in plan.zorder_columns) if clustered else ())
    parameters: dict[str, Any] = {"predicate": [plan.predicate] if plan.predicate else [], "zOrderBy": plan.zorder_by,
                                  "auto": bool(params.get("auto"))}
    if clustered:
        parameters.update(clusterBy=plan.clustering_by, isFull=bool(params.get("full")))
    if plan.layout == "even":
        parameters["targetFiles"] = plan.target_files
    # partitions left for a later run (reserved by another run, past --max-partitions): the
    # auto-compaction policy looks past this commit for them
    deferred = int(params.get("_deferred") or 0) + int(params.get("_beyond_max") or 0)
    if deferred or params.get("auto"):
        parameters["partitionsDeferred"] = deferred
    log.info("OPTIMIZE %s at version %d: %d bins, %d files, %.1f MiB to rewrite", ctx.storage.root,
             snapshot.version, len(plan.bins), plan.input_files, plan.input_bytes / 2**20)
    totals = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0,
              "numDeletionVectorsRemoved": 0}
    added_sizes: list[int] = []
    versions: list[int] = []
    dropped_bins = 0
    committed_removed: set[str] = set()
    committed_added: list[dict] = []
    if plan.layout in ("zorder", "hilbert"):
        from ..zorder import execute_zorder

        batches = [plan.bins]
    else:
        batches = _batches(plan.bins, batch_bytes)
        max_bins = params.get("max_concurrent_bins")
        tasks = ctx.tasks(f"OPTIMIZE {ctx.storage.root}", threads=int(max_bins) if max_bins else None)
    done_bins = 0
    for n, batch in enumerate(batches, 1):
        label = f"batch {n}/{len(batches)}"
        try:
            if plan.layout == "even":
                from ..even_split import execute_even

                outputs = execute_even(tasks, spec, dataclasses.replace(plan, bins=batch), label)
            elif plan.layout != "binpack":
                try:
                    outputs = execute_zorder(ctx.spark(), spec, plan)
                except Exception as exc:
                    raise_worker_error(exc)
                    raise
                if clustered:  # each bin became one new ZCube
                    outputs = [tag_clustered_files(o, plan.zorder_columns) for o in outputs]
            else:
                outputs = _execute_bins(tasks, spec, batch, params.get("max_concurrent_bins"), label)
        except BaseException:
            _delete_run_outputs(spec, batch)
            raise
        version, dropped = _commit_batch(snapshot, plan, batch, outputs, parameters,
                                         after_version=versions[-1] if versions else None)
        dropped_bins += len(dropped)
        kept = [i for i in range(len(batch)) if i not in set(dropped)]
        if version is not None:
            versions.append(version)
            for i in kept:
                totals["numRemovedFiles"] += len(batch[i].files)
                totals["numRemovedBytes"] += batch[i].input_bytes
                totals["numDeletionVectorsRemoved"] += batch[i].num_dvs
                committed_removed.update(f["path"] for f in batch[i].files)
                committed_added.extend(outputs[i])
                for a in outputs[i]:
                    totals["numAddedFiles"] += 1
                    totals["numAddedBytes"] += a["size"]
                    added_sizes.append(a["size"])
        done_bins += len(batch)
        log.info("OPTIMIZE %s: %s committed as version %s; %d/%d bins done", ctx.storage.root, label, version,
                 done_bins, len(plan.bins))
    if clustered:
        after = [a for a in snapshot.add_actions() if a["path"] not in committed_removed] + committed_added
        out["clusteringQualityAfter"] = clustering_quality(after, plan.zorder_columns)
    return {**out, **totals, **size_percentiles(added_sizes),
            "status": "committed" if versions else "skipped",
            "version_committed": versions[-1] if versions else None, "versions_committed": versions,
            "numBatches": len(batches), "numBins": len(plan.bins), "numBinsDroppedByConflicts": dropped_bins,
            "totalConsideredFiles": plan.num_table_files,
            "totalFilesSkipped": plan.num_table_files - totals["numRemovedFiles"]}


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    params = {k: getattr(args, k) for k in ("predicate", "zorder_by", "min_file_size", "max_file_size",
                                             "max_concurrent_bins", "batch_bytes", "dv_ratio", "compression",
                                             "full", "min_cube_size", "target_cube_size", "rewrite_type_widened",
                                             "target_files", "auto", "all_partitions", "min_num_files",
                                             "max_deleted_rows_ratio",
                                             "max_partitions", "lease_seconds", "dry_run")}
    return run_optimize(ctx, params)


def format_human(m: dict[str, Any]) -> str:
    if m["status"] == "dry_run":
        return json.dumps(m["plan"], indent=2)
    return (f"OPTIMIZE {m['table']}: {m['status']}, version {m.get('version_read')} -> {m.get('version_committed')}; "
            f"removed {m.get('numRemovedFiles', 0)} files ({m.get('numRemovedBytes', 0)} bytes), "
            f"added {m.get('numAddedFiles', 0)} files ({m.get('numAddedBytes', 0)} bytes) in {m['duration_s']}s")
