"""The S3A settings the delta-spark engine gives a table's bucket: from the storage options and the
environment, never a credential (the run on a real S3 server is in tests/delta_spark/test_engine_on_s3.py)."""

from __future__ import annotations

from airflow_delta_maint.app.engines.hadoop_store import s3a_settings


def test_an_s3_compatible_endpoint_gets_path_style_access_and_plain_http():
    options = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
               "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    assert s3a_settings("lake", options, environ={}) == {
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake.endpoint.region": "eu-west-1",
    }


def test_options_win_over_the_environment_and_obstore_names_count():
    environ = {"AWS_ENDPOINT_URL": "https://env.example", "AWS_REGION": "us-east-1", "AWS_SECRET_ACCESS_KEY": "x"}
    assert s3a_settings("b", {"endpoint": "https://opt.example"}, environ) == {
        "fs.s3a.bucket.b.endpoint": "https://opt.example", "fs.s3a.bucket.b.path.style.access": "true",
        "fs.s3a.bucket.b.endpoint.region": "us-east-1"}


def test_aws_itself_needs_nothing():
    assert s3a_settings("b", {}, environ={"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s"}) == {}


def test_obstore_only_azure_uris_are_refused_with_the_form_to_use():
    import pytest

    from airflow_delta_maint.app.engines import EngineSetupError
    from airflow_delta_maint.app.engines.hadoop_store import prepare_hadoop_store

    with pytest.raises(EngineSetupError, match=r"give the table as abfss://<container>@<account>\.dfs\.core"):
        prepare_hadoop_store(object(), "az://container/events", {})
