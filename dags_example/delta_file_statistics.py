"""
Give a Delta table's files the statistics readers skip files by, weekly, without rewriting them.

Files written without statistics (a writer with ``spark.databricks.delta.stats.collect=false``), or
written before ``delta.dataSkippingStatsColumns`` named the columns queries now filter on, get them
from their parquet footers. The check on the worker skips Spark when every live file already has
them. ``max_files`` bounds one run's work; the next run continues where it stopped. The table comes
from the environment variable ``DELTA_MAINT_TABLE``, else a demo table under the system's temp folder.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_maint.operators.maintenance import ComputeStatsOperator

TABLE = os.environ.get("DELTA_MAINT_TABLE", os.path.join(tempfile.gettempdir(), "delta-maint-demo", "events"))

with DAG(
    dag_id="delta_file_statistics",
    description="Compute missing file statistics of a Delta table",
    schedule=timedelta(days=7),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["delta", "maintenance"],
):
    ComputeStatsOperator(task_id="compute_stats", table_uri=TABLE, columns=["event_time"], max_files=100_000)
