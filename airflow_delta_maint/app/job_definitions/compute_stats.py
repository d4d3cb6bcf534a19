"""``compute-stats``: statistics for the live files that lack them, re-added with ``dataChange=false``."""

from __future__ import annotations

from airflow_delta_maint.delta.protocol.features import Operation

from .definition import JobDefinition
from .options import FormerName, Option, options

COMPUTE_STATS = JobDefinition(
    name="compute-stats",
    summary="Give the live files that lack statistics (or a covered column's) their statistics.",
    runner="airflow_delta_maint.app.jobs.compute_stats",
    operation=Operation.COMPUTE_STATS,
    writes=True,
    catalog_operation="COMPUTE_STATISTICS",
    fleet_default={},
    fleet_rank=2,
    options=options(
        Option("where", "str", "partition predicate, e.g. \"date >= '2024-01-01'\"",
               former_names=(FormerName("predicate", flag=None),)),
        Option("columns", "str", "also collect statistics of these columns (dotted for nested fields), beyond "
               "delta.dataSkippingStatsColumns / delta.dataSkippingNumIndexedCols", metavar="C1,C2"),
        Option("max_files", "int", "give at most N files statistics in this run", metavar="N"),
        Option("dry_run", "bool", "report the files that need statistics; compute and commit nothing",
               attribute="dry_run_only"),
    ),
)
