"""Fixtures shared by the namespaced-cluster tests: the object store on the cluster's bridge.

Each test module starts its own ``cluster`` fixture (with or without a Spark Connect server); ``s3``
starts moto on that cluster's bridge address.
"""

from __future__ import annotations

import json

import boto3
import pytest

from tests.storage.servers import start_moto


@pytest.fixture(scope="module")
def s3(cluster, tmp_path_factory):
    """moto with IAM checks on the bridge's address: bucket ``lake`` and a user who may use it.
    Yields (server, key id, secret); requests without that user's keys are refused."""
    server = start_moto(tmp_path_factory.mktemp("moto"), auth_actions=4, host=cluster.host)
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
