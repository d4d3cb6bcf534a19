"""An S3 table maintained with credentials from an Airflow connection (used by the tests)."""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

TABLE = os.environ.get("DELTA_MAINT_TEST_TABLE", "s3://lake/events")
SPARK_CONF = json.loads(os.environ.get("DELTA_MAINT_TEST_SPARK_CONF", "{}"))

with DAG(dag_id="delta_maint_storage_conn", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 0}):
    wait = CommitIntervalSensor(task_id="wait", table_uri=TABLE, min_commits=3, storage_conn_id="lake_s3",
                                poke_interval=1, timeout=60)
    optimize = OptimizeOperator(task_id="optimize", table_uri=TABLE, storage_conn_id="lake_s3", conf=SPARK_CONF)
    inspect = InspectTableOperator(task_id="inspect", table_uri=TABLE, storage_conn_id="lake_s3", conf=SPARK_CONF)
    wait >> optimize >> inspect
