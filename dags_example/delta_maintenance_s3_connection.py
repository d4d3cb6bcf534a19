"""
Maintain a Delta table on S3 with credentials from an Airflow connection.

The connection ``delta_lake_s3`` (type ``aws``) holds the credentials: access key id as login,
secret access key as password, ``region_name`` (and ``endpoint_url`` for an S3-compatible store)
in its extra. For example::

    export AIRFLOW_CONN_DELTA_LAKE_S3='{"conn_type": "aws", "login": "AKIA...", "password": "...",
        "extra": {"region_name": "eu-west-1"}}'

With the Amazon provider installed (``pip install 'airflow-delta-maint[amazon]'``), its hook reads
the connection, so role assumption (``role_arn``), profiles and session tokens work as they do for
the Amazon operators. The secret never reaches a command line, a log, XCom or the rendered task
fields: spark-submit gets it in its environment only. ``storage_options`` keeps non-secret
settings. The table comes from the environment variable ``DELTA_MAINT_S3_TABLE``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

TABLE = os.environ.get("DELTA_MAINT_S3_TABLE", "s3://my-lake/events")
CONNECTION = "delta_lake_s3"

with DAG(
    dag_id="delta_maintenance_s3_connection",
    description="OPTIMIZE and VACUUM an S3 table with credentials from an Airflow connection",
    schedule=timedelta(hours=1),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["delta", "maintenance", "s3"],
):
    wait = CommitIntervalSensor(task_id="wait_for_commits", table_uri=TABLE, min_commits=50,
                                storage_conn_id=CONNECTION, mode="reschedule", poke_interval=300)
    optimize = OptimizeOperator(task_id="optimize", table_uri=TABLE, storage_conn_id=CONNECTION,
                                storage_options={"AWS_REGION": "eu-west-1"})
    vacuum = VacuumOperator(task_id="vacuum", table_uri=TABLE, mode="lite", storage_conn_id=CONNECTION)
    wait >> optimize >> vacuum
