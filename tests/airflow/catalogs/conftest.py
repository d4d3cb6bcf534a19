"""Catalog servers for the catalog tests, started by the tests and stopped by process id: moto's Glue and S3;
a Hive metastore (the metastore server of the Hive jars pyspark ships, on an embedded Derby database); a Unity
Catalog contract server (``unity_server.py``, the published OpenAPI contract's endpoints we call)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from tests.hive_metastore import start_hive_metastore
from tests.storage.servers import Server, free_port, start_moto, wait_for_port


@dataclass
class GlueLake:
    """moto serving Glue and S3 (bucket ``lake``); the ``aws`` connection's id and secret; a Glue client."""

    server: Server
    conn_id: str
    secret: str
    glue: object
    s3_options: dict[str, str]


@pytest.fixture(scope="module")
def glue_catalog(tmp_path_factory):
    """One moto server (Glue and S3) per module; the connection ``glue_lake`` of type aws reaches both."""
    server = start_moto(tmp_path_factory.mktemp("moto-glue"))
    try:
        secret = "glue-secret-" + secrets.token_hex(12)
        kw = dict(endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="AKIDGLUELAKE",
                  aws_secret_access_key=secret)
        boto3.client("s3", **kw).create_bucket(Bucket="lake")
        glue = boto3.client("glue", **kw)
        options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                   "AWS_ACCESS_KEY_ID": "AKIDGLUELAKE", "AWS_SECRET_ACCESS_KEY": secret}
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_GLUE_LAKE", json.dumps({
                "conn_type": "aws", "login": "AKIDGLUELAKE", "password": secret,
                "extra": {"region_name": "us-east-1", "endpoint_url": server.endpoint}}))
            yield GlueLake(server, "glue_lake", secret, glue, options)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hive_metastore(tmp_path_factory):
    """A Hive metastore per module; the connection ``hive_lake`` (type hive_metastore) reaches it."""
    server = start_hive_metastore(tmp_path_factory.mktemp("hive-metastore"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_HIVE_LAKE", json.dumps({"conn_type": "hive_metastore", "host": "127.0.0.1",
                                                              "port": server.port}))
            yield server
    finally:
        server.stop()


@dataclass
class UnityLake:
    """The Unity Catalog contract server (its state file, read on every request) and moto's S3 behind it."""

    server: Server
    conn_id: str
    token: str
    state_file: Path
    s3: GlueLake
    #: what the server vends: an S3 key id, its secret and a session token (moto's S3 takes any key)
    vended: dict[str, str]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def update(self, **changes: object) -> None:
        self.state_file.write_text(json.dumps({**self.state(), **changes}))

    def requests(self) -> list[dict]:
        """The credential requests served so far (table id and operation)."""
        return [{k: v for k, v in r.items() if k != "at"} for r in self.timed_requests()]

    def timed_requests(self) -> list[dict]:
        """The credential requests served so far, with the time each was served at (``at``, epoch seconds)."""
        log = Path(f"{self.state_file}.requests")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def unity_catalog(glue_catalog, tmp_path_factory):
    """A Unity Catalog server per module on 127.0.0.1, data on moto's S3; the connection ``unity_lake``
    (type databricks: the server's URL, its token as password) reaches it."""
    workdir = tmp_path_factory.mktemp("unity")
    token = "uc-token-" + secrets.token_hex(12)
    vended = {"access_key_id": "AKIDUNITYVENDED", "secret_access_key": "uc-vended-" + secrets.token_hex(12),
              "session_token": "uc-session-" + secrets.token_hex(16)}
    state = workdir / "state.json"
    state.write_text(json.dumps({"token": token, "tables": {}, "credentials": {"aws_temp_credentials": vended},
                                 "lifetime_s": 3600, "allowed": {}}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.airflow.catalogs.unity_server", str(port), str(state)],
                            cwd=Path(__file__).resolve().parents[3], stdout=subprocess.DEVNULL,
                            stderr=open(workdir / "server.log", "wb"), start_new_session=True)
    server = Server("unity-catalog", port, proc)
    try:
        wait_for_port(port, proc, timeout=30)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_UNITY_LAKE", json.dumps({"conn_type": "databricks", "host": server.endpoint,
                                                               "password": token}))
            yield UnityLake(server, "unity_lake", token, state, glue_catalog, vended)
    finally:
        server.stop()
