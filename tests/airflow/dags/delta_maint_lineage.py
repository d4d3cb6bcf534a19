"""OPTIMIZE and log compaction with the table among their outlets (used by the lineage and asset event tests)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Asset

from airflow_delta_maint.operators.maintenance import LogCompactionOperator, OptimizeOperator

TABLE = os.environ.get("DELTA_MAINT_LINEAGE_TABLE", "/nonexistent/lineage_table")
# named by its URI: the DAG is parsed with other tables by other tests sharing the Airflow database, and an
# asset name bound to two URIs would make Airflow deactivate it
table = Asset(uri=f"file://{TABLE}")

with DAG(dag_id="delta_maint_lineage", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 0}):
    optimize = OptimizeOperator(task_id="optimize", table_uri=TABLE, outlets=[table])
    compact = LogCompactionOperator(task_id="compact_log", table_uri=TABLE, interval=100, outlets=[table])
    optimize >> compact
