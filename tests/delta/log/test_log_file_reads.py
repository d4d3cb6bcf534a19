"""Reading the replayed log files of an object-store table ahead, in order (``read_log_files``)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.log import checkpoint_read
from airflow_delta_maint.delta.log.checkpoint_read import read_log_files


class SlowStore:
    """A stand-in for an object-store Storage: each read waits, the later keys' the shortest."""

    is_local = False

    def __init__(self, files: dict[str, bytes], missing: set[str] = frozenset()) -> None:
        self.files, self.missing = files, missing
        self.reads: list[str] = []
        self.in_flight = self.most = 0
        self.lock = threading.Lock()

    def read(self, key: str) -> bytes:
        with self.lock:
            self.reads.append(key)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            time.sleep(0.002 * (1 + (len(self.files) - int(key)) % 5))
            if key in self.missing:
                raise FileNotFoundError(key)
            return self.files[key]
        finally:
            with self.lock:
                self.in_flight -= 1


def test_in_order_and_concurrent():
    store = SlowStore({str(i): f"file {i}".encode() for i in range(200)})
    keys = [str(i) for i in range(200)]
    assert list(read_log_files(store, keys)) == [f"file {i}".encode() for i in range(200)]  # type: ignore[arg-type]
    assert sorted(store.reads, key=int) == keys  # each file read once
    assert 1 < store.most <= checkpoint_read.LOG_READ_THREADS


def test_a_missing_file_raises_where_it_is_taken():
    store = SlowStore({str(i): b"x" for i in range(100)}, missing={"40"})
    got = []
    with pytest.raises(CorruptLogError, match="missing or unreadable: 40"):
        for data in read_log_files(store, [str(i) for i in range(100)]):  # type: ignore[arg-type]
            got.append(data)
    assert len(got) == 40


def test_reads_stay_within_the_window_and_stop_with_the_reader():
    store = SlowStore({str(i): b"x" for i in range(1000)})
    reader = read_log_files(store, [str(i) for i in range(1000)])  # type: ignore[arg-type]
    next(reader)
    time.sleep(0.2)
    assert len(store.reads) <= checkpoint_read.LOG_READ_AHEAD + 1
    reader.close()
    time.sleep(0.1)
    settled = len(store.reads)
    time.sleep(0.1)
    assert len(store.reads) == settled < 1000
