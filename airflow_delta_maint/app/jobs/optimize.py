"""Compact small files (bin-packing) or Z-order them; commits with dataChange=false."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import uuid
from typing import Any, Callable, Mapping, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES, AutoDecision, PartitionCounts,
                                                             PartitionKey, choose_partitions, partition_key,
                                                             partition_label)
from airflow_delta_maint.delta.plans.clustering import clustering_quality, is_clustered, tag_clustered_files
from airflow_delta_maint.delta.plans.clustering_scan import ClusteringWork
from airflow_delta_maint.delta.plans.even_split_scan import EvenSplitCheck
from airflow_delta_maint.delta.plans.optimize import (DEFAULT_DV_RATIO, Bin, OptimizePlan, file_size_settings,
                                                      plan_optimize, size_percentiles)
from airflow_delta_maint.delta.plans.partition_reservation import DEFAULT_LEASE_SECONDS, reserve_partitions
from airflow_delta_maint.delta.plans.recent_writes import leave_out
from airflow_delta_maint.delta.plans.type_widening_scan import OldTypeFiles
from airflow_delta_maint.delta.protocol.features import OPTIMIZE_DELTA_SPARK, check_supported, table_features
from airflow_delta_maint.delta.protocol.row_tracking import row_tracking
from airflow_delta_maint.delta.storage.store import Storage

from ..context import JobContext
from ..engines import DELTA_SPARK, add_engine_argument, engine_of
from .optimize_large import RoundSteps, run_in_rounds
from airflow_delta_maint.app.rewrite.commit import AFTER_REWRITE, BinCommitter, GroupResult, delete_outputs, remove_action
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, delete_run_outputs, output_dir, rewrite_bin
from airflow_delta_maint.app.rewrite.rebase import BinOutputs
from airflow_delta_maint.app.rewrite.rewrite_path import RewritePath, busy_unit_bins, commit_groups, rewrite_and_commit
from airflow_delta_maint.app.runners.tasks import Tasks, raise_worker_error

NAME = "optimize"
DEFAULT_BATCH_BYTES = 50 << 30
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
# delta-spark's (Spark's) default: the fastest to write and read; zstd writes files about a
# quarter smaller for some 10-15% more time (docs/benchmarks.md).
DEFAULT_COMPRESSION = "snappy"
#: Z-order and liquid clustering record a row map (8 bytes a row, compressed, on the driver) so that
#: a bin can be rebased onto concurrent deletion vectors; above this many input rows they do not
#: (tables with row tracking map rows through their stable row ids instead and need none)
MAX_ROW_MAP_ROWS = 50_000_000
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
    parser.add_argument("--bins-per-commit", type=int, default=None,
                        help="commit bins this many together as soon as they are rewritten; 0: one commit per "
                        "batch once all its bins are rewritten (default: a quiet table rewrites each batch at once; "
                        "a table a writer is committing to, or that one commits to during the run, has its bins "
                        "rewritten one at a time, each going in as soon as another writer has committed)")
    parser.add_argument("--min-file-age", type=float, default=None, metavar="SECONDS",
                        help="leave out files younger than this (their modificationTime): spares writers that "
                        "are still working on fresh data")
    parser.add_argument("--skip-recent-partitions", type=int, default=None, metavar="N",
                        help="leave out partitions that any of the newest N commits changed data in (appends and "
                        "the deletion vectors of DELETE, UPDATE, MERGE); a clustered or unpartitioned table is one "
                        "partition")
    parser.add_argument("--wait-for-writer", type=float, default=None, metavar="SECONDS",
                        help="busy tables: hold the rewritten bins and commit them right after another writer's "
                        "commit, waiting for one at most this long, when a writer's next statement has usually not "
                        "started yet")
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
    parser.add_argument("--purge", action="store_true",
                        help="rewrite only the files with deletion vectors, dropping their deleted rows (delta-spark's "
                        "REORG TABLE ... APPLY (PURGE)); takes no --zorder-by, --auto or --target-files")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    add_engine_argument(parser)


def _zorder_columns(text: str | Sequence[str] | None) -> list[str]:
    if not text:
        return []
    if isinstance(text, str):
        return [c.strip() for c in text.split(",") if c.strip()]
    return list(text)


class Skip(str):
    """A reason to skip, with the details the metrics carry."""

    details: dict[str, Any]  # set on every instance nothing_to_do returns


def auto_decision(snapshot: Snapshot, params: dict[str, Any],
                  counts: Mapping[PartitionKey, PartitionCounts] | None = None) -> AutoDecision | None:
    """The auto-compaction policy's choice of partitions, or None when ``auto`` is off; ``counts``:
    the live files' numbers per partition when streamed from the log (see ``choose_partitions``)."""
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
        all_partitions=bool(params.get("all_partitions")), whole_table=whole, counts=counts)


def purge_params(params: dict[str, Any]) -> dict[str, Any]:
    """``--purge``: only files with deletion vectors are rewritten (no file counts as small, any deleted
    row is enough), as delta-spark's REORG TABLE ... APPLY (PURGE) does."""
    if not params.get("purge"):
        return params
    given = [flag for key, flag in (("zorder_by", "--zorder-by"), ("auto", "--auto"),
                                    ("target_files", "--target-files"),
                                    ("rewrite_type_widened", "--rewrite-type-widened")) if params.get(key)]
    if given:
        raise InvalidArgumentError(f"--purge rewrites the files with deletion vectors only; it takes no "
                                   f"{', '.join(given)}")
    return {**params, "min_file_size": 1, "dv_ratio": 0.0}


def plan_from_params(snapshot: Snapshot, params: dict[str, Any], decision: AutoDecision | None = None) -> OptimizePlan:
    params = purge_params(params)
    if decision is None:
        decision = auto_decision(snapshot, params)
    clustered_auto = decision is not None and is_clustered(snapshot.protocol)
    view, left = leave_out(snapshot, min_file_age_s=params.get("min_file_age"),
                           recent_commits=params.get("skip_recent_partitions"),
                           whole_table=is_clustered(snapshot.protocol) or not snapshot.partition_columns)
    plan = plan_optimize(view, predicate=params.get("predicate"),
                         zorder_by=_zorder_columns(params.get("zorder_by")),
                         min_file_size=None if clustered_auto else params.get("min_file_size"),
                         max_file_size=params.get("max_file_size"),
                         dv_ratio=params.get("dv_ratio", DEFAULT_DV_RATIO), full=bool(params.get("full")),
                         min_cube_size=params.get("min_cube_size"), target_cube_size=params.get("target_cube_size"),
                         rewrite_type_widened=bool(params.get("rewrite_type_widened")),
                         partitions=set(decision.chosen) if decision is not None else None,
                         target_files=params.get("target_files"))
    plan.num_table_files = snapshot.num_files
    plan.left_out = left.metrics() if left.any else {}
    return plan


def nothing_to_do(table: str, storage_options: dict[str, str] | None, params: dict[str, Any]) -> str | None:
    """Without Spark: a reason when the plan is empty, else None. Bad input raises.

    Reads the log in bounded memory (:func:`streamed_plan_outline`): the checkpoint's columns
    ``add.path``, ``add.deletionVector``, ``add.partitionValues``, ``add.size``, ``add.stats``
    (``numRecords`` of files with a deletion vector) and, with ``min_file_age``,
    ``add.modificationTime``, one row group at a time; the commits after it; with ``auto`` or
    ``skip_recent_partitions`` the newest commits' actions. Liquid clustering also reads
    ``add.tags``, ``add.clusteringProvider``; ``target_files`` ``add.stats`` of every file
    (``numRecords``); ``rewrite_type_widened`` the footers of selected data files until one holds
    an old type. The whole snapshot is loaded instead when the streamed read cannot vouch for the
    state (see ``state_stream``).
    """
    from airflow_delta_maint.delta.log.state_stream import StreamFallback, open_state

    _check_engine_options(params)
    params = purge_params(params)
    try:
        state = open_state(table, storage_options=storage_options)
        outline = streamed_plan_outline(state, params)
    except StreamFallback:
        outline = None
    if outline is None:
        snapshot = Snapshot.load(table, storage_options=storage_options)
        check_supported(snapshot.protocol, feature_gate(params), snapshot.metadata)
        decision = auto_decision(snapshot, params)
        outline = _outline(plan_from_params(snapshot, params, decision), decision)
    return _skip_reason(outline, params)


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


def _outline(plan: OptimizePlan, decision: AutoDecision | None) -> PlanOutline:
    return PlanOutline(plan.version, plan.is_empty, plan.layout, plan.min_file_size, plan.left_out, decision)


def _skip_reason(plan: PlanOutline, params: dict[str, Any]) -> str | None:
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

    Raises what the in-memory check raises for bad input, in the same order: the shell snapshot
    (no files) runs every validation of the policy and the plan first.

    With ``keep_scan`` the outline carries the scan and the selection (``optimize_large``).

    With ``candidates`` the outline carries ``input_bytes``: the bytes the plan's bins rewrite,
    packed from the candidate files' sizes and paths (kept in memory, so for small logs only); None
    is returned then for liquid clustering, ``target_files`` and ``rewrite_type_widened``, whose
    bytes only the whole plan tells.
    """
    import time

    from airflow_delta_maint.delta.plans.clustering import clustering_columns
    from airflow_delta_maint.delta.plans.optimize import _partition_filter, validate_zorder
    from airflow_delta_maint.delta.plans.partition_scan import scan_partitions
    from airflow_delta_maint.delta.plans.recent_writes import LeftOut, recently_written_partitions

    shell = state.shell()
    check_supported(shell.protocol, feature_gate(params), shell.metadata)
    clustered = is_clustered(shell.protocol)
    target_files = params.get("target_files")
    widened = bool(params.get("rewrite_type_widened"))
    clustering = clustered and not widened and target_files is None and \
        bool(clustering_columns(shell.metadata.schema_string, shell.domains))
    if candidates and (target_files is not None or widened or clustering):
        return None
    # every validation, in the order the in-memory check runs them, on a table without files
    plan_from_params(shell, params, auto_decision(shell, params))
    auto = bool(params.get("auto"))
    whole = clustered or not shell.partition_columns
    auto_min, _ = file_size_settings(shell, params.get("min_file_size"), params.get("max_file_size"))
    clustered_auto = auto and clustered
    min_size, max_size = file_size_settings(shell, None if clustered_auto else params.get("min_file_size"),
                                            params.get("max_file_size"))
    zorder_by = _zorder_columns(params.get("zorder_by"))
    zorder = bool(validate_zorder(shell, zorder_by)) if zorder_by else False
    min_age = params.get("min_file_age")
    recent_commits = params.get("skip_recent_partitions")
    now = int(time.time() * 1000)
    recent = recently_written_partitions(shell, recent_commits, whole) if recent_commits else set()
    max_ratio = params.get("max_deleted_rows_ratio")
    matches = _partition_filter(shell, params.get("predicate"))

    def matched(key: PartitionKey) -> bool:
        return matches is None or bool(matches(dict(key)))

    work = _rewrite_check(shell, params, clustering, matched)
    scan = scan_partitions(
        state, min_file_size=min_size, max_file_size=max_size, dv_ratio=params.get("dv_ratio", DEFAULT_DV_RATIO),
        zorder=zorder, auto_min_file_size=auto_min if auto else None,
        auto_ratio=float(max_ratio) if max_ratio is not None else DEFAULT_MAX_DELETED_ROWS_RATIO,
        whole_table=whole, young_after_ms=now - int(min_age * 1000) if min_age else None, recent=recent or None,
        collect=candidates and not zorder, one_partition=clustering, visit=work,
        visit_columns=work.columns if work is not None else ())
    decision = auto_decision(shell, params, counts=scan.counts) if auto else None
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


def _rewrite_check(shell: Snapshot, params: dict[str, Any], clustering: bool,
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
    return remove_action(add, now)


def _delete_run_outputs(spec: RewriteSpec, bins: list[Bin], committed: frozenset[str] | set[str] = frozenset()
                        ) -> None:
    """After a failed Spark job: delete what this run's tasks wrote and no commit of the run
    references (``committed``: storage keys of committed outputs). Best effort: a task still running
    when its job failed may write after this, and VACUUM removes that file later."""
    try:
        n = delete_run_outputs(spec, [output_dir(spec.storage, b.files) for b in bins], keep=committed)
    except Exception as exc:  # orphans are harmless: VACUUM removes them after the retention period
        log.warning("could not delete the files of the failed rewrite: %s", exc)
        return
    if n:
        log.warning("OPTIMIZE %s: the rewrite failed; deleted the %d files its tasks had written", spec.storage.root, n)


def _delete_outputs(storage: Storage, adds: list[dict]) -> None:
    """Remove files this run wrote but will never commit (best effort)."""
    delete_outputs(storage, [a["path"] for a in adds])


def _commit_batch(snapshot: Snapshot, plan: OptimizePlan, bins: list[Bin], outputs: list[list[dict]],
                  parameters: dict, after_version: int | None = None) -> tuple[int | None, list[int]]:
    """Commit one batch of bins in one commit, rebased onto concurrent deletion vectors (see
    ``optimize_commit``); bins whose inputs were removed meanwhile are dropped.

    Returns (committed version or None, indexes of the bins dropped).
    """
    committer = BinCommitter(snapshot, plan, parameters)
    committer.after = after_version
    result = committer.commit(bins, [BinOutputs(o) for o in outputs])
    return result.version, sorted(result.dropped)


def rewrite_units(params: dict[str, Any], num_bins: int, path: RewritePath | None = None) -> tuple[int, bool]:
    """How many bins are rewritten together (one Spark job, or one slice of local work; 0: a whole
    batch) and whether each unit is committed as soon as it is rewritten (else rewritten units are
    held and committed together when the log moves, see :func:`_execute_plan`).

    ``--bins-per-commit N``: N bins, each unit committed at once; 0: whole batches, each committed
    once rewritten (one shuffle for Z-order and clustering). Unset: the run's path
    (:mod:`~airflow_delta_maint.app.rewrite.rewrite_path`): whole batches on a quiet table; on a busy
    one, one bin (or as many as keep the run within ``MAX_COMMITS_PER_RUN`` units) held until the log moves.
    """
    value = params.get("bins_per_commit")
    if value is None:
        if path is not None and not path.busy:
            return 0, True
        return busy_unit_bins(num_bins), False
    if int(value) < 0:
        raise InvalidArgumentError(f"bins per commit must be 0 (one commit per batch) or positive, got {value}")
    return int(value), True


def feature_gate(params: Mapping[str, Any]) -> str:
    """The feature gate's job for this run: OPTIMIZE written natively, or by delta-spark, which honours
    the table's writer features itself (this core only plans, from the log)."""
    return OPTIMIZE_DELTA_SPARK if engine_of(NAME, params) == DELTA_SPARK else "optimize"


def _check_engine_options(params: dict[str, Any]) -> str:
    """The run's engine; options the chosen engine cannot honour fail before anything is read."""
    engine = engine_of(NAME, params)
    if engine == DELTA_SPARK:
        from ..engines.delta_spark import NATIVE_ONLY_OPTIMIZE, refuse_native_only

        refuse_native_only(params, NATIVE_ONLY_OPTIMIZE, "OPTIMIZE")
    purge_params(params)
    return engine


def run_optimize(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Plan, rewrite (Spark tasks, or threads of this process under local execution) and commit in
    batches, or (engine delta-spark) run delta-spark's OPTIMIZE on what the plan selects. Returns the
    job's metrics."""
    engine = _check_engine_options(params)
    check_run_options(params)
    if params.get("bins_per_commit") is None and "_rewrite_path" not in params:
        params = {**params, "_rewrite_path": RewritePath()}  # one path for the whole run, its rounds included
    if engine != DELTA_SPARK:
        result = run_in_rounds(ctx, params, engine, _ROUND_STEPS)
        if result is not None:
            return result
    snapshot = Snapshot.load(ctx.storage)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, feature_gate(params), snapshot.metadata)
    decision = auto_decision(snapshot, params)
    plan = plan_from_params(snapshot, params, decision)
    return run_plan(ctx, params, engine, snapshot, plan, decision)


def check_run_options(params: dict[str, Any]) -> None:
    """Refuse bad run options before the table is read (on a large table, before minutes of planning)."""
    batch_bytes = params.get("batch_bytes")
    if batch_bytes is not None and int(batch_bytes) <= 0:
        raise InvalidArgumentError(f"batch bytes must be positive, got {batch_bytes}")
    if params.get("max_concurrent_bins") is not None and int(params["max_concurrent_bins"]) <= 0:
        raise InvalidArgumentError(f"max concurrent bins must be positive, got {params['max_concurrent_bins']}")
    if params.get("lease_seconds") is not None and int(params["lease_seconds"]) < 0:
        raise InvalidArgumentError(f"lease seconds must be 0 (no reservation) or positive, got {params['lease_seconds']}")
    compression = params.get("compression") or DEFAULT_COMPRESSION
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"unknown compression {compression!r}; one of {', '.join(COMPRESSIONS)}")
    if float(params.get("wait_for_writer") or 0) < 0:
        raise InvalidArgumentError(f"wait for writer must not be negative, got {params['wait_for_writer']}")
    if params.get("bins_per_commit") is not None and int(params["bins_per_commit"]) < 0:
        raise InvalidArgumentError(f"bins per commit must be 0 (one commit per batch) or positive, "
                                   f"got {params['bins_per_commit']}")


def check_spark_for(ctx: JobContext, layout: str) -> None:
    """Z-order and liquid clustering shuffle: refused under local execution."""
    if layout in ("zorder", "hilbert") and not ctx.spark_allowed:
        what = "Liquid clustering" if layout == "hilbert" else "Z-order"
        raise InvalidArgumentError(f"{what} of {ctx.storage.root} needs Spark (a shuffle), which local execution "
                                   "does not start; run it with execution 'spark'")


def run_plan(ctx: JobContext, params: dict[str, Any], engine: str, snapshot: Snapshot, plan: OptimizePlan,
             decision: AutoDecision | None, added_sizes: list[int] | None = None,
             load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True) -> dict[str, Any]:
    """Run one plan of ``snapshot`` (the whole table, or a round of a large one: ``whole_table``
    false, and no clustering quality, which needs every file), its options checked before
    (:func:`check_run_options`): reserve its partitions, rewrite and commit. ``added_sizes`` collects the committed files' sizes;
    ``load_base`` loads the snapshot a commit is rebased onto (see ``BinCommitter``)."""
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
        if whole_table:
            out["clusteringQualityBefore"] = clustering_quality(snapshot.add_actions(), plan.zorder_columns)
    if params.get("dry_run"):
        return {**out, "status": "dry_run", "plan": plan.summary()}
    empty = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0}
    if plan.is_empty:
        reason = decision.reason() if decision is not None else (
            "nothing to cluster" if clustered else "nothing to compact")
        return {**out, "status": "skipped", "reason": reason, **empty}
    check_spark_for(ctx, plan.layout)
    ctx.storage.require_put_if_absent()  # refuse a store without put-if-absent before any file is written
    lease = int(params["lease_seconds"]) if params.get("lease_seconds") is not None else DEFAULT_LEASE_SECONDS
    if engine == DELTA_SPARK:
        from ..engines.delta_spark import session

        session(ctx)  # a session that cannot run delta-spark fails before any partition is reserved
    if not lease:
        return _execute(engine, ctx, params, snapshot, plan, out, restricted=decision is not None,
                        added_sizes=added_sizes, load_base=load_base, whole_table=whole_table)
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
        return _execute(engine, ctx, params, snapshot, plan, out,
                        restricted=decision is not None or bool(reservation.taken_by_others),
                        added_sizes=added_sizes, load_base=load_base, whole_table=whole_table)


def _execute(engine: str, ctx: JobContext, params: dict[str, Any], snapshot: Snapshot, plan: OptimizePlan,
             out: dict[str, Any], restricted: bool, added_sizes: list[int] | None = None,
             load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True) -> dict[str, Any]:
    """Run the plan with the engine. delta-spark gets the plan's partitions as its WHERE clause when the
    run is limited to some (the auto-compaction policy's choice, partitions reserved by other runs)."""
    if engine != DELTA_SPARK:
        return _execute_plan(ctx, params, snapshot, plan, out, added_sizes, load_base, whole_table)
    from ..engines import delta_spark

    partitions: list[dict[str, str | None]] | None = None
    if restricted:
        seen: dict[tuple, dict[str, str | None]] = {}
        for b in plan.bins:
            seen.setdefault(partition_key(b.partition_values), dict(b.partition_values))
        partitions = list(seen.values())
    return {**out, **delta_spark.optimize(ctx, purge_params(params), snapshot, plan, partitions)}


def _execute_plan(ctx: JobContext, params: dict[str, Any], snapshot: Snapshot, plan: OptimizePlan,
                  out: dict[str, Any], added_sizes: list[int] | None = None,
                  load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True) -> dict[str, Any]:
    """Rewrite the plan's bins and commit them group by group as they are rewritten."""
    clustered = plan.layout == "hilbert"
    batch_bytes = int(params["batch_bytes"]) if params.get("batch_bytes") is not None else DEFAULT_BATCH_BYTES
    # On a table with deletion vectors every file's stats say whether they are exact; ours are.
    tight_bounds = True if "deletionVectors" in table_features(snapshot.protocol)[1] else None
    compression = params.get("compression") or DEFAULT_COMPRESSION
    rows = row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains)
    spec = RewriteSpec(ctx.storage, snapshot.metadata.to_action(), compression=compression,
                       target_file_bytes=plan.max_file_size, tight_bounds=tight_bounds,
                       run_token=uuid.uuid4().hex[:8], row_tracking=rows,
                       required_stats_columns=tuple(c.logical_path for c in plan.zorder_columns) if clustered else ())
    # delta-spark's names and order: predicate, zOrderBy, clusterBy (always; [] unless clustered), auto, and
    # isFull on a clustered table
    parameters: dict[str, Any] = {"predicate": [plan.predicate] if plan.predicate else [], "zOrderBy": plan.zorder_by,
                                  "clusterBy": plan.clustering_by if clustered else [],
                                  "auto": bool(params.get("auto"))}
    if clustered:
        parameters["isFull"] = bool(params.get("full"))
    if plan.layout == "even":
        parameters["targetFiles"] = plan.target_files
    # partitions left for a later run (reserved by another run, past --max-partitions): the
    # auto-compaction policy looks past this commit for them
    deferred = int(params.get("_deferred") or 0) + int(params.get("_beyond_max") or 0)
    if deferred or params.get("auto"):
        parameters["partitionsDeferred"] = deferred
    path: RewritePath | None = params.get("_rewrite_path")
    if path is not None:
        path.decide(ctx.storage, snapshot.version)
    per_unit, eager = rewrite_units(params, len(plan.bins), path)
    units = commit_groups(plan.bins, batch_bytes, per_unit)
    if plan.layout in ("zorder", "hilbert") and per_unit == 0:
        units = [list(range(len(plan.bins)))]  # one shuffle for the whole plan
    log.info("OPTIMIZE %s at version %d: %d bins, %d files, %.1f MiB to rewrite in %d units%s", ctx.storage.root,
             snapshot.version, len(plan.bins), plan.input_files, plan.input_bytes / 2**20, len(units),
             f" ({path.path} path: {path.cadence.reason()})" if path is not None and path.cadence else "")
    # a quiet run records no row maps (about a tenth of a Z-order's time): a bin whose inputs a writer
    # deletes from meanwhile is dropped instead of rebased, and the run turns busy for the rest
    rewriters = [_group_rewriter(ctx, params, spec, plan, per_unit, row_maps=path is None or path.busy)]
    committer = BinCommitter(snapshot, plan, parameters, load_base)
    results: list[tuple[list[int], GroupResult]] = []
    committed_keys: set[str] = set()
    held: list[tuple[list[int], list[BinOutputs]]] = []
    done = [0]
    busy = [False]
    wait = float(params.get("wait_for_writer") or 0)

    def flush() -> None:
        if not held:
            return
        group = [i for g, _ in held for i in g]
        outputs = [o for _, outs in held for o in outs]
        held.clear()
        result = committer.commit([plan.bins[i] for i in group], outputs, wait_for_writer_s=wait)
        results.append((group, result))
        for adds in result.adds.values():
            committed_keys.update(k for k in (ctx.storage.key_for_path(a["path"]) for a in adds) if k)
        log.info("OPTIMIZE %s: %d bins %s; %d/%d units rewritten", ctx.storage.root, len(group),
                 f"committed as version {result.version}" if result.version is not None else "dropped",
                 done[0], len(units))

    def turn_busy(n: int) -> None:
        """A quiet run saw another writer's commit: the units left are rewritten the busy way."""
        nonlocal eager
        left = [i for g in units[n + 1:] for i in g]
        if not left or path is None or not path.turn_busy(
                f"another writer committed while unit {n + 1} of {len(units)} was rewritten"):
            return
        units[n + 1:] = commit_groups([plan.bins[i] for i in left], batch_bytes, busy_unit_bins(len(left)))
        units[n + 1:] = [[left[j] for j in g] for g in units[n + 1:]]
        eager = False
        busy[0] = not wait
        # units of few bins, more of them at once
        rewriters.append(_group_rewriter(ctx, params, spec, plan, busy_unit_bins(len(left)), row_maps=True))
        log.info("OPTIMIZE %s: another writer committed during the run; the %d bins left are rewritten in %d "
                 "units, each committed as soon as it is rewritten", ctx.storage.root, len(left), len(units) - n - 1)

    def rewritten(n: int, outputs: list[BinOutputs]) -> None:
        done[0] += 1
        for hook in list(AFTER_REWRITE):
            hook([plan.bins[i] for i in units[n]])
        held.append((units[n], outputs))
        held_bytes = sum(plan.bins[i].input_bytes for g, _ in held for i in g)
        # held units go in one commit; once someone else has committed during this run (a busy
        # table: the sooner a bin lands, the fewer writer commits it is rebased over), each unit
        # goes in as soon as it is rewritten
        moved = not busy[0] and committer.log_moved()
        busy[0] = busy[0] or (not wait and moved)
        if eager or busy[0] or held_bytes >= batch_bytes:
            flush()
        if moved and path is not None and not path.busy:
            turn_busy(n)

    def unit_rewriter(n: int, bins: list[Bin]) -> list[BinOutputs]:
        return rewriters[-1][0](n, bins)

    try:
        rewrite_and_commit(plan.bins, units, unit_rewriter, rewritten, lambda: rewriters[-1][1])
        flush()
    except BaseException:
        _delete_run_outputs(spec, plan.bins, committed_keys)
        raise
    if added_sizes is not None:
        added_sizes.extend(a["size"] for _, r in results for i in r.committed for a in r.adds.get(i, []))
    return {**out, **_totals(plan, results, clustered and whole_table, snapshot), "numBatches": len(results),
            **(path.metrics() if path is not None else {})}


def _group_rewriter(ctx: JobContext, params: dict[str, Any], spec: RewriteSpec, plan: OptimizePlan,
                    per_commit: int, row_maps: bool = True) -> tuple[Callable[[int, list[Bin]], list[BinOutputs]], int]:
    """The function that rewrites one group of bins, and how many groups may be rewritten at once;
    ``row_maps``: Z-order and clustering record the row maps a rebase needs (see ``MAX_ROW_MAP_ROWS``)."""
    max_bins = params.get("max_concurrent_bins")
    if plan.layout in ("zorder", "hilbert"):
        from airflow_delta_maint.app.rewrite.zorder import execute_zorder

        want_maps = row_maps and not spec.row_tracking.materializes and \
            sum(_num_records(f) for b in plan.bins for f in b.files) <= MAX_ROW_MAP_ROWS

        def zorder(n: int, bins: list[Bin]) -> list[BinOutputs]:
            maps: list[list[bytes]] | None = [] if want_maps else None
            try:
                adds = execute_zorder(ctx.spark(), spec, dataclasses.replace(plan, bins=bins), maps)
            except Exception as exc:
                raise_worker_error(exc)
                raise
            if plan.layout == "hilbert":  # each bin became one new ZCube
                adds = [tag_clustered_files(o, plan.zorder_columns) for o in adds]
            return [BinOutputs(a, maps[i] if maps is not None else None) for i, a in enumerate(adds)]

        return zorder, 1  # a shuffle keeps every core busy: one at a time, committed while the next runs
    tasks = ctx.tasks(f"OPTIMIZE {ctx.storage.root}", threads=int(max_bins) if max_bins else None)
    if plan.layout == "even":
        from airflow_delta_maint.app.rewrite.even_split import execute_even

        def even(n: int, bins: list[Bin]) -> list[BinOutputs]:
            adds = execute_even(tasks, spec, dataclasses.replace(plan, bins=bins), f"commit {n + 1}")
            return [BinOutputs(a) for a in adds]

        return even, 1
    if per_commit == 0:
        concurrency = 1
    else:
        concurrency = max(1, math.ceil(tasks.parallelism / per_commit))
        if max_bins:
            concurrency = max(1, min(concurrency, int(max_bins) // per_commit or 1))

    def binpack(n: int, bins: list[Bin]) -> list[BinOutputs]:
        return [BinOutputs(a) for a in _execute_bins(tasks, spec, bins, max_bins, f"commit {n + 1}")]

    return binpack, concurrency


def _num_records(add: dict) -> int:
    try:
        return int(json.loads(add.get("stats") or "{}").get("numRecords") or 0)
    except ValueError:
        return 0


def _totals(plan: OptimizePlan, results: list[tuple[list[int], GroupResult]], clustered: bool,
            snapshot: Snapshot) -> dict[str, Any]:
    """The run's metrics from what each commit did."""
    totals = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0,
              "numDeletionVectorsRemoved": 0}
    added_sizes: list[int] = []
    versions: list[int] = []
    dropped: list[dict[str, Any]] = []
    rebased = carried = 0
    committed_removed: set[str] = set()
    committed_added: list[dict] = []
    for group, result in results:
        if result.version is not None:
            versions.append(result.version)
        for i, reason in result.dropped.items():
            b = plan.bins[group[i]]
            dropped.append({"partition": partition_label(partition_key(b.partition_values)), "files": len(b.files),
                            "bytes": b.input_bytes, "reason": reason})
        rebased += len(result.rebased)
        carried += result.carried
        for i in result.committed:
            for r in result.removed.get(i, []):
                rm = r["remove"]
                totals["numRemovedFiles"] += 1
                totals["numRemovedBytes"] += rm["size"]
                totals["numDeletionVectorsRemoved"] += 1 if rm.get("deletionVector") else 0
                committed_removed.add(rm["path"])
            for a in result.adds.get(i, []):
                totals["numAddedFiles"] += 1
                totals["numAddedBytes"] += a["size"]
                added_sizes.append(a["size"])
                committed_added.append(a)
    out: dict[str, Any] = {}
    if clustered:
        after = [a for a in snapshot.add_actions() if a["path"] not in committed_removed] + committed_added
        out["clusteringQualityAfter"] = clustering_quality(after, plan.zorder_columns)
    versions.sort()
    return {**out, **totals, **size_percentiles(added_sizes),
            "status": "committed" if versions else "skipped",
            **({} if versions else {"reason": "every bin was dropped: concurrent commits removed or rewrote "
                                              "its input files"}),
            "version_committed": versions[-1] if versions else None, "versions_committed": versions,
            "numBins": len(plan.bins), "numBinsDroppedByConflicts": len(dropped), "droppedBins": dropped,
            "numBinsRebased": rebased, "numDeletionVectorsCarried": carried,
            **({"leftOut": plan.left_out} if plan.left_out else {}),
            "totalConsideredFiles": plan.num_table_files,
            "totalFilesSkipped": plan.num_table_files - totals["numRemovedFiles"]}


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    params = {k: getattr(args, k) for k in ("predicate", "zorder_by", "min_file_size", "max_file_size",
                                             "max_concurrent_bins", "batch_bytes", "dv_ratio", "compression",
                                             "full", "min_cube_size", "target_cube_size", "rewrite_type_widened",
                                             "target_files", "auto", "all_partitions", "min_num_files",
                                             "max_deleted_rows_ratio", "bins_per_commit", "min_file_age",
                                             "skip_recent_partitions", "wait_for_writer",
                                             "max_partitions", "lease_seconds", "dry_run", "purge", "engine")}
    return run_optimize(ctx, params)


def format_human(m: dict[str, Any]) -> str:
    if m["status"] == "dry_run":
        return json.dumps(m["plan"], indent=2)
    return (f"OPTIMIZE {m['table']}: {m['status']}, version {m.get('version_read')} -> {m.get('version_committed')}; "
            f"removed {m.get('numRemovedFiles', 0)} files ({m.get('numRemovedBytes', 0)} bytes), "
            f"added {m.get('numAddedFiles', 0)} files ({m.get('numAddedBytes', 0)} bytes) in {m['duration_s']}s")


#: the steps OPTIMIZE in rounds borrows from this job (see ``optimize_large``)
_ROUND_STEPS = RoundSteps(outline=streamed_plan_outline, purge=purge_params, plan=plan_from_params, run=run_plan,
                          check_spark=check_spark_for)
