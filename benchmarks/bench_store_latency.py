"""Maintenance at an object store's speed (not a test): S3 jobs behind 20 ms of latency, against delta-rs.

Real object stores answer in 10-50 ms; moto on 127.0.0.1 in well under one. Every request here goes
through the fault proxy (``tests/storage/fault_proxy.py``, its own process) with a fixed
``latency_ms`` (each request waits on its own thread, so concurrent requests wait in parallel) in front
of a moto S3 server. The server runs in a child process of this script (``--serve``: moto's
``ThreadedMotoServer``) that also writes the tables straight into moto's backend (uploading 20,000
objects over HTTP would take minutes); each table copy gets a bucket of its own (moto walks a bucket's
every key for each listing page), dropped after its run. Both sides run on the same data, alternating,
each on a fresh copy; the proxy counts each side's requests by kind (``/__proxy__/stats``).

1. ``vacuum``: VACUUM full of 100 folders x (100 live + 100 orphan) tiny files: 10,000 live, 10,000
   orphans. Ours: the whole task as a user's runs it with no Spark, a fresh ``delta-maint vacuum
   --retention-hours 0 --ignore-retention-check`` process (a full VACUUM of a small table runs on the
   driver's threads: ``execution="auto"`` chooses ``local`` for it); delta-rs: a fresh process running
   ``DeltaTable(...).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False,
   full=True)``. Process wall times, imports included. Both must delete exactly the 10,000 orphans.
2. ``optimize``: the speed guard's OPTIMIZE table (800 files, 360 MB, 8 partitions; built by
   ``bench_guard.py`` under ``benchmarks/out/guard/src/optimize``), 256 MiB target. Ours in this process
   on a ``local[2]`` SparkSession started and warmed beforehand (Spark's start excluded); delta-rs
   ``optimize.compact(target_size=...)`` in a fresh process, timed after its import. Both remove the
   800 files and add 8.
3. ``worker_check``: the OptimizeOperator's check on the worker (no Spark) of a 100,000-file log
   (``bench_worker_checks.py``'s multi-part checkpoint and 1,000 commits, no data files); delta-rs
   ``DeltaTable`` + ``get_add_actions``. Each in a fresh process, timed after its imports.

Each side's best of ``--repeat`` rounds (on a shared machine other work only slows a run down).

Usage: python -m benchmarks.bench_store_latency [--repeat 2] [--latency-ms 20] [--only vacuum optimize worker_check]
       [--out benchmarks/out/store_latency.md]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"
TARGET = 256 << 20
LATENCY_MS = 20
PARTITIONS = 100
PER_PARTITION = 100
WORKER_CHECK_FILES = 100_000
JOBS = ("vacuum", "optimize", "worker_check")
CREDENTIALS = {"AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing"}
DELTA_MAINT = str(Path(sys.executable).with_name("delta-maint"))
_SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                        {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}


# -- the moto host (a child process) -----------------------------------------------------------------
def serve(port: int) -> None:
    """``--serve PORT``: moto's S3 on 127.0.0.1:PORT, and commands on standard input, one JSON object a
    line, each answered by one JSON line on standard output."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    _lean_listing()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    print(json.dumps({"ok": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            result = _command(backend, cmd)
            print(json.dumps({"ok": True, "result": result}), flush=True)
        except Exception as exc:  # the benchmark fails with the cause
            print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    server.stop()


def _lean_listing() -> None:
    """Answer ListObjectsV2 from a sorted walk of the bucket's keys, with the XML written directly.

    moto's own answer passes every object through its generic serializer (a timestamp parsed by
    dateutil, a dozen lookups per field): some 0.19 ms of Python per object, 3.7 s for 20,000 objects
    on this machine, one request at a time (the GIL). That would swamp the latency measured here, which
    a real store's listing (1,000 keys in tens of milliseconds) does not. Same answer: the page's keys
    in order, ``prefix``, ``delimiter`` (common prefixes), ``start-after``, ``max-keys``, continuation
    tokens, ``encoding-type=url``.
    """
    import bisect
    from urllib.parse import quote
    from xml.sax.saxutils import escape

    from moto.s3.exceptions import InvalidContinuationToken
    from moto.s3.responses import S3Response

    def list_objects_v2(self: Any) -> Any:
        bucket = self.backend.get_bucket(self.bucket_name)
        q = self.querystring
        token = q.get("continuation-token", [None])[0]
        if token == "":
            raise InvalidContinuationToken()
        prefix = q.get("prefix", [""])[0] or ""
        delimiter = q.get("delimiter", [None])[0] or None
        max_keys = int(q.get("max-keys", ["1000"])[0])
        start_after = q.get("start-after", [None])[0]
        url = q.get("encoding-type", [None])[0] == "url"
        after = bytes.fromhex(token).decode() if token else start_after
        keys = sorted(k for k in list(bucket.keys.keys()) if k.startswith(prefix))
        at = bisect.bisect_right(keys, after) if after else 0
        contents, folders, last = [], [], None
        truncated = False
        while at < len(keys):
            if len(contents) + len(folders) >= max_keys:
                truncated = True
                break
            key = keys[at]
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                folder = key[:cut + len(delimiter)]
                folders.append(folder)
                last = folder + "\U0010ffff"
                at = bisect.bisect_right(keys, last, at)
                continue
            contents.append(bucket.keys[key])
            last = key
            at += 1
        name = (lambda k: escape(quote(k, safe="/"))) if url else escape
        parts = ['<?xml version="1.0" encoding="UTF-8"?>',
                 '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
                 f"<Name>{escape(bucket.name)}</Name><Prefix>{name(prefix)}</Prefix><MaxKeys>{max_keys}</MaxKeys>",
                 f"<KeyCount>{len(contents) + len(folders)}</KeyCount><IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        if token:
            parts.append(f"<ContinuationToken>{token}</ContinuationToken>")
        elif start_after:
            parts.append(f"<StartAfter>{name(start_after)}</StartAfter>")
        if truncated and last is not None:
            parts.append(f"<NextContinuationToken>{last.encode().hex()}</NextContinuationToken>")
        for obj in contents:
            parts.append(f"<Contents><Key>{name(obj.name)}</Key><LastModified>{obj.last_modified_ISO8601}</LastModified>"
                         f"<ETag>{escape(obj.etag)}</ETag><Size>{obj.size}</Size>"
                         f"<StorageClass>{obj.storage_class}</StorageClass></Contents>")
        for folder in folders:
            parts.append(f"<CommonPrefixes><Prefix>{name(folder)}</Prefix></CommonPrefixes>")
        parts.append("</ListBucketResult>")
        return 200, {"Content-Type": "application/xml"}, "".join(parts)

    S3Response.list_objects_v2 = list_objects_v2  # type: ignore[method-assign]


def _command(backend: Any, cmd: dict[str, Any]) -> Any:
    op, bucket = cmd["op"], cmd.get("bucket")
    if op == "vacuum_table":
        backend.create_bucket(bucket, "us-east-1")
        return _vacuum_table(backend, bucket, cmd["partitions"], cmd["per"])
    if op == "upload":  # every file under a local folder, keys relative to it
        backend.create_bucket(bucket, "us-east-1")
        root = Path(cmd["dir"])
        n = 0
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not rel.startswith(".") and "/." not in rel and rel != ".done":
                backend.put_object(bucket, rel, path.read_bytes())
                n += 1
        return n
    if op == "count":  # data objects (the log left out)
        return sum(1 for k in backend.get_bucket(bucket).keys.keys() if not k.startswith("_delta_log/"))
    if op == "drop":
        b = backend.get_bucket(bucket)
        for key in list(b.keys.keys()):
            backend.delete_object(bucket, key)
        backend.delete_bucket(bucket)
        return None
    raise ValueError(f"unknown command {op!r}")


def _vacuum_table(backend: Any, bucket: str, partitions: int, per: int) -> int:
    """``partitions`` folders of ``per`` referenced files (one commit) and ``per`` orphans; the orphans."""
    body = b"PAR1" + b"\0" * 60 + b"PAR1"
    now = int(time.time() * 1000)
    actions: list[dict] = [
        {"commitInfo": {"timestamp": now, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(_SCHEMA), "partitionColumns": ["p"], "configuration": {},
                      "createdTime": now}}]
    orphans = 0
    for p in range(partitions):
        for i in range(2 * per):
            key = f"p={p}/part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
            backend.put_object(bucket, key, body)
            if i < per:
                actions.append({"add": {"path": key, "partitionValues": {"p": str(p)}, "size": len(body),
                                        "modificationTime": now, "dataChange": True}})
            else:
                orphans += 1
    backend.put_object(bucket, f"_delta_log/{0:020d}.json",
                       ("\n".join(json.dumps(a) for a in actions) + "\n").encode())
    return orphans


class MotoHost:
    """The ``--serve`` child: moto's S3 plus the commands that fill and empty its buckets."""

    def __init__(self) -> None:
        from tests.storage.servers import free_port, wait_for_port

        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_store_latency", "--serve",
                                      str(self.port)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self._lock = threading.Lock()
        self._answer()
        wait_for_port(self.port, self.proc)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _answer(self) -> Any:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the moto host exited ({self.proc.poll()})")
        answer = json.loads(line)
        if not answer["ok"]:
            raise RuntimeError(answer["error"])
        return answer.get("result")

    def call(self, op: str, **kw: Any) -> Any:
        with self._lock:
            self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            return self._answer()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class LatencyProxy:
    """``tests/storage/fault_proxy.py`` in front of ``upstream``: no faults, ``latency_ms`` per request."""

    def __init__(self, upstream: str, latency_ms: float) -> None:
        from tests.storage.servers import free_port, wait_for_port

        self.port = free_port()
        self.latency_ms = latency_ms
        config = json.dumps({"store": "s3", "latency_ms": latency_ms})
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.storage.fault_proxy", "--upstream", upstream,
                                      "--port", str(self.port), "--config", config], cwd=REPO,
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        wait_for_port(self.port, self.proc)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.endpoint}/__proxy__/{path}", data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        """Counts start again from zero (the latency stays)."""
        self._call("PUT", "config", {"store": "s3", "latency_ms": self.latency_ms})

    def requests(self) -> dict[str, int]:
        return dict(sorted(self._call("GET", "stats")["requests"].items()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)


# -- one side's run ----------------------------------------------------------------------------------
def _rs_process(code: str, options: dict[str, str]) -> tuple[float, float]:
    """delta-rs ``code`` (``dt``: the table) in a fresh process: (seconds after its import, process wall)."""
    script = ("import sys, time\nfrom deltalake import DeltaTable\nt = time.perf_counter()\n"
              f"{code}\nprint(time.perf_counter() - t)\n")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, **options})
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"delta-rs: {proc.stderr[-2000:]}")
    return float(proc.stdout.split()[-1]), wall


def _storage_args(options: dict[str, str]) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in options.items()]


class Bench:
    """The servers and one round of each job."""

    def __init__(self, latency_ms: float) -> None:
        self.host = MotoHost()
        self.proxy = LatencyProxy(self.host.endpoint, latency_ms)
        self.options = {"AWS_ENDPOINT_URL": self.proxy.endpoint, **CREDENTIALS}
        self.counts: dict[str, dict[str, dict[str, int]]] = {}
        self.results: dict[str, list[tuple[float, float]]] = {}
        self._n = 0

    def stop(self) -> None:
        self.proxy.stop()
        self.host.stop()

    def _bucket(self, job: str, who: str) -> str:
        self._n += 1
        return f"{job.replace('_', '-')}-{who}-{self._n}"

    def _counted(self, job: str, who: str, run: Callable[[], float]) -> float:
        self.proxy.reset()
        took = run()
        self.counts.setdefault(job, {})[who] = self.proxy.requests()
        return took

    # VACUUM: whole processes
    def vacuum_side(self, who: str) -> float:
        bucket = self._bucket("vacuum", who)
        orphans = self.host.call("vacuum_table", bucket=bucket, partitions=PARTITIONS, per=PER_PARTITION)
        before = self.host.call("count", bucket=bucket)
        uri = f"s3://{bucket}/"
        if who == "ours":
            def run() -> float:
                started = time.perf_counter()
                proc = subprocess.run([DELTA_MAINT, "vacuum", uri, "--retention-hours", "0",
                                       "--ignore-retention-check", "--json", *_storage_args(self.options)],
                                      capture_output=True, text=True)
                took = time.perf_counter() - started
                if proc.returncode:
                    raise RuntimeError(f"ours: {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
                return took
        else:
            def run() -> float:
                return _rs_process(f"DeltaTable({uri!r}).vacuum(retention_hours=0, enforce_retention_duration=False, "
                                   "dry_run=False, full=True)", self.options)[1]
        try:
            took = self._counted("vacuum", who, run)
            deleted = before - self.host.call("count", bucket=bucket)
            if deleted != orphans:
                raise RuntimeError(f"{who} VACUUM deleted {deleted} objects, expected {orphans}")
        finally:
            self.host.call("drop", bucket=bucket)
        return took

    # OPTIMIZE: ours on the warm session, delta-rs after its import
    def optimize_side(self, who: str) -> float:
        from benchmarks.bench_guard import source

        bucket = self._bucket("optimize", who)
        self.host.call("upload", bucket=bucket, dir=str(source("optimize")))
        uri = f"s3://{bucket}/"
        if who == "ours":
            def run() -> float:
                from airflow_delta_maint.app.cli import run as cli_run

                started = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    code, m = cli_run(["optimize", uri, "--target-file-size", str(TARGET), "--json",
                                       *_storage_args(self.options)])
                took = time.perf_counter() - started
                if code or m.get("numRemovedFiles") != 800 or m.get("numAddedFiles") != 8:
                    raise RuntimeError(f"ours: {m}")
                return took
        else:
            def run() -> float:
                return _rs_process(f"m = DeltaTable({uri!r}).optimize.compact(target_size={TARGET})\n"
                                   "assert m['numFilesRemoved'] == 800 and m['numFilesAdded'] == 8, m",
                                   self.options)[0]
        try:
            return self._counted("optimize", who, run)
        finally:
            self.host.call("drop", bucket=bucket)

    # the worker's OPTIMIZE check: fresh processes, timed after their imports
    def worker_check_side(self, who: str) -> float:
        bucket = self._bucket("check", who)
        self.host.call("upload", bucket=bucket, dir=str(worker_check_log()))
        uri = f"s3://{bucket}/"
        check = "optimize" if who == "ours" else "delta_rs"
        env = {**os.environ, **self.options}

        def run() -> float:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_worker_checks", "--child", check, "after",
                                   uri], capture_output=True, text=True, cwd=REPO, env=env)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode or not lines or json.loads(lines[-1])["status"] != "ok":
                raise RuntimeError(f"{check}: {proc.stdout[-500:]} {proc.stderr[-2000:]}")
            out = json.loads(lines[-1])
            if who == "rs" and int(out["result"]) < WORKER_CHECK_FILES:  # 100,900 live after the commits
                raise RuntimeError(f"delta-rs listed {out['result']} files")
            return float(out["seconds"])
        try:
            return self._counted("worker_check", who, run)
        finally:
            self.host.call("drop", bucket=bucket)

    def round(self, job: str, first: str = "ours") -> tuple[float, float]:
        side = {"vacuum": self.vacuum_side, "optimize": self.optimize_side, "worker_check": self.worker_check_side}[job]
        order = ("ours", "rs") if first == "ours" else ("rs", "ours")
        took = {who: side(who) for who in order}
        self.results.setdefault(job, []).append((took["ours"], took["rs"]))
        print(f"{job}: ours {took['ours']:.2f} s, delta-rs {took['rs']:.2f} s "
              f"({took['ours'] / took['rs']:.2f}x)", flush=True)
        return took["ours"], took["rs"]

    def best(self, job: str) -> tuple[float, float]:
        runs = self.results[job]
        return min(o for o, _ in runs), min(r for _, r in runs)


def worker_check_log() -> Path:
    from benchmarks.bench_worker_checks import generate

    return generate(WORKER_CHECK_FILES, "multipart")


def warm_spark() -> Any:
    """A ``local[2]`` session with its Python workers started (OPTIMIZE excludes Spark's start)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_delta_maint.app.spark_session import get_spark

    spark = get_spark("local[2]", "bench-store-latency")
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
    return spark


GOALS = {"vacuum": 0.5, "optimize": 0.8, "worker_check": 0.5}
TITLES = {"vacuum": "VACUUM full, 20,000 objects (10,000 orphans), whole process",
          "optimize": "OPTIMIZE, 800 files (360 MB), Spark's start excluded",
          "worker_check": "the worker's OPTIMIZE check, 100,000 files"}


def report(bench: Bench, latency_ms: float, repeat: int) -> str:
    lines = [f"S3 (moto) behind {latency_ms:g} ms a request; best of {repeat} rounds; load average "
             f"{os.getloadavg()[0]:.1f} at the end.", "",
             "| job | ours (s) | delta-rs (s) | ours ÷ delta-rs | goal | runs (ours / delta-rs) |",
             "|---|---:|---:|---:|---:|---|"]
    for job in JOBS:
        if job not in bench.results:
            continue
        ours, rs = bench.best(job)
        runs = ", ".join(f"{o:.2f} / {r:.2f}" for o, r in bench.results[job])
        lines.append(f"| {TITLES[job]} | {ours:.2f} | {rs:.2f} | {ours / rs:.2f} | ≤ {GOALS[job]:.2f} | {runs} |")
    lines += ["", "Requests of the last round, by kind (the proxy's counts):", ""]
    for job, per in bench.counts.items():
        for who, counts in per.items():
            name = "ours" if who == "ours" else "delta-rs"
            lines.append(f"- {job}, {name}: {sum(counts.values())} ("
                         + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=LATENCY_MS)
    parser.add_argument("--only", nargs="+", choices=JOBS)
    parser.add_argument("--out", type=Path, default=OUT / "store_latency.md")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    import logging

    logging.basicConfig(level=logging.WARNING)
    wanted = [j for j in JOBS if j in (args.only or JOBS)]
    if "optimize" in wanted:  # built before the clock runs
        from benchmarks.bench_guard import source

        source("optimize")
    if "worker_check" in wanted:
        worker_check_log()
    bench = Bench(args.latency_ms)
    spark = None
    try:
        if "optimize" in wanted:
            spark = warm_spark()
        for n in range(args.repeat):
            for job in wanted:
                bench.round(job, "ours" if n % 2 == 0 else "rs")
    finally:
        if spark is not None:
            spark.stop()
        bench.stop()
    text = report(bench, args.latency_ms, args.repeat)
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
