"""What the fault tests share: a fault proxy process in front of a store, a small table written by delta-rs
(once a process, on local disk) and copied to the store, and the checks a table must pass after a job ran
through the proxy (the rows as delta-rs and DuckDB read them, referenced files, commits)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.app.execution import run_in_process
from airflow_delta_maint.delta.storage.store import Storage
from tests.storage.conftest import Store
from tests.storage.duckdb_reader import duckdb_rows
from tests.storage.servers import REPO, free_port, wait_for_port

#: the faults a seeded run draws, spread evenly over every request kind (timeouts are tested on their own)
RANDOM_FAULTS = ("slowdown", "internal", "reset", "reset_body", "lost_reply")
#: the share of requests a seeded run fails
RATE = 0.05
COMMITS = 12
ROWS = 10
#: the partition column of the tables :func:`append` writes (its value: the row's id modulo 2)
PARTITION = "part"


@dataclass
class Proxy:
    """A running fault proxy (``tests/storage/fault_proxy.py``) in front of one store."""

    port: int
    proc: subprocess.Popen
    store: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.endpoint}/__proxy__/{path}", data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def configure(self, seed: int = 0, rates: dict[str, dict[str, float]] | None = None,
                  script: list[dict[str, Any]] | None = None, latency_ms: float = 0, hold_s: float = 10) -> None:
        """Replace the proxy's faults (none by default); counts start again."""
        self._call("PUT", "config", {"store": self.store, "seed": seed, "rates": rates or {}, "script": script or [],
                                     "latency_ms": latency_ms, "hold_s": hold_s})

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "stats")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)


def start_proxy(upstream: str, store: str, seed: int = 0, config: dict[str, Any] | None = None) -> Proxy:
    """``python -m tests.storage.fault_proxy`` on a free port, its own process group."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.storage.fault_proxy", "--upstream", upstream, "--port", str(port),
            "--seed", str(seed), "--config", json.dumps({"store": store, **(config or {})})]
    proc = subprocess.Popen(argv, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return Proxy(port, proc, store)


def through(store: Store, proxy: Proxy) -> dict[str, str]:
    """The store's options with the endpoint at the proxy."""
    if store.name == "s3":
        return {**store.options, "AWS_ENDPOINT_URL": proxy.endpoint}
    return {**store.options, "endpoint": f"{proxy.endpoint}/{store.options['account_name']}"}


def storage_args(options: dict[str, str]) -> list[str]:
    return [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]


@contextlib.contextmanager
def delta_rs_env(store: Store) -> Iterator[None]:
    """The emulator variables delta-rs 1.6.0 needs to list Azurite right, for the length of a delta-rs call
    only: obstore would send the jobs' requests to the emulator's own URL, around the proxy. DuckDB's delta
    extension needs them too: it reads Azurite's log with object_store in emulator mode (set for the account
    ``devstoreaccount1`` whatever the secret says), whose address comes from ``AZURITE_BLOB_STORAGE_URL`` only."""
    if store.name != "azure":
        yield
        return
    saved = {k: os.environ.get(k) for k in ("AZURE_STORAGE_USE_EMULATOR", "AZURITE_BLOB_STORAGE_URL")}
    os.environ.update({"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": store.server.endpoint})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def local_table(commits: int, strip: tuple[int, ...], days: int | None) -> Path:
    """delta-rs appends ``commits`` times to two partitions (2 * ``commits`` small files) in a local folder, and
    its log is rewritten (:func:`rewrite_log`); written once a process, copied to the store for each new table."""
    folder = Path(tempfile.mkdtemp(prefix="delta-maint-fault-table-"))
    atexit.register(shutil.rmtree, folder, True)
    for i in range(commits):
        append(str(folder), {}, i)
    rewrite_log(str(folder), {}, commits, strip, days)
    return folder


def upload(folder: Path, uri: str, options: dict[str, str]) -> None:
    """Every file of a local table to the table at ``uri``, put in parallel: the objects delta-rs would have
    written there, without its round of requests per commit."""
    storage = Storage(uri, options)
    files = [f for f in sorted(folder.rglob("*")) if f.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda f: storage.put(f.relative_to(folder).as_posix(), f.read_bytes()), files))


def append(uri: str, options: dict[str, str], i: int) -> None:
    """delta-rs appends the ``i``-th batch of ``ROWS`` rows (two files, one per partition)."""
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), PARTITION: pa.array([x % 2 for x in ids]),
                                   "value": pa.array([f"v{x}" for x in ids])}),
                    mode="append", partition_by=[PARTITION], storage_options=options)


def rewrite_log(uri: str, options: dict[str, str], commits: int, strip: tuple[int, ...], days: int | None) -> None:
    """Rewrite the commits delta-rs wrote: no statistics in the adds of the versions in ``strip`` (work for
    compute-stats), and with ``days``, in-commit timestamps that many days back, one second apart (the table
    enables them from version 0, and delta-rs can no longer write to it), so the commits are older than
    cleanup-log's cut-off."""
    storage = Storage(uri, options)
    start = int(time.time() * 1000) - (days or 0) * 86_400_000
    for version in range(commits):
        key = f"_delta_log/{version:020d}.json"
        actions = [json.loads(line) for line in storage.read(key).decode().splitlines() if line.strip()]
        if days is not None:
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            info["inCommitTimestamp"] = info["timestamp"] = start + version * 1000
            actions = [{"commitInfo": info}] + [a for a in actions if "commitInfo" not in a]
        for action in actions:
            if version in strip:
                action.get("add", {}).pop("stats", None)
            if days is None:
                continue
            if "protocol" in action:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["inCommitTimestamp"]}
            if "metaData" in action:
                action["metaData"].setdefault("configuration", {})["delta.enableInCommitTimestamps"] = "true"
        storage.put(key, "".join(json.dumps(a) + "\n" for a in actions).encode())


def live_files(store: Store, uri: str) -> tuple[int, list[str]]:
    """(version, keys of the live files) as delta-rs sees the table, reading straight from the store."""
    with delta_rs_env(store):
        dt = DeltaTable(uri, storage_options=store.options)
        version, uris = dt.version(), dt.file_uris()
    storage = Storage(uri, store.options)
    keys = [storage.key_for_path(u) for u in uris]
    assert None not in keys, uris
    return version, [k for k in keys if k is not None]


def rows(store: Store, uri: str) -> tuple[int, Counter]:
    """(version, rows) as delta-rs sees the table: its live files, each read from the store.
    A live file that is missing raises FileNotFoundError."""
    version, keys = live_files(store, uri)
    storage = Storage(uri, store.options)
    counter: Counter = Counter()
    for key in keys:
        for row in pq.read_table(io.BytesIO(storage.read(key))).to_pylist():
            counter[tuple(sorted(row.items()))] += 1
    return version, counter


def duckdb_counter(store: Store, uri: str) -> Counter:
    """The rows DuckDB reads (:func:`~tests.storage.duckdb_reader.duckdb_rows`) as :func:`rows` counts them: the
    columns of the data files, once each partition value is checked against the row's id."""
    counter: Counter = Counter()
    with delta_rs_env(store):
        read = duckdb_rows(store, uri)
    for row in read:
        assert row.pop(PARTITION) == row["id"] % 2, row
        counter[tuple(sorted(row.items()))] += 1
    return counter


def data_files(uri: str, options: dict[str, str]) -> set[str]:
    """The keys of the table's data files: its objects outside hidden folders (``_delta_log``, leases)."""
    return {f.key for f in Storage(uri, options).list_recursive() if not f.key.startswith("_")}


def removed_files(uri: str, options: dict[str, str]) -> set[str]:
    """The keys of the files the log's commits remove."""
    storage = Storage(uri, options)
    out = set()
    for f in storage.list_from("_delta_log/"):
        if f.key.endswith(".json") and f.key.count(".") == 1:
            for line in storage.read(f.key).decode().splitlines():
                remove = json.loads(line).get("remove") if line.strip() else None
                if remove:
                    out.add(storage.key_for_path(remove["path"]))
    return out


def commits(uri: str, options: dict[str, str], after: int) -> list[dict[str, Any]]:
    """The commitInfo of every version after ``after``, oldest first."""
    storage = Storage(uri, options)
    out = []
    for f in storage.list_from("_delta_log/"):
        name = f.key.rsplit("/", 1)[-1]
        stem = name.split(".")[0]
        if name.endswith(".json") and name.count(".") == 1 and stem.isdigit() and int(stem) > after:
            for line in storage.read(f.key).decode().splitlines():
                action = json.loads(line)
                if "commitInfo" in action:
                    out.append(action["commitInfo"])
    return out


@pytest.fixture(scope="module", params=["s3_store", "azure_store"], ids=["s3", "azure"])
def proxied(request) -> Iterator[tuple[Store, Proxy]]:
    """A store and a fault proxy in front of it (faults off until a test configures them)."""
    store: Store = request.getfixturevalue(request.param)
    proxy = start_proxy(store.server.endpoint, "azure" if store.name == "azure" else "s3")
    try:
        yield store, proxy
    finally:
        proxy.stop()


@pytest.fixture
def clean_env(monkeypatch) -> None:
    """No store variable in the environment: the jobs get options only (the proxy's endpoint)."""
    for key in list(os.environ):
        if key.startswith(("AWS_", "AZURE_", "AZURITE_")):
            monkeypatch.delenv(key)


#: how a job runs: (job, table, arguments, storage options) -> (exit code, metrics)
Runner = Callable[[str, str, list[str], dict[str, str]], tuple[int, dict]]


@dataclass
class Table:
    """A table under test: reached straight (``store.options``) and through the proxy (``faulty``)."""

    store: Store
    proxy: Proxy
    uri: str
    before: Counter
    #: the version the last check read
    version: int
    stats: dict[str, Any] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)

    @property
    def options(self) -> dict[str, str]:
        return self.store.options

    @property
    def faulty(self) -> dict[str, str]:
        return through(self.store, self.proxy)

    def run(self, job: str, argv: list[str], seed: int | None = None, options: dict[str, str] | None = None,
            runner: Runner | None = None, **faults: Any) -> tuple[int, dict]:
        """Run ``job`` through the proxy (``options`` added to its storage options), in this process or with
        ``runner`` (e.g. :func:`~tests.storage.fault_submit.submit`'s spark-submit), with seeded random faults
        (at :data:`RATE`, and ``faults`` besides, e.g. a script) or ``faults`` only; faults are off again
        afterwards."""
        if seed is not None:
            faults = {"seed": seed, "rates": {"*": {f: RATE / len(RANDOM_FAULTS) for f in RANDOM_FAULTS}},
                      "latency_ms": 20, **faults}
        self.proxy.configure(**faults)
        try:
            return (runner or run_in_process)(job, self.uri, argv, {**self.faulty, **(options or {})})
        finally:
            self.stats = self.proxy.stats()
            self.proxy.configure()

    def check(self) -> int:
        """The rows are the same, read by delta-rs and by DuckDB, and every live file is there (a missing one fails
        either read); the version."""
        self.version, now = rows(self.store, self.uri)
        assert now == self.before
        assert duckdb_counter(self.store, self.uri) == now
        return self.version

    def live(self) -> set[str]:
        return set(live_files(self.store, self.uri)[1])


def new_table(store: Store, proxy: Proxy, path: str, days: int | None = 3) -> Table:
    """A fresh table of 24 files, four of them without statistics, its commits ``days`` old (so compute-stats
    and cleanup-log have work; None: delta-rs's own timestamps, and delta-rs can still write to it)."""
    uri = store.uri(path)
    upload(local_table(COMMITS, (0, 1), days), uri, store.options)
    version, before = rows(store, uri)
    return Table(store, proxy, uri, before, version)
