"""Write log compaction files (and optionally a checkpoint) so readers open few log files.

The work is planning and rewriting small JSON files on the driver, with the core alone; it
does not start Spark, except to write the parts of a due checkpoint of a large table (see
:mod:`~airflow_delta_maint.app.jobs.checkpoint`). A large log's state is opened streamed: the job
reads its protocol, metadata and commits, never its files.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from airflow_delta_maint.delta.log import compaction
from airflow_delta_maint.delta.log.cleanup import cleanup_expired_log
from airflow_delta_maint.delta.log.compaction import compact_log
from airflow_delta_maint.delta.log.compaction_options import LogCompactionOptions

from ..context import JobContext
from ..job_definitions.compact_log import COMPACT_LOG
from ..engines import DELTA_SPARK, check_engine
from ..state_reading import streamed_state
from .checkpoint import checkpoint_version

NAME = COMPACT_LOG.name




def options_from(params: Mapping[str, Any]) -> LogCompactionOptions:
    """The run's typed options from its parsed command line (``vars`` of the namespace), the engine checked
    (it writes the checkpoint and cleans the expired log; delta-spark writes no compaction files, ours always
    do); a bad value raises ``InvalidArgumentError`` before anything is read."""
    return LogCompactionOptions.from_mapping({**params, "engine": check_engine(NAME, params.get("engine"))})


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Compact the log of ``ctx.table``; returns the job's metrics."""
    return run_compact_log(ctx, options_from(vars(args)))


def run_compact_log(ctx: JobContext, options: LogCompactionOptions) -> dict[str, Any]:
    """Compact the log of ``ctx.table`` with ``options``; returns the job's metrics."""
    if options.engine == DELTA_SPARK:
        return _run_with_delta_spark_checkpoints(options, ctx)
    # a large log: the job reads only the state's head, streamed; a due checkpoint is written in parts
    state = streamed_state(ctx.storage, what=NAME)
    shell = state
    writer = (lambda version: checkpoint_version(ctx, ctx.storage, version)) if state is not None else None
    metrics = compact_log(ctx.storage, interval=options.interval, max_window_bytes=options.max_window_bytes,
                          checkpoint_interval=options.checkpoint_interval, snapshot=shell, checkpoint_writer=writer)
    if options.cleanup_expired_log:
        metrics["expired_log_cleanup"] = cleanup = cleanup_expired_log(ctx.storage, snapshot=shell,
                                                                       checkpoint_writer=writer)
        if cleanup["status"] == "committed" and metrics.get("status") == "skipped":
            metrics["status"] = "committed"
    return metrics


def _run_with_delta_spark_checkpoints(options: LogCompactionOptions, ctx: JobContext) -> dict[str, Any]:
    """The checkpoint (when due) and the expired-log cleanup by delta-spark, the compaction files by ours."""
    from airflow_delta_maint.delta.log.listing import list_log

    from ..engines import delta_spark

    listing = list_log(ctx.storage)
    latest = listing.latest_commit
    base = max((c.version for c in listing.checkpoints), default=None)
    checkpoint = None
    if options.checkpoint_interval is not None and latest is not None and base != latest \
            and latest - (base if base is not None else -1) >= options.checkpoint_interval:
        checkpoint = delta_spark.checkpoint(ctx, None, latest)
    elif options.cleanup_expired_log:
        delta_spark.session(ctx)  # a session that cannot run delta-spark fails before the log is touched
    metrics = compact_log(ctx.storage, interval=options.interval, max_window_bytes=options.max_window_bytes)
    metrics["checkpoint_engine"] = DELTA_SPARK
    if checkpoint is not None:
        metrics["checkpoint"] = checkpoint
        if metrics.get("status") == "skipped":
            metrics["status"] = "committed"
    if options.cleanup_expired_log:
        planned = cleanup_expired_log(ctx.storage, dry_run=True)
        metrics["expired_log_cleanup"] = cleanup = delta_spark.cleanup_expired_log(ctx, planned, None)
        if cleanup["status"] == "committed" and metrics.get("status") == "skipped":
            metrics["status"] = "committed"
    return metrics


def format_human(m: dict[str, Any]) -> str:
    """A short report of one run."""
    lines = [
        f"table            {m['table']}",
        f"status           {m['status']} (version {m['version_read']}, interval {m['interval']})",
    ]
    cp = m.get("checkpoint")
    if cp:
        state = "already existed" if cp.get("already_existed") else f"written ({cp.get('size_bytes')} bytes)"
        lines.append(f"checkpoint       version {cp.get('version')}: {state}")
    lines.append(f"windows written  {m['numWindowsWritten']} ({m['numCommitsReconciled']} commits, "
                 f"{m['numActionsReconciled']} actions -> {m['numActionsWritten']}, {m['numBytesWritten']} bytes)")
    for w in m["windows_written"]:
        lines.append(f"  {w['start']}..{w['end']}  {w['numActions']} actions, {w['bytes']} bytes")
    if m["numWindowsAlreadyPresent"]:
        lines.append(f"already present  {m['numWindowsAlreadyPresent']}")
    lines.append(f"windows skipped  {m['numWindowsSkipped']}")
    for w in m["windows_skipped"]:
        lines.append(f"  {w['start']}..{w['end']}  {w['reason']}")
    lines.append(f"files cleaned    {m['numFilesCleaned']}")
    if m.get("expired_log_cleanup"):
        c = m["expired_log_cleanup"]
        lines.append(f"expired log      {c['numLogFilesDeleted']} files deleted, kept from checkpoint "
                     f"{c.get('checkpointVersion')}")
    lines.append(f"duration         {m['duration_s']} s")
    return "\n".join(lines)


def nothing_to_do(table: str, storage_options: Mapping[str, str] | None,
                  options: LogCompactionOptions) -> str | None:
    """Without Spark: the core's reason to skip (:func:`~airflow_delta_maint.delta.log.compaction.nothing_to_do`).
    Bad input raises."""
    return compaction.nothing_to_do(table, storage_options, options)
