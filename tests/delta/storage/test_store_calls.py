"""The store call counter: counts by kind, thread-safe, merged and subtracted as plain data, and the counting block
that decides where the storages opened inside it count."""

from __future__ import annotations

import pickle
import threading

from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.storage.store_calls import (FIELDS, KINDS, PROCESS_CALLS, StoreCalls, counting,
                                                           current_calls, empty_counts, merge_counts)


def test_counts_by_kind_as_plain_data():
    calls = StoreCalls()
    calls.add("get", nbytes=100)
    calls.add("get", nbytes=50)
    calls.add("deleteMany", objects=1000)
    calls.add("list", 0, objects=7)
    counts = calls.counts()
    assert set(counts) == set(KINDS) and all(set(c) == set(FIELDS) for c in counts.values())
    assert counts["get"] == {"calls": 2, "bytes": 150, "objects": 0}
    assert counts["deleteMany"] == {"calls": 1, "bytes": 0, "objects": 1000}
    assert counts["list"] == {"calls": 0, "bytes": 0, "objects": 7}
    assert calls.total() == 3
    counts["get"]["calls"] = 99  # a copy
    assert calls.counts()["get"]["calls"] == 2


def test_since_merge_and_empty_counts():
    calls = StoreCalls()
    calls.add("head")
    before = calls.counts()
    calls.add("head")
    calls.add("put", nbytes=10)
    delta = calls.since(before)
    assert delta["head"]["calls"] == 1 and delta["put"] == {"calls": 1, "bytes": 10, "objects": 0}
    other = StoreCalls()
    other.merge(delta)
    other.merge({"put": {"calls": 1}, "unknown": {"calls": 5}})  # missing fields count 0, unknown kinds are left out
    assert other.counts()["put"] == {"calls": 2, "bytes": 10, "objects": 0} and other.total() == 3
    assert merge_counts(empty_counts(), delta) == delta
    assert empty_counts() == StoreCalls().counts()


def test_counting_from_many_threads_loses_nothing():
    calls = StoreCalls()

    def work() -> None:
        for _ in range(10_000):
            calls.add("getRange", nbytes=3)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls.counts()["getRange"] == {"calls": 80_000, "bytes": 240_000, "objects": 0}


def test_storages_count_where_they_are_opened(tmp_path):
    """A storage counts into the counter it is given, else the counting block's it is opened in (a pickled copy:
    where it is unpickled), else the process's."""
    job, given = StoreCalls(), StoreCalls()
    assert current_calls() is PROCESS_CALLS
    with counting(job):
        assert current_calls() is job
        assert Storage(str(tmp_path)).calls is job
        assert Storage(str(tmp_path), calls=given).calls is given
        inner = StoreCalls()
        with counting(inner):
            assert current_calls() is inner
        assert current_calls() is job
        shipped = pickle.dumps(Storage(str(tmp_path)))
    assert current_calls() is PROCESS_CALLS
    assert pickle.loads(shipped).calls is PROCESS_CALLS
    with counting(job):
        assert pickle.loads(shipped).calls is job
    seen = []
    with counting(job):  # another thread has a context of its own
        t = threading.Thread(target=lambda: seen.append(current_calls()))
        t.start()
        t.join()
    assert seen == [PROCESS_CALLS]


def test_local_disk_is_not_counted(tmp_path):
    calls = StoreCalls()
    storage = Storage(str(tmp_path), calls=calls)
    storage.put("a/b.bin", b"x" * 10)
    assert storage.read("a/b.bin") == b"x" * 10 and storage.read_range("a/b.bin", 2, 4) == b"xx"
    assert storage.head("a/b.bin").size == 10 and [f.key for f in storage.list_from("a/")] == ["a/b.bin"]
    storage.delete("a/b.bin")
    assert calls.total() == 0
