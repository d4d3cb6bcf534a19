"""
Nightly maintenance of a list of Delta tables: OPTIMIZE, then log compaction, then VACUUM, per table.

The tables come from the Airflow Variable ``delta_maint_tables`` (a JSON list, or paths separated
by commas), else the environment variable ``DELTA_MAINT_TABLES``, else a demo table under the
system's temp folder. One mapped task group runs per table, so each table's steps run in order
while tables run side by side: the style for a few large tables, each worth its own Spark
application, its own retries and its own log. Every task's XCom value is the metrics object of its run.

Many small tables (the Variable ``delta_maint_small_tables``, else ``DELTA_MAINT_SMALL_TABLES``)
are maintained by one ``MaintainTablesOperator`` task instead: the worker checks every table
without Spark and submits one application for the tables that have work (none: no Spark at all;
small work only: run on the worker). Its XCom value is one entry per table.

The Spark connection ``spark_default`` chooses where the jobs run, e.g.
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'``.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime

from airflow.sdk import DAG, Param, Variable, chain, task, task_group

from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from airflow_delta_maint.operators.maintenance import (
    InspectTableOperator,
    LogCompactionOperator,
    OptimizeOperator,
    VacuumOperator,
    available_jobs,
)

DEFAULT_TABLE = os.path.join(tempfile.gettempdir(), "delta-maint-demo", "events")
JOBS = set(available_jobs())


def parse_tables(raw: str | list | None) -> list[str]:
    """Table URIs from a JSON list or a comma-separated string."""
    if raw is None:
        return []
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            raw = json.loads(text)
        else:
            return [t.strip() for t in text.split(",") if t.strip()]
    return [str(t) for t in raw]


with DAG(
    dag_id="delta_maintenance_nightly",
    description="OPTIMIZE, log compaction and VACUUM of each Delta table, every night",
    schedule="0 2 * * *",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "vacuum_retention_hours": Param(168, type="number", minimum=0),
        "vacuum_ignore_retention_check": Param(False, type="boolean"),
    },
    tags=["delta", "maintenance"],
) as dag:

    @task
    def list_tables() -> list[str]:
        """The tables to maintain tonight."""
        tables = parse_tables(Variable.get("delta_maint_tables", default=None)) or parse_tables(
            os.environ.get("DELTA_MAINT_TABLES")
        )
        return tables or [DEFAULT_TABLE]

    @task_group
    def maintain(table_uri: str) -> None:
        """One table: each job the application offers, in order."""
        steps = []
        if "optimize" in JOBS:
            steps.append(OptimizeOperator(task_id="optimize", table_uri=table_uri))
        if "compact-log" in JOBS:
            steps.append(LogCompactionOperator(task_id="compact_log", table_uri=table_uri))
        if "vacuum" in JOBS:
            steps.append(
                VacuumOperator(
                    task_id="vacuum",
                    table_uri=table_uri,
                    retention_hours="{{ params.vacuum_retention_hours }}",
                    ignore_retention_check="{{ params.vacuum_ignore_retention_check }}",
                )
            )
        if not steps:  # an application without maintenance jobs still reports the table's health
            steps.append(InspectTableOperator(task_id="inspect", table_uri=table_uri))
        chain(*steps)

    maintain.expand(table_uri=list_tables())

    @task
    def list_small_tables() -> list[str]:
        """The many small tables, maintained together in one application."""
        return parse_tables(Variable.get("delta_maint_small_tables", default=None)) or parse_tables(
            os.environ.get("DELTA_MAINT_SMALL_TABLES")
        )

    small = list_small_tables()
    MaintainTablesOperator(
        task_id="maintain_small_tables",
        tables=small,
        jobs={
            "optimize": {},
            "compact-log": {},
            "vacuum": {
                "mode": "lite",
                "retention_hours": "{{ params.vacuum_retention_hours }}",
                "ignore_retention_check": "{{ params.vacuum_ignore_retention_check }}",
            },
        },
        execution="auto",
    )
