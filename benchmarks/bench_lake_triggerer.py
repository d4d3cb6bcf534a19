"""A thousand table watchers in a real ``airflow triggerer``: its memory, its listings, and one firing.

An Airflow home in a temporary folder (SQLite, as the end-to-end tests use) holds one DAG file that schedules a
DAG on ``--tables`` assets (default 1,000), each with an asset watcher running a
:class:`~airflow_delta_maint.triggers.table_commits.TableCommitsTrigger` (``min_commits=5``) on its own table.
The tables are logs only, four commits each, on a moto S3 server (a child process, seeded as
``bench_lake_scale`` seeds it); the triggers reach moto through the fault proxy of ``tests/storage`` (no faults,
run in this process) so every request is counted, by kind and by table.

Route: asset watchers, not deferred sensors. ``airflow dag-processor`` parses the DAG and registers one trigger
per watcher in the metadata database, as in production; then it is stopped, and ``airflow triggerer`` runs the
triggers. A thousand deferred ``CommitIntervalSensor`` task instances would need a scheduler and a thousand
task starts on two cores before the triggerer holds a single trigger; the triggerer runs the same
``TriggerRunner`` loop for both.

Measured: the time until the triggerer runs every trigger and until every table had its first check; then,
over ``--polls`` poll intervals of ``--poke-interval`` seconds, the store requests per table by kind (the
listings per table per interval, the mean and the most of any table); the peak RSS of each process of the
triggerer (``VmHWM``: the supervisor and its trigger-runner child, and the log server) and of their sum
(sampled every 0.5 s); and, after a commit written to one table, that its trigger fires (an asset event for that
table and no other) and how long it took.

Usage: ``.venv/bin/python -m benchmarks.bench_lake_triggerer [--tables 1000] [--poke-interval 30] [--polls 3]``;
prints a JSON object and writes it to ``benchmarks/out/lake_triggerer.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "storage"))
from benchmarks.bench_lake_scale import commit_bytes, write_s3_lake  # noqa: E402
from fault_proxy import Config, FaultState, make_handler, request_kind  # noqa: E402
from servers import start_moto  # noqa: E402

from tests.airflow.delta_maint_testing import stop_process_group  # noqa: E402

OUT = REPO / "benchmarks" / "out"
BIN = Path(sys.executable).parent
DAG_ID = "lake_of_a_thousand_tables"
#: commits each table is seeded with; the watchers fire at one more
SEEDED_COMMITS = 4
MIN_COMMITS = SEEDED_COMMITS + 1
CLASSPATH = "airflow_delta_maint.triggers.table_commits.TableCommitsTrigger"

DAG_FILE = '''"""A DAG scheduled on any of a lake's tables crossing its commit threshold (one asset watcher per table)."""

import json
import os

from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher, task

from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

with open(os.path.join(os.path.dirname(__file__), "lake_tables.json")) as fh:
    SPEC = json.load(fh)

tables = [
    Asset(name=f"lake_{i:04d}", uri=uri, watchers=[AssetWatcher(
        name=f"lake_{i:04d}_commits",
        trigger=TableCommitsTrigger(table_uri=uri, min_commits=SPEC["min_commits"],
                                    poke_interval=SPEC["poke_interval"]))])
    for i, uri in enumerate(SPEC["tables"])
]

with DAG(dag_id="%s", schedule=AssetAny(*tables), catchup=False):

    @task
    def maintain(triggering_asset_events=None) -> list[str]:
        return [event.extra["table_uri"] for events in triggering_asset_events.values() for event in events]

    maintain()
''' % DAG_ID


class TableCounts:
    """Store requests by table and kind (the table is the key's first part, a listing's prefix's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)

    def add(self, method: str, target: str, headers: Any) -> None:
        kind = request_kind(method, target, headers)
        parts = urlsplit(target)
        if kind == "LIST":
            key = (parse_qs(parts.query).get("prefix") or [""])[0]
        else:
            key = unquote(parts.path).lstrip("/").split("/", 1)[-1]   # path style: /bucket/key
        with self.lock:
            self.counts[key.split("/", 1)[0]][kind] += 1

    def take(self) -> dict[str, Counter[str]]:
        """The counts so far, and start again from zero."""
        with self.lock:
            out, self.counts = dict(self.counts), defaultdict(Counter)
        return out


def start_proxy(upstream: str, tables: TableCounts) -> tuple[ThreadingHTTPServer, str]:
    """The fault proxy (no faults) in a thread of this process, counting each request by table too."""
    base = make_handler(FaultState(Config()), upstream)

    def handle(self: Any) -> None:
        tables.add(self.command, self.path, self.headers)
        base.do_GET(self)   # the proxy's one handler, for every method

    handler = type("TableCountingHandler", (base,), {"do_GET": handle, "do_PUT": handle, "do_POST": handle,
                                                      "do_DELETE": handle, "do_HEAD": handle})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class TreeSampler:
    """Samples the RSS of a process and its descendants every 0.5 s (a thread); keeps each one's ``VmHWM``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_sum = 0
        self.peak_pss_sum = 0
        self.hwm: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = pss = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                    pss += p.memory_full_info().pss   # shared pages (the forked runner's) counted once
                    status = Path(f"/proc/{p.pid}/status").read_text()
                    hwm = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
                    self.hwm[p.pid] = (" ".join(p.cmdline())[:120], hwm * 1024)
                except (psutil.Error, OSError, StopIteration):
                    pass
            self.peak_sum = max(self.peak_sum, total)
            self.peak_pss_sum = max(self.peak_pss_sum, pss)
            self._stop.wait(0.5)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(5)
        return {"peak_rss_sum_mib": round(self.peak_sum / 2**20), "peak_pss_sum_mib": round(self.peak_pss_sum / 2**20),
                "peak_rss_by_process_mib": {f"{pid} {cmd}": round(rss / 2**20)
                                            for pid, (cmd, rss) in sorted(self.hwm.items())}}


def _env(home: Path, endpoint: str, capacity: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__TRIGGERER__CAPACITY": str(capacity), "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    return env


def _start(home: Path, env: dict[str, str], name: str) -> subprocess.Popen:
    with open(home / f"{name}.log", "wb") as log:
        return subprocess.Popen([str(BIN / "airflow"), name], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop one component and its children (its own session), by its process id."""
    stop_process_group(proc)


def _query(db: Path, sql: str, *args: Any) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def _wait(condition: Callable[[], bool], timeout: float, what: str, procs: list[subprocess.Popen]) -> float:
    """Seconds until ``condition`` held (polled every 0.5 s); fails when a process died or time ran out."""
    started = time.monotonic()
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - started


def _per_table(counts: dict[str, Counter[str]], tables: list[str], intervals: float) -> dict[str, Any]:
    kinds = sorted({k for c in counts.values() for k in c})
    n = len(tables)
    return {kind: {"mean": round(sum(counts.get(t, Counter())[kind] for t in tables) / n / intervals, 3),
                   "max": round(max(counts.get(t, Counter())[kind] for t in tables) / intervals, 3)}
            for kind in kinds}


def _register(home: Path, env: dict[str, str], n: int) -> float:
    """Run the dag-processor until the metadata database holds ``n`` table triggers; seconds it took."""
    db = home / "airflow.db"
    processor = _start(home, env, "dag-processor")
    try:
        return _wait(lambda: _query(db, "SELECT count(*) FROM trigger WHERE classpath = ?", CLASSPATH)[0][0] >= n,
                     600, f"{n} triggers registered", [processor])
    finally:
        _stop(processor)


def _watch(home: Path, env: dict[str, str], uris: list[str], counts: TableCounts, moto_endpoint: str,
           polls: int, interval: float) -> dict[str, Any]:
    """Run the triggerer: until every trigger runs and every table was checked, then ``polls`` intervals, then
    one table's commit until its event."""
    db, n = home / "airflow.db", len(uris)
    names = [u.removeprefix("s3://lake/") for u in uris]
    counts.take()
    triggerer = _start(home, env, "triggerer")
    sampler = TreeSampler(triggerer.pid)
    out: dict[str, Any] = {}
    try:
        out["all_running_s"] = round(_wait(lambda: _query(
            db, "SELECT count(*) FROM trigger WHERE classpath = ? AND triggerer_id IS NOT NULL", CLASSPATH)[0][0] >= n,
            600, "the triggerer to take every trigger", [triggerer]), 1)
        seen: dict[str, Counter[str]] = defaultdict(Counter)

        def all_checked() -> bool:
            for table, c in counts.take().items():
                seen[table].update(c)
            return all(seen[t]["GET"] + seen[t]["RANGE_GET"] >= SEEDED_COMMITS for t in names)
        out["all_checked_after_s"] = round(_wait(all_checked, 600, "every table's first check", [triggerer]), 1)
        out["first_check_per_table"] = _per_table(seen, names, 1)
        counts.take()
        time.sleep(polls * interval)
        out["per_table_per_interval"] = _per_table(counts.take(), names, polls)
        out["fired"] = _fire_one(db, uris, moto_endpoint, interval, triggerer)
    finally:
        out.update(sampler.stop())
        _stop(triggerer)
    return out


def _fire_one(db: Path, uris: list[str], moto_endpoint: str, interval: float,
              triggerer: subprocess.Popen) -> dict[str, Any]:
    """Commit to the middle table (straight to moto) and wait for its asset event."""
    import boto3

    uri = uris[len(uris) // 2]
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    key = f"{uri.removeprefix('s3://lake/')}/_delta_log/{SEEDED_COMMITS:020d}.json"
    s3.put_object(Bucket="lake", Key=key, Body=commit_bytes([{"commitInfo": {"operation": "WRITE"}}]),
                  IfNoneMatch="*")
    seconds = _wait(lambda: bool(_query(db, "SELECT count(*) FROM asset_event")[0][0]), 4 * interval + 120,
                    "the event of the table written to", [triggerer])
    time.sleep(2)
    events = [json.loads(extra) for (extra,) in _query(db, "SELECT extra FROM asset_event")]
    payloads = [e.get("payload", e) for e in events]
    return {"table": uri, "seconds_to_event": round(seconds, 1), "events": len(payloads),
            "payload": payloads[0] if payloads else None,
            "only_that_table": all(p.get("table_uri") == uri for p in payloads)}


def measure(tables: int, polls: int, interval: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="lake-triggerer-"))
    moto = start_moto(work)
    counts = TableCounts()
    proxy, endpoint = start_proxy(moto.endpoint, counts)
    try:
        started = time.perf_counter()
        uris = write_s3_lake(moto.endpoint, tables)
        out: dict[str, Any] = {"tables": tables, "poke_interval_s": interval, "polls": polls,
                               "build_s": round(time.perf_counter() - started, 1)}
        home = work / "home"
        (home / "dags").mkdir(parents=True)
        (home / "dags" / "lake_tables.json").write_text(json.dumps(
            {"tables": uris, "min_commits": MIN_COMMITS, "poke_interval": interval}))
        (home / "dags" / f"{DAG_ID}.py").write_text(DAG_FILE)
        env = _env(home, endpoint, max(1000, tables))
        migrated = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True)
        if migrated.returncode:
            raise RuntimeError(migrated.stderr[-3000:])
        out["registered_s"] = round(_register(home, env, tables), 1)
        out.update(_watch(home, env, uris, counts, moto.endpoint, polls, interval))
        return out
    finally:
        proxy.shutdown()
        proxy.server_close()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=3, help="poll intervals counted")
    parser.add_argument("--poke-interval", type=float, default=30.0)
    args = parser.parse_args()
    load = os.getloadavg()
    result = measure(args.tables, args.polls, args.poke_interval)
    result["load_average_before"] = [round(x, 2) for x in load]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=1)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "lake_triggerer.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
