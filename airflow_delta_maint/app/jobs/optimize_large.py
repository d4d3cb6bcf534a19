"""OPTIMIZE of a large table in rounds, the driver's memory bounded by a round, not the table.

From the ``stream_min_files`` setting's checkpointed files on (:mod:`airflow_delta_maint.app.settings`),
bin-packing (with ``where``, ``policy='auto'``, ``purge``, young files and recent partitions left out)
and Z-order plan from the streamed state: one pass counts the candidates per partition and makes
the auto policy's choice, a second spills the partitions with work, a round at a time, to local
parquet files (:mod:`airflow_delta_maint.delta.plans.optimize_rounds`). Each round is then planned,
rewritten and committed exactly as a whole plan is (:func:`~.optimize_execution.run_plan`), and the rounds'
metrics are summed into one run's. Liquid clustering's rounds are runs of its new ZCubes, ordered
out of core (:mod:`airflow_delta_maint.delta.plans.clustering_rounds`); its clustering quality
(which sorts every file's bounds) is not measured in rounds. ``target_files``,
``rewrite_type_widened`` and tables clustered by no column plan on the whole state, as does a
log the stream cannot vouch for.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import read_table
from airflow_delta_maint.delta.plans.clustering import (DEFAULT_TARGET_CUBE_SIZE, clustering_columns,
                                                        is_clustered)
from airflow_delta_maint.delta.plans.clustering_rounds import clustering_order, spill_clustering_rounds
from airflow_delta_maint.delta.plans.optimize import (SIZE_PERCENTILE_KEYS, Bin, OptimizePlan, add_dicts,
                                                      file_size_settings, size_percentiles)
from airflow_delta_maint.delta.plans.optimize_decision import PlanOutline, plan_from_options, streamed_plan_outline
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.plans.optimize_rounds import (iter_round_snapshots, live_files_among,
                                                             partition_rounds, spill_rounds)
from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.protocol.uniform_iceberg import check_no_iceberg_metadata
from airflow_delta_maint.delta.storage.store import Storage

from ..context import JobContext
from .optimize_execution import check_spark_for, run_plan
from airflow_delta_maint.app.rewrite.rewrite_counts import merge_copy_metrics
from airflow_delta_maint.app.rewrite.rewrite_cadence import RewriteCadence

log = logging.getLogger("delta_maint.optimize")

#: per-run counters that the rounds add up
_SUMS = ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "numDeletionVectorsRemoved",
         "numBins", "numBinsDroppedByConflicts", "numBinsRebased", "numDeletionVectorsCarried", "numBatches")
_PLAN_SUMS = ("num_partitions", "num_bins", "num_files_to_rewrite", "num_bytes_to_rewrite", "predicted_output_files",
              "num_deletion_vectors_to_purge")


def run_in_rounds(ctx: JobContext, options: OptimizeOptions, state: StreamedState,
                  path: RewriteCadence | None = None) -> dict[str, Any] | None:
    """The run's metrics, OPTIMIZE done in rounds on the streamed state; None when the plan needs the
    whole state (the caller then plans on it). Where the stream cannot vouch for the log, its
    fallback is raised by the passes, before anything is written."""
    clustered_by_none = is_clustered(state.protocol) and not clustering_columns(state.metadata.schema_string,
                                                                                  state.domains)
    if clustered_by_none or options.target_files is not None or options.rewrite_type_widened:
        log.info("OPTIMIZE %s plans on the whole state: target_files, rewrite_type_widened and tables "
                 "clustered by no column are not planned in rounds", ctx.storage.root)
        return None
    return _rounds(ctx, options.purged(), state, path)


def _rounds(ctx: JobContext, options: OptimizeOptions, state: StreamedState,
            path: RewriteCadence | None) -> dict[str, Any]:
    ctx.version_read = state.version  # reported with a refusal too
    check_supported(state.protocol, Operation.OPTIMIZE, state.metadata)
    check_no_iceberg_metadata(ctx.storage, state.metadata, Operation.OPTIMIZE)
    outline = streamed_plan_outline(state, options, keep_scan=True)
    assert outline is not None and outline.scan is not None and outline.selected is not None
    if not outline.is_empty and not options.dry_run:
        check_spark_for(ctx, outline.layout)  # before the second pass; planning alone needs no Spark
    if outline.layout == "hilbert":
        return _clustering_rounds(ctx, options, state, outline, path)
    scan, decision = outline.scan, outline.decision
    round_files = ctx.settings.optimize_round_files
    rounds = partition_rounds(scan, outline.selected, outline.layout == "zorder", round_files)
    if not rounds:
        nothing = state.part(ADD_SCHEMA.empty_table())  # the header, its candidate files none
        plan = plan_from_options(nothing, options, decision)
        plan.num_table_files, plan.left_out = scan.total_files, outline.left_out
        return run_plan(ctx, options, nothing, plan, decision, path=path)
    log.info("OPTIMIZE %s at version %d: %d partitions with work, %d candidate files, in %d rounds of at most "
             "%d files", ctx.storage.root, state.version, sum(len(p) for p in rounds.partitions), sum(rounds.files),
             len(rounds), round_files)
    results: list[dict[str, Any]] = []
    sizes: list[int] = []
    with spill_rounds(state, rounds, min_file_size=outline.min_file_size, zorder=outline.layout == "zorder") as spill:
        for n, partial in iter_round_snapshots(state, spill):
            plan = plan_from_options(partial, options, decision)
            plan.num_table_files, plan.left_out = scan.total_files, outline.left_out
            log.info("OPTIMIZE %s: round %d of %d: %d bins, %d files, %.1f MiB", ctx.storage.root, n + 1, len(rounds),
                     len(plan.bins), plan.input_files, plan.input_bytes / 2**20)
            results.append(_run_round(ctx, options, path, partial, plan, decision, sizes))
            del partial, plan
    return merge_rounds(results, sizes, scan.total_files)


def _clustering_rounds(ctx: JobContext, options: OptimizeOptions, state: StreamedState,
                       outline: PlanOutline, path: RewriteCadence | None) -> dict[str, Any]:
    """Liquid clustering in rounds (:mod:`~airflow_delta_maint.delta.plans.clustering_rounds`): each
    round's new ZCubes are the plan's, the plan's clusteringStats are the whole run's."""
    shell, work, decision = state.part(ADD_SCHEMA.empty_table()), outline.work, outline.decision
    total = outline.scan.total_files
    if outline.is_empty:
        plan = plan_from_options(shell, options, decision)
        plan.num_table_files, plan.left_out = total, outline.left_out
        return run_plan(ctx, options, shell, plan, decision, whole_table=False, path=path)
    columns = clustering_columns(shell.metadata.schema_string, shell.domains)
    min_size, max_size = file_size_settings(shell, None, options.target_file_size)
    target = DEFAULT_TARGET_CUBE_SIZE if options.target_cube_size is None else options.target_cube_size
    round_files = ctx.settings.optimize_round_files
    order = clustering_order(work, round_files)
    chosen = order.chosen
    spill, group_files = spill_clustering_rounds(state, work, order, target_cube_size=target,
                                                 max_files=round_files, young_after_ms=outline.young_after_ms)
    stats = {"inputZCubeFiles": {"numFiles": sum(work.cube_files.values()), "size": sum(work.cubes.values())},
             "inputOtherFiles": {"numFiles": work.unclustered, "size": work.unclustered_bytes},
             "inputNumZCubes": len(work.cubes),
             "mergedFiles": {"numFiles": sum(group_files),
                             "size": work.unclustered_bytes + sum(work.cubes[c] for c in chosen)},
             "numOutputZCubes": len(group_files),
             "numFilesSkippedOtherClustering": work.skipped_other}
    log.info("OPTIMIZE %s at version %d: clustering %d files into %d ZCubes in %d rounds", ctx.storage.root,
             state.version, sum(group_files), len(group_files), spill.count)
    results: list[dict[str, Any]] = []
    sizes: list[int] = []
    with spill:
        for n in range(spill.count):
            table = spill.read(n)
            files = table.select(ADD_SCHEMA.names)
            groups = table.column("_group").to_numpy(zero_copy_only=False)
            adds = add_dicts(files)
            del table
            plan = OptimizePlan(state.version, min_size, max_size, [], None, zorder_columns=columns,
                                num_table_files=total, layout="hilbert", clustering_by=[c.name for c in columns])
            plan.clustering_stats, plan.left_out, plan.num_candidate_files = stats, outline.left_out, len(adds)
            starts = [i for i in range(len(adds)) if i == 0 or groups[i] != groups[i - 1]]
            for lo, hi in zip(starts, starts[1:] + [len(adds)]):
                plan.bins.append(Bin({}, adds[lo:hi], sum(int(a["size"]) for a in adds[lo:hi])))
            log.info("OPTIMIZE %s: round %d of %d: %d ZCubes, %d files, %.1f MiB", ctx.storage.root, n + 1,
                     spill.count, len(plan.bins), plan.input_files, plan.input_bytes / 2**20)
            results.append(_run_round(ctx, options, path, state.part(files), plan, decision, sizes))
            del files, adds, plan
    return merge_rounds(results, sizes, total)


def _run_round(ctx: JobContext, options: OptimizeOptions, path: RewriteCadence | None, partial: Snapshot,
               plan: OptimizePlan, decision: Any, sizes: list[int]) -> dict[str, Any]:
    """One round run as a plan of its own; its commits rebase onto the live files among its inputs."""
    inputs = [f["path"] for b in plan.bins for f in b.files]

    def load_base(version: int) -> Snapshot:
        return _partial_base(ctx.storage, version, inputs)

    return run_plan(ctx, options, partial, plan, decision, sizes, load_base, whole_table=False, path=path)


def _partial_base(storage: Storage, version: int, paths: list[str]) -> Snapshot:
    """The base a round's commit is rebased onto: the live files among its inputs, streamed (the
    whole state read instead where the stream cannot vouch for the log at that version)."""
    return read_table(storage, lambda state: live_files_among(state, paths), version=version,
                      what="OPTIMIZE's rebase")


def merge_rounds(results: list[dict[str, Any]], added_sizes: list[int], total_files: int) -> dict[str, Any]:
    """One run's metrics from its rounds' (each as one plan's run reports it)."""
    out = dict(results[0])
    if out.get("status") == "dry_run":
        plan = dict(out["plan"])
        plan["partitions"] = dict(plan.get("partitions") or {})
        for r in results[1:]:
            for key in _PLAN_SUMS:
                plan[key] = plan.get(key, 0) + r["plan"].get(key, 0)
            plan["partitions"].update(r["plan"].get("partitions") or {})
        return {**out, "plan": plan, "numRounds": len(results)}
    for key in _SUMS:
        out[key] = sum(int(r.get(key) or 0) for r in results)
    for key in SIZE_PERCENTILE_KEYS:
        out.pop(key, None)
    out.update(size_percentiles(added_sizes))
    out["droppedBins"] = [d for r in results for d in r.get("droppedBins") or ()]
    out.update(merge_copy_metrics(results))
    versions = sorted(v for r in results for v in r.get("versions_committed") or ())
    out["versions_committed"] = versions
    out["version_committed"] = versions[-1] if versions else None
    reserved: dict[str, Any] = {}
    for r in results:
        reserved.update(r.get("partitionsReservedByOthers") or {})
    if reserved:
        out["partitionsReservedByOthers"] = dict(sorted(reserved.items()))
    out["status"] = "committed" if versions else "skipped"
    out.pop("reason", None)
    if not versions:
        reasons = list(dict.fromkeys(str(r["reason"]) for r in results if r.get("reason")))
        out["reason"] = "; ".join(reasons) if reasons else "nothing was committed"
    out["totalConsideredFiles"] = total_files
    out["totalFilesSkipped"] = total_files - out["numRemovedFiles"]
    out["numRounds"] = len(results)
    for key in ("rewritePath", "rewritePathReason", "writeCadence"):  # one path for the run: as it ended
        if key in results[-1]:
            out[key] = results[-1][key]
    return out
