"""
OPTIMIZE a Delta table once it has gathered enough commits since its last OPTIMIZE.

The sensor reads only the tail of the table's log and gives its worker slot back between checks
(``mode="reschedule"``). The table comes from the Airflow Variable ``delta_maint_table``, else the
environment variable ``DELTA_MAINT_TABLE``, else a demo table under the system's temp folder; the
number of commits from the DAG parameter ``min_commits``.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator, available_jobs
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

DEFAULT_TABLE = os.environ.get(
    "DELTA_MAINT_TABLE", os.path.join(tempfile.gettempdir(), "delta-maint-demo", "events")
)
TABLE = "{{ var.value.get('delta_maint_table', '%s') }}" % DEFAULT_TABLE.replace("'", "\\'")

with DAG(
    dag_id="delta_maintenance_on_commits",
    description="OPTIMIZE a Delta table after every N commits",
    schedule=timedelta(hours=1),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"min_commits": Param(100, type="integer", minimum=1)},
    tags=["delta", "maintenance"],
) as dag:
    wait = CommitIntervalSensor(
        task_id="wait_for_commits",
        table_uri=TABLE,
        min_commits="{{ params.min_commits }}",
        since="last_optimize",
        mode="reschedule",
        poke_interval=300,
        timeout=timedelta(hours=12).total_seconds(),
        soft_fail=True,
    )
    if "optimize" in available_jobs():
        compact = OptimizeOperator(task_id="optimize", table_uri=TABLE)
    else:  # an application without OPTIMIZE still reports the table's health
        compact = InspectTableOperator(task_id="inspect", table_uri=TABLE)
    wait >> compact
