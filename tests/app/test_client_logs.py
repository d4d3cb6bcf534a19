"""A store or catalog that cannot be reached gives one line: the client libraries' own loggers stay quiet
(Thrift logs a refused connection with its traceback, botocore where it found credentials) unless
``--verbose``, or in a task a logger at DEBUG."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.client_logs import CLIENT_LOGGERS, SILENT, quieted_client_loggers
from airflow_delta_maint.operators.maintenance import OptimizeOperator
from tests.storage.servers import free_port

DELTA_MAINT = Path(sys.executable).parent / "delta-maint"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _refused_targets(port: int) -> dict[str, list[str]]:
    """Each catalog and each store, reached on a port nobody listens on."""
    endpoint = f"http://127.0.0.1:{port}"
    return {
        "hive": ["--table-name", "sales.orders", "--catalog", "hive", "--catalog-option", "host=127.0.0.1",
                 "--catalog-option", f"port={port}"],
        "glue": ["--table-name", "sales.orders", "--catalog", "glue", "--catalog-option", f"endpoint_url={endpoint}",
                 "--catalog-option", "region_name=us-east-1"],
        "unity": ["--table-name", "main.sales.orders", "--catalog", "unity", "--catalog-option", f"host={endpoint}"],
        "s3": ["s3://tables/t", "--storage-option", f"AWS_ENDPOINT_URL={endpoint}", "--storage-option",
               "allow_http=true", "--storage-option", "AWS_REGION=us-east-1"],
        "azure": ["az://tables/t", "--storage-option", "account_name=devstoreaccount1", "--storage-option",
                  f"endpoint={endpoint}/devstoreaccount1", "--storage-option", "allow_http=true"],
        "gcs": ["gs://tables/t", "--storage-option", f"base_url={endpoint}", "--storage-option", "allow_http=true",
                "--storage-option", "skip_signature=true"],
    }


def _run(args: list[str]) -> subprocess.CompletedProcess:
    # credentials of the environment, as a shell would have them (never on the command line)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "DATABRICKS_TOKEN": "dapi-testing", "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY}
    return subprocess.run([str(DELTA_MAINT), "inspect", *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.e2e
@pytest.mark.parametrize("target", ["hive", "glue", "unity", "s3", "azure", "gcs"])
def test_an_unreachable_catalog_or_store_gives_one_line(target):
    done = _run(_refused_targets(free_port())[target])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("delta-maint inspect: error: cannot "), lines[0]
    assert "Traceback" not in done.stderr and "testing" not in done.stderr + done.stdout


@pytest.mark.e2e
def test_verbose_shows_the_clients_own_log():
    done = _run([*_refused_targets(free_port())["hive"], "--verbose"])
    assert done.returncode == 2
    assert "thrift.transport.TSocket" in done.stderr and "Traceback" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("delta-maint inspect: error: cannot reach the Hive metastore")


def test_the_loggers_are_given_back_after_the_block():
    logging.getLogger("botocore").setLevel(logging.INFO)
    with quieted_client_loggers():
        assert all(logging.getLogger(name).level == SILENT for name in CLIENT_LOGGERS)
        assert not logging.getLogger("botocore.credentials").isEnabledFor(logging.CRITICAL)
    assert logging.getLogger("botocore").level == logging.INFO
    with quieted_client_loggers(verbose=True):
        assert logging.getLogger("botocore").level == logging.INFO


@pytest.mark.parametrize("catalog", ["hive", "glue"])
def test_a_task_with_an_unreachable_catalog_logs_no_client_traceback(catalog, monkeypatch, caplog):
    port = free_port()
    conn = ({"conn_type": "hive_metastore", "host": "127.0.0.1", "port": port} if catalog == "hive" else
            {"conn_type": "aws", "login": "testing", "password": "testing",
             "extra": {"region_name": "us-east-1", "endpoint_url": f"http://127.0.0.1:{port}"}})
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_CATALOG", json.dumps(conn))
    op = OptimizeOperator(task_id="o", table_name="sales.orders", catalog_conn_id="lake_catalog", execution="local")
    caplog.set_level(logging.INFO)
    with pytest.raises((AirflowException, Exception)) as failed:
        op.execute({})
    assert str(failed.value).count("\n") == 0 and "cannot reach" in str(failed.value)
    clients = [r for r in caplog.records if r.name.split(".")[0] in {n.split(".")[0] for n in CLIENT_LOGGERS}]
    assert clients == [], [(r.name, r.getMessage()) for r in clients]
    assert not any(r.exc_info for r in caplog.records)
