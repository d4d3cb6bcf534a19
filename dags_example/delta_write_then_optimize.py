"""
A writer's DAG that maintains its own table in its quiet window: the write, then, once the table has
gathered ``min_commits`` commits since its last OPTIMIZE, OPTIMIZE, before the next write starts.

The sensor pokes once and skips the maintenance at once when the table is not due, so the writer's
next run never waits for it. The table comes from the Airflow Variable ``delta_maint_table``, else
the environment variable ``DELTA_MAINT_TABLE``, else a demo table under the system's temp folder.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_delta_maint.operators.maintenance import OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

DEFAULT_TABLE = os.environ.get(
    "DELTA_MAINT_TABLE", os.path.join(tempfile.gettempdir(), "delta-maint-demo", "events")
)
TABLE = "{{ var.value.get('delta_maint_table', '%s') }}" % DEFAULT_TABLE.replace("'", "\\'")

with DAG(
    dag_id="delta_write_then_optimize",
    description="Upsert a batch into a Delta table, then OPTIMIZE it in the writer's quiet window",
    schedule=timedelta(minutes=10),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # the next write waits for this run's maintenance
    params={"min_commits": Param(50, type="integer", minimum=1)},
    tags=["delta", "maintenance"],
) as dag:

    @task
    def upsert_batch(table_uri: str) -> None:
        """The pipeline's own MERGE (here a placeholder)."""
        print(f"MERGE INTO delta.`{table_uri}` ...")

    due = CommitIntervalSensor(
        task_id="optimize_due",
        table_uri=TABLE,
        min_commits="{{ params.min_commits }}",
        since="last_optimize",
        mode="poke",
        poke_interval=1,
        timeout=0,
        soft_fail=True,  # not due: the run skips OPTIMIZE and ends
    )
    optimize = OptimizeOperator(
        task_id="optimize",
        table_uri=TABLE,
        skip_recent_partitions=2,  # the partitions the last two commits wrote wait for a later run
        min_file_age=300,
    )
    upsert_batch(TABLE) >> due >> optimize
