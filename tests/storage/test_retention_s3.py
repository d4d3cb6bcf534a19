"""cleanup-log and VACUUM from an inventory on S3 (moto on 127.0.0.1), with credentials passed as
storage options: the jobs work, rows stay, and the secret appears in no output, log or metrics."""

from __future__ import annotations

import io
import logging
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.test_object_stores import listing, rows, run_cli, shell_env, storage_args, write_table  # noqa: F401

pytestmark = pytest.mark.timeout(300)

SECRET = "retention-s3cr3t-9f3a1c"


@pytest.mark.usefixtures("shell_env")  # a clean store environment: credentials only as storage options
def test_cleanup_log_and_inventory_vacuum_on_s3_keep_the_secret(s3_store, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    options = {**s3_store.options, "AWS_SECRET_ACCESS_KEY": SECRET}  # moto takes any secret
    uri = s3_store.uri("retention")
    write_table(uri, s3_store.options, commits=4)
    before = rows(uri, s3_store.options)

    # every commit is from today: after the cut-off (midnight UTC, 30 days back), nothing expires
    code, m = run_cli("cleanup-log", uri, *storage_args(options))
    assert code == 0 and m["status"] == "skipped" and "no commit is older" in m["reason"], m
    code, m = run_cli("cleanup-log", uri, "--dry-run", "--retention-hours", "0", *storage_args(options))
    assert code == 0 and m["status"] == "skipped", m

    storage = Storage(uri, s3_store.options)
    storage.put("orphan-a.parquet", b"orphan")
    storage.put("orphan-b.parquet", b"orphan")
    time.sleep(3)
    # a partial inventory, as S3 Inventory delivers rows (s3:// URIs), written next to the table
    objects = [f for f in storage.list_recursive() if f.key != "orphan-b.parquet"]
    inventory = pa.table({"path": [f"{uri}/{f.key}" for f in objects],
                          "length": pa.array([f.size for f in objects], pa.int64()),
                          "isDir": [False] * len(objects),
                          "modificationTime": pa.array([f.mtime_ms for f in objects], pa.int64())})
    buf = io.BytesIO()
    pq.write_table(inventory, buf)
    Storage(s3_store.uri("inventories"), s3_store.options).put("retention/inventory.parquet", buf.getvalue())
    code, m = run_cli("vacuum", uri, "--inventory", s3_store.uri("inventories/retention/inventory.parquet"),
                      "--retention-hours", str(2 / 3600), "--ignore-retention-check", *storage_args(options))
    assert code == 0 and m["status"] == "committed" and m["numDeletedFiles"] == 1, m
    left = listing(uri, s3_store.options)
    assert "orphan-a.parquet" not in left and "orphan-b.parquet" in left  # not in the inventory: kept
    assert rows(uri, s3_store.options)[1] == before[1]

    out = capsys.readouterr()
    assert SECRET not in out.out and SECRET not in out.err and SECRET not in caplog.text
    assert SECRET not in repr(m)
