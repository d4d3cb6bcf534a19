"""What OPTIMIZE's options ask of a table, decided once for every caller: the auto-compaction
policy's choice of partitions, the plan, the outline of the plan streamed in bounded memory, and the
reason to skip when it is empty.

The command line's dry run and the job plan with :func:`plan_from_options`; the operators' check on
the worker, the fleet and the job's own skip all ask :func:`nothing_to_do` (or :func:`outline_of` on
a state already open) and :func:`skip_reason`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import TableState, read_table
from airflow_delta_maint.delta.plans.auto_compaction import (AutoDecision,
                                                             PartitionCounts, PartitionKey, choose_partitions,
                                                             partition_label)
from airflow_delta_maint.delta.plans.clustering import (DEFAULT_MIN_CUBE_SIZE, clustering_columns,
                                                        is_clustered)
from airflow_delta_maint.delta.plans.clustering_scan import ClusteringWork
from airflow_delta_maint.delta.plans.even_split_scan import EvenSplitCheck
from airflow_delta_maint.delta.plans.optimize import (OptimizePlan, file_size_settings, partition_filter,
                                                      plan_optimize, validate_zorder)
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.plans.partition_scan import scan_partitions
from airflow_delta_maint.delta.plans.recent_writes import LeftOut, leave_out, recently_written_partitions
from airflow_delta_maint.delta.plans.type_widening_scan import OldTypeFiles
from airflow_delta_maint.delta.protocol.actions import ADD_SCHEMA
from airflow_delta_maint.delta.protocol.features import check_supported


def auto_decision(snapshot: TableHeader, options: OptimizeOptions,
                  counts: Mapping[PartitionKey, PartitionCounts] | None = None) -> AutoDecision | None:
    """The auto-compaction policy's choice of partitions, or None when ``auto`` is off; ``counts``:
    the live files' numbers per partition when streamed from the log (see ``choose_partitions``)."""
    if not options.auto:
        return None
    min_size, _ = file_size_settings(snapshot, options.min_file_size, options.target_file_size)
    whole = is_clustered(snapshot.protocol) or not snapshot.partition_columns
    return choose_partitions(
        snapshot, min_file_size=min_size, min_num_files=options.min_num_files,
        max_deleted_rows_ratio=options.max_deleted_rows_ratio, max_partitions=options.max_partitions,
        all_partitions=options.all_partitions, whole_table=whole, counts=counts)


def plan_from_options(snapshot: Snapshot, options: OptimizeOptions,
                      decision: AutoDecision | None = None) -> OptimizePlan:
    """The plan ``options`` ask for on ``snapshot``: young files and recently written partitions left
    out, the auto-compaction policy's partitions (``decision``, else decided here) selected."""
    options = options.purged()
    if decision is None:
        decision = auto_decision(snapshot, options)
    clustered_auto = decision is not None and is_clustered(snapshot.protocol)
    view, left = leave_out(snapshot, min_file_age_s=options.min_file_age,
                           recent_commits=options.skip_recent_partitions,
                           whole_table=is_clustered(snapshot.protocol) or not snapshot.partition_columns)
    plan = plan_optimize(view, predicate=options.where, zorder_by=list(options.zorder_by),
                         min_file_size=None if clustered_auto else options.min_file_size,
                         target_file_size=options.target_file_size, dv_ratio=options.dv_ratio, full=options.full,
                         min_cube_size=options.min_cube_size, target_cube_size=options.target_cube_size,
                         rewrite_type_widened=options.rewrite_type_widened,
                         partitions=set(decision.chosen) if decision is not None else None,
                         target_files=options.target_files)
    plan.num_table_files = snapshot.num_files
    plan.left_out = left.metrics() if left.any else {}
    return plan


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
    #: with ``input_bytes``: each bin's files as (path, size, deletion vector or not), for the execution
    #: choice's estimate of what the row-group copy takes byte for byte
    bin_files: list[list[tuple[str, int, bool]]] | None = None
    #: with ``keep_scan``: the streamed per-partition aggregates, the partitions the plan selects,
    #: the plan's own aggregate (liquid clustering's) and the modification time young files are after
    scan: Any = None
    selected: Callable[[PartitionKey], bool] | None = None
    work: Any = None
    young_after_ms: int | None = None

    def set_bins(self, bins: list[list[tuple[str, int, bool]]]) -> None:
        """The bins' files (``bin_files``) and the bytes they rewrite (``input_bytes``)."""
        self.bin_files = bins
        self.input_bytes = sum(size for files in bins for _, size, _ in files)


def plan_outline(plan: OptimizePlan, decision: AutoDecision | None) -> PlanOutline:
    """The outline of a plan built from the whole snapshot."""
    return PlanOutline(plan.version, plan.is_empty, plan.layout, plan.min_file_size, plan.left_out, decision,
                       input_bytes=plan.input_bytes, bin_files=bin_files(plan))


def bin_files(plan: OptimizePlan) -> list[list[tuple[str, int, bool]]]:
    """Each bin's files as (path, size, deletion vector or not)."""
    return [[(str(f["path"]), int(f.get("size") or 0), bool(f.get("deletionVector"))) for f in b.files]
            for b in plan.bins]


def outline_of(state: TableState, options: OptimizeOptions, candidates: bool = False) -> PlanOutline | None:
    """The plan's outline on either state: from the streamed state's aggregates
    (:func:`streamed_plan_outline`, whose planner-level fallbacks send the work to the whole state),
    from the plan itself on the eager state. None as :func:`streamed_plan_outline` says."""
    if isinstance(state, StreamedState):
        return streamed_plan_outline(state, options, candidates=candidates)
    check_supported(state.protocol, options.feature_gate, state.metadata)
    decision = auto_decision(state, options)
    return plan_outline(plan_from_options(state, options, decision), decision)


def skip_reason(plan: PlanOutline, options: OptimizeOptions) -> str | None:
    """Why the job would skip: the plan is empty (its reason names why), else None."""
    version, decision = plan.version, plan.decision
    if plan.is_empty and decision is not None:
        skip = Skip(f"auto compaction at version {version}: {decision.reason()}")
        skip.details = {"autoCompaction": decision.metrics()}
        return skip
    if plan.is_empty and options.target_files:
        return (f"nothing to rewrite at version {version}: every selected partition already is "
                f"{options.target_files} files of even row counts")
    if plan.is_empty and options.rewrite_type_widened:
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


def streamed_plan_outline(state: StreamedState, options: OptimizeOptions, candidates: bool = False,
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
    options = options.purged()
    check_supported(state.protocol, options.feature_gate, state.metadata)
    clustered = is_clustered(state.protocol)
    target_files = options.target_files
    widened = options.rewrite_type_widened
    clustering = clustered and not widened and target_files is None and \
        bool(clustering_columns(state.metadata.schema_string, state.domains))
    if candidates and (target_files is not None or widened or clustering):
        return None
    # every validation, in the order the in-memory check runs them, on a table without files
    no_files = state.part(ADD_SCHEMA.empty_table())
    plan_from_options(no_files, options, auto_decision(no_files, options))
    auto = options.auto
    whole = clustered or not state.partition_columns
    auto_min, _ = file_size_settings(state, options.min_file_size, options.target_file_size)
    clustered_auto = auto and clustered
    min_size, max_size = file_size_settings(state, None if clustered_auto else options.min_file_size,
                                            options.target_file_size)
    zorder_by = list(options.zorder_by)
    zorder = bool(validate_zorder(state, zorder_by)) if zorder_by else False
    min_age = options.min_file_age
    recent_commits = options.skip_recent_partitions
    now = int(time.time() * 1000)
    recent = recently_written_partitions(state, recent_commits, whole) if recent_commits else set()
    matches = partition_filter(state, options.where)

    def matched(key: PartitionKey) -> bool:
        return matches is None or bool(matches(dict(key)))

    work = _rewrite_check(state, options, clustering, matched)
    scan = scan_partitions(
        state, min_file_size=min_size, target_file_size=max_size, dv_ratio=options.dv_ratio,
        zorder=zorder, auto_min_file_size=auto_min if auto else None, auto_ratio=options.max_deleted_rows_ratio,
        whole_table=whole, young_after_ms=now - int(min_age * 1000) if min_age else None, recent=recent or None,
        collect=candidates and not zorder, one_partition=clustering, visit=work,
        visit_columns=work.columns if work is not None else ())
    decision = auto_decision(state, options, counts=scan.counts) if auto else None
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
        outline.set_bins(scan.bins(selected))
    return outline


def _rewrite_check(shell: TableHeader, options: OptimizeOptions, clustering: bool,
                   matched: Callable[[PartitionKey], bool]) -> ClusteringWork | EvenSplitCheck | OldTypeFiles | None:
    """The streamed aggregate of a plan that looks at more than sizes and deletion vectors."""
    if options.target_files is not None:
        return EvenSplitCheck(options.target_files)
    if options.rewrite_type_widened:
        return OldTypeFiles(shell.storage, shell.metadata, matched)
    if clustering:
        min_cube = options.min_cube_size
        return ClusteringWork([c.name for c in clustering_columns(shell.metadata.schema_string, shell.domains)],
                              full=options.full, min_cube_size=DEFAULT_MIN_CUBE_SIZE if min_cube is None else min_cube)
    return None


def nothing_to_do(table: Any, storage_options: Mapping[str, str] | None, options: OptimizeOptions) -> str | None:
    """Without Spark: a reason when the plan ``options`` ask for is empty on ``table`` (a path, URI or
    ``Storage``), else None. Bad input raises ``DeltaError``, as the job would.

    Reads the log in bounded memory (:func:`streamed_plan_outline`): the checkpoint's columns
    ``add.path``, ``add.deletionVector``, ``add.partitionValues``, ``add.size``, ``add.stats``
    (``numRecords`` of files with a deletion vector) and, with ``min_file_age``,
    ``add.modificationTime``, one row group at a time; the commits after it; with ``auto`` or
    ``skip_recent_partitions`` the newest commits' actions. Liquid clustering also reads
    ``add.tags``, ``add.clusteringProvider``; ``target_files`` ``add.stats`` of every file
    (``numRecords``); ``rewrite_type_widened`` the footers of selected data files until one holds
    an old type. The whole snapshot is loaded instead when the streamed read cannot vouch for the
    state (see ``table_state``).
    """
    options = options.purged()
    outline = read_table(table, lambda state: outline_of(state, options), storage_options=storage_options,
                         what="OPTIMIZE's check")
    assert outline is not None
    return skip_reason(outline, options)

