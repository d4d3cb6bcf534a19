"""``checkpoint``: a checkpoint of the table's state (classic, multi-part or V2)."""

from __future__ import annotations

from airflow_delta_maint.delta.protocol.features import Operation

from .definition import DELTA_SPARK, NATIVE, JobDefinition
from .engine_option import ENGINE
from .options import Option, options

CLEANUP_EXPIRED_LOG = Option("cleanup_expired_log", "bool",
                             "then delete log files older than delta.logRetentionDuration (see cleanup-log)",
                             templated=False)

CHECKPOINT = JobDefinition(
    name="checkpoint",
    summary="Write a checkpoint of the table's state (and optionally clean up the expired log).",
    runner="airflow_delta_maint.app.jobs.checkpoint",
    operation=Operation.CHECKPOINT,
    writes=True,
    catalog_operation="CHECKPOINT",
    driver_only=True,
    engines=(NATIVE, DELTA_SPARK),
    engine_option="engine",
    options=options(
        Option("version", "int", "checkpoint this version (default: the latest)"),
        CLEANUP_EXPIRED_LOG,
        ENGINE,
    ),
)
