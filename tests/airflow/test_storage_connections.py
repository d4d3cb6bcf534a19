"""Object-store credentials from Airflow connections (``storage_conn_id``), and the secret kept out of sight.

Servers run on 127.0.0.1 (moto S3 with IAM checks, so a wrong secret fails; Azurite), started by each test
module and stopped by process id. The connections are ``AIRFLOW_CONN_<ID>`` variables holding JSON.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import sqlite3
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowException
from delta_maint_testing import BIN, ProcessSampler, airflow_env, task_results
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.storage.failures import StorageError
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.hooks.delta_maint import DeltaMaintHook
from airflow_delta_maint.hooks.storage_credentials import (
    resolve_storage_credentials,
    secret_option_keys,
)
from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from airflow_delta_maint.triggers.commit_interval import CommitIntervalTrigger
from tests.storage.servers import start_azurite, start_moto

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
    """moto with IAM checks: bucket ``lake``, a user allowed to read, write and delete in it, and a role.

    Yields (server, access key id, secret, role) where role is (role ARN, key id, secret) of a user that
    may only assume the role, which alone may read, write and delete. The first 9 requests set it up
    unauthenticated.
    """
    server = start_moto(tmp_path_factory.mktemp("moto"), auth_actions=9)
    try:
        kw = dict(endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="setup",
                  aws_secret_access_key="setup")
        boto3.client("s3", **kw).create_bucket(Bucket="lake")
        iam = boto3.client("iam", **kw)
        s3_policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", "Action": [
            "s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:DeleteObject"]}]})
        iam.create_user(UserName="maint")
        key = iam.create_access_key(UserName="maint")["AccessKey"]
        iam.put_user_policy(UserName="maint", PolicyName="lake", PolicyDocument=s3_policy)
        iam.create_user(UserName="assumer")
        assumer = iam.create_access_key(UserName="assumer")["AccessKey"]
        iam.put_user_policy(UserName="assumer", PolicyName="assume", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", "Action": "sts:AssumeRole"}]}))
        role = iam.create_role(RoleName="lake-maint", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"AWS": "*"}}]}))["Role"]
        iam.put_role_policy(RoleName="lake-maint", PolicyName="lake", PolicyDocument=s3_policy)
        yield (server, key["AccessKeyId"], key["SecretAccessKey"],
               (role["Arn"], assumer["AccessKeyId"], assumer["SecretAccessKey"]))
    finally:
        server.stop()


def s3_connection(server, key_id: str, secret: str) -> str:
    return json.dumps({"conn_type": "aws", "login": key_id, "password": secret,
                       "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}})


def s3_role_connection(server, role: tuple[str, str, str]) -> str:
    """An ``aws`` connection whose keys may only assume ``role``: the Amazon provider's hook assumes it."""
    role_arn, key_id, secret = role
    return json.dumps({"conn_type": "aws", "login": key_id, "password": secret,
                       "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint, "role_arn": role_arn,
                                 "service_config": {"sts": {"endpoint_url": server.endpoint}}}})


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


def test_delta_spark_engine_adds_its_jars_and_no_secret(monkeypatch, tmp_path):
    """engine="delta-spark": --packages (the provider's setting), the Delta extension and catalog, Ivy settings
    naming Maven Central only; the storage secret still goes through the environment only. The native
    engine gets none of it."""
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "aws-secret-7f3e9c", "extra": {"region_name": "eu-west-1"}}))
    monkeypatch.setenv("AIRFLOW__DELTA_MAINT__DELTA_SPARK_PACKAGES", "io.delta:delta-spark_2.13:4.4.0")
    creds = resolve_storage_credentials("lake_aws", "s3://lake/t")
    hook = DeltaMaintHook(storage_credentials=creds, engine="delta-spark", cache_dir=tmp_path)
    cmd = hook.build_command("optimize", "s3://lake/t", ["--engine", "delta-spark"], "/tmp/m.json",
                             {"AWS_REGION": "eu-west-1"})
    assert cmd[cmd.index("--packages") + 1] == "io.delta:delta-spark_2.13:4.4.0"
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in cmd
    assert "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog" in cmd
    settings = Path(hook._conf["spark.jars.ivySettings"])
    assert settings.parent == tmp_path and "repo1.maven.org" in settings.read_text()
    assert ".m2" not in settings.read_text() and "<filesystem" not in settings.read_text()
    assert not any("aws-secret-7f3e9c" in part for part in cmd), cmd
    assert not any("aws-secret-7f3e9c" in str(v) for v in hook._conf.values())
    assert "aws-secret-7f3e9c" not in settings.read_text()
    assert hook.submit_env()["AWS_SECRET_ACCESS_KEY"] == "aws-secret-7f3e9c"
    # the user's own packages and Ivy settings win
    own = DeltaMaintHook(engine="delta-spark", cache_dir=tmp_path, packages="io.delta:delta-spark_2.13:4.4.0,x:y:1",
                         conf={"spark.jars.ivySettings": "/etc/ivy.xml"})
    cmd = own.build_command("vacuum", "/t", [], "/tmp/m.json", {})
    assert cmd[cmd.index("--packages") + 1] == "io.delta:delta-spark_2.13:4.4.0,x:y:1"
    assert "spark.jars.ivySettings=/etc/ivy.xml" in cmd
    native = DeltaMaintHook(storage_credentials=creds, cache_dir=tmp_path)
    cmd = native.build_command("optimize", "s3://lake/t", [], "/tmp/m.json", {})
    assert "--packages" not in cmd and not any("io.delta" in part or "ivySettings" in part for part in cmd)


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
    server, key_id, secret, _ = iam_s3
    uri = "s3://lake/sensor"
    write_appends(uri, s3_options(server, key_id, secret), commits=4)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_WRONG", s3_connection(server, key_id, "not-the-secret"))

    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_s3")
    done = sensor.poke(context={})
    assert done.is_done and done.xcom_value == {"from_version": 1, "to_version": 3, "commits": 3}
    again = sensor.poke(context={})  # from what the first poke saw: the same answer, with the connection's keys
    assert again.xcom_value == done.xcom_value
    assert secret not in repr(vars(sensor._commit_watch))   # a watch remembers versions and the table, no key
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
    assert secret not in repr(vars(trigger.commit_watch)) and secret not in json.dumps(trigger.serialize()[1])
    wrong_trigger = CommitIntervalTrigger(uri, 2, storage_conn_id="lake_s3_wrong", poke_interval=0.1)
    event = asyncio.run(first_event(wrong_trigger))
    assert event["status"] == "error" and "credentials were rejected" in event["message"]
    missing = CommitIntervalTrigger(uri, 2, storage_conn_id="no_such_conn", poke_interval=0.1)
    event = asyncio.run(first_event(missing))
    assert event["status"] == "error" and "no_such_conn" in event["message"]


def test_nothing_to_do_check_uses_the_connection(iam_s3, monkeypatch, no_ambient_credentials):
    """The worker-side check (no Spark) opens the table with the connection's credentials."""
    server, key_id, secret, _ = iam_s3
    uri = "s3://lake/lite"
    write_appends(uri, s3_options(server, key_id, secret), commits=2)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    op = VacuumOperator(task_id="vacuum", table_uri=uri, mode="lite", storage_conn_id="lake_s3",
                        storage_options={"AWS_REGION": "us-east-1"})
    metrics = op.execute(context={})  # nothing expired: skipped without Spark
    assert metrics["status"] == "skipped" and metrics["version_read"] == 1
    assert secret not in json.dumps(metrics)


def test_role_assumption_gives_the_job_temporary_credentials(iam_s3, monkeypatch, no_ambient_credentials):
    """role_arn in an aws connection: the Amazon provider's hook assumes the role through STS, and the
    temporary key id, secret and session token are what reaches the store (the connection's own keys may
    only assume the role)."""
    server, key_id, secret, role = iam_s3
    uri = "s3://lake/assumed"
    write_appends(uri, s3_options(server, key_id, secret), commits=2)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_ROLE", s3_role_connection(server, role))
    creds = resolve_storage_credentials("lake_s3_role", uri)
    env = creds.env
    assert env["AWS_ACCESS_KEY_ID"] != role[1] and env["AWS_SECRET_ACCESS_KEY"] != role[2]
    assert env["AWS_SESSION_TOKEN"] and set(creds.secrets) == {env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"]}
    assert masked(env["AWS_SECRET_ACCESS_KEY"]) and masked(env["AWS_SESSION_TOKEN"])
    assert role[2] not in repr(creds) and env["AWS_SESSION_TOKEN"] not in repr(creds)

    # the connection's own keys and the temporary ones without their token are refused; the assumed
    # role's credentials let the requests through (read with our own store here: delta-rs exports the
    # storage options it is given into the process environment, where a token would outlive the call)
    with pytest.raises(StorageError, match="permission denied"):
        Storage(uri, s3_options(server, role[1], role[2])).read("_delta_log/00000000000000000000.json")
    without_token = {k: v for k, v in env.items() if k != "AWS_SESSION_TOKEN"}
    with pytest.raises(StorageError, match="credentials were rejected"):
        Storage(uri, without_token).read("_delta_log/00000000000000000000.json")
    assert [f.key for f in Storage(uri, env).list_from("_delta_log/")] == [
        "_delta_log/00000000000000000000.json", "_delta_log/00000000000000000001.json"]

    # spark-submit gets all three in its environment, none on its command line
    hook = DeltaMaintHook(conn_id="spark_default", storage_credentials=creds)
    cmd = hook.build_command("vacuum", uri, [], "/tmp/m.json", {})
    submit_env = hook.submit_env()
    assert all(submit_env[k] == env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"))
    assert not any(env["AWS_SECRET_ACCESS_KEY"] in part or env["AWS_SESSION_TOKEN"] in part for part in cmd)

    # the worker-side check opens the table with them too
    metrics = VacuumOperator(task_id="vacuum", table_uri=uri, mode="lite", storage_conn_id="lake_s3_role").execute({})
    assert metrics["status"] == "skipped" and metrics["version_read"] == 1


# -- Azure (Azurite) -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """Azurite with a private account (not the well-known development key) and container ``lake``.

    Yields (server, account, key, endpoint)."""
    from azure.storage.blob import BlobServiceClient

    account, key = "lakeacct", base64.b64encode(secrets.token_bytes(48)).decode()
    server = start_azurite(tmp_path_factory.mktemp("azurite"), account=(account, key))
    endpoint = f"{server.endpoint}/{account}"
    try:
        BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
            f"BlobEndpoint={endpoint};").create_container("lake")
        yield server, account, key, endpoint
    finally:
        server.stop()


def azure_options(account: str, key: str, endpoint: str) -> dict[str, str]:
    return {"account_name": account, "account_key": key, "allow_http": "true", "endpoint": endpoint}


def wasb_connection(account: str, key: str, endpoint: str) -> str:
    return json.dumps({"conn_type": "wasb", "login": account, "password": key, "host": endpoint})


def test_sensor_on_azure_with_a_wasb_connection(azurite, monkeypatch, no_ambient_credentials):
    _, account, key, endpoint = azurite
    uri = "az://lake/events"
    write_appends(uri, azure_options(account, key, endpoint), commits=3)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB", wasb_connection(account, key, endpoint))
    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb")
    assert sensor.poke(context={}).xcom_value == {"from_version": 0, "to_version": 2, "commits": 3}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB_STRING", json.dumps({
        "conn_type": "wasb", "extra": {"connection_string": (
            f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};BlobEndpoint={endpoint};")}}))
    sensor = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb_string")
    assert sensor.poke(context={}).xcom_value["commits"] == 3
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_WASB_WRONG", wasb_connection(account, "d3Jvbmcta2V5", endpoint))
    wrong = CommitIntervalSensor(task_id="wait", table_uri=uri, min_commits=3, storage_conn_id="lake_wasb_wrong")
    with pytest.raises(AirflowException, match="cannot count the commits"):
        wrong.poke(context={})


# -- end to end: airflow dags test, spark-submit on a store's table, and a scan for the secrets -----
@dataclass
class ScannedRun:
    """One ``airflow dags test`` run of ``delta_maint_storage_conn`` and what was seen while it ran."""

    out: str
    err: str
    #: pid -> arguments of every descendant process (the last read: a process's arguments change when it executes)
    seen: dict[int, list[str]]
    #: pid -> environment of every spark-submit JVM
    environs: dict[int, dict[str, str]]
    run_id: str
    #: every arguments any descendant had, in the order read
    every_args: list[list[str]]

    def submits(self, job: str) -> list[dict[str, str]]:
        """The environments of the spark-submit runs of ``job`` (an application argument)."""
        return [self.environs[pid] for pid, cmd in self.seen.items() if pid in self.environs and job in cmd]


def _twelve_small_files(uri: str, options: dict[str, str]) -> list[tuple]:
    """The example DAG's table: 6 appends of 12 small files in 2 partitions; its rows."""
    write_appends(uri, options, commits=6)
    return table_rows(uri, options)


def _dags_test_scanned(airflow_home, tmp_path, uri: str, **connections: str) -> tuple[ScannedRun, object]:
    """Run the DAG on ``uri`` with only ``connections`` (AIRFLOW_CONN_* and the DAG's variables) holding
    credentials, sampling the processes; the Spark event log is written under ``tmp_path``."""
    events = tmp_path / "spark-events"
    events.mkdir()
    env = airflow_env(airflow_home, DELTA_MAINT_TEST_TABLE=uri, DELTA_MAINT_TEST_SPARK_CONF=json.dumps({
        "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false", "spark.eventLog.dir": events.as_uri()}))
    for key in [k for k in env if k.startswith(STORE_PREFIXES)]:
        del env[key]  # only the connections hold credentials
    env.update(connections)
    proc = subprocess.Popen([str(BIN / "airflow"), "dags", "test", "delta_maint_storage_conn"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ProcessSampler([proc.pid]) as sampler:
        try:
            out, err = proc.communicate(timeout=500)
        finally:
            if proc.poll() is None:
                proc.kill()
    seen = {pid: cmd for pid, (cmd, _) in sampler.latest.items()}
    environs = {pid: environ for pid, (cmd, environ) in sampler.latest.items()
                if any("SparkSubmit" in part for part in cmd)}
    with sqlite3.connect(airflow_home / "airflow.db") as conn:
        run_id, state = conn.execute("SELECT run_id, state FROM dag_run WHERE dag_id = 'delta_maint_storage_conn' "
                                     "ORDER BY id DESC LIMIT 1").fetchone()
    assert state == "success", out[-6000:] + err[-3000:]
    return ScannedRun(out, err, seen, environs, run_id, sampler.every_args), events


def _assert_hidden(run: ScannedRun, airflow_home, events, hidden: list[str]) -> None:
    """None of ``hidden`` in: any process's arguments, the task logs, the Spark event log (the Spark UI's
    environment page), XCom, the rendered task fields or anything else in the metadata database."""
    assert hidden and all(len(value) >= 16 for value in hidden)
    submits = [cmd for cmd in run.seen.values() if any("SparkSubmit" in part for part in cmd)]
    assert len(submits) >= 2, "spark-submit was not seen running"
    assert [cmd for cmd in run.every_args if any(value in part for value in hidden for part in cmd)] == []
    texts = {"dags test output": run.out + run.err}
    logs = airflow_home / "logs"
    for f in (logs.rglob("*") if logs.exists() else []):
        if f.is_file():
            texts[str(f)] = f.read_text(errors="replace")
    event_files = [f for f in events.rglob("*") if f.is_file()]
    assert len(event_files) >= 2
    texts["event log"] = "".join(f.read_text(errors="replace") for f in event_files)
    assert "SparkListenerEnvironmentUpdate" in texts["event log"]  # what the Spark UI's environment page shows
    with sqlite3.connect(airflow_home / "airflow.db") as conn:
        rendered = conn.execute("SELECT task_id, rendered_fields FROM rendered_task_instance_fields "
                                "WHERE dag_id = 'delta_maint_storage_conn' AND run_id = ?", (run.run_id,)).fetchall()
        xcoms = conn.execute("SELECT task_id, value FROM xcom WHERE dag_id = 'delta_maint_storage_conn' "
                             "AND run_id = ?", (run.run_id,)).fetchall()
        texts["metadata database"] = "\n".join(conn.iterdump())
    assert {t for t, _ in rendered} >= {"optimize", "inspect"} and {t for t, _ in xcoms} >= {"optimize", "inspect"}
    leaks = [(where, i) for where, text in texts.items() for i, value in enumerate(hidden) if value in text]
    assert leaks == []


def _assert_no_delta_classes(events) -> None:
    """Our engine needs no Delta jars: no jar or folder on the classpath of the applications the DAG
    submitted (the Spark UI's environment page, from the event log) holds an ``io.delta`` class, and no
    package or jar was asked for."""
    updates = [json.loads(line) for f in events.rglob("*") if f.is_file()
               for line in f.read_text(errors="replace").splitlines()
               if '"SparkListenerEnvironmentUpdate"' in line]
    assert updates, "no application's environment in the event log"
    for update in updates:
        props = dict(update["Spark Properties"])
        assert not props.get("spark.jars.packages") and not props.get("spark.jars"), props
        entries = [Path(p) for p in update["Classpath Entries"]]
        jars = [p for p in entries if p.suffix == ".jar"]
        assert any(p.name.startswith("spark-core_") for p in jars)  # the listing is the real classpath
        delta = [str(p) for p in jars if p.exists() and any(n.startswith("io/delta/")
                                                           for n in zipfile.ZipFile(p).namelist())]
        delta += [str(p) for p in entries if p.is_dir() and (p / "io" / "delta").exists()]
        assert delta == [], f"Delta classes on our engine's classpath: {delta}"


@pytest.mark.e2e
def test_dag_on_s3_with_connections_never_shows_the_secrets(iam_s3, airflow_home, tmp_path, no_ambient_credentials):
    """The sensor reads with an access key; optimize and inspect assume a role (STS through the Amazon
    provider's hook) whose temporary credentials alone may touch the bucket."""
    server, key_id, secret, role = iam_s3
    uri = "s3://lake/events"
    options = s3_options(server, key_id, secret)
    before = _twelve_small_files(uri, options)
    run, events = _dags_test_scanned(airflow_home, tmp_path, uri, DELTA_MAINT_TEST_CONN="lake_s3",
                                     DELTA_MAINT_TEST_JOB_CONN="lake_s3_role",
                                     AIRFLOW_CONN_LAKE_S3=s3_connection(server, key_id, secret),
                                     AIRFLOW_CONN_LAKE_S3_ROLE=s3_role_connection(server, role))
    _, tasks = task_results(airflow_home, "delta_maint_storage_conn")

    # the table: compacted, rows unchanged, read back by delta-rs
    assert tasks[("wait", -1)]["value"]["commits"] >= 3
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["version_committed"] == 6
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    inspect = tasks[("inspect", -1)]["value"]
    assert inspect["operation"] == "inspect" and inspect["status"] == "skipped" and inspect["version_read"] == 6
    assert table_rows(uri, options) == before
    assert DeltaTable(uri, storage_options=options).history(1)[0]["operation"] == "OPTIMIZE"

    # each job's spark-submit ran with the role's temporary credentials in its environment
    jobs = run.submits("optimize") + run.submits("inspect")
    assert len(jobs) >= 2
    temporary = set()
    for job_env in jobs:
        assert job_env.get("AWS_SESSION_TOKEN") and job_env["AWS_ACCESS_KEY_ID"] not in (key_id, role[1])
        temporary |= {job_env["AWS_SECRET_ACCESS_KEY"], job_env["AWS_SESSION_TOKEN"]}
    _assert_hidden(run, airflow_home, events, [secret, role[2], *sorted(temporary)])
    _assert_no_delta_classes(events)


@pytest.mark.e2e
def test_large_table_paths_in_a_dag_on_s3_never_show_the_secret(iam_s3, airflow_home, tmp_path,
                                                                 no_ambient_credentials):
    """The large-table paths forced down (OPTIMIZE in rounds of one partition, inspect streamed), run
    by the operators with an S3 connection: the secret reaches no process's arguments, task log,
    Spark event log, XCom, rendered field or anything else in the metadata database."""
    server, key_id, secret, _ = iam_s3
    uri = "s3://lake/large-paths"
    options = s3_options(server, key_id, secret)
    before = _twelve_small_files(uri, options)
    run, events = _dags_test_scanned(airflow_home, tmp_path, uri, DELTA_MAINT_TEST_CONN="lake_s3",
                                     AIRFLOW_CONN_LAKE_S3=s3_connection(server, key_id, secret),
                                     DELTA_MAINT_STREAM_MIN_FILES="0", DELTA_MAINT_OPTIMIZE_ROUND_FILES="1")
    _, tasks = task_results(airflow_home, "delta_maint_storage_conn")
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["numRounds"] == 2, optimize
    assert optimize["versions_committed"] == [6, 7]  # one commit per round (partition)
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    assert table_rows(uri, options) == before
    jobs = run.submits("optimize") + run.submits("inspect")
    assert len(jobs) >= 2 and all(job_env.get("AWS_SECRET_ACCESS_KEY") == secret for job_env in jobs)
    _assert_hidden(run, airflow_home, events, [secret])


@pytest.mark.e2e
def test_dag_on_azure_with_a_wasb_connection_never_shows_the_key(azurite, airflow_home, tmp_path,
                                                                  no_ambient_credentials):
    _, account, key, endpoint = azurite
    uri = "az://lake/maintained"
    options = azure_options(account, key, endpoint)
    before = _twelve_small_files(uri, options)
    run, events = _dags_test_scanned(airflow_home, tmp_path, uri, DELTA_MAINT_TEST_CONN="lake_wasb",
                                     AIRFLOW_CONN_LAKE_WASB=wasb_connection(account, key, endpoint))
    _, tasks = task_results(airflow_home, "delta_maint_storage_conn")

    assert tasks[("wait", -1)]["value"]["commits"] >= 3
    optimize = tasks[("optimize", -1)]["value"]
    assert optimize["status"] == "committed" and optimize["version_committed"] == 6
    assert optimize["numRemovedFiles"] == 12 and optimize["numAddedFiles"] == 2
    assert tasks[("inspect", -1)]["value"]["version_read"] == 6
    assert table_rows(uri, options) == before
    assert DeltaTable(uri, storage_options=options).history(1)[0]["operation"] == "OPTIMIZE"

    jobs = run.submits("optimize") + run.submits("inspect")
    assert len(jobs) >= 2 and all(job_env.get("AZURE_STORAGE_ACCOUNT_KEY") == key for job_env in jobs)
    _assert_hidden(run, airflow_home, events, [key])


def test_event_trigger_uses_the_connection(iam_s3, monkeypatch, no_ambient_credentials, capsys):
    """The event trigger stores only the connection's id, fetches it for each check, never logs the secret."""
    from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

    server, key_id, secret, _ = iam_s3
    uri = "s3://lake/event-trigger-table"
    write_appends(uri, s3_options(server, key_id, secret), commits=3)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", s3_connection(server, key_id, secret))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3_WRONG", s3_connection(server, key_id, "not-the-secret"))
    trigger = TableCommitsTrigger(table_uri=uri, min_commits=3, storage_conn_id="lake_s3", poke_interval=0.1)
    _, kwargs = trigger.serialize()
    assert kwargs["storage_conn_id"] == "lake_s3" and secret not in json.dumps(kwargs)

    async def first_event(t, timeout):
        gen = t.run()
        try:
            return (await asyncio.wait_for(gen.__anext__(), timeout)).payload
        finally:
            await gen.aclose()

    assert asyncio.run(first_event(trigger, 30)) == {"table_uri": uri, "from_version": 0, "to_version": 2,
                                                     "commits": 3}
    wrong = TableCommitsTrigger(table_uri=uri, min_commits=3, storage_conn_id="lake_s3_wrong", poke_interval=0.1)
    with pytest.raises(TimeoutError):  # rejected credentials: logged, checked again, no event
        asyncio.run(first_event(wrong, 2))
    out = capsys.readouterr()
    assert "credentials were rejected" in out.out
    assert secret not in out.out + out.err
