"""``vacuum``: delete data files no version inside the retention window references."""

from __future__ import annotations

from airflow_delta_maint.delta.protocol.features import Operation

from .definition import DELTA_SPARK, NATIVE, JobDefinition, Params
from .engine_option import ENGINE
from .options import Option, options


def _lite(params: Params) -> bool:
    return (params.get("mode") or "full") == "lite"


VACUUM = JobDefinition(
    name="vacuum",
    summary="Delete data files that no table version inside the retention window references.",
    runner="airflow_delta_maint.app.jobs.vacuum",
    operation=Operation.VACUUM,
    writes=True,
    catalog_operation="VACUUM",
    engines=(NATIVE, DELTA_SPARK),
    engine_option="engine",
    # lite VACUUM starts Spark only to delete a million files or more
    spark_work=lambda params: not _lite(params),
    reads_older_commits=_lite,
    local_kind=lambda params: "driver-only job" if _lite(params) else "full VACUUM",
    fleet_default={"mode": "lite"},
    fleet_rank=4,
    options=options(
        Option("retention_hours", "float", "keep files needed by versions of the last H hours (default: the "
               "table's delta.deletedFileRetentionDuration, 7 days if unset)"),
        Option("mode", "str", "full lists every file under the table; lite reads the files to delete from the log",
               default="full", choices=("full", "lite")),
        Option("dry_run", "bool", "report what would be deleted; delete and commit nothing", attribute="dry_run_only"),
        Option("ignore_retention_check", "bool",
               "allow a retention shorter than the table's (unsafe while others read or write)"),
        Option("keep_versions", "str", "also keep every file these versions read, so time travel to them keeps "
               "working", metavar="V1,V2"),
        Option("inventory", "str", "read the files under the table from this inventory (parquet, CSV or Delta; "
               "columns path, length, isDir, modificationTime) instead of listing (full mode)", metavar="PATH"),
        ENGINE,
    ),
)
