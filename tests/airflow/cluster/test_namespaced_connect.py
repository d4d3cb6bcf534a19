"""The operators through a Spark Connect server whose cluster shares nothing with the Airflow side.

The namespaced cluster of ``namespaced.py`` (a standalone master and two workers, each worker in network
and mount namespaces of its own) with a Spark Connect server in front of it, running as the master does.
The machines' Python has pyspark, pyarrow and numpy only (what a Spark Connect server's Python workers
need for ``mapInArrow``); obstore, pyroaring and the application's modules reach the executors through the
session (``addArtifacts``). The Airflow side runs no Spark at all: a client process talks to the server.
Tables live on moto S3 on the bridge; its keys reach the tasks inside them, never the server's logs.
"""

from __future__ import annotations

import json
import time

import pytest

from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator
from tests.airflow.cluster.namespaced import start_cluster
from tests.airflow.cluster.test_namespaced_cluster import (data_keys, referenced, s3_connection, s3_options,
                                                           table_rows, write_table)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

CONN_ID = "spark_connect_cluster"


def rows(uri: str, options: dict[str, str]):
    """The table's rows by id and value (ids repeat across the appends below)."""
    return table_rows(uri, options).sort_by([("id", "ascending"), ("value", "ascending")])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = time.monotonic()
    c = start_cluster(tmp_path_factory.mktemp("cluster"), connect=True)
    print(f"namespaced cluster {c.url} with Spark Connect on port {c.connect_port} up in "
          f"{time.monotonic() - started:.1f} s")
    try:
        yield c
    finally:
        c.stop()


def test_jobs_through_spark_connect_on_the_namespaced_cluster(cluster, s3, monkeypatch, capfd):
    server, key_id, secret = s3
    options = s3_options(server, key_id, secret)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "spark_connect", "host": cluster.host, "port": cluster.connect_port}))
    uri = "s3://lake/connect"
    write_table(uri, options, commits=6)  # 12 small files in 2 partitions
    before = rows(uri, options)

    optimize = OptimizeOperator(task_id="optimize", table_uri=uri, conn_id=CONN_ID,
                                storage_conn_id="lake_s3").execute(context={})
    assert optimize["status"] == "committed" and optimize["version_committed"] == 6, optimize
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    assert rows(uri, options).equals(before)

    write_table(uri, options, commits=4, rows=400, seed=3)  # ids restart at 0: more rows per id
    before = rows(uri, options)
    zorder = OptimizeOperator(task_id="zorder", table_uri=uri, conn_id=CONN_ID, storage_conn_id="lake_s3",
                              zorder_by=["value"], target_file_size=4_000).execute(context={})
    assert zorder["status"] == "committed" and zorder["numRemovedFiles"] == 10 and zorder["numAddedFiles"] > 2, zorder
    assert rows(uri, options).equals(before)

    vacuum = VacuumOperator(task_id="vacuum", table_uri=uri, conn_id=CONN_ID, storage_conn_id="lake_s3",
                            retention_hours=0, ignore_retention_check=True).execute(context={})
    assert vacuum["status"] == "committed" and vacuum["numFilesDeleted"] == 22, vacuum
    assert data_keys(uri, options) == referenced(uri, options)
    assert rows(uri, options).equals(before)

    # the executors of the namespaced workers ran the tasks, the server's session among the applications
    for worker in cluster.workers:
        runs = [d for d in (worker.folder / "work").glob("app-*/*") if (d / "stderr").exists()]
        assert any("Running task" in (d / "stderr").read_text() for d in runs), f"{worker.name} ran no task"
    assert cluster.connect is not None and "Spark Connect - session_id" in cluster.connect.log_text()
    # the storage secret is in no log of the cluster (the server's, its event log, the workers' and executors')
    seen = "\n".join(node.log_text() for node in [cluster.connect, cluster.master, *cluster.workers])
    events = [f for f in (cluster.connect.folder / "logs").rglob("*") if f.is_file()]
    assert events and secret not in seen and not [f for f in events if secret in f.read_text(errors="replace")]
    out = capfd.readouterr()
    assert secret not in out.out + out.err
    for metrics in (optimize, zorder, vacuum):
        assert secret not in json.dumps(metrics)
