"""Tasks that must fail with a clear message and leave the table unchanged (used by the tests)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator

TABLE = os.environ.get("DELTA_MAINT_TEST_TABLE", "/nonexistent/table")

with DAG(dag_id="delta_maint_failures", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 0}):
    OptimizeOperator(task_id="missing_connection", table_uri=TABLE, conn_id="no_such_spark",
                     skip_if_nothing_to_do=False)
    OptimizeOperator(task_id="unreachable_master", table_uri=TABLE, conn_id="spark_unreachable",
                     skip_if_nothing_to_do=False)
    OptimizeOperator(task_id="missing_table", table_uri=TABLE + "_missing")
    InspectTableOperator(task_id="bad_option", table_uri=TABLE, small_file_bytes="lots")
    # spark-submit runs; the application fails and reports why
    InspectTableOperator(task_id="missing_table_in_spark", table_uri=TABLE + "_gone")
