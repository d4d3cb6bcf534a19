"""Object-store servers for tests/storage: one of each kind per test session, stopped by process id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import boto3
import pytest

from tests.storage.servers import AZURITE_ACCOUNT, Server, start_azurite, start_moto


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
