"""End to end: ``airflow dags test`` of the catalog example DAG on moto's Glue and S3, with real spark-submit:
the listing, one mapped OPTIMIZE task instance per table, one MaintainTablesOperator; rows read back; the
Glue connection's secret in no process's arguments, task log, XCom, rendered field or Spark event log."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from delta_maint_testing import BIN, ProcessSampler, airflow_env, task_results
from deltalake import DeltaTable

from tests.airflow.catalogs.test_glue_catalog import by_crawler, rows, spark_on_emr, write_appends

pytestmark = pytest.mark.e2e

DAG_ID = "delta_maintenance_catalog_tables"
AMBIENT = ("AWS_", "AZURE_", "GOOGLE_")


@dataclass
class DagRun:
    """What one run left: its output, every argument list of its processes, the spark-submit JVMs' environments."""

    out: str
    every_args: list[list[str]]
    submits: list[tuple[list[str], dict[str, str]]]
    run_id: str
    state: str


def run_scanned(home: Path, events: Path, **env: str) -> DagRun:
    """``airflow dags test`` of the catalog DAG, its processes sampled; Spark writes its event log to ``events``
    (``spark-defaults.conf`` in a ``SPARK_CONF_DIR`` of the test's own: the DAG sets no Spark conf)."""
    conf_dir = events.parent / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.compress false\nspark.eventLog.dir {events.as_uri()}\n")
    full = airflow_env(home, SPARK_CONF_DIR=str(conf_dir))
    for key in [k for k in full if k.startswith(AMBIENT)]:
        del full[key]  # only the catalog connection holds credentials
    full.update(env)
    proc = subprocess.Popen([str(BIN / "airflow"), "dags", "test", DAG_ID], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    with ProcessSampler([proc.pid]) as sampler:
        try:
            out, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    submits = [(cmd, environ) for cmd, environ in sampler.latest.values() if any("SparkSubmit" in p for p in cmd)]
    with sqlite3.connect(home / "airflow.db") as conn:
        run_id, state = conn.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                                     (DAG_ID,)).fetchone()
    return DagRun(out, sampler.every_args, submits, run_id, state)


def texts_of_the_run(home: Path, run: DagRun, events: Path) -> dict[str, str]:
    """Where a secret could show: the run's output, the task logs, the Spark event logs, the metadata database."""
    texts = {"dags test output": run.out}
    for f in (home / "logs").rglob("*") if (home / "logs").exists() else []:
        if f.is_file():
            texts[str(f)] = f.read_text(errors="replace")
    texts["event log"] = "".join(f.read_text(errors="replace") for f in events.rglob("*") if f.is_file())
    with sqlite3.connect(home / "airflow.db") as conn:
        texts["metadata database"] = "\n".join(conn.iterdump())
    return texts


def test_catalog_dag_maps_a_task_per_table_and_never_shows_the_secret(glue_catalog, airflow_home, tmp_path):
    lake, options = glue_catalog, glue_catalog.s3_options
    for uri, commits in (("s3://lake/e2e/orders", 6), ("s3://lake/e2e/returns", 3), ("s3://lake/e2e/scratch", 2)):
        write_appends(uri, options, commits)
    g = lake.glue
    g.create_database(DatabaseInput={"Name": "shop"})
    g.create_table(DatabaseName="shop", TableInput=spark_on_emr("orders", "s3a://lake/e2e/orders"))
    g.create_table(DatabaseName="shop", TableInput=by_crawler("returns", "s3://lake/e2e/returns/"))
    g.create_table(DatabaseName="shop", TableInput=spark_on_emr("tmp_scratch", "s3://lake/e2e/scratch"))
    g.create_table(DatabaseName="shop", TableInput={"Name": "recent", "TableType": "VIRTUAL_VIEW",
                                                    "ViewOriginalText": "SELECT * FROM orders"})
    before = {t: rows(f"s3://lake/e2e/{t}", options) for t in ("orders", "returns", "scratch")}
    scratch_version = DeltaTable("s3://lake/e2e/scratch", storage_options=options).version()

    events = tmp_path / "spark-events"
    events.mkdir()
    connection = json.dumps({"conn_type": "aws", "login": "AKIDGLUELAKE", "password": lake.secret,
                             "extra": {"region_name": "us-east-1", "endpoint_url": lake.server.endpoint}})
    run = run_scanned(airflow_home, events, AIRFLOW_CONN_GLUE_CATALOG=connection, DELTA_MAINT_CATALOG_SCHEMA="shop")
    state, tasks = task_results(airflow_home, DAG_ID)
    assert run.state == state == "success", run.out[-8000:]

    # the listing: Delta tables only (no view), tmp_* left out; one OPTIMIZE task instance per table
    assert tasks[("tables", -1)]["value"] == ["shop.orders", "shop.returns"]
    mapped = {m: t for (task_id, m), t in tasks.items() if task_id == "optimize"}
    assert sorted(mapped) == [0, 1] and all(t["state"] == "success" for t in mapped.values())
    for index, (name, table, files) in enumerate((("shop.orders", "orders", 12), ("shop.returns", "returns", 6))):
        metrics = mapped[index]["value"]
        assert metrics["operation"] == "optimize" and metrics["status"] == "committed", metrics
        assert metrics["table_name"] == name and metrics["table"].rstrip("/") == f"s3://lake/e2e/{table}"
        assert metrics["numRemovedFiles"] == files and metrics["numAddedFiles"] == 2
        assert metrics["version_committed"] == metrics["version_read"] + 1
        history = DeltaTable(f"s3://lake/e2e/{table}", storage_options=options).history()
        assert "OPTIMIZE" in [h["operation"] for h in history]

    # one fleet over both: log compaction of each table's commits, lite VACUUM within the retention (nothing due)
    fleet = tasks[("housekeeping", -1)]["value"]
    assert [(e["table_name"], e["table"].rstrip("/")) for e in fleet] == [
        ("shop.orders", "s3://lake/e2e/orders"), ("shop.returns", "s3://lake/e2e/returns")]
    for entry in fleet:
        compact, vacuum = entry["jobs"]
        assert compact["operation"] == "compact-log" and compact["status"] in ("committed", "skipped"), compact
        assert vacuum["operation"] == "vacuum" and vacuum.get("numFilesDeleted", 0) == 0, vacuum
    assert fleet[0]["jobs"][0]["status"] == "committed"  # orders: 7 commits, a whole window of 5

    # rows read back by delta-rs: unchanged; the excluded table untouched
    assert {t: rows(f"s3://lake/e2e/{t}", options) for t in before} == before
    assert len(DeltaTable("s3://lake/e2e/orders", storage_options=options).file_uris()) == 2
    assert DeltaTable("s3://lake/e2e/scratch", storage_options=options).version() == scratch_version

    # every Spark job reached S3 with the connection's key through its environment only
    jobs = [(cmd, environ) for cmd, environ in run.submits if "optimize" in cmd or "fleet" in " ".join(cmd)]
    assert len(jobs) >= 3, [cmd[-8:] for cmd, _ in run.submits]
    assert all(environ.get("AWS_SECRET_ACCESS_KEY") == lake.secret for _, environ in jobs)
    assert [cmd for cmd in run.every_args if any(lake.secret in part for part in cmd)] == []
    texts = texts_of_the_run(airflow_home, run, events)
    assert "SparkListenerEnvironmentUpdate" in texts["event log"]  # the Spark UI's environment page
    assert len([f for f in events.rglob("*") if f.is_file()]) >= 3
    with sqlite3.connect(airflow_home / "airflow.db") as conn:
        rendered = conn.execute("SELECT task_id, map_index FROM rendered_task_instance_fields WHERE dag_id = ? "
                                "AND run_id = ?", (DAG_ID, run.run_id)).fetchall()
    assert {("optimize", 0), ("optimize", 1), ("housekeeping", -1)} <= set(rendered)
    assert [where for where, text in texts.items() if lake.secret in text] == []
