"""A DAG scheduled on a Delta table's commits through an asset watcher; its one task records the events it got."""

from __future__ import annotations

import os

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

TABLE = os.environ["DELTA_MAINT_EVENTS_TABLE"]

table = Asset(
    name="delta_maint_events_table",
    uri=f"file://{TABLE}",
    watchers=[AssetWatcher(name="delta_maint_events_commits",
                           trigger=TableCommitsTrigger(table_uri=TABLE, min_commits=3, poke_interval=1))],
)

with DAG(dag_id="delta_maint_table_events", schedule=[table], catchup=False, max_active_runs=1):

    @task
    def record(triggering_asset_events=None) -> list[dict]:
        return [event.extra for events in triggering_asset_events.values() for event in events]

    record()
