"""Object-store credentials from Airflow connections (``storage_conn_id``), and the secret kept out of sight.

Servers run on 127.0.0.1 (moto S3 with IAM checks, so a wrong secret fails; Azurite), started by each test
module and stopped by process id. The connections are ``AIRFLOW_CONN_<ID>`` variables holding JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import threading
import time

import boto3
import psutil
import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import BIN, airflow_env, task_results
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.storage_credentials import (
    credentials_from_connection,
    resolve_storage_credentials,
    secret_option_keys,
)
from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from airflow_delta_maint.triggers.commit_interval import CommitIntervalTrigger
from tests.storage.servers import AZURITE_ACCOUNT, AZURITE_KEY, start_azurite, start_moto

pytestmark = pytest.mark.timeout(600)

STORE_PREFIXES = ("AWS_", "AZURE_", "AZURITE_", "GOOGLE_")
ROWS = 20


@pytest.fixture
def no_ambient_credentials(monkeypatch):
    """No store variable in this process: only the connection can let a request through."""
    for key in list(os.environ):
        if key.startswith(STORE_PREFIXES):
            monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def iam_s3(tmp_path_factory):
    """moto with IAM checks: bucket ``lake`` and a user allowed to read, write and delete in it.

    Yields (server, access key id, secret). The first 4 requests set it up unauthenticated.
    """
    server = start_moto(tmp_path_factory.mktemp("moto"), auth_actions=4)
    try:
        kw = dict(endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="setup",
                  aws_secret_access_key="setup")
        boto3.client("s3", **kw).create_bucket(Bucket="lake")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="maint")
        key = iam.create_access_key(UserName="maint")["AccessKey"]
        iam.put_user_policy(UserName="maint", PolicyName="lake", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", "Action": [
                "s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:DeleteObject"]}]}))
        yield server, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.stop()


def s3_connection(server, key_id: str, secret: str) -> str:
    return json.dumps({"conn_type": "aws", "login": key_id, "password": secret,
                       "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}})


def s3_options(server, key_id: str, secret: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}


def write_appends(uri: str, options: dict[str, str], commits: int, partitions: int = 2) -> None:
    for i in range(commits):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()),
                                       "part": pa.array([f"p{j % partitions}" for j in range(ROWS)]),
                                       "value": pa.array([float(x) for x in ids])}),
                        mode="append", partition_by=["part"], storage_options=options)


def table_rows(uri: str, options: dict[str, str]) -> list[tuple]:
    data = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    return sorted(zip(data.column("id").to_pylist(), data.column("part").to_pylist(),
                      data.column("value").to_pylist()))


def masked(value: str) -> bool:
    from airflow.sdk.log import _secrets_masker

    return value not in str(_secrets_masker().redact(f"x {value} y"))


# -- connections to store variables ----------------------------------------------------------------
@pytest.mark.parametrize("use_provider", [True, False], ids=["amazon-provider", "fields"])
def test_aws_connection_to_variables(monkeypatch, use_provider):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "aws-secret-7f3e9c",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9999",
                  "aws_session_token": "aws-token-51d2"}}))
    creds = resolve_storage_credentials("lake_aws", "s3a://lake/t", use_provider=use_provider)
    assert creds.family == "s3"
    assert creds.env == {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "aws-secret-7f3e9c",
                         "AWS_SESSION_TOKEN": "aws-token-51d2", "AWS_REGION": "eu-west-1",
                         "AWS_ENDPOINT_URL": "http://127.0.0.1:9999", "AWS_ALLOW_HTTP": "true"}
    assert set(creds.secrets) == {"aws-secret-7f3e9c", "aws-token-51d2"}
    assert masked("aws-secret-7f3e9c") and masked("aws-token-51d2")
    assert "aws-secret-7f3e9c" not in repr(creds) and "aws-secret-7f3e9c" not in str(creds)


def test_azure_and_google_connections_to_variables(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB", json.dumps({
        "conn_type": "wasb", "login": "acct", "password": "azure-key-0b7c", "host": "https://acct.blob.core.windows.net"}))
    creds = resolve_storage_credentials("lake_wasb", "abfss://c@acct.dfs.core.windows.net/t")
    assert creds.env == {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "azure-key-0b7c",
                         "AZURE_ENDPOINT": "https://acct.blob.core.windows.net"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_SP", json.dumps({
        "conn_type": "adls", "host": "acct", "login": "client-id", "password": "sp-secret-3a",
        "extra": {"tenant_id": "tenant"}}))
    creds = resolve_storage_credentials("lake_sp", "az://c/t")
    assert creds.env == {"AZURE_CLIENT_ID": "client-id", "AZURE_CLIENT_SECRET": "sp-secret-3a",
                         "AZURE_TENANT_ID": "tenant", "AZURE_STORAGE_ACCOUNT_NAME": "acct"}
    assert masked("sp-secret-3a")
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_SAS", json.dumps({
        "conn_type": "wasb", "login": "acct", "extra": {"sas_token": "?sv=2024&sig=sas-sig-9d"}}))
    assert resolve_storage_credentials("lake_sas", "az://c/t").env == {
        "AZURE_STORAGE_SAS_TOKEN": "sv=2024&sig=sas-sig-9d", "AZURE_STORAGE_ACCOUNT_NAME": "acct"}
    key = {"type": "service_account", "client_email": "m@p.iam.gserviceaccount.com",
           "private_key": "-----BEGIN PRIVATE KEY-----\ngcs-key-77\n-----END PRIVATE KEY-----\n"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_GCS", json.dumps({
        "conn_type": "google_cloud_platform", "extra": {"keyfile_dict": json.dumps(key)}}))
    creds = resolve_storage_credentials("lake_gcs", "gs://b/t")
    assert json.loads(creds.env["GOOGLE_SERVICE_ACCOUNT_KEY"]) == key
    assert masked(key["private_key"])
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_GCS_FILE", json.dumps({
        "conn_type": "google_cloud_platform", "extra": {"key_path": "/secrets/sa.json"}}))
    assert resolve_storage_credentials("lake_gcs_file", "gs://b/t").env == {"GOOGLE_SERVICE_ACCOUNT": "/secrets/sa.json"}


def test_connection_must_fit_the_table(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({"conn_type": "aws", "login": "a", "password": "b"}))
    with pytest.raises(AirflowException, match="does not fit the table az://c/t"):
        resolve_storage_credentials("lake_aws", "az://c/t")
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_HTTP", json.dumps({"conn_type": "http", "host": "h"}))
    with pytest.raises(AirflowException, match="use a connection of type aws"):
        resolve_storage_credentials("lake_http", "s3://b/t")


# -- spark-submit: the secret in the child's environment only ------------------------------------
def test_secret_reaches_spark_submit_through_its_environment_only(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "aws-secret-7f3e9c", "extra": {"region_name": "eu-west-1"}}))
    monkeypatch.setenv("AWS_SESSION_TOKEN", "ambient-token")  # must not mix with the connection's keys
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    creds = resolve_storage_credentials("lake_aws", "s3://lake/t")
    for conn_id in ("spark_default", "spark_yarn"):  # yarn in client mode: user env_vars become --conf, secrets not
        hook = DeltaMaintHook(conn_id=conn_id, storage_credentials=creds, env_vars={"X_USER": "1"})
        cmd = hook.build_command("optimize", "s3://lake/t", [], "/tmp/m.json", {"AWS_REGION": "eu-west-1"})
        assert not any("aws-secret-7f3e9c" in part for part in cmd), cmd
        assert not any("aws-secret-7f3e9c" in str(v) for v in hook._conf.values())
        env = hook.submit_env()
        assert env["AWS_SECRET_ACCESS_KEY"] == "aws-secret-7f3e9c" and env["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
        assert "AWS_SESSION_TOKEN" not in env


def test_cluster_deploy_mode_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({"conn_type": "aws", "login": "a", "password": "b"}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_CLUSTER", json.dumps({"conn_type": "spark", "host": "yarn",
                                                             "extra": {"deploy-mode": "cluster"}}))
    creds = resolve_storage_credentials("lake_aws", "s3://lake/t")
    with pytest.raises(AirflowException, match="cannot be used in deploy mode 'cluster'"):
        DeltaMaintHook(conn_id="spark_yarn_cluster", storage_credentials=creds, metrics_uri="s3://lake/m")


# -- storage_options refuses secrets ---------------------------------------------------------------
@pytest.mark.parametrize("key", ["AWS_SECRET_ACCESS_KEY", "aws_session_token", "account_key", "sas_token",
                                 "AZURE_CLIENT_SECRET", "service_account_key", "password", "bearer_token",
                                 "AZURE_STORAGE_ACCESS_KEY", "google_credentials", "private_key"])
def test_storage_options_refuse_secrets(key):
    message = "storage_options must not hold secrets"
    with pytest.raises(AirflowException, match=message) as info:
        OptimizeOperator(task_id="o", table_uri="s3://b/t", storage_options={"AWS_REGION": "x", key: "v"})
    assert "storage_conn_id" in str(info.value) and key in str(info.value)
    with pytest.raises(AirflowException, match=message):
        CommitIntervalSensor(task_id="s", table_uri="s3://b/t", min_commits=1, storage_options={key: "v"})
    with pytest.raises(AirflowException, match=message):
        CommitIntervalTrigger("s3://b/t", 1, storage_options={key: "v"})


def test_non_secret_options_pass():
    options = {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://h", "AWS_ACCESS_KEY_ID": "AKID",
               "allow_http": "true", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "max_retries": "2",
               "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "conditional_put": "etag"}
    assert secret_option_keys(options) == []
    VacuumOperator(task_id="v", table_uri="s3://b/t", storage_options=options)


def test_secret_rendered_into_storage_options_is_refused_at_run_time():
    op = VacuumOperator(task_id="v", table_uri="s3://b/t", storage_options={"AWS_REGION": "x"})
    op.storage_options = {"AWS_REGION": "x", "aws_secret_access_key": "rendered"}  # as a template could make it
    with pytest.raises(AirflowException, match="storage_options must not hold secrets"):
        op.execute(context={})


# -- worker-side checks, the sensor and the trigger on S3 ------------------------------------------
def test_sensor_and_trigger_count_commits_with_the_connection(iam_s3, monkeypatch, no_ambient_credentials):
    server, key_id, secret = iam_s3
    uri = "s3://lake/sensor"
    write_appends(uri, s3_options(server, key_id, secret), commits=4)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_WRONG", s3_connection(server, key_id, "not-the-secret"))

    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_s3")
    done = sensor.poke(context={})
    assert done.is_done and done.xcom_value == {"from_version": 1, "to_version": 3, "commits": 3}
    wrong = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_s3_wrong")
    with pytest.raises(AirflowException, match="credentials were rejected"):
        wrong.poke(context={})  # IAM checks on: the secret is what lets the requests through

    trigger = CommitIntervalTrigger(uri, min_commits=2, since="version", since_version=1, storage_conn_id="lake_s3",
                                    poke_interval=0.1)
    path, kwargs = trigger.serialize()
    assert kwargs["storage_conn_id"] == "lake_s3" and secret not in json.dumps(kwargs)

    async def first_event(t):
        async for event in t.run():
            return event.payload

    assert asyncio.run(first_event(trigger)) == {"status": "success", "from_version": 2, "to_version": 3,
                                                 "commits": 2}
    wrong_trigger = CommitIntervalTrigger(uri, 2, storage_conn_id="lake_s3_wrong", poke_interval=0.1)
    event = asyncio.run(first_event(wrong_trigger))
    assert event["status"] == "error" and "credentials were rejected" in event["message"]
    missing = CommitIntervalTrigger(uri, 2, storage_conn_id="no_such_conn", poke_interval=0.1)
    event = asyncio.run(first_event(missing))
    assert event["status"] == "error" and "no_such_conn" in event["message"]


def test_nothing_to_do_check_uses_the_connection(iam_s3, monkeypatch, no_ambient_credentials):
    """The worker-side check (no Spark) opens the table with the connection's credentials."""
    server, key_id, secret = iam_s3
    uri = "s3://lake/lite"
    write_appends(uri, s3_options(server, key_id, secret), commits=2)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    op = VacuumOperator(task_id="vacuum", table_uri=uri, mode="lite", storage_conn_id="lake_s3",
                        storage_options={"AWS_REGION": "us-east-1"})
    metrics = op.execute(context={})  # nothing expired: skipped without Spark
    assert metrics["status"] == "skipped" and metrics["version_read"] == 1
    assert secret not in json.dumps(metrics)


# -- Azure (Azurite) -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    from azure.storage.blob import BlobServiceClient

    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={server.endpoint}/{AZURITE_ACCOUNT};").create_container("lake")
        yield server
    finally:
        server.stop()


def test_sensor_on_azure_with_a_wasb_connection(azurite, monkeypatch, no_ambient_credentials):
    endpoint = f"{azurite.endpoint}/{AZURITE_ACCOUNT}"
    options = {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY, "allow_http": "true", "endpoint": endpoint}
    uri = "az://lake/events"
    write_appends(uri, options, commits=3)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB", json.dumps({
        "conn_type": "wasb", "login": AZURITE_ACCOUNT, "password": AZURITE_KEY, "host": endpoint}))
    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb")
    assert sensor.poke(context={}).xcom_value == {"from_version": 0, "to_version": 2, "commits": 3}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB_STRING", json.dumps({
        "conn_type": "wasb", "extra": {"connection_string": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};")}}))
    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb_string")
    assert sensor.poke(context={}).xcom_value["commits"] == 3
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB_WRONG", json.dumps({
        "conn_type": "wasb", "login": AZURITE_ACCOUNT, "password": "d3Jvbmcta2V5", "host": endpoint}))
    wrong = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb_wrong")
    with pytest.raises(AirflowException, match="cannot count the commits"):
        wrong.poke(context={})


# -- end to end: airflow dags test, spark-submit on an S3 table, and a scan for the secret ----------
def _sample_processes(root: int, seen: dict[int, list[str]], environs: list[dict], stop: threading.Event) -> None:
    """Note the arguments of every descendant of ``root`` (and the environment of spark-submit's JVM)."""
    while not stop.is_set():
        try:
            children = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for p in children:
            try:
                cmdline = p.cmdline()
                seen.setdefault(p.pid, cmdline)
                if any("SparkSubmit" in part for part in cmdline) and not environs:
                    environs.append(p.environ())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        time.sleep(0.05)


@pytest.mark.e2e
def test_dag_on_s3_with_a_connection_never_shows_the_secret(iam_s3, airflow_home, tmp_path, no_ambient_credentials):
    server, key_id, secret = iam_s3
    uri = "s3://lake/events"
    options = s3_options(server, key_id, secret)
    write_appends(uri, options, commits=6)  # 12 small files in 2 partitions
    before = table_rows(uri, options)
    events = tmp_path / "spark-events"
    events.mkdir()
    env = airflow_env(
        airflow_home,
        AIRFLOW_CONN_LAKE_S3=s3_connection(server, key_id, secret),
        DELTA_MAINT_TEST_TABLE=uri,
        DELTA_MAINT_TEST_SPARK_CONF=json.dumps({"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                                                "spark.eventLog.dir": events.as_uri()}),
    )
    for key in [k for k in env if k.startswith(STORE_PREFIXES)]:
        del env[key]  # only the connection holds credentials
    env["AIRFLOW_CONN_LAKE_S3"] = s3_connection(server, key_id, secret)
    proc = subprocess.Popen([str(BIN / "airflow"), "dags", "test", "delta_maint_storage_conn"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, list[str]] = {}
    environs: list[dict] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_processes, args=(proc.pid, seen, environs, stop), daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=500)
    finally:
        stop.set()
        sampler.join(10)
        if proc.poll() is None:
            proc.kill()
    state, tasks = task_results(airflow_home, "delta_maint_storage_conn")
    assert state == "success", out[-6000:] + err[-3000:]

    # the table: compacted, rows unchanged, read back by delta-rs
    assert tasks[("wait", -1)]["value"]["commits"] >= 3
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["version_committed"] == 6
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    inspect = tasks[("inspect", -1)]["value"]
    assert inspect["operation"] == "inspect" and inspect["status"] != "failed" and inspect["version_read"] == 6
    assert table_rows(uri, options) == before
    assert DeltaTable(uri, storage_options=options).history(1)[0]["operation"] == "OPTIMIZE"

    # spark-submit ran with the secret in its environment, and in no process's arguments
    submits = [cmd for cmd in seen.values() if any("SparkSubmit" in part for part in cmd)]
    assert len(submits) >= 2, "spark-submit was not seen running"
    assert environs and environs[0].get("AWS_SECRET_ACCESS_KEY") == secret
    leaks = [cmd for cmd in seen.values() if any(secret in part for part in cmd)]
    assert leaks == []

    # the task log (stdout of dags test and the log files), the Spark event log
    assert secret not in out and secret not in err
    logs = [f for f in (airflow_home / "logs").rglob("*") if f.is_file()] if (airflow_home / "logs").exists() else []
    for f in logs:
        assert secret not in f.read_text(errors="replace"), f
    event_files = [f for f in events.rglob("*") if f.is_file()]
    assert len(event_files) >= 2
    event_text = "".join(f.read_text(errors="replace") for f in event_files)
    assert "SparkListenerEnvironmentUpdate" in event_text  # what the Spark UI's environment page shows
    assert secret not in event_text and key_id in json.dumps(environs[0])

    # the metadata database: XCom, rendered task fields, everything else
    with sqlite3.connect(airflow_home / "airflow.db") as conn:
        rendered = conn.execute("SELECT task_id, rendered_fields FROM rendered_task_instance_fields "
                                "WHERE dag_id = 'delta_maint_storage_conn'").fetchall()
        xcoms = conn.execute("SELECT task_id, value FROM xcom WHERE dag_id = 'delta_maint_storage_conn'").fetchall()
        dump = "\n".join(conn.iterdump())
    assert {t for t, _ in rendered} >= {"optimize", "inspect"} and {t for t, _ in xcoms} >= {"optimize", "inspect"}
    assert secret not in dump
