"""The row-tracking rules of the core: table states, fresh ids, and a commit that loses a race to
a writer which advanced the high-water mark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_delta_maint.delta.errors import CorruptLogError, UnsupportedFeatureError
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import Transaction
from airflow_delta_maint.delta.protocol.row_tracking import assign_fresh_ids, high_water_mark, row_tracking
from airflow_delta_maint.delta.storage.store import Storage
from tests.row_tracking_tables import (HandLog, build_enabled_table, enabled_configuration, high_water, metadata,
                                       protocol, tracked)


def _state(path: Path):
    snap = Snapshot.load(str(path))
    return row_tracking(snap.protocol, snap.metadata, snap.domains)


def test_states(tmp_path: Path) -> None:
    enabled = _state(build_enabled_table(tmp_path / "e"))
    assert (enabled.describe(), enabled.materializes, enabled.assigns_fresh_ids, enabled.high_water_mark) == \
        ("enabled", True, True, 52)
    log = HandLog(tmp_path / "s")
    log.commit(protocol(dvs=False), metadata({"delta.rowTrackingSuspended": "true"}), {"add": log.data_file([1])})
    suspended = _state(log.path)
    assert (suspended.describe(), suspended.materializes, suspended.assigns_fresh_ids) == ("suspended", False, False)
    log = HandLog(tmp_path / "n")
    log.commit(protocol(dvs=False), metadata({"delta.enableRowTracking": "true"}), {"add": log.data_file([1])})
    with pytest.raises(UnsupportedFeatureError, match="materializedRowIdColumnName"):
        _state(log.path)


def test_fresh_ids_are_consecutive_above_the_mark() -> None:
    adds = [{"path": "a", "stats": json.dumps({"numRecords": 3})}, {"path": "b", "stats": '{"numRecords":2}'}]
    out, mark = assign_fresh_ids(adds, 9, 4)
    assert [(a["baseRowId"], a["defaultRowCommitVersion"]) for a in out] == [(10, 4), (13, 4)] and mark == 14
    assert "baseRowId" not in adds[0]  # copies
    with pytest.raises(CorruptLogError, match="numRecords"):
        assign_fresh_ids([{"path": "c"}], 0, 1)


def test_high_water_mark_of_a_bad_domain_is_a_clear_error() -> None:
    assert high_water_mark({}) == -1
    with pytest.raises(CorruptLogError, match="delta.rowTracking"):
        high_water_mark({"delta.rowTracking": {"configuration": "not json"}})


def test_commit_after_a_concurrent_writer_numbers_above_its_mark(tmp_path: Path) -> None:
    log = HandLog(tmp_path / "t")
    a = log.data_file([1, 2, 3])
    log.commit(protocol(dvs=False), metadata(enabled_configuration(dvs=False)), tracked(a, 0, 0), high_water(2))
    snap = Snapshot.load(str(log.path))
    ours = log.data_file([10, 11])
    txn = Transaction(snap, "WRITE", job="optimize")
    txn.add_actions([{"add": {**ours, "dataChange": False}}])
    theirs = log.data_file([20, 21, 22, 23])
    log.commit(tracked(theirs, 1000, 1), high_water(1003))  # a concurrent writer wins version 1
    version = txn.commit()
    assert version == 2 and txn.row_id_high_water_mark == 1005
    mine = next(x["add"] for x in read_commit(Storage(str(log.path)), 2) if "add" in x)
    assert (mine["baseRowId"], mine["defaultRowCommitVersion"]) == (1004, 2)
    assert high_water_mark(Snapshot.load(str(log.path)).domains) == 1005
