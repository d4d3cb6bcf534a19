"""VACUUM full's listing path on S3 (moto on 127.0.0.1): the listing started before the log is read, and
bulk deletes across folders."""

from __future__ import annotations

import obstore
import pytest

from airflow_delta_maint.delta.errors import StorageError
from airflow_delta_maint.delta.storage.table_files import delete_files_parallel, list_subtree
from airflow_delta_maint.delta.storage.prefetch import PrefetchedListing
from airflow_delta_maint.delta.storage.store import Storage

pytestmark = pytest.mark.timeout(120)

KEYS = ["_delta_log/00000000000000000000.json", "_delta_log/_last_checkpoint", "a.parquet", ".hidden.parquet",
        "_tmp/x.parquet", "_p=1/b.parquet", "_p=1/_sub/c.parquet", "q=2/d.parquet", "_change_data/e.parquet",
        "q=3/.crc/f.parquet"]


@pytest.fixture
def table(s3_store, request):
    root = s3_store.uri(f"prefetch-{request.node.name}")
    storage = Storage(root, s3_store.options)
    for key in KEYS:
        obstore.put(storage.store, key, b"x" * 3)
    return storage


def test_prefetched_listing_is_the_table_listing(table):
    listing = PrefetchedListing(table)
    found = listing.subtree(["_p", "q"])
    expected = list_subtree(table, "", ["_p", "q"])
    assert sorted(found.keys) == sorted(expected.keys) == [
        "_change_data/e.parquet", "_p=1/b.parquet", "a.parquet", "q=2/d.parquet"]
    assert sorted(zip(found.keys, found.sizes)) == sorted(zip(expected.keys, expected.sizes))
    listed = dict(zip(expected.keys, expected.mtimes))  # milliseconds, from a float there: within 1 ms
    assert all(abs(mtime - listed[key]) <= 1 for key, mtime in zip(found.keys, found.mtimes))
    assert sorted(PrefetchedListing(table).subtree().keys) == ["_change_data/e.parquet", "a.parquet",
                                                               "q=2/d.parquet"]


def test_a_listing_past_its_limit_or_cancelled_gives_no_result(table):
    assert PrefetchedListing(table, max_objects=2).subtree() is None
    listing = PrefetchedListing(table)
    listing.cancel()
    found = listing.subtree()
    assert found is None or len(found.keys) == 3  # cancelled before or after the one page


def test_a_failed_listing_raises_where_it_is_taken(s3_store):
    listing = PrefetchedListing(Storage("s3://no-such-bucket/t", s3_store.options))
    with pytest.raises(StorageError, match="s3://no-such-bucket/t"):
        listing.subtree()
    with pytest.raises(ValueError):
        PrefetchedListing(Storage("/tmp"))


def test_bulk_deletes_span_folders(s3_store):
    storage = Storage(s3_store.uri("bulk-delete"), s3_store.options)
    keys = sorted(f"p={i % 7}/f{i}.parquet" for i in range(230))
    for key in keys + ["keep.parquet"]:
        obstore.put(storage.store, key, b"x")
    seen: list[int] = []
    assert delete_files_parallel(storage, keys, threads=4, batch=100, progress=seen.append) == 230
    assert sorted(seen) == [30, 100, 100]  # one request per 100 keys, whatever their folder
    assert [f.key for f in storage.list_recursive("")] == ["keep.parquet"]
