"""Give live files the statistics readers skip files by, without rewriting them (compute-stats).

The driver selects the files that have no statistics or whose statistics leave out a covered column
(:mod:`airflow_delta_maint.delta.plans.compute_stats`, one pass over the state's scan, streamed on a
large log); Spark tasks (threads of this process under local execution) read each file's footer,
and its data only where the footer cannot prove a value
(:mod:`airflow_delta_maint.app.runners.stats_tasks`); the driver re-adds the files with their new
statistics in one commit (``COMPUTE STATS``, ``dataChange=false``): same path, size, partition values,
modification time, deletion vector, tags and row-tracking fields. A file a concurrent writer removed
(or gave another deletion vector) meanwhile is left out of the commit, which then goes in without it.
"""

from __future__ import annotations

import argparse
import functools
import logging
from typing import Any, Mapping

from airflow_delta_maint.delta.errors import CommitFailedError
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction, conflicting_files
from airflow_delta_maint.delta.plans import compute_stats as plans
from airflow_delta_maint.delta.plans.compute_stats import ComputeStatsOptions, ComputeStatsPlan
from airflow_delta_maint.delta.protocol.uniform_iceberg import check_no_iceberg_metadata

from ..context import JobContext
from ..job_definitions.compute_stats import COMPUTE_STATS
from ..runners.stats_tasks import StatsSpec, StatsTarget, stats_slice
from ..state_reading import read_state

NAME = COMPUTE_STATS.name
#: files listed by a dry run at most
DRY_RUN_LIST_CAP = 1000
#: commits tried, each after leaving out the files concurrent writers removed
MAX_ATTEMPTS = 10
#: files per task at least (a task's start costs more than a few footers)
FILES_PER_TASK = 64

log = logging.getLogger("delta_maint.compute_stats")




def options_from(params: Mapping[str, Any]) -> ComputeStatsOptions:
    """The run's typed options from its parsed command line (``vars`` of the namespace); a bad value
    raises ``InvalidArgumentError`` before anything is read."""
    return ComputeStatsOptions.from_mapping(params)


def nothing_to_do(table: str, storage_options: Mapping[str, str] | None, options: ComputeStatsOptions) -> str | None:
    """Without Spark: the core's reason when no live file needs statistics
    (:func:`~airflow_delta_maint.delta.plans.compute_stats.nothing_to_do`), else None. Bad input raises."""
    return plans.nothing_to_do(table, storage_options, options)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Select, compute and commit; the job's metrics."""
    options = options_from(vars(args))
    return read_state(ctx.storage, functools.partial(_compute_stats, ctx, options), what=NAME)


def _compute_stats(ctx: JobContext, options: ComputeStatsOptions, state: TableHeader) -> dict[str, Any]:
    ctx.version_read = state.version
    check_no_iceberg_metadata(ctx.storage, state.metadata, NAME)
    plan = plans.plan_compute_stats(state, options)
    metrics: dict[str, Any] = {**plan.metrics(), "version_committed": None, "numFilesUpdated": 0,
                               "numFilesReadFromData": 0, "numFilesDroppedByConflicts": 0}
    if options.where:
        metrics["predicate"] = options.where
    if not plan.files:
        metrics.update(status="skipped", reason=plan.reason(options.where))
        return metrics
    if options.dry_run:
        metrics.update(status="dry_run", files=[f["path"] for f in plan.files[:DRY_RUN_LIST_CAP]],
                       files_truncated=len(plan.files) > DRY_RUN_LIST_CAP)
        return metrics
    log.info("compute-stats %s at version %d: %d files without statistics, %d missing columns; computing %d",
             ctx.storage.root, state.version, plan.num_files_without_stats, plan.num_files_missing_columns,
             len(plan.files))
    computed = compute(ctx, state, plan)
    metrics["numFilesReadFromData"] = sum(1 for _, _, from_data in computed if from_data)
    stats = {path: text for path, text, _ in computed}
    adds = [{**add, "stats": stats[add["path"]], "dataChange": False} for add in plan.files]
    version, dropped = commit_stats(state, adds, options, metrics)
    metrics.update(status="committed" if version is not None else "skipped", version_committed=version,
                   numFilesUpdated=len(adds) - len(dropped), numFilesDroppedByConflicts=len(dropped))
    if version is None:
        metrics["reason"] = "concurrent writers removed every selected file"
    return metrics


def compute(ctx: JobContext, state: TableHeader, plan: ComputeStatsPlan) -> list[tuple[str, str, bool]]:
    """Every selected file's (path, statistics JSON, data read) from the job's tasks, in plan order."""
    spec = StatsSpec(ctx.storage, state.metadata.to_action(), tuple(c.logical_path for c in plan.columns),
                     plan.deletion_vectors, plan.widened)
    targets: list[StatsTarget] = [(f["path"], int(f["size"]), bool(f.get("deletionVector"))) for f in plan.files]
    tasks = ctx.tasks(f"compute-stats {ctx.storage.root}")
    slices = max(1, min(tasks.parallelism * 4, len(targets) // FILES_PER_TASK or 1))
    return tasks.map_slices(functools.partial(stats_slice, spec=spec), targets, slices, "file statistics")


def commit_stats(state: TableHeader, adds: list[dict], options: ComputeStatsOptions,
                 metrics: Mapping[str, Any]) -> tuple[int | None, list[str]]:
    """Commit the re-added files on top of the read version; (the version, the paths left out because
    concurrent commits removed them). None when every file was left out.

    Raises:
        ConflictError: a concurrent change of the protocol or metadata (the run plans again).
        CommitFailedError: writers kept removing selected files for :data:`MAX_ATTEMPTS` attempts.
    """
    pending = list(adds)
    dropped: list[str] = []
    parameters = {"predicate": [options.where] if options.where else []}
    for _ in range(MAX_ATTEMPTS):
        if not pending:
            return None, dropped
        txn = Transaction(state, plans.OPERATION, parameters, job=plans.JOB)
        txn.add_actions({"add": a} for a in pending)
        operation_metrics = {"numFilesUpdated": len(pending),
                             "numFilesWithoutStats": metrics.get("numFilesWithoutStats"),
                             "numFilesMissingColumns": metrics.get("numFilesMissingColumns")}
        try:
            return txn.commit(operation_metrics), dropped
        except ConflictError as exc:
            if exc.kind != "ConcurrentDeleteRead":
                raise
            gone = conflicting_files(state.storage, state.version, [a["path"] for a in pending])
            if not gone:
                raise
            log.info("compute-stats %s: concurrent commits removed %d selected files; committing without them",
                     state.storage.root, len(gone))
            dropped.extend(sorted(gone))
            pending = [a for a in pending if a["path"] not in gone]
    raise CommitFailedError(f"could not commit {plans.OPERATION} to {state.storage.root} after {MAX_ATTEMPTS} "
                            "attempts: concurrent writers kept removing the selected files")


def format_human(m: dict[str, Any]) -> str:
    """The run's metrics as a few lines for a terminal."""
    lines = [f"compute-stats of {m['table']}: {m['status']}",
             f"  version read            {m.get('version_read')}",
             f"  files considered        {m.get('numFilesConsidered')}",
             f"  without statistics      {m.get('numFilesWithoutStats')}",
             f"  missing columns         {m.get('numFilesMissingColumns')}"]
    if m["status"] == "dry_run":
        lines.extend(f"    {p}" for p in m.get("files", []))
        if m.get("files_truncated"):
            lines.append(f"    ... and {m['numFilesSelected'] - len(m['files'])} more")
    else:
        lines.append(f"  files updated           {m.get('numFilesUpdated')}")
    if m.get("numFilesLeftForLaterRuns"):
        lines.append(f"  left for later runs     {m['numFilesLeftForLaterRuns']}")
    if m.get("version_committed") is not None:
        lines.append(f"  committed               COMPUTE STATS at version {m['version_committed']}")
    if m.get("reason"):
        lines.append(f"  {m['reason']}")
    return "\n".join(lines)
