"""Object-store servers for tests/storage: one of each kind per test session, stopped by process id."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import boto3
import pytest

from tests.storage.servers import AZURITE_ACCOUNT, Server, start_azurite, start_fake_gcs, start_moto


@dataclass
class Store:
    """A bucket (or container) on a server, with what a shell would export to reach it."""

    name: str  # s3, azure, gcs
    server: Server
    bucket: str
    scheme: str
    env: dict[str, str] = field(default_factory=dict)
    #: storage options that reach the store without any environment variable (delta-rs and the CLI)
    options: dict[str, str] = field(default_factory=dict)
    make_bucket: Callable[[str], None] | None = None

    def uri(self, path: str, scheme: str | None = None) -> str:
        return f"{scheme or self.scheme}://{self.bucket}/{path}"


@pytest.fixture(scope="session")
def servers_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("object-stores")


@pytest.fixture(scope="session")
def s3_store(servers_dir):
    server = start_moto(servers_dir)
    try:
        client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket="tables")
        options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                   "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        yield Store("s3", server, "tables", "s3", env=dict(server.env), options=options,
                    make_bucket=lambda name: client.create_bucket(Bucket=name))
    finally:
        server.stop()


_POLICIES = {
    "writer": ["s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:DeleteObject"],
    "reader": ["s3:GetObject", "s3:ListBucket"],
}


@pytest.fixture(scope="session")
def s3_locked(servers_dir):
    """A moto server that checks IAM credentials: bucket ``locked``, users ``writer`` and ``reader``.

    Yields (server, {user: (access key id, secret)}). The first 7 requests set it up unauthenticated.
    """
    server = start_moto(servers_dir, auth_actions=1 + 3 * len(_POLICIES))
    try:
        kw = dict(endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                  aws_secret_access_key="testing")
        boto3.client("s3", **kw).create_bucket(Bucket="locked")
        iam = boto3.client("iam", **kw)
        keys = {}
        for user, actions in _POLICIES.items():
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
            iam.put_user_policy(UserName=user, PolicyName="tables", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
        yield server, keys
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_store(servers_dir):
    from azure.storage.blob import BlobServiceClient

    server = start_azurite(servers_dir)
    try:
        key = server.env["AZURE_STORAGE_ACCOUNT_KEY"]
        service = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={server.endpoint}/{AZURITE_ACCOUNT};")
        service.create_container("tables")
        yield Store("azure", server, "tables", "az", env=dict(server.env),
                    options={"account_name": AZURITE_ACCOUNT, "account_key": key, "allow_http": "true",
                             "endpoint": f"{server.endpoint}/{AZURITE_ACCOUNT}"})
    finally:
        server.stop()


def gcs_json_api(server: Server, path: str, data: bytes, content_type: str = "application/octet-stream") -> None:
    """A POST to fake-gcs-server's JSON API (obstore writes through the XML API, which it does not have)."""
    request = urllib.request.Request(f"{server.endpoint}{path}", data=data, method="POST",
                                     headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def gcs_upload_dir(server: Server, bucket: str, prefix: str, local: str) -> None:
    """Copy a local folder (a table delta-rs wrote) to ``gs://bucket/prefix`` through the JSON API."""
    for root, _, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            key = f"{prefix}/{os.path.relpath(path, local)}".replace(os.sep, "/")
            with open(path, "rb") as f:
                gcs_json_api(server, f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name="
                             f"{urllib.parse.quote(key, safe='')}", f.read())


@pytest.fixture(scope="session")
def gcs_store(servers_dir):
    server = start_fake_gcs(servers_dir)
    try:
        gcs_json_api(server, "/storage/v1/b", json.dumps({"name": "tables"}).encode(), "application/json")
        yield Store("gcs", server, "tables", "gs", env=dict(server.env),
                    options={"google_service_account": server.env["GOOGLE_SERVICE_ACCOUNT"], "allow_http": "true"})
    finally:
        server.stop()
