"""Object-store benchmark (not a test): VACUUM full and OPTIMIZE on a moto S3 server, against delta-rs.

The server is moto's S3 (``moto[server]``) on 127.0.0.1, started by this script and stopped by
its process id. Each job runs on its own identical copy of the table, built the same way:

1. VACUUM full: 100 partition folders x 100 referenced files (one commit of 10,000 adds) plus 100
   orphan objects per folder: 20,000 objects, 10,000 of them orphans. Ours:
   ``delta-maint vacuum --retention-hours 0 --ignore-retention-check`` (in-process on a
   SparkSession started and warmed beforehand, so JVM start-up is excluded); delta-rs 1.6.0:
   ``DeltaTable.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)``.
2. OPTIMIZE: 500 small files (50 delta-rs appends over 10 partitions). Ours: ``delta-maint optimize``
   (bin-packing, in-process, Spark warmed); delta-rs: ``DeltaTable.optimize.compact()``.

Both readers count the table's rows before and after each OPTIMIZE (the same number), and each
VACUUM must delete exactly the 10,000 orphans. Moto keeps no request log, so request counts are
counted by moto; ``--count-requests`` adds one untimed run of each side through a counting proxy
(``benchmarks/counting_proxy.py``). Medians of ``--repeat`` runs, alternating, each on a fresh copy.

Usage: python -m benchmarks.bench_object_store [--repeat 3] [--jobs vacuum,optimize] [--count-requests]
       [--out benchmarks/out/object_store.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 100
PER_PARTITION = 100
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                       {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}


def _store(env: dict[str, str], bucket: str):
    from obstore.store import S3Store

    return S3Store(bucket, endpoint=env["AWS_ENDPOINT_URL"], region="us-east-1", access_key_id="testing",
                   secret_access_key="testing", client_options={"allow_http": True})


def build_vacuum_table(env: dict[str, str], bucket: str, prefix: str) -> int:
    """Upload the referenced files, the orphans and one commit; returns the number of orphans."""
    import obstore

    store = _store(env, bucket)
    body = b"PAR1" + b"\0" * 60 + b"PAR1"
    keys = [f"{prefix}/p={p}/part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
            for p in range(PARTITIONS) for i in range(2 * PER_PARTITION)]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: obstore.put(store, k, body), keys))
    now = int(time.time() * 1000)
    actions = [{"commitInfo": {"timestamp": now, "operation": "WRITE"}},
               {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(SCHEMA), "partitionColumns": ["p"], "configuration": {},
                             "createdTime": now}}]
    referenced = [k for n, k in enumerate(keys) if n % (2 * PER_PARTITION) < PER_PARTITION]
    for k in referenced:
        rel = k[len(prefix) + 1:]
        actions.append({"add": {"path": rel, "partitionValues": {"p": rel.split("/")[0][2:]}, "size": len(body),
                                "modificationTime": now, "dataChange": True}})
    obstore.put(store, f"{prefix}/_delta_log/{0:020d}.json",
                ("\n".join(json.dumps(a) for a in actions) + "\n").encode())
    return len(keys) - len(referenced)


def build_optimize_table(uri: str, options: dict[str, str]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    n = 0
    for _ in range(50):
        ids = list(range(n, n + 1000))
        n += 1000
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "p": [f"k{i % 10}" for i in ids]}),
                        mode="append", partition_by=["p"], storage_options=options)


def count_objects(env: dict[str, str], bucket: str, prefix: str) -> int:
    """Data objects of the table (its log left out: VACUUM commits and writes its watermark there)."""
    import obstore

    return sum(1 for chunk in obstore.list(_store(env, bucket), prefix + "/") for meta in chunk
               if "/_delta_log/" not in meta["path"])


def rows(uri: str, options: dict[str, str]) -> int:
    """The table's row count as delta-rs reads it from the log's statistics."""
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(uri, storage_options=options).get_add_actions(flatten=True))
    return sum(actions.column("num_records").to_pylist())


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run_vacuum(who: str, run: str, env: dict[str, str], options: dict[str, str]) -> float:
    """Build a VACUUM table, vacuum it with ``who`` (``ours`` or ``delta-rs``) through ``options``'s
    endpoint, check that exactly the orphans are gone; the job's time."""
    from deltalake import DeltaTable

    from airflow_delta_maint.app import cli

    prefix = f"vacuum-{run}-{who}"
    orphans = build_vacuum_table(env, "bench", prefix)
    uri = f"s3://bench/{prefix}"
    before = count_objects(env, "bench", prefix)
    if who == "ours":
        def job():
            code, m = cli.run(["vacuum", uri, "--retention-hours", "0", "--ignore-retention-check", "--json",
                               *[f"--storage-option={k}={v}" for k, v in options.items() if k == "AWS_ENDPOINT_URL" and v != env.get(k)]])
            assert code == 0, m
    else:
        def job():
            DeltaTable(uri, storage_options=options).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    took = timed(job)
    deleted = before - count_objects(env, "bench", prefix)
    assert deleted == orphans, f"{who} VACUUM deleted {deleted} objects, expected {orphans}"
    return took


def run_optimize(who: str, run: str, env: dict[str, str], options: dict[str, str]) -> float:
    """Build an OPTIMIZE table, compact it with ``who``, check the row count; the job's time."""
    from deltalake import DeltaTable

    from airflow_delta_maint.app import cli

    uri = f"s3://bench/optimize-{run}-{who}"
    direct = {k: v for k, v in env.items()}
    build_optimize_table(uri, direct)
    rows_before = rows(uri, direct)
    if who == "ours":
        def job():
            code, m = cli.run(["optimize", uri, "--json",
                               *[f"--storage-option={k}={v}" for k, v in options.items() if k == "AWS_ENDPOINT_URL" and v != env.get(k)]])
            assert code == 0 and m["numRemovedFiles"] == 500, m
    else:
        def job():
            m = DeltaTable(uri, storage_options=options).optimize.compact()
            assert m["numFilesRemoved"] == 500, m
    took = timed(job)
    assert rows(uri, direct) == rows_before
    return took


JOBS = {"vacuum": (run_vacuum, "VACUUM full, 20,000 objects, 10,000 orphans"),
        "optimize": (run_optimize, "OPTIMIZE, 500 small files in 10 partitions")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", default="vacuum,optimize", help="comma-separated: vacuum, optimize")
    parser.add_argument("--count-requests", action="store_true",
                        help="after the timed runs, one more run each through a counting proxy")
    parser.add_argument("--out", type=Path, default=OUT / "object_store.md")
    args = parser.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = set(jobs) - set(JOBS)
    if unknown:
        parser.error(f"unknown jobs: {', '.join(sorted(unknown))}")

    sys.path.insert(0, str(REPO))
    import boto3

    from airflow_delta_maint.app.spark_session import get_spark
    from benchmarks.counting_proxy import CountingProxy
    from tests.storage.servers import start_moto

    workdir = Path(tempfile.mkdtemp(prefix="bench-object-store-"))
    server = start_moto(workdir)
    proxy = None
    try:
        env = dict(server.env)
        os.environ.update(env)
        options = {k: v for k, v in env.items()}
        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="bench")
        spark = get_spark("local[2]", "bench-object-store")
        spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()  # start Python workers

        results: dict[str, dict[str, list[float]]] = {job: {"ours": [], "delta-rs": []} for job in jobs}
        for run in range(args.repeat):
            for who in (("ours", "delta-rs") if run % 2 == 0 else ("delta-rs", "ours")):
                for job in jobs:
                    results[job][who].append(JOBS[job][0](who, str(run), env, options))
                print(f"run {run + 1} {who}: " + ", ".join(f"{job} {results[job][who][-1]:.2f} s" for job in jobs),
                      flush=True)
        counts: dict[str, dict[str, Counter]] = {}
        if args.count_requests:
            proxy = CountingProxy(server.endpoint)
            through = dict(options, AWS_ENDPOINT_URL=proxy.endpoint)
            for job in jobs:
                for who in ("ours", "delta-rs"):
                    JOBS[job][0](who, f"counted-{job}", env, through)  # builds the table directly, then counts
                    counts.setdefault(job, {})[who] = proxy.take()
                    print(f"{job} {who}: {dict(sorted(counts[job][who].items()))}", flush=True)
        spark.stop()
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()

    lines = ["## Object stores (moto S3 on 127.0.0.1)", "",
             f"Medians of {args.repeat} runs each, every run on a fresh copy; Spark started beforehand.", "",
             "| job | this project (s) | delta-rs 1.6.0 (s) | ratio |", "|---|---:|---:|---:|"]
    for job in jobs:
        ours, rs = statistics.median(results[job]["ours"]), statistics.median(results[job]["delta-rs"])
        runs = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(results[job]["ours"], results[job]["delta-rs"]))
        lines.append(f"| {JOBS[job][1]} | {ours:.2f} | {rs:.2f} | {ours / rs:.2f}x (runs, ours/delta-rs: {runs}) |")
    if counts:
        lines += ["", "Requests (one more run each, through a counting proxy):", ""]
        for job, per in counts.items():
            for who, c in per.items():
                lines.append(f"- {job}, {who}: {sum(c.values())} ({', '.join(f'{k} {v}' for k, v in sorted(c.items()))})")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
