"""The commit-interval sensor in its three modes, one after the other (used by the tests).

Versions 0..5 exist when the run starts; the test writes version 6 while the poke-mode sensor
waits, 7 while the reschedule-mode sensor is rescheduled, 8 while the deferrable sensor is deferred.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, chain

from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

TABLE = os.environ.get("DELTA_MAINT_TEST_TABLE", "/nonexistent/table")

with DAG(dag_id="delta_maint_sensor_modes", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 0}):
    common = {"table_uri": TABLE, "since": "version", "since_version": 5, "poke_interval": 1, "timeout": 240}
    chain(
        CommitIntervalSensor(task_id="poke", min_commits=1, mode="poke", **common),
        CommitIntervalSensor(task_id="reschedule", min_commits=2, mode="reschedule", **common),
        CommitIntervalSensor(task_id="deferrable", min_commits=3, deferrable=True, **common),
    )
