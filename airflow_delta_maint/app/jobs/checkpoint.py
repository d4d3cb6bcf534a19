"""Write a checkpoint of the table's latest version (no Spark)."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.cleanup import cleanup_expired_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.features import check_checkpoint_allowed, check_supported

from ..context import JobContext

NAME = "checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", type=int, help="checkpoint this version (default: the latest)")
    parser.add_argument("--cleanup-expired-log", action="store_true",
                        help="then delete log files older than delta.logRetentionDuration (see cleanup-log)")


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    snapshot = Snapshot.load(ctx.storage, args.version)
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, "checkpoint", snapshot.metadata)
    if args.version is not None:
        latest = Snapshot.load(ctx.storage, paths_only=True)
        check_checkpoint_allowed(latest.protocol, latest.metadata, snapshot.version)
    result = write_checkpoint(snapshot)
    metrics = {"status": "skipped" if result["already_existed"] else "committed",
               "version_read": snapshot.version,
               "version_committed": None, "checkpoint_version": result["version"], "checkpoint": result}
    if args.cleanup_expired_log:
        metrics["expired_log_cleanup"] = cleanup = cleanup_expired_log(ctx.storage)
        if cleanup["status"] == "committed":
            metrics["status"] = "committed"
    return metrics


def format_human(m: dict[str, Any]) -> str:
    c = m["checkpoint"]
    state = "already existed" if c["already_existed"] else "written"
    return (f"checkpoint of {m['table']} at version {c['version']} {state}: {c['path']} "
            f"({c['kind']}, {c['num_add_files']} files, {c['size_bytes']} bytes)")
