"""Catalog servers for the catalog tests, started by the tests and stopped by process id: moto's Glue and S3."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import boto3
import pytest

from tests.storage.servers import Server, start_moto


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
