"""Partition reservations: one winner per partition, expiry and takeover, release; on local disk
and on a moto S3 server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_delta_maint.delta.storage.leases import RESERVATIONS_DIR, reserve_partitions
from airflow_delta_maint.delta.storage.store import Storage

LABELS = [f"p=part{i}" for i in range(6)]


def _check_races(storage: Storage) -> None:
    results = {}
    barrier = threading.Barrier(4)

    def run(name: str) -> None:
        barrier.wait()
        results[name] = reserve_partitions(storage, LABELS, run_id=name)

    threads = [threading.Thread(target=run, args=(f"run{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [set(r.held) for r in results.values()]
    assert set().union(*held) == set(LABELS)
    assert sum(len(h) for h in held) == len(LABELS)  # every partition held by exactly one run
    for name, r in results.items():
        assert set(r.taken_by_others) == set(LABELS) - set(r.held)
        assert all(holder != name for holder in r.taken_by_others.values())
    for r in results.values():
        r.release()
    again = reserve_partitions(storage, LABELS, run_id="later")
    assert set(again.held) == set(LABELS)  # released leases are free again
    again.release()


def test_concurrent_runs_hold_disjoint_partitions_on_local_disk(tmp_path: Path) -> None:
    _check_races(Storage(str(tmp_path)))


def test_concurrent_runs_hold_disjoint_partitions_on_s3(s3_store) -> None:
    _check_races(Storage(s3_store.uri("reservations"), s3_store.options))


def test_live_lease_is_respected_and_expired_one_taken_over(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    first = reserve_partitions(storage, ["p=a", "p=b"], run_id="first", lease_seconds=60, now=1000.0)
    assert set(first.held) == {"p=a", "p=b"}
    live = reserve_partitions(storage, ["p=a"], run_id="second", lease_seconds=60, now=1030.0)
    assert live.held == {} and live.taken_by_others == {"p=a": "first"}
    taken = reserve_partitions(storage, ["p=a"], run_id="second", lease_seconds=60, now=1061.0)
    assert list(taken.held) == ["p=a"]
    # the old lease's holder releasing late does not free the partition the new holder has
    first.release()
    assert reserve_partitions(storage, ["p=a"], run_id="third", now=1062.0).taken_by_others == {"p=a": "second"}
    taken.release()
    assert not [p for p in (tmp_path / RESERVATIONS_DIR).iterdir() if "p=a" in p.read_text()]


@pytest.mark.parametrize("lease", ["not json", ""])
def test_a_torn_lease_counts_as_expired(tmp_path: Path, lease: str) -> None:
    storage = Storage(str(tmp_path))
    r = reserve_partitions(storage, ["p=x"], run_id="a")
    (tmp_path / r.held["p=x"]).write_text(lease)
    assert list(reserve_partitions(storage, ["p=x"], run_id="b").held) == ["p=x"]


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import os, sys; from airflow_delta_maint.delta.storage.store import Storage; "
            "from airflow_delta_maint.delta.storage.leases import reserve_partitions; "
            "r = reserve_partitions(Storage(sys.argv[1]), ['p=a'], run_id='killed', lease_seconds=3600); "
            "os._exit(0 if r.held else 1)")  # exits without releasing, as kill -9 would
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert list((tmp_path / RESERVATIONS_DIR).iterdir())  # the lease is still there
    again = reserve_partitions(Storage(str(tmp_path)), ["p=a"], run_id="rerun")
    assert list(again.held) == ["p=a"] and again.taken_by_others == {}
    again.release()


def test_a_live_run_renews_its_lease(tmp_path: Path) -> None:
    import json
    import time

    storage = Storage(str(tmp_path))
    holder = reserve_partitions(storage, ["p=a"], run_id="long", lease_seconds=2)
    try:
        first = holder.held["p=a"]
        first_expires = json.loads(storage.read(first))["expires_at"]
        deadline = time.monotonic() + 60
        while holder.held["p=a"] == first:  # the renewer writes the lease's next generation
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.05)
        renewed = json.loads(storage.read(holder.held["p=a"]))
        assert renewed["run_id"] == "long" and renewed["expires_at"] > first_expires
        # when the first lease has expired, only the renewal keeps the partition
        other = reserve_partitions(storage, ["p=a"], run_id="other", now=first_expires)
        assert other.taken_by_others == {"p=a": "long"} and other.held == {}
    finally:
        holder.release()
