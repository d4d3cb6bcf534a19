"""End to end: OPTIMIZE of a Unity Catalog table by name submitted to real spark-submit with the S3 credentials the
catalog vended (the contract server of ``unity_server.py``, data on moto's S3); rows read back; the vended secret
key and session token, and the catalog's token, in no process's arguments, the task's log, its XCom value or
rendered fields, nor Spark's event log, while the spark-submit JVM's environment holds the vended ones. The server
vends credentials of a few seconds, different on each request: the run outlives the first and its driver and
Spark tasks ask the catalog again (the catalog's token reaches them through spark-submit's environment only)."""

from __future__ import annotations

import json
import logging
import os

import time

import pytest
from delta_maint_testing import ProcessSampler
from deltalake import DeltaTable

from airflow_delta_maint.operators.maintenance import OptimizeOperator
from tests.airflow.catalogs.test_glue_catalog import rows, write_appends
from tests.airflow.catalogs.test_unity_catalog import store_options, table_info

pytestmark = pytest.mark.e2e

TABLE = "s3://lake/uc-spark/orders"
#: the vended credentials' life: a Spark run takes many times longer
LIFETIME_S = 3


def test_vended_credentials_reach_spark_through_the_environment_only(unity_catalog, tmp_path, monkeypatch, caplog,
                                                                      capfd):
    uc = unity_catalog
    write_appends(TABLE, uc.s3.s3_options, 6)
    uc.update(tables={"main.spark.orders": table_info("main.spark.orders", TABLE)})
    before = rows(TABLE, uc.s3.s3_options)
    version = DeltaTable(TABLE, storage_options=uc.s3.s3_options).version()

    events = tmp_path / "spark-events"
    events.mkdir()
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.compress false\nspark.eventLog.dir {events.as_uri()}\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)  # the vended credentials are the only ones anywhere
    caplog.set_level(logging.DEBUG)

    op = OptimizeOperator(task_id="optimize", table_name="main.spark.orders", catalog_conn_id=uc.conn_id,
                          execution="spark", storage_options=store_options(uc))
    uc.update(lifetime_s=LIFETIME_S, rotate=True)
    start = time.time()
    try:
        with ProcessSampler([os.getpid()]) as sampler:
            metrics = op.execute({})
    finally:
        uc.update(lifetime_s=3600, rotate=False)
    end = time.time()

    assert metrics["status"] == "committed" and metrics["table_name"] == "main.spark.orders", metrics
    assert metrics["numRemovedFiles"] == 12 and metrics["numAddedFiles"] == 2
    assert metrics["version_read"] == version and metrics["version_committed"] == version + 1
    assert rows(TABLE, uc.s3.s3_options) == before
    asked = [r["at"] for r in uc.timed_requests() if start <= r["at"] <= end]
    assert set(map(json.dumps, uc.requests()[-len(asked):])) == {json.dumps({"table_id": "id-orders",
                                                                             "operation": "READ_WRITE"})}
    # the run outlived the credentials vended at its start, and asked again once they were about to expire
    assert len(asked) >= 3 and end - asked[0] > 2 * LIFETIME_S and max(asked) > asked[0] + LIFETIME_S / 2, asked

    # the spark-submit JVM reached S3 with the vended credentials, through its environment
    # the operator's spark-submit (not the JVM of a SparkSession this test process may hold: "pyspark-shell")
    submits = [environ for cmd, environ in sampler.latest.values()
               if any("SparkSubmit" in p for p in cmd) and not any("pyspark-shell" in p for p in cmd)]
    # the credentials of one of the run's answers (the name's resolution asked first), all three from the same one
    first = len(uc.requests()) - len(asked) + 1
    vended = [tuple(f"{uc.vended[k]}-{n}" for k in ("access_key_id", "secret_access_key", "session_token"))
              for n in range(first, first + len(asked))]
    assert submits and all((e.get("AWS_ACCESS_KEY_ID"), e.get("AWS_SECRET_ACCESS_KEY"), e.get("AWS_SESSION_TOKEN"))
                           in vended for e in submits), [e.get("AWS_ACCESS_KEY_ID") for e in submits]
    # what asks the catalog again: its URL, token, the table and the operation, in the environment
    assert all((e.get("DELTA_MAINT_UNITY_TOKEN"), e.get("DELTA_MAINT_UNITY_TABLE"), e.get("DELTA_MAINT_UNITY_OPERATION"))
               == (uc.token, "main.spark.orders", "READ_WRITE") for e in submits)

    hidden = {"secret key": uc.vended["secret_access_key"], "session token": uc.vended["session_token"],
              "catalog token": uc.token}
    out, err = capfd.readouterr()
    event_log = "".join(f.read_text(errors="replace") for f in events.rglob("*") if f.is_file())
    assert "SparkListenerEnvironmentUpdate" in event_log  # the Spark UI's environment page was written
    texts = {
        "process arguments": "\n".join(" ".join(cmd) for cmd in sampler.every_args),
        "task log": caplog.text + out + err,
        "XCom": json.dumps(metrics),
        "rendered fields": json.dumps({f: getattr(op, f) for f in op.template_fields}, default=str),
        "event log": event_log,
    }
    assert any("SparkSubmit" in args for args in texts["process arguments"].splitlines())
    assert "Spark-Submit cmd:" in texts["task log"] and "main.spark.orders resolved to" in texts["task log"]
    assert [(where, what) for where, text in texts.items() for what, secret in hidden.items() if secret in text] == []
