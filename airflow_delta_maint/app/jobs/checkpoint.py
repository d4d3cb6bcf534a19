"""Write a checkpoint of the table's latest version.

Small tables: the whole state in memory and one checkpoint file written by the driver (no Spark).
Large ones (see :mod:`airflow_delta_maint.app.state_reading`): the state streamed, the checkpoint's
parts (or a V2 checkpoint's sidecars) written by parallel tasks and published once by the driver
(:mod:`airflow_delta_maint.delta.log.checkpoint_parts`).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.checkpoint_parts import write_checkpoint_in_parts
from airflow_delta_maint.delta.log.cleanup import cleanup_expired_log
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.protocol.features import Operation, check_checkpoint_allowed, check_supported
from airflow_delta_maint.delta.storage.store import Storage

from ..context import JobContext
from ..job_definitions.checkpoint import CHECKPOINT
from ..engines import DELTA_SPARK, check_engine
from ..state_reading import read_state, warm_up_spark

NAME = CHECKPOINT.name




def write_in_parts(ctx: JobContext, state: StreamedState) -> dict[str, Any]:
    """A checkpoint of a streamed state, its parts written by the job's tasks (Spark, or threads
    under local execution)."""
    warm_up_spark(ctx)

    def run_slices(writer, slices):
        if not slices:
            return []
        tasks = ctx.tasks(f"checkpoint {ctx.storage.root}")
        return tasks.map_slices(writer, slices, len(slices), "checkpoint parts")

    return write_checkpoint_in_parts(state, run_slices=run_slices)


def write_state_checkpoint(ctx: JobContext, state: TableState) -> dict[str, Any]:
    """A checkpoint of the state: written whole by the driver from the eager state, in parts by the
    job's tasks from the streamed one (whose fallback runs before anything is written)."""
    if isinstance(state, StreamedState):
        return write_in_parts(ctx, state)
    return write_checkpoint(state)


def checkpoint_version(ctx: JobContext, storage: Storage, version: int) -> dict[str, Any]:
    """Write a checkpoint of ``version`` the way the log's size asks for (the expired-log cleanup's
    checkpoint too)."""
    return read_state(storage, functools.partial(write_state_checkpoint, ctx), version, NAME)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    engine = check_engine(NAME, getattr(args, "engine", None))
    return read_state(ctx.storage, functools.partial(_checkpoint, args, ctx, engine), args.version, NAME,
                      paths_only=engine == DELTA_SPARK, streamed=engine != DELTA_SPARK)


def _checkpoint(args: argparse.Namespace, ctx: JobContext, engine: str, snapshot: TableState) -> dict[str, Any]:
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, Operation.CHECKPOINT, snapshot.metadata)
    streamed = isinstance(snapshot, StreamedState)
    # the latest version's header, read as the state was (its files are not needed)
    latest: TableHeader = snapshot if args.version is None else \
        read_state(ctx.storage, lambda header: header, None, NAME, paths_only=True, streamed=streamed)
    if args.version is not None:
        check_checkpoint_allowed(latest.protocol, latest.metadata, snapshot.version)
    if engine == DELTA_SPARK:
        from ..engines import delta_spark

        result = delta_spark.checkpoint(ctx, args.version, latest.version)
    else:
        result = write_state_checkpoint(ctx, snapshot)
    metrics = {"status": "skipped" if result["already_existed"] else "committed",
               "version_read": snapshot.version,
               "version_committed": None, "checkpoint_version": result["version"], "checkpoint": result}
    if args.cleanup_expired_log:
        if engine == DELTA_SPARK:
            from ..engines import delta_spark

            planned = cleanup_expired_log(ctx.storage, dry_run=True)
            metrics["expired_log_cleanup"] = cleanup = delta_spark.cleanup_expired_log(ctx, planned, None)
        else:
            metrics["expired_log_cleanup"] = cleanup = cleanup_expired_log(
                ctx.storage, snapshot=latest if streamed else None,
                checkpoint_writer=lambda v: checkpoint_version(ctx, ctx.storage, v))
        if cleanup["status"] == "committed":
            metrics["status"] = "committed"
    return metrics


def format_human(m: dict[str, Any]) -> str:
    c = m["checkpoint"]
    state = "already existed" if c["already_existed"] else "written"
    return (f"checkpoint of {m['table']} at version {c['version']} {state}: {c['path']} "
            f"({c['kind']}, {c['num_add_files']} files, {c['size_bytes']} bytes)")
