"""OPTIMIZE's row-group copy on an object store (moto S3 on 127.0.0.1, behind the counting proxy): the
inputs' row groups read by ranged requests, the output written by a multipart upload as it is made
(no local copy of it), the rows and statistics those of a full rewrite; a corrupt chunk aborts the
upload (no object, no upload left open) and the bin is re-encoded. Local execution (threads)."""

from __future__ import annotations

import boto3
import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta_maint.app.rewrite import data_files
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.footer import file_bytes, read_footer
from airflow_delta_maint.delta.storage import stream_write
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.copy_tables import run, stats_by_partition
from tests.storage.fault_harness import start_proxy, through
from tests.storage.test_object_stores import listing, rows

pytestmark = pytest.mark.timeout(300)

FILES = 3
ROWS = 160_000  # random doubles do not compress: about 2.5 MiB a file, an output of two 5 MiB parts


def write(uri: str, options: dict[str, str]) -> None:
    rng = np.random.default_rng(3)
    for k in range(FILES):
        ids = np.arange(k * ROWS, (k + 1) * ROWS, dtype=np.int64)
        write_deltalake(uri, pa.table({"id": ids, "v": rng.random(ROWS), "s": [f"r{i % 5}" for i in range(ROWS)]}),
                        mode="append", storage_options=options)


def no_local_copy(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the copy wrote a local temporary file")

    monkeypatch.setattr(data_files.tempfile, "mkstemp", refuse)


def test_copy_reads_ranges_and_uploads_in_parts(s3_store, monkeypatch):
    uri, full = s3_store.uri("copy/t"), s3_store.uri("copy/never")
    for u in (uri, full):
        write(u, s3_store.options)
    _, before = rows(uri, s3_store.options)
    monkeypatch.setattr(stream_write, "PART_BYTES", 5 << 20)
    proxy = start_proxy(s3_store.server.endpoint, "s3")
    try:
        with monkeypatch.context() as patched:
            no_local_copy(patched)
            code, m = run(uri, through(s3_store, proxy), copy_row_groups="always")
        stats = proxy.stats()["requests"]
    finally:
        proxy.stop()
    assert code == 0 and m["status"] == "committed", m
    assert (m["numRowGroupsCopied"], m["numRowGroupsReencoded"], m["copyFallbacks"]) == (FILES, 0, {})
    assert stats.get("MULTIPART_CREATE") == 1 and stats.get("MULTIPART_PART") == 2, stats
    assert stats.get("MULTIPART_COMPLETE") == 1 and stats.get("RANGE_GET", 0) >= 2 * FILES, stats
    code, never = run(full, s3_store.options, copy_row_groups="never")
    assert code == 0, never
    assert rows(uri, s3_store.options)[1] == before == rows(full, s3_store.options)[1]
    assert stats_by_partition(uri, s3_store.options) == stats_by_partition(full, s3_store.options)
    add = Snapshot.load(uri, storage_options=s3_store.options).add_actions()[0]
    storage = Storage(uri, s3_store.options)
    assert read_footer(RangeReader(storage, add["path"], add["size"])).num_rows == FILES * ROWS


def test_a_corrupt_chunk_aborts_the_upload_and_re_encodes(s3_store, monkeypatch):
    uri = s3_store.uri("copy/corrupt")
    write(uri, s3_store.options)
    storage = Storage(uri, s3_store.options)
    _, before = rows(uri, s3_store.options)
    adds = sorted(Snapshot.load(uri, storage_options=s3_store.options).add_actions(), key=lambda a: a["path"])
    victim = adds[-1]
    data = storage.read(victim["path"])
    footer = read_footer(RangeReader(storage, victim["path"], len(data)))
    footer.row_groups[0]["columns"][1]["meta_data"]["num_values"] += 1
    storage.put(victim["path"], data[:-8 - footer.length] + file_bytes(footer.metadata))
    files_before = listing(uri, s3_store.options)
    monkeypatch.setattr(stream_write, "PART_BYTES", 5 << 20)
    code, m = run(uri, s3_store.options, copy_row_groups="always")
    assert code == 0 and m["status"] == "committed", m
    assert (m["numRowGroupsCopied"], m["copyFallbacks"]) == (0, {"corruptChunk": FILES})
    assert rows(uri, s3_store.options)[1] == before
    new = {k for k in listing(uri, s3_store.options) if k.endswith(".parquet")} - set(files_before)
    assert len(new) == 1  # the re-encoded output; the aborted one never became an object
    client = boto3.client("s3", endpoint_url=s3_store.server.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    assert not client.list_multipart_uploads(Bucket=s3_store.bucket, Prefix="copy/corrupt").get("Uploads")
