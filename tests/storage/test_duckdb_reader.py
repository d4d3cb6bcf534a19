"""DuckDB, the fault tests' second reader (``duckdb_reader.py``), on moto's S3 and Azurite: it reads the rows
delta-rs reads, sees each new version on its one connection, and fails on a live file missing from the store."""

from __future__ import annotations

import duckdb
import pytest

from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.fault_harness import append, delta_rs_env, duckdb_counter, live_files, rows


@pytest.fixture(params=["s3_store", "azure_store"], ids=["s3", "azure"])
def store(request):
    return request.getfixturevalue(request.param)


def test_duckdb_reads_what_delta_rs_reads_and_fails_on_a_missing_file(store):
    uri = store.uri("duckdb/reader")
    with delta_rs_env(store):
        append(uri, store.options, 0)
        assert duckdb_counter(store, uri) == rows(store, uri)[1]
        append(uri, store.options, 1)  # a new version: the connection does not keep the old snapshot
    version, now = rows(store, uri)
    assert version == 1 and sum(now.values()) == 20
    assert duckdb_counter(store, uri) == now
    _, keys = live_files(store, uri)
    Storage(uri, store.options).delete(keys[0])
    with pytest.raises(duckdb.Error, match=r"(?i)404|not ?found|does not exist|BlobNotFound"):
        duckdb_counter(store, uri)
