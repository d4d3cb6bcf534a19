"""OPTIMIZE on row-tracking tables (PROTOCOL.md "Row Tracking"): every logical row keeps its
stable Row ID and Row Commit Version, fresh ids never collide, the high-water mark only grows.

Tables are written by hand, action by action (tests/row_tracking_tables.py), with deletion
vectors and partly materialized ids; the stable ids are read by an independent reader that
follows the protocol's reader requirements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.row_tracking import high_water_mark
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize import listing, rows_deltars
from tests.row_tracking_tables import (COMMIT_VERSION_COL, ROW_ID_COL, HandLog, build_enabled_table, high_water,
                                       live_values, metadata, protocol, remove_of, stable_rows, tracked)


def optimize(path: Path, *args: str) -> tuple[int, dict]:
    return cli.run(["optimize", str(path), "--json", *args])


def _commit(path: Path, version: int) -> list[dict]:
    return read_commit(Storage(str(path)), version)


def _fresh_ranges(snap: Snapshot) -> list[tuple[int, int]]:
    out = []
    for add in snap.add_actions():
        n = json.loads(add["stats"])["numRecords"]
        out.append((add["baseRowId"], add["baseRowId"] + n - 1))
    return sorted(out)


def test_enabled_with_deletion_vectors_keeps_every_stable_id(tmp_path: Path, spark) -> None:
    path = build_enabled_table(tmp_path / "t")
    before, values = stable_rows(path), live_values(path)
    assert before[3] == (3, 3) and before[50] == (52, 3) and 12 not in before  # updated, inserted, deleted
    old_mark = high_water_mark(Snapshot.load(str(path)).domains)

    code, m = optimize(path)
    assert code == 0 and m["status"] == "committed", m
    v = m["version_committed"]
    assert stable_rows(path) == before
    assert live_values(path) == values

    snap = Snapshot.load(str(path))
    adds = snap.add_actions()
    assert len(adds) == 1 and not adds[0].get("deletionVector")
    new = adds[0]
    assert new["baseRowId"] == old_mark + 1 and new["defaultRowCommitVersion"] == v
    new_mark = high_water_mark(snap.domains)
    assert new_mark == old_mark + json.loads(new["stats"])["numRecords"]
    actions = _commit(path, v)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["tags"] == {"delta.rowTracking.preserved": "true"}
    removes = [a["remove"] for a in actions if "remove" in a]
    assert removes and all("baseRowId" in r and "defaultRowCommitVersion" in r for r in removes)
    # the rewritten file stores both materialized columns for every row
    import pyarrow.parquet as pq
    written = pq.read_table(path / new["path"])
    assert written.column(ROW_ID_COL).null_count == 0 and written.column(COMMIT_VERSION_COL).null_count == 0

    # a second OPTIMIZE (nothing to do) and an append, then OPTIMIZE again: still the same ids
    code, m2 = optimize(path)
    assert m2["status"] == "skipped"
    log = HandLog(path)
    log.version = snap.version
    extra = log.data_file([60, 61, 62])
    log.commit(tracked(extra, new_mark + 1, snap.version + 1), high_water(new_mark + 3))
    expected = {**before, 60: (new_mark + 1, snap.version + 1), 61: (new_mark + 2, snap.version + 1),
                62: (new_mark + 3, snap.version + 1)}
    assert stable_rows(path) == expected
    code, m3 = optimize(path, "--min-file-size", str(1 << 30))
    assert m3["status"] == "committed", m3
    assert stable_rows(path) == expected
    snap = Snapshot.load(str(path))
    assert high_water_mark(snap.domains) > new_mark + 3
    ranges = _fresh_ranges(snap)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges  # fresh ids never overlap


def test_without_deletion_vectors_delta_rs_reads_the_same_rows(tmp_path: Path, spark) -> None:
    path = build_enabled_table(tmp_path / "t", dvs=False)
    rows, ids = rows_deltars(path), stable_rows(path)
    code, m = optimize(path)
    assert m["status"] == "committed", m
    assert rows_deltars(path) == rows
    assert stable_rows(path) == ids


def test_supported_but_not_enabled_assigns_fresh_ids_only(tmp_path: Path, spark) -> None:
    log = HandLog(tmp_path / "t")
    a, b, c = (log.data_file(list(range(5 * k, 5 * k + 5))) for k in range(3))
    log.commit(protocol(dvs=False), metadata({}), {"add": a}, operation="CREATE TABLE")  # before the feature
    log.commit({"add": b})
    log.commit(tracked(c, 0, 2), high_water(4))
    rows = rows_deltars(log.path)
    code, m = optimize(log.path)
    assert m["status"] == "committed", m
    snap = Snapshot.load(str(log.path))
    (new,) = snap.add_actions()
    assert new["baseRowId"] == 5 and new["defaultRowCommitVersion"] == m["version_committed"]
    assert high_water_mark(snap.domains) == 5 + 15 - 1
    info = next(x["commitInfo"] for x in _commit(log.path, m["version_committed"]) if "commitInfo" in x)
    assert "tags" not in info  # ids were not preserved: the table has not enabled row tracking
    assert rows_deltars(log.path) == rows


def test_suspended_assigns_nothing_and_carries_materialized_values(tmp_path: Path, spark) -> None:
    log = HandLog(tmp_path / "t")
    conf = {"delta.rowTrackingSuspended": "true",
            "delta.rowTracking.materializedRowIdColumnName": ROW_ID_COL,
            "delta.rowTracking.materializedRowCommitVersionColumnName": COMMIT_VERSION_COL}
    a = log.data_file([1, 2], row_ids=[100, 101], commit_versions=[7, None])
    b = log.data_file([3, 4])
    log.commit(protocol(dvs=False), metadata(conf), tracked(a, 0, 0), high_water(200), operation="CREATE TABLE")
    log.commit({"add": b})
    rows = rows_deltars(log.path)
    code, m = optimize(log.path)
    assert m["status"] == "committed", m
    snap = Snapshot.load(str(log.path))
    (new,) = snap.add_actions()
    assert "baseRowId" not in new and "defaultRowCommitVersion" not in new
    assert high_water_mark(snap.domains) == 200
    import pyarrow.parquet as pq
    t = pq.read_table(log.path / new["path"]).sort_by("id")
    assert t.column(ROW_ID_COL).to_pylist() == [100, 101, None, None]
    assert t.column(COMMIT_VERSION_COL).to_pylist() == [7, None, None, None]
    assert rows_deltars(log.path) == rows


def test_enabled_file_without_base_row_id_is_refused_and_changes_nothing(tmp_path: Path, spark) -> None:
    log = HandLog(tmp_path / "t")
    a, b = log.data_file([1, 2]), log.data_file([3, 4])
    from tests.row_tracking_tables import enabled_configuration
    log.commit(protocol(dvs=False), metadata(enabled_configuration(dvs=False)), tracked(a, 0, 0), {"add": b},
               high_water(1), operation="CREATE TABLE")
    before = listing(log.path)
    code, m = optimize(log.path)
    assert code != 0 and m["status"] == "failed"
    assert "stable row ids cannot be preserved" in m["error"] and b["path"] in m["error"]
    assert listing(log.path) == before


def test_enable_and_suspend_together_is_refused(tmp_path: Path) -> None:
    log = HandLog(tmp_path / "t")
    from tests.row_tracking_tables import enabled_configuration
    conf = {**enabled_configuration(dvs=False), "delta.rowTrackingSuspended": "true"}
    a, b = log.data_file([1]), log.data_file([2])
    log.commit(protocol(dvs=False), metadata(conf), tracked(a, 0, 0), tracked(b, 1, 0), high_water(1))
    before = listing(log.path)
    code, m = optimize(log.path)
    assert code != 0 and "forbids" in m["error"]
    assert listing(log.path) == before


@pytest.mark.parametrize("job", ["checkpoint", "compact-log"])
def test_log_files_keep_row_tracking_fields(job: str, tmp_path: Path) -> None:
    path = build_enabled_table(tmp_path / "t")
    before = stable_rows(path)
    args = ["--interval", "2"] if job == "compact-log" else []
    code, m = cli.run([job, str(path), "--json", *args])
    assert code == 0, m
    names = sorted(p.name for p in (path / "_delta_log").iterdir())
    assert any(".checkpoint." in n or ".compacted." in n for n in names), names
    snap = Snapshot.load(str(path), compactions="trust")
    assert stable_rows(path) == before
    assert all("baseRowId" in a and "defaultRowCommitVersion" in a for a in snap.add_actions())
    assert high_water_mark(snap.domains) == 52
    _ = remove_of  # removes are checked by the OPTIMIZE test
