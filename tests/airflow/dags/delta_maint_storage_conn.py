"""A table on an object store maintained with credentials from Airflow connections (used by the tests).

``DELTA_MAINT_TEST_TABLE`` names the table, ``DELTA_MAINT_TEST_CONN`` the connection of the sensor,
``DELTA_MAINT_TEST_JOB_CONN`` the one of ``optimize`` and ``inspect`` (by default the same).
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

TABLE = os.environ.get("DELTA_MAINT_TEST_TABLE", "s3://lake/events")
CONN = os.environ.get("DELTA_MAINT_TEST_CONN", "lake_s3")
JOB_CONN = os.environ.get("DELTA_MAINT_TEST_JOB_CONN", CONN)
SPARK_CONF = json.loads(os.environ.get("DELTA_MAINT_TEST_SPARK_CONF", "{}"))

with DAG(dag_id="delta_maint_storage_conn", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 0}):
    wait = CommitIntervalSensor(task_id="wait", table_uri=TABLE, min_commits=3, storage_conn_id=CONN,
                                poke_interval=1, timeout=60)
    optimize = OptimizeOperator(task_id="optimize", table_uri=TABLE, storage_conn_id=JOB_CONN, conf=SPARK_CONF)
    inspect = InspectTableOperator(task_id="inspect", table_uri=TABLE, storage_conn_id=JOB_CONN, conf=SPARK_CONF)
    wait >> optimize >> inspect
