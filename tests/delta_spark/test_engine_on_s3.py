"""The delta-spark engine on an object store: OptimizeOperator(engine="delta-spark") on a table in a moto
S3 server, through a real spark-submit whose packages add Hadoop's S3A connector (hadoop-aws, built for
the session's Hadoop) beside delta-spark. The credentials come from an Airflow connection and reach S3A
through the environment only: not the command line, the Spark conf, the event log or XCom.

Without the connector, the engine refuses before any work with one line naming the package.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import boto3
import pytest

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-delta-maint-tests-"))

from airflow_delta_maint.app.engines import DELTA_SPARK  # noqa: E402
from airflow_delta_maint.app.engines.run import run_job_with_engine  # noqa: E402
from airflow_delta_maint.delta.log.snapshot import Snapshot  # noqa: E402
from airflow_delta_maint.delta.storage.store import Storage  # noqa: E402
from tests.delta_spark_session import CACHE  # noqa: E402
from tests.storage.servers import start_moto  # noqa: E402

pytestmark = [pytest.mark.delta_spark]

KEY_ID, SECRET = "AKIDDELTASPARKS3", "delta-spark-s3-secret-5be1"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


def _options(server) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}


def _upload_table(spark, server, tmp_path: Path, bucket: str) -> str:
    """A small delta-spark table with deletion vectors, written locally and uploaded to ``bucket``."""
    local = tmp_path / "local"
    spark.sql("SELECT id, CAST(id % 2 AS STRING) AS p, id * 3 AS v FROM range(0, 300)").repartition(3) \
        .write.format("delta").partitionBy("p").option("delta.enableDeletionVectors", "true").save(str(local))
    spark.sql("SELECT id, CAST(id % 2 AS STRING) AS p, id * 3 AS v FROM range(300, 400)").repartition(2) \
        .write.format("delta").mode("append").save(str(local))
    spark.sql(f"DELETE FROM delta.`{local}` WHERE id % 5 = 0")
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    client.create_bucket(Bucket=bucket)
    for f in sorted(local.rglob("*")):
        if f.is_file() and not f.name.endswith(".crc"):
            client.upload_file(str(f), bucket, f"events/{f.relative_to(local).as_posix()}")
    return f"s3://{bucket}/events"


def _rows(spark, server, bucket: str, dest: Path) -> list[tuple]:
    """The table's rows as delta-spark reads them (deletion vectors applied), from a download of the bucket."""
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    shutil.rmtree(dest, ignore_errors=True)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="events/"):
        for obj in page.get("Contents", []):
            target = dest / obj["Key"][len("events/"):]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(target))
    return sorted(tuple(r) for r in spark.read.format("delta").load(str(dest)).select("id", "p", "v").collect())


def test_a_session_without_the_s3_connector_is_refused_before_any_work(spark, moto, tmp_path):
    uri = _upload_table(spark, moto, tmp_path, "no-connector")
    storage = Storage(uri, _options(moto))
    before = sorted((f.key, f.size) for f in storage.list_recursive(""))
    code, m = run_job_with_engine("optimize", uri, DELTA_SPARK, spark=spark, storage_options=_options(moto))
    assert code == 2, m
    hadoop = spark._jvm.org.apache.hadoop.util.VersionInfo.getVersion()
    assert m["error"] == (f"the delta-spark engine reaches s3a:// tables through Hadoop's file system for S3, which is "
                          f"not on the session's classpath: add org.apache.hadoop:hadoop-aws:{hadoop} (built for the "
                          f"session's Hadoop {hadoop}) to the Spark connection's packages; or use engine 'native', "
                          "which needs no jars")
    assert sorted((f.key, f.size) for f in storage.list_recursive("")) == before


@pytest.mark.e2e
def test_optimize_operator_runs_delta_spark_on_s3(spark, moto, tmp_path, monkeypatch):
    from airflow_delta_maint.operators.maintenance import OptimizeOperator

    uri = _upload_table(spark, moto, tmp_path, "lake")
    rows, before = _rows(spark, moto, "lake", tmp_path / "before"), Snapshot.load(uri, storage_options=_options(moto))
    hadoop = spark._jvm.org.apache.hadoop.util.VersionInfo.getVersion()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({
        "conn_type": "aws", "login": KEY_ID, "password": SECRET,
        "extra": {"region_name": "us-east-1", "endpoint_url": moto.endpoint}}))
    monkeypatch.setenv("DELTA_MAINT_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    events = tmp_path / "events"
    events.mkdir()
    op = OptimizeOperator(task_id="optimize", table_uri=uri, engine="delta-spark", storage_conn_id="lake_s3",
                          storage_options={"AWS_ALLOW_HTTP": "true"},
                          conf={"spark.jars.packages": f"org.apache.hadoop:hadoop-aws:{hadoop}",
                                "spark.jars.ivy": str(CACHE / "ivy"), "spark.eventLog.enabled": "true",
                                "spark.eventLog.compress": "false", "spark.eventLog.dir": str(events)})
    metrics = op.execute(context={})

    assert metrics["engine"] == "delta-spark" and metrics["status"] == "committed", metrics
    assert metrics["statement"] == "OPTIMIZE delta.`s3a://lake/events`"
    after = Snapshot.load(uri, storage_options=_options(moto))
    assert after.version == metrics["version_committed"] == before.version + 1
    assert after.num_files == before.num_files - metrics["numRemovedFiles"] + metrics["numAddedFiles"]
    assert metrics["numRemovedFiles"] == before.num_files and metrics["numDeletionVectorsRemoved"] > 0
    assert _rows(spark, moto, "lake", tmp_path / "after") == rows
    # the secret is nowhere to be seen: the command line, the conf, XCom, rendered fields, the event log
    hook = op._hook
    assert hook is not None and f"org.apache.hadoop:hadoop-aws:{hadoop}" in hook._packages
    assert not any(SECRET in part for part in hook.build_command("optimize", uri, [], "/tmp/m.json", {}))
    assert SECRET not in json.dumps(hook._conf) and SECRET not in json.dumps(metrics, default=str)
    assert all(SECRET not in str(getattr(op, f)) for f in op.template_fields)
    logs = [p for p in events.rglob("*") if p.is_file()]
    assert logs and all(SECRET not in p.read_text(errors="replace") for p in logs)
    assert any("hadoop-aws" in p.read_text(errors="replace") for p in logs)  # the readable log of this application
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
