"""VACUUM full from an inventory against VACUUM full from a listing (not a test).

Table: the 100,000-file table of ``bench_vacuum`` (100 partition folders x 1,000 tiny files, 50,000
of them orphans: 25,000 tombstoned 20 days ago, 25,000 untracked). The inventory is a parquet file
with delta-spark's columns (path, length, isDir, modificationTime) listing every object under the
table, written once before the runs (taking an inventory is the storage's job, not VACUUM's).

Both runs use ``--retention-hours 0 --ignore-retention-check`` on identical copies, in-process, on a
SparkSession started and warmed beforehand; the listing run lists with Spark tasks, the inventory
run reads the parquet file on the driver and starts no Spark job. They alternate ``--repeat`` times
(medians); both must delete the same files.

Usage: python benchmarks/bench_vacuum_inventory.py [--workdir DIR] [--repeat 3] [--out benchmarks/out/vacuum_inventory.md]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
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
        elapsed, m = run_ours(a, "--retention-hours", "0", "--ignore-retention-check")
        listed.append(elapsed)
        deleted.add(("listing", m["numDeletedFiles"], count_files(a)))
        b = copy(source, work / "inventory")
        inventory = work / "inventory.parquet"
        rows = write_inventory(b, inventory)
        elapsed, m = run_ours(b, "--retention-hours", "0", "--ignore-retention-check", "--inventory", str(inventory))
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
    print(section)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(section)


if __name__ == "__main__":
    main()
