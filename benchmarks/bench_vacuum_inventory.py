"""VACUUM full from an inventory against VACUUM full from a listing (not a test).

Table: the 100,000-file table of ``bench_vacuum`` (100 partition folders x 1,000 tiny files, 50,000
of them orphans: 25,000 tombstoned 20 days ago, 25,000 untracked). The inventory is a parquet file
with delta-spark's columns (path, length, isDir, modificationTime) listing every object under the
table, written once before the runs (taking an inventory is the storage's job, not VACUUM's).

Both runs use ``--retention-hours 1 --ignore-retention-check`` (the inventory must be younger than the
cut-off; every orphan is days old, so the same files go as with 0) on identical copies, in-process, on a
SparkSession started and warmed beforehand; the listing run lists with Spark tasks, the inventory
run reads the parquet file on the driver and starts no Spark job. They alternate ``--repeat`` times
(medians); both must delete the same files.

On a moto S3 server (127.0.0.1, started here and stopped by its process id) the same comparison
runs on ``bench_object_store``'s table: 100 folders x 200 objects, 10,000 of them orphans (uploading
100,000 objects to moto would take most of the run). Objects on S3 cannot be aged, so the table
waits ``S3_AGE_S`` seconds after its upload and both runs use a retention just below that; the
inventory (rows ``s3://bucket/...`` from one listing, as S3 Inventory would deliver them) is
written just before its run. ``--no-s3`` leaves this part out.

Usage: python benchmarks/bench_vacuum_inventory.py [--workdir DIR] [--repeat 3] [--no-s3] [--out benchmarks/out/vacuum_inventory.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.bench_vacuum import build, copy, count_files, run_ours

OUT = Path(__file__).resolve().parent / "out"
REPO = Path(__file__).resolve().parents[1]
S3_AGE_S = 40


def write_inventory(root: Path, dest: Path) -> int:
    """Every object under ``root`` (the log included) as an inventory parquet file; returns its rows."""
    paths, lengths, dirs, mtimes = [], [], [], []
    for folder, subdirs, files in os.walk(root):
        for name in subdirs:
            p = os.path.join(folder, name)
            paths.append(f"file:{p}")
            lengths.append(0)
            dirs.append(True)
            mtimes.append(int(os.stat(p).st_mtime * 1000))
        for name in files:
            p = os.path.join(folder, name)
            st = os.stat(p)
            paths.append(f"file:{p}")
            lengths.append(st.st_size)
            dirs.append(False)
            mtimes.append(int(st.st_mtime * 1000))
    pq.write_table(pa.table({"path": paths, "length": pa.array(lengths, pa.int64()), "isDir": dirs,
                             "modificationTime": pa.array(mtimes, pa.int64())}), dest)
    return len(paths)


def s3_inventory(env: dict[str, str], bucket: str, prefix: str, dest: Path) -> int:
    """An inventory of every object under ``prefix`` (one listing), as parquet; returns its rows."""
    import obstore

    from benchmarks.bench_object_store import _store

    paths, lengths, mtimes = [], [], []
    for chunk in obstore.list(_store(env, bucket), prefix + "/"):
        for meta in chunk:
            paths.append(f"s3://{bucket}/{meta['path']}")
            lengths.append(int(meta["size"]))
            mtimes.append(int(meta["last_modified"].timestamp() * 1000))
    pq.write_table(pa.table({"path": paths, "length": pa.array(lengths, pa.int64()), "isDir": [False] * len(paths),
                             "modificationTime": pa.array(mtimes, pa.int64())}), dest)
    return len(paths)


def s3_section(repeat: int, work: Path) -> str:
    """Listing against inventory on a moto S3 server; the Markdown section."""
    import boto3

    from airflow_delta_maint.app import cli
    from benchmarks.bench_object_store import build_vacuum_table, count_objects
    from tests.storage.servers import start_moto

    server = start_moto(work)
    retention = str((S3_AGE_S - 10) / 3600)
    times: dict[str, list[float]] = {"listing": [], "inventory": []}
    try:
        env = dict(server.env)
        os.environ.update(env)
        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="bench")
        for i in range(repeat):
            prefixes = {who: f"inv-{i}-{who}" for who in ("listing", "inventory")}
            orphans = {who: build_vacuum_table(env, "bench", p) for who, p in prefixes.items()}
            time.sleep(S3_AGE_S)
            for who, prefix in prefixes.items():
                args = ["vacuum", f"s3://bench/{prefix}", "--retention-hours", retention, "--ignore-retention-check",
                        "--json"]
                if who == "inventory":
                    inventory = work / f"s3-inventory-{i}.parquet"
                    s3_inventory(env, "bench", prefix, inventory)
                    args += ["--inventory", str(inventory)]
                before = count_objects(env, "bench", prefix)
                t = time.perf_counter()
                code, m = cli.run(args)
                times[who].append(time.perf_counter() - t)
                assert code == 0, m
                deleted = before - count_objects(env, "bench", prefix)
                assert deleted == orphans[who] == m["numDeletedFiles"], (who, deleted, orphans[who], m)
            print(f"s3 round {i + 1}: listing {times['listing'][-1]:.2f}s, inventory {times['inventory'][-1]:.2f}s",
                  flush=True)
    finally:
        server.stop()
    return "\n".join([
        "### On a moto S3 server",
        "",
        f"20,000 objects, 10,000 orphans; both delete exactly the orphans. Medians of {repeat} "
        f"(listing {', '.join(f'{x:.2f}' for x in times['listing'])} s; "
        f"inventory {', '.join(f'{x:.2f}' for x in times['inventory'])} s).",
        "",
        "| run | median wall time |",
        "|---|---|",
        f"| listing | {statistics.median(times['listing']):.2f} s |",
        f"| inventory | {statistics.median(times['inventory']):.2f} s |",
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-s3", action="store_true", help="leave out the moto S3 comparison")
    parser.add_argument("--out", default=str(OUT / "vacuum_inventory.md"),
                        help="write the Markdown section here, replacing the file")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-vacuum-inventory-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import logging

    logging.basicConfig(level=logging.WARNING)
    source = work / "source"
    shutil.rmtree(source, ignore_errors=True)
    t = time.perf_counter()
    counts = build(source, tracked=75_000, removed=25_000)
    print(f"built {counts} in {time.perf_counter() - t:.1f}s", flush=True)

    from airflow_delta_maint.app.spark_session import get_spark

    spark = get_spark("local[*]")
    spark.sparkContext.parallelize(range(100), 2).count()  # JVM warm-up
    listed, from_inventory, deleted = [], [], set()
    rows = 0
    for i in range(args.repeat):
        a = copy(source, work / "listing")
        elapsed, m = run_ours(a, "--retention-hours", "1", "--ignore-retention-check")
        listed.append(elapsed)
        deleted.add(("listing", m["numDeletedFiles"], count_files(a)))
        b = copy(source, work / "inventory")
        inventory = work / "inventory.parquet"
        rows = write_inventory(b, inventory)
        elapsed, m = run_ours(b, "--retention-hours", "1", "--ignore-retention-check", "--inventory", str(inventory))
        from_inventory.append(elapsed)
        deleted.add(("inventory", m["numDeletedFiles"], count_files(b)))
        print(f"round {i + 1}: listing {listed[-1]:.2f}s, inventory {from_inventory[-1]:.2f}s", flush=True)
    results = {(n, left) for _, n, left in deleted}
    if len(results) != 1:
        raise SystemExit(f"the runs disagree: {sorted(deleted)}")
    (n, left), = results
    section = "\n".join([
        "## VACUUM full from an inventory",
        "",
        f"{counts['files']:,} files ({counts['untracked']:,} untracked, {counts['removed']:,} tombstoned); "
        f"inventory of {rows:,} rows (parquet); both delete {n:,} files and leave {left:,}. "
        f"Medians of {args.repeat} (all runs: listing {', '.join(f'{x:.2f}' for x in listed)} s; "
        f"inventory {', '.join(f'{x:.2f}' for x in from_inventory)} s).",
        "",
        "| run | median wall time |",
        "|---|---|",
        f"| listing (Spark tasks list the table) | {statistics.median(listed):.2f} s |",
        f"| inventory (driver reads the parquet file) | {statistics.median(from_inventory):.2f} s |",
        "",
    ])
    if not args.no_s3:
        sys.path.insert(0, str(REPO))
        section += "\n" + s3_section(args.repeat, work)
    print(section)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(section)


if __name__ == "__main__":
    main()
