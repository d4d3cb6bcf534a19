"""Write a checkpoint of the table's latest version (no Spark)."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.cleanup import cleanup_expired_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.features import check_checkpoint_allowed, check_supported

from ..context import JobContext
from ..engines import DELTA_SPARK, add_engine_argument, check_engine

NAME = "checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", type=int, help="checkpoint this version (default: the latest)")
    parser.add_argument("--cleanup-expired-log", action="store_true",
                        help="then delete log files older than delta.logRetentionDuration (see cleanup-log)")
    add_engine_argument(parser)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    engine = check_engine(NAME, getattr(args, "engine", None))
    snapshot = Snapshot.load(ctx.storage, args.version, paths_only=engine == DELTA_SPARK)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, "checkpoint", snapshot.metadata)
    latest = Snapshot.load(ctx.storage, paths_only=True) if args.version is not None else snapshot
    if args.version is not None:
        check_checkpoint_allowed(latest.protocol, latest.metadata, snapshot.version)
    if engine == DELTA_SPARK:
        from ..engines import delta_spark

        result = delta_spark.checkpoint(ctx, args.version, latest.version)
    else:
        result = write_checkpoint(snapshot)
    metrics = {"status": "skipped" if result["already_existed"] else "committed",
               "version_read": snapshot.version,
               "version_committed": None, "checkpoint_version": result["version"], "checkpoint": result}
    if args.cleanup_expired_log:
        if engine == DELTA_SPARK:
            from ..engines import delta_spark

            planned = cleanup_expired_log(ctx.storage, dry_run=True)
            metrics["expired_log_cleanup"] = cleanup = delta_spark.cleanup_expired_log(ctx, planned, None)
        else:
            metrics["expired_log_cleanup"] = cleanup = cleanup_expired_log(ctx.storage)
        if cleanup["status"] == "committed":
            metrics["status"] = "committed"
    return metrics


def format_human(m: dict[str, Any]) -> str:
    c = m["checkpoint"]
    state = "already existed" if c["already_existed"] else "written"
    return (f"checkpoint of {m['table']} at version {c['version']} {state}: {c['path']} "
            f"({c['kind']}, {c['num_add_files']} files, {c['size_bytes']} bytes)")
