"""``cleanup-log``: delete expired log files as the protocol allows."""

from __future__ import annotations

from airflow_delta_maint.delta.log.cleanup import retention_hours_of
from airflow_delta_maint.delta.protocol.features import Operation

from .definition import DELTA_SPARK, NATIVE, JobDefinition
from .engine_option import ENGINE
from .options import FormerName, Option, options

CLEANUP_LOG = JobDefinition(
    name="cleanup-log",
    summary="Delete log files older than the table's log retention (commits, checkpoints, checksums, sidecars).",
    runner="airflow_delta_maint.app.jobs.cleanup_log",
    operation=Operation.CLEANUP_LOG,
    writes=True,
    catalog_operation="METADATA_CLEANUP",
    driver_only=True,
    engines=(NATIVE, DELTA_SPARK),
    engine_option="engine",
    dry_run_plans_natively=True,
    estimate_holds=lambda params: params.get("retention_hours") is None and not params.get("keep_versions"),
    options=options(
        Option("retention_hours", "float", "delete log files older than H hours (default: the table's "
               "delta.logRetentionDuration, 30 days if unset)", metavar="H",
               former_names=(FormerName("retention", value=retention_hours_of),)),
        Option("keep_versions", "str", "versions whose log entries must stay (time travel to them keeps working)",
               metavar="V1,V2"),
        Option("dry_run", "bool", "list what would be deleted; change nothing", attribute="dry_run_only"),
        ENGINE,
    ),
)
