"""
OPTIMIZE a Delta table and compact its log each time it gathers enough commits: no sensor, no schedule.

The table is an asset with a watcher: the triggerer runs a
:class:`~airflow_delta_maint.triggers.table_commits.TableCommitsTrigger` that reads only the tail of
the table's log and fires an asset event once per crossing of ``min_commits`` commits since the last
OPTIMIZE; the DAG is scheduled on the asset. The trigger's arguments identify it, so the table is
fixed when the file is parsed: the environment variable ``DELTA_MAINT_TABLE``, else a demo table
under the system's temp folder. The maintenance tasks do not list the table among their outlets:
their events would schedule this DAG again.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_delta_maint.operators.maintenance import LogCompactionOperator, OptimizeOperator
from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

TABLE = os.environ.get("DELTA_MAINT_TABLE", os.path.join(tempfile.gettempdir(), "delta-maint-demo", "events"))

events_table = Asset(
    name="delta_maint_events_table",
    uri=TABLE if "://" in TABLE else f"file://{os.path.abspath(TABLE)}",
    watchers=[
        AssetWatcher(
            name="delta_maint_events_commits",
            trigger=TableCommitsTrigger(table_uri=TABLE, min_commits=100, since="last_optimize", poke_interval=300),
        )
    ],
)

with DAG(
    dag_id="delta_maintenance_on_table_asset",
    description="OPTIMIZE and compact the log of a Delta table after every 100 commits",
    schedule=[events_table],
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "maintenance"],
) as dag:
    optimize = OptimizeOperator(task_id="optimize", table_uri=TABLE)
    compact_log = LogCompactionOperator(task_id="compact_log", table_uri=TABLE)
    optimize >> compact_log
