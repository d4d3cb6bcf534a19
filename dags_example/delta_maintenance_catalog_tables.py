"""
Maintain every Delta table of a catalog database, found by name.

The connection ``glue_catalog`` (type ``aws``) reaches the AWS Glue Data Catalog and, unless a task
names a ``storage_conn_id``, the tables' S3 buckets. A Hive metastore connection (type
``hive_metastore``) works the same way; see docs/catalogs.md.

``tables`` lists the database's Delta tables (views and other formats left out, ``tmp_*`` excluded).
Each table then gets its own OPTIMIZE task instance (a mapped task, retried and reported on its own),
and one MaintainTablesOperator runs log compaction and lite VACUUM on all of them in one Spark
application. The database comes from the environment variable ``DELTA_MAINT_CATALOG_SCHEMA``. Every task
is submitted to Spark unless ``[delta_maint] execution = auto`` lets small tables run on the worker.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_delta_maint.operators.catalog_tables import ListCatalogTablesOperator
from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from airflow_delta_maint.operators.maintenance import OptimizeOperator

CATALOG = "glue_catalog"
SCHEMA = os.environ.get("DELTA_MAINT_CATALOG_SCHEMA", "sales")

with DAG(
    dag_id="delta_maintenance_catalog_tables",
    description="OPTIMIZE each Delta table of a catalog database, then compact logs and VACUUM them together",
    schedule=timedelta(days=1),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["delta", "maintenance", "catalog"],
):
    tables = ListCatalogTablesOperator(task_id="tables", catalog_conn_id=CATALOG, schema=SCHEMA,
                                       exclude=["tmp_*"])
    optimize = OptimizeOperator.partial(task_id="optimize", catalog_conn_id=CATALOG).expand(table_name=tables.output)
    housekeeping = MaintainTablesOperator(task_id="housekeeping", table_names=tables.output, catalog_conn_id=CATALOG,
                                          jobs={"compact-log": {}, "vacuum": {"mode": "lite"}})
    tables >> optimize >> housekeeping
