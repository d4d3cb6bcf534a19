"""Delete expired log files: commits, checkpoints, checksums and sidecars older than the log retention.

Planning and deleting run on the driver with the core alone; no Spark starts, except for the
parts of a large table's missing boundary checkpoint (see the checkpoint job). The decisions read
the protocol, metadata and version only: a large log's are streamed, never loaded whole. The rules
are those of :mod:`airflow_delta_maint.delta.log.cleanup`.
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.cleanup import check_retention_hours, cleanup_expired_log, log_retention_ms
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.plans.vacuum_options import parse_versions

from ..context import JobContext
from ..job_definitions.cleanup_log import CLEANUP_LOG
from ..engines import DELTA_SPARK, check_engine
from ..state_reading import streamed_state
from .checkpoint import checkpoint_version

NAME = CLEANUP_LOG.name
DRY_RUN_LIST_CAP = 1000




def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Clean up the expired log files of ``ctx.table``; returns the job's metrics."""
    engine = check_engine(NAME, getattr(args, "engine", None))
    keep = list(parse_versions(args.keep_versions))
    check_retention_hours(args.retention_hours)
    if engine == DELTA_SPARK and keep:
        raise InvalidArgumentError("cleanup-log with the delta-spark engine does not take keep_versions (native "
                                   "engine only)")
    # the decisions need the protocol, metadata and version only: a large log's are streamed
    state = streamed_state(ctx.storage, None, NAME)
    snapshot: TableHeader = state if state is not None else Snapshot.load(ctx.storage, paths_only=True)
    ctx.version_read = snapshot.version
    # the delta-spark engine: our core plans the same cleanup (a dry run), delta-spark deletes
    metrics = cleanup_expired_log(ctx.storage, retention_hours=args.retention_hours,
                                  dry_run=bool(args.dry_run or engine == DELTA_SPARK),
                                  keep_versions=keep, snapshot=snapshot,
                                  checkpoint_writer=lambda v: checkpoint_version(ctx, ctx.storage, v))
    if engine == DELTA_SPARK and not args.dry_run:
        from ..engines import delta_spark

        retention_ms = log_retention_ms(dict(snapshot.metadata.configuration), args.retention_hours) \
            if args.retention_hours is not None else None
        return delta_spark.cleanup_expired_log(ctx, metrics, retention_ms)
    listed = metrics.get("log_files_to_delete")
    if listed is not None and len(listed) > DRY_RUN_LIST_CAP:
        metrics["log_files_to_delete"] = listed[:DRY_RUN_LIST_CAP]
        metrics["log_files_to_delete_truncated"] = True
    return metrics


def format_human(m: dict[str, Any]) -> str:
    """A short report of one run."""
    lines = [f"expired log cleanup of {m['table']}: {m['status']}",
             f"  version read       {m.get('version_read')}",
             f"  cut-off commit     {m.get('cutoffCommitVersion')}",
             f"  kept from          checkpoint {m.get('checkpointVersion')}"]
    if m.get("checkpointWritten") is not None:
        lines.append(f"  checkpoint written version {m['checkpointWritten']}")
    lines.append(f"  log files          {m.get('numLogFilesToDelete')} to delete, {m.get('numLogFilesDeleted')} deleted")
    for key in m.get("log_files_to_delete") or []:
        lines.append(f"    {key}")
    if m.get("reason"):
        lines.append(f"  reason             {m['reason']}")
    return "\n".join(lines)
