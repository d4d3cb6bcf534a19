"""What a deployment installs, and nothing more: the wheel with no extra runs every job of the command line on a
local table and on S3 (moto), and the example DAG with ``airflow dags test``; each documented extra brings what
its feature imports. A missing runtime dependency fails here, where the test extra cannot hide it."""

from __future__ import annotations

import io
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.storage.store import Storage
from tests.install.conftest import EXTRAS, REPO, Install

#: the test extra's packages a plain install must run without
TEST_ONLY = {"deltalake", "duckdb", "moto", "pytest", "hypothesis", "boto3", "apache-airflow-providers-amazon",
             "hmsclient", "databricks-sdk", "delta-spark", "apache-airflow-providers-openlineage"}
COMMITS, ROWS = 12, 50
#: what each run of :func:`every_job` ends with on the table :func:`make_table` writes
EXPECTED = [("inspect", "skipped"), ("optimize", "dry_run"), ("optimize", "committed"), ("optimize", "committed"),
            ("compute-stats", "skipped"), ("compact-log", "committed"), ("checkpoint", "committed"),
            ("vacuum", "dry_run"), ("vacuum", "committed"), ("cleanup-log", "skipped")]


def make_table(uri: str, options: dict[str, str]) -> None:
    """delta-rs appends ``COMMITS`` small files, then deletes some rows (a file VACUUM can reclaim)."""
    for i in range(COMMITS):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([f"p{i % 2}"] * ROWS),
                                       "value": pa.array([f"v{x}" for x in ids])}),
                        mode="append", partition_by=["part"], storage_options=options or None)


def rows(uri: str, options: dict[str, str]) -> Counter:
    """The table's rows as delta-rs lists its files, read through our storage."""
    storage = Storage(uri, options)
    counter: Counter = Counter()
    for file_uri in DeltaTable(uri, storage_options=options or None).file_uris():
        if "://" not in uri:  # a local table: delta-rs gives plain paths
            data = pq.read_table(file_uri.removeprefix("file://"))
        else:
            key = storage.key_for_path(file_uri)
            assert key is not None, file_uri
            data = pq.read_table(io.BytesIO(storage.read(key)))
        for row in data.select(["id", "value"]).to_pylist():
            counter[(row["id"], row["value"])] += 1
    return counter


def every_job(uri: str, history: str, options: dict[str, str]) -> list[list[str]]:
    """Each job of the command line, in the order a night runs them, with work for each."""
    store = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    rec = ["--history-uri", history, *store]
    return [
        ["inspect", uri, *rec],
        ["optimize", uri, "--dry-run", *store],
        ["optimize", uri, *rec],
        ["optimize", uri, "--zorder-by", "id", *rec],
        ["compute-stats", uri, *rec],
        ["compact-log", uri, *rec],
        ["checkpoint", uri, *rec],
        ["vacuum", uri, "--mode", "lite", "--retention-hours", "0", "--ignore-retention-check", "--dry-run", *rec],
        ["vacuum", uri, "--mode", "full", "--retention-hours", "0", "--ignore-retention-check", *rec],
        ["cleanup-log", uri, "--retention-hours", "0", "--dry-run", *rec],
    ]


def run_every_job(install: Install, uri: str, options: dict[str, str], work: Path) -> None:
    history = str(work / "history")
    before = rows(uri, options)
    assert sum(before.values()) == COMMITS * ROWS
    statuses = []
    for argv in every_job(uri, history, options):
        done = install.run(["delta-maint", *argv, "--json"], cwd=work)
        assert done.returncode == 0, (argv, done.stderr[-3000:])
        metrics = json.loads(done.stdout.strip().splitlines()[-1])
        statuses.append((argv[0], metrics["status"]))
        assert rows(uri, options) == before, argv  # no row lost, duplicated or resurrected
    assert statuses == EXPECTED, statuses
    spec = work / "fleet.json"
    spec.write_text(json.dumps({"tables": [{"table": uri, "storage_options": options,
                                            "jobs": [{"job": "optimize", "args": []},
                                                     {"job": "vacuum", "args": ["--mode", "lite"]}]}],
                                "history_uri": history}))
    fleet = install.run(["delta-maint", "fleet", str(spec), "--json"], cwd=work)
    assert fleet.returncode == 0, fleet.stderr[-3000:]
    report = install.run(["delta-maint", "report", "--history", history, "--out", str(work / "report.html")],
                         cwd=work)
    assert report.returncode == 0, report.stderr[-3000:]
    assert uri.rstrip("/").rsplit("/", 1)[-1] in (work / "report.html").read_text()
    assert rows(uri, options) == before


def test_a_plain_install_holds_no_test_package(install):
    plain = install(None)
    assert not plain.distributions() & TEST_ONLY, plain.distributions() & TEST_ONLY
    assert "arro3-core" in plain.distributions()


def test_every_job_from_a_plain_install_on_a_local_table(install, tmp_path):
    table = tmp_path / "events"
    make_table(str(table), {})
    run_every_job(install(None), str(table), {}, tmp_path)


def test_every_job_from_a_plain_install_on_s3(install, moto_s3, tmp_path):
    options = {"AWS_ENDPOINT_URL": moto_s3.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    uri = "s3://lake/events"
    make_table(uri, options)
    run_every_job(install(None), uri, {**options, "allow_http": "true"}, tmp_path)


def test_the_example_dag_from_a_plain_install(install, tmp_path):
    plain = install(None)
    table, home = tmp_path / "events", tmp_path / "airflow"
    make_table(str(table), {})
    before = rows(str(table), {})
    env = plain.env(
        AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags_example"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        AIRFLOW_VAR_DELTA_MAINT_TABLES=json.dumps([str(table)]), AIRFLOW_VAR_DELTA_MAINT_TABLE=str(table),
        AIRFLOW__DELTA_MAINT__HISTORY_URI=str(tmp_path / "history"))
    home.mkdir()
    migrated = plain.run(["airflow", "db", "migrate"], cwd=tmp_path, env=env)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    conf = json.dumps({"vacuum_retention_hours": 0, "vacuum_ignore_retention_check": True})
    done = plain.run(["airflow", "dags", "test", "delta_maintenance_nightly", "-c", conf], cwd=tmp_path, env=env,
                     timeout=1200)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    with sqlite3.connect(home / "airflow.db") as db:
        states = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = 'delta_maintenance_nightly'"
                            ).fetchall()
    assert states and all(state in ("success", "skipped") for _, state in states), states
    assert ("maintain.optimize", "success") in states, states
    assert rows(str(table), {}) == before


def test_each_extra_installs_what_its_feature_imports(install, tmp_path):
    """One smoke run per extra: its feature's imports, and the code path that needs them."""
    probes = {
        "amazon": "from airflow_delta_maint.hooks.storage_credentials import _aws_hook_class; "
                  "assert _aws_hook_class() is not None; "
                  "from airflow.providers.amazon.aws.hooks.glue_catalog import GlueCatalogHook",
        "microsoft-azure": "from airflow.providers.microsoft.azure.hooks.wasb import WasbHook",
        "google": "from airflow.providers.google.cloud.hooks.gcs import GCSHook",
        "catalogs": "from airflow_delta_maint.catalogs.open_catalog import open_catalog; "
                    "import airflow_delta_maint.catalogs.hive, airflow_delta_maint.catalogs.unity, hmsclient, thrift; "
                    "open_catalog('glue', {'region_name': 'us-east-1'}); "
                    "open_catalog('unity', {'host': 'http://127.0.0.1:9'}); "
                    "from airflow_delta_maint.hooks.catalogs import catalog_for",
        "openlineage": "from airflow_delta_maint.operators.lineage import operator_lineage; "
                       "facets = operator_lineage('/tmp/t', {'operation': 'optimize', 'status': 'committed'}); "
                       "assert facets.run_facets['deltaMaintenance']",
        "delta-spark": "import delta, pyspark, importlib.metadata as md; "
                       "from airflow_delta_maint.app.engines.delta_spark import check_versions; "
                       "check_versions(pyspark.__version__, md.version('delta-spark'))",
    }
    assert set(probes) == set(EXTRAS)
    plain = install(None)
    for extra, probe in probes.items():
        with_extra = install(extra)
        done = with_extra.run(["python", "-c", probe], cwd=tmp_path,
                              env=with_extra.env(DATABRICKS_TOKEN="dapi-testing"))
        assert done.returncode == 0, (extra, done.stderr[-3000:])
        without = plain.run(["python", "-c", probe], cwd=tmp_path)
        assert without.returncode != 0, extra  # the extra is what brings it


@pytest.mark.parametrize("extra", ["delta-spark"])
def test_the_delta_spark_extra_runs_its_engine(install, extra, tmp_path):
    """The delta-spark extra: OPTIMIZE by delta-spark's own command, its jars fetched as the hook fetches them."""
    with_extra = install(extra)
    table = tmp_path / "events"
    make_table(str(table), {})
    before = rows(str(table), {})
    done = with_extra.run(["delta-maint", "optimize", str(table), "--engine", "delta-spark", "--json"], cwd=tmp_path,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert (metrics["status"], metrics["engine"]) == ("committed", "delta-spark"), metrics
    assert rows(str(table), {}) == before
