"""compute-stats on an object store (moto S3 on 127.0.0.1): footers and the columns a footer cannot prove read
by byte ranges, the files re-added with the statistics delta-rs wrote before they were taken out of the log,
the rows unchanged. Runs in this process under local execution (no Spark)."""

from __future__ import annotations

import json

import pytest

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.test_object_stores import rows, write_table

pytestmark = pytest.mark.timeout(300)


def test_compute_stats_on_s3(s3_store):
    uri = s3_store.uri("compute-stats")
    write_table(uri, s3_store.options, commits=4)
    written = {a["path"]: json.loads(a["stats"]) for a in Snapshot.load(uri, storage_options=s3_store.options).add_actions()}
    storage = Storage(uri, s3_store.options)
    for version in (0, 2):  # two files lose their statistics
        key = f"_delta_log/{version:020d}.json"
        actions = [json.loads(line) for line in storage.read(key).decode().splitlines() if line.strip()]
        for action in actions:
            action.get("add", {}).pop("stats", None)
        storage.put(key, "".join(json.dumps(a) + "\n" for a in actions).encode())
    version, before = rows(uri, s3_store.options)

    code, m = run_in_process("compute-stats", uri, [], s3_store.options)
    assert code == 0, m
    assert (m["status"], m["numFilesWithoutStats"], m["numFilesUpdated"], m["version_committed"]) == \
        ("committed", 2, 2, version + 1)
    assert m["numFilesReadFromData"] == 2  # delta-rs' footers leave NaN out of the double column's bounds
    assert rows(uri, s3_store.options) == (version + 1, before)
    assert {a["path"]: json.loads(a["stats"])
            for a in Snapshot.load(uri, storage_options=s3_store.options).add_actions()} == written
    code, again = run_in_process("compute-stats", uri, [], s3_store.options)
    assert (code, again["status"]) == (0, "skipped")
