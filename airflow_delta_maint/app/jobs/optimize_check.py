"""OPTIMIZE's check without Spark (the operator's, on the worker): the outline of the plan, from the
log streamed in bounded memory or from the whole snapshot, and the reason to skip when it is empty.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, AutoDecision, PartitionKey,
                                                             partition_label)
from airflow_delta_maint.delta.plans.clustering import is_clustered
from airflow_delta_maint.delta.plans.clustering_scan import ClusteringWork
from airflow_delta_maint.delta.plans.even_split_scan import EvenSplitCheck
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO, OptimizePlan, file_size_settings
from airflow_delta_maint.delta.plans.type_widening_scan import OldTypeFiles
from airflow_delta_maint.delta.protocol.features import check_supported

from .optimize_options import auto_decision, feature_gate, plan_from_params, zorder_columns


class Skip(str):
    """A reason to skip, with the details the metrics carry."""

    details: dict[str, Any]  # set on every instance nothing_to_do returns


@dataclasses.dataclass
class PlanOutline:
    """What the skip check needs of a plan: whether it is empty, and what its reason names."""

    version: int
    is_empty: bool
    layout: str
    min_file_size: int
    left_out: dict[str, Any]
    decision: AutoDecision | None
    #: the bytes the bins rewrite (known when asked for)
    input_bytes: int | None = None
    #: with ``keep_scan``: the streamed per-partition aggregates, the partitions the plan selects,
    #: the plan's own aggregate (liquid clustering's) and the modification time young files are after
    scan: Any = None
    selected: Callable[[PartitionKey], bool] | None = None
    work: Any = None
    young_after_ms: int | None = None


def plan_outline(plan: OptimizePlan, decision: AutoDecision | None) -> PlanOutline:
    """The outline of a plan built from the whole snapshot."""
    return PlanOutline(plan.version, plan.is_empty, plan.layout, plan.min_file_size, plan.left_out, decision)


def outline_of(state: TableState, params: dict[str, Any], candidates: bool = False) -> PlanOutline | None:
    """The plan's outline on either state: from the streamed state's aggregates
    (:func:`streamed_plan_outline`, whose planner-level fallbacks send the work to the whole state),
    from the plan itself on the eager state. None as :func:`streamed_plan_outline` says."""
    if isinstance(state, StreamedState):
        return streamed_plan_outline(state, params, candidates=candidates)
    check_supported(state.protocol, feature_gate(params), state.metadata)
    decision = auto_decision(state, params)
    return plan_outline(plan_from_params(state, params, decision), decision)


def skip_reason(plan: PlanOutline, params: dict[str, Any]) -> str | None:
    """Why the job would skip: the plan is empty (its reason names why), else None."""
    version, decision = plan.version, plan.decision
    if plan.is_empty and decision is not None:
        skip = Skip(f"auto compaction at version {version}: {decision.reason()}")
        skip.details = {"autoCompaction": decision.metrics()}
        return skip
    if plan.is_empty and params.get("target_files"):
        return (f"nothing to rewrite at version {version}: every selected partition already is "
                f"{params['target_files']} files of even row counts")
    if plan.is_empty and params.get("rewrite_type_widened"):
        return f"nothing to rewrite at version {version}: no live file holds a widened column in its old type"
    if plan.is_empty and plan.left_out:
        return (f"nothing to rewrite at version {version} once young files and recently written "
                f"partitions are left out ({plan.left_out})")
    if plan.is_empty and plan.layout == "hilbert":
        return (f"nothing to cluster at version {version}: no unclustered file and no more than one "
                "ZCube below the minimum cube size")
    if plan.is_empty:
        return (f"nothing to compact at version {version}: no partition has two or more files "
                f"below {plan.min_file_size} bytes or a file with deletion vectors to purge")
    return None


def streamed_plan_outline(state: StreamedState, params: dict[str, Any], candidates: bool = False,
                          keep_scan: bool = False) -> PlanOutline | None:
    """The plan's outline from the log streamed in bounded memory (``partition_scan``), equal to
    the one of the plan built from the whole snapshot. Liquid clustering, ``target_files`` and
    ``rewrite_type_widened`` add their own aggregate to the same pass (``clustering_scan``,
    ``even_split_scan``, ``type_widening_scan``).

    Raises what the in-memory check raises for bad input, in the same order: the state snapshot
    (no files) runs every validation of the policy and the plan first.

    With ``keep_scan`` the outline carries the scan and the selection (``optimize_large``).

    With ``candidates`` the outline carries ``input_bytes``: the bytes the plan's bins rewrite,
    packed from the candidate files' sizes and paths (kept in memory, so for small logs only); None
    is returned then for liquid clustering, ``target_files`` and ``rewrite_type_widened``, whose
    bytes only the whole plan tells.
    """
    import time

    from airflow_delta_maint.delta.plans.clustering import clustering_columns
    from airflow_delta_maint.delta.plans.optimize import partition_filter, validate_zorder
    from airflow_delta_maint.delta.plans.partition_scan import scan_partitions
    from airflow_delta_maint.delta.plans.recent_writes import LeftOut, recently_written_partitions

    check_supported(state.protocol, feature_gate(params), state.metadata)
    clustered = is_clustered(state.protocol)
    target_files = params.get("target_files")
    widened = bool(params.get("rewrite_type_widened"))
    clustering = clustered and not widened and target_files is None and \
        bool(clustering_columns(state.metadata.schema_string, state.domains))
    if candidates and (target_files is not None or widened or clustering):
        return None
    # every validation, in the order the in-memory check runs them, on a table without files
    no_files = state.part(ADD_SCHEMA.empty_table())
    plan_from_params(no_files, params, auto_decision(no_files, params))
    auto = bool(params.get("auto"))
    whole = clustered or not state.partition_columns
    auto_min, _ = file_size_settings(state, params.get("min_file_size"), params.get("max_file_size"))
    clustered_auto = auto and clustered
    min_size, max_size = file_size_settings(state, None if clustered_auto else params.get("min_file_size"),
                                            params.get("max_file_size"))
    zorder_by = zorder_columns(params.get("zorder_by"))
    zorder = bool(validate_zorder(state, zorder_by)) if zorder_by else False
    min_age = params.get("min_file_age")
    recent_commits = params.get("skip_recent_partitions")
    now = int(time.time() * 1000)
    recent = recently_written_partitions(state, recent_commits, whole) if recent_commits else set()
    max_ratio = params.get("max_deleted_rows_ratio")
    matches = partition_filter(state, params.get("predicate"))

    def matched(key: PartitionKey) -> bool:
        return matches is None or bool(matches(dict(key)))

    work = _rewrite_check(state, params, clustering, matched)
    scan = scan_partitions(
        state, min_file_size=min_size, max_file_size=max_size, dv_ratio=params.get("dv_ratio", DEFAULT_DV_RATIO),
        zorder=zorder, auto_min_file_size=auto_min if auto else None,
        auto_ratio=float(max_ratio) if max_ratio is not None else DEFAULT_MAX_DELETED_ROWS_RATIO,
        whole_table=whole, young_after_ms=now - int(min_age * 1000) if min_age else None, recent=recent or None,
        collect=candidates and not zorder, one_partition=clustering, visit=work,
        visit_columns=work.columns if work is not None else ())
    decision = auto_decision(state, params, counts=scan.counts) if auto else None
    chosen = set(decision.chosen) if decision is not None else None

    def selected(key: PartitionKey) -> bool:
        return matched(key) and (chosen is None or key in chosen)

    left = LeftOut()
    if scan.total_files and (min_age or recent_commits):
        left.young_files = scan.young_files if min_age else 0
        if recent:
            left.recent_partition_files = scan.recent_partition_files
            left.recent_partitions = sorted(partition_label(k) for k in recent)
    if isinstance(work, ClusteringWork):
        empty, layout = work.is_empty(chosen), "hilbert"
    elif isinstance(work, EvenSplitCheck):
        empty, layout = work.is_empty(scan.keys, selected), "even"
    elif isinstance(work, OldTypeFiles):
        empty, layout = work.is_empty, "binpack"
    else:
        empty, layout = scan.plan_is_empty(selected, zorder), "zorder" if zorder else "binpack"
    outline = PlanOutline(state.version, empty, layout, min_size, left.metrics() if left.any else {}, decision)
    if keep_scan:
        outline.scan, outline.selected, outline.work = scan, selected, work
        outline.young_after_ms = now - int(min_age * 1000) if min_age else None
    if candidates and not zorder:
        outline.input_bytes = scan.input_bytes(selected)
    return outline


def _rewrite_check(shell: TableHeader, params: dict[str, Any], clustering: bool,
                   matched: Callable[[PartitionKey], bool]) -> ClusteringWork | EvenSplitCheck | OldTypeFiles | None:
    """The streamed aggregate of a plan that looks at more than sizes and deletion vectors."""
    from airflow_delta_maint.delta.plans.clustering import DEFAULT_MIN_CUBE_SIZE, clustering_columns

    if params.get("target_files") is not None:
        return EvenSplitCheck(int(params["target_files"]))
    if params.get("rewrite_type_widened"):
        return OldTypeFiles(shell.storage, shell.metadata, matched)
    if clustering:
        min_cube = params.get("min_cube_size")
        return ClusteringWork([c.name for c in clustering_columns(shell.metadata.schema_string, shell.domains)],
                              full=bool(params.get("full")),
                              min_cube_size=DEFAULT_MIN_CUBE_SIZE if min_cube is None else int(min_cube))
    return None

