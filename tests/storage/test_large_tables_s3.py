"""The large-table paths on S3 (moto on 127.0.0.1), forced with the thresholds down, credentials
passed as storage options only: OPTIMIZE in rounds, then log compaction whose due checkpoint is
written in parts. Rows stay, the log reads back, and the secret appears in no output, log or
metrics."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.app.settings import STREAM_MIN_FILES_ENV
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.test_object_stores import rows, run_cli, shell_env, storage_args  # noqa: F401

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]

SECRET = "large-s3cr3t-4b7e2d"


@pytest.mark.usefixtures("shell_env")  # a clean store environment: credentials only as storage options
def test_optimize_in_rounds_and_compaction_on_s3_keep_the_secret(s3_store, spark, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(STREAM_MIN_FILES_ENV, "0")
    monkeypatch.setenv("DELTA_MAINT_OPTIMIZE_ROUND_FILES", "2")
    options = {**s3_store.options, "AWS_SECRET_ACCESS_KEY": SECRET}  # moto takes any secret
    uri = s3_store.uri("large")
    for i in range(3):
        ids = list(range(i * 30, i * 30 + 30))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "p": [f"p{x % 3}" for x in ids]}),
                        mode="append", partition_by=["p"], storage_options=s3_store.options)
    before = rows(uri, s3_store.options)

    code, m = run_cli("optimize", uri, *storage_args(options))
    assert code == 0 and m["status"] == "committed", m
    assert m["numRounds"] == 3 and m["numRemovedFiles"] == 9 and m["numAddedFiles"] == 3, m
    assert rows(uri, s3_store.options)[1] == before[1]

    code, c = run_cli("compact-log", uri, "--interval", "2", "--checkpoint-interval", "1", *storage_args(options))
    assert code == 0 and c["checkpoint"]["kind"] == "multipart" and c["checkpoint"]["version"] == m["version_committed"]
    storage = Storage(uri, s3_store.options)
    assert any(cp.version == c["checkpoint"]["version"] for cp in list_log(storage).checkpoints)
    assert Snapshot.load(storage).segment.checkpoint_version == c["checkpoint"]["version"]
    assert rows(uri, s3_store.options)[1] == before[1]

    out = capsys.readouterr()
    assert SECRET not in out.out and SECRET not in out.err and SECRET not in caplog.text
    assert SECRET not in repr(m) and SECRET not in repr(c)
