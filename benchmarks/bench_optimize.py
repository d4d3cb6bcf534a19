"""OPTIMIZE benchmark (not a test): bin-packing against delta-rs, a pyarrow floor, worker memory.

Table: about 1 GB in 2,000 small parquet files over 8 partitions (250 files of ~0.5 MB each),
written once with pyarrow and committed with the core's ``Transaction`` (statistics from the
footers), cached under ``benchmarks/out/optimize/src``.

1. This project: ``delta-maint optimize`` in-process on a ``local[2]`` SparkSession; runs are
   timed from after the session exists and has run one JVM-only job (JVM start-up, reported
   separately). The first run also starts Spark's Python workers (reported as such); then
   delta-rs, this project with its default codec and with the other codec alternate
   ``--repeat`` times on fresh copies synced to disk (medians).
2. delta-rs: ``DeltaTable.optimize.compact(target_size=...)`` on a copy of the same table, same
   target size.
3. Floor: one process, pyarrow only: per partition, read every file and write one file with
   this project's default codec.
4. Executor memory: peak RSS (VmHWM) of the Python workers of a fresh Spark application per bin
   size; streaming keeps it flat as bins grow.

Usage: python benchmarks/bench_optimize.py [--workdir DIR] [--target-mb 256] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARTITIONS = 8
FILES_PER_PARTITION = 250
ROWS_PER_FILE = 12_000


def generate(src: Path) -> None:
    """Write the 2,000 files with pyarrow and commit them in one transaction."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from airflow_delta_maint.delta.protocol.stats import parquet_file_stats
    from airflow_delta_maint.delta.log.transaction import commit_actions

    tmp = src.with_name(src.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("a", pa.float64()),
                        ("b", pa.float64()), ("c", pa.float64()), ("k", pa.int32()), ("s", pa.string()),
                        ("p", pa.string())])
    write_deltalake(str(tmp), schema.empty_table(), partition_by=["p"])
    snap = Snapshot.load(str(tmp))
    rng = np.random.default_rng(1)
    words = np.array([f"word-{i:05d}" for i in range(5000)], dtype=object)
    adds = []
    next_id = 0
    for part in range(PARTITIONS):
        folder = tmp / f"p=part{part}"
        folder.mkdir()
        for _ in range(FILES_PER_PARTITION):
            n = ROWS_PER_FILE
            table = pa.table({
                "id": np.arange(next_id, next_id + n, dtype=np.int64),
                "ts": pa.array(1_700_000_000_000_000 + np.arange(next_id, next_id + n) * 1000, pa.timestamp("us", tz="UTC")),
                "a": rng.random(n), "b": rng.normal(size=n), "c": rng.random(n).round(2),
                "k": rng.integers(0, 100, n).astype(np.int32), "s": pa.array(words[rng.integers(0, 5000, n)], pa.string()),
            })
            next_id += n
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            pq.write_table(table, folder / name, compression="snappy")
            rel = f"p=part{part}/{name}"
            adds.append({"add": {"path": rel, "partitionValues": {"p": f"part{part}"},
                                 "size": (folder / name).stat().st_size, "modificationTime": int(time.time() * 1000),
                                 "dataChange": True,
                                 "stats": json.dumps(parquet_file_stats(str(folder / name), snap.metadata))}})
    commit_actions(snap, "WRITE", adds, {"mode": "Append"})
    tmp.rename(src)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet"))


def floor(src: Path, out: Path, codec: str) -> float:
    """pyarrow only, one process: read each partition's files and write one file."""
    import pyarrow.parquet as pq

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.perf_counter()
    for part in sorted(p for p in src.iterdir() if p.name.startswith("p=")):
        files = sorted(part.glob("*.parquet"))
        with pq.ParquetWriter(out / f"{part.name}.parquet", pq.read_schema(files[0]), compression=codec) as w:
            buffered = []
            size = 0
            for f in files:
                t = pq.read_table(f)
                buffered.append(t)
                size += t.nbytes
                if size >= 128 << 20:
                    import pyarrow as pa

                    w.write_table(pa.concat_tables(buffered), row_group_size=sum(b.num_rows for b in buffered))
                    buffered, size = [], 0
            if buffered:
                import pyarrow as pa

                w.write_table(pa.concat_tables(buffered), row_group_size=sum(b.num_rows for b in buffered))
    return time.perf_counter() - started


def worker_peak_rss() -> int:
    """Max VmHWM (bytes) over the Python processes descended from this one (the Spark workers)."""
    me = os.getpid()
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    parents[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    peak = 0
    for pid in parents:
        p, seen = pid, 0
        while p not in (0, 1, me) and seen < 50:
            p, seen = parents.get(p, 0), seen + 1
        if p != me or pid == me:
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            if b"pyspark" not in cmd:
                continue
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
    return peak


def memory_run(table: Path, target: int) -> None:
    """(child mode) one Spark application: OPTIMIZE with ``target``, print the workers' peak RSS."""
    from airflow_delta_maint.app import cli
    from airflow_delta_maint.app.spark_session import get_spark

    get_spark("local[2]")
    code, m = cli.run(["optimize", str(table), "--min-file-size", str(1 << 40), "--target-file-size", str(target)])
    assert code == 0, m
    print(json.dumps({"peak": worker_peak_rss(), "bins": m["numBins"], "added": m["numAddedFiles"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "out" / "optimize"))
    ap.add_argument("--target-mb", type=int, default=256)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory-run", nargs=2, metavar=("TABLE", "TARGET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.memory_run:
        memory_run(Path(args.memory_run[0]), int(args.memory_run[1]))
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / "src"
    if not src.exists():
        t = time.perf_counter()
        generate(src)
        print(f"generated {src} in {time.perf_counter() - t:.0f} s")
    total = dir_bytes(src)
    target = args.target_mb << 20

    from deltalake import DeltaTable

    from airflow_delta_maint.app import cli
    from airflow_delta_maint.app.spark_session import get_spark

    def fresh(name: str) -> Path:
        dest = work / name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest)
        subprocess.run(["sync"], check=True)
        time.sleep(1)
        return dest

    def ours(codec: str | None) -> tuple[float, dict]:
        table = fresh("ours")
        extra = ["--compression", codec] if codec else []
        started = time.perf_counter()
        code, m = cli.run(["optimize", str(table), "--min-file-size", str(target), "--target-file-size", str(target),
                           *extra])
        took = time.perf_counter() - started
        assert code == 0 and m["status"] == "committed", m
        return took, m

    def delta_rs() -> tuple[float, dict, int]:
        table = fresh("rs")
        started = time.perf_counter()
        metrics = DeltaTable(str(table)).optimize.compact(target_size=target)
        took = time.perf_counter() - started
        import pyarrow as pa

        out = sum(pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).column("size_bytes").to_pylist())
        return took, metrics, out

    t0 = time.perf_counter()
    spark = get_spark("local[2]")
    spark.range(1).count()  # the JVM's first job (class loading, code generation): start-up too
    jvm = time.perf_counter() - t0
    cold, m = ours(None)
    codec = m.get("compression", "default")
    other = "snappy" if codec == "zstd" else "zstd"
    runs: dict[str, list[float]] = {"rs": [], "ours": [], "other": []}
    for _ in range(args.repeat):
        took, rs_metrics, rs_out = delta_rs()
        runs["rs"].append(took)
        took, m = ours(None)
        runs["ours"].append(took)
        took, mo = ours(other)
        runs["other"].append(took)
        print(f"delta-rs {runs['rs'][-1]:.1f} s, ours {runs['ours'][-1]:.1f} s, ours {other} {took:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    floor_time = floor(src, work / "floor", codec)
    for name in ("ours", "rs"):
        shutil.rmtree(work / name, ignore_errors=True)
    print(f"\ninput: {total / 1e6:.0f} MB in {PARTITIONS * FILES_PER_PARTITION} files, {PARTITIONS} partitions; "
          f"target {args.target_mb} MiB; medians of {args.repeat} alternating runs; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| run | wall time | files out | bytes out | vs delta-rs |")
    print("|---|---:|---:|---:|---:|")
    print(f"| this project ({codec}, the default), warm | {med['ours']:.1f} s | {m['numAddedFiles']} | "
          f"{m['numAddedBytes'] / 1e6:.0f} MB | {med['ours'] / med['rs']:.2f} |")
    print(f"| this project, first run (Python workers start) | {cold:.1f} s | | | {cold / med['rs']:.2f} |")
    print(f"| this project, first run incl. JVM start-up ({jvm:.1f} s) | {cold + jvm:.1f} s | | | "
          f"{(cold + jvm) / med['rs']:.2f} |")
    print(f"| this project, `--compression {other}` | {med['other']:.1f} s | {mo['numAddedFiles']} | "
          f"{mo['numAddedBytes'] / 1e6:.0f} MB | {med['other'] / med['rs']:.2f} |")
    print(f"| delta-rs optimize.compact (zstd, its default) | {med['rs']:.1f} s | {rs_metrics['numFilesAdded']} | "
          f"{rs_out / 1e6:.0f} MB | 1.00 |")
    print(f"| floor: pyarrow read + write ({codec}), one process | {floor_time:.1f} s | {PARTITIONS} | "
          f"{dir_bytes(work / 'floor') / 1e6:.0f} MB | {floor_time / med['rs']:.2f} |")
    print("runs (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.1f}" for x in v) for k, v in runs.items()))
    spark.stop()
    if not args.skip_memory:
        print("\n| bin size (max file size) | bins | Python worker peak RSS |")
        print("|---|---:|---:|")
        for mb in (32, 256):
            copy = work / f"mem{mb}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(src, copy)
            out = subprocess.run([sys.executable, __file__, "--memory-run", str(copy), str(mb << 20)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"| {mb} MiB | {r['bins']} | {r['peak'] / 2**20:.0f} MiB |")
            shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
