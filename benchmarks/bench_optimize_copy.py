"""OPTIMIZE with row groups copied against delta-rs (a benchmark, not a test), on the same tables in one run.

Two tables, compacted toward 1 GiB (one bin each):

- **medium**: ``--medium`` files of about ``--mib`` MiB (pyarrow, snappy, one row group each: an id, a
  double, a low-cardinality string, a timestamp, an int32);
- **mixed**: half of those medium files and, for the other half of the bytes, tiny files of about
  ``--tiny-mib`` MiB.

Each is compacted on a fresh copy (data files hard-linked) by:

1. delta-rs ``optimize.compact`` in a fresh process, snappy (the same codec as the inputs) and its default
   (zstd); wall and CPU of the job, its import excluded;
2. ours on a warm ``local[2]`` SparkSession in this process (Spark's start excluded), ``copy_row_groups``
   ``auto`` and ``never``; CPU of this process, the JVM and the Python workers;
3. ours as the whole task in a fresh process on threads (local execution, which ``execution="auto"``
   chooses below 1 GiB of input): process start, imports, the job; ``auto`` and ``never``.

Every run is checked: one file of all the rows. CPU seconds per GiB of input are the machine-independent
figure (the machine's other work moves wall times). Prints a table and writes it to ``--out``.

Usage: python -m benchmarks.bench_optimize_copy [--medium 24] [--mib 40] [--tiny-mib 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_row_group_copy import BYTES_PER_ROW  # noqa: E402

OUT = REPO / "benchmarks" / "out"
TARGET = 1 << 30

RS = ("import json, resource, sys, time\nfrom deltalake import DeltaTable, WriterProperties\n"
      "r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()\n"
      "props = None if sys.argv[2] == 'default' else WriterProperties(compression=sys.argv[2].upper())\n"
      "DeltaTable(sys.argv[1]).optimize.compact(target_size=int(sys.argv[3]), writer_properties=props)\n"
      "r1 = resource.getrusage(resource.RUSAGE_SELF)\n"
      "print(json.dumps([time.perf_counter() - t, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime]))\n")
LOCAL = ("import argparse, json, sys, time\nt = time.perf_counter()\n"
         "from airflow_delta_maint.app.context import JobContext\n"
         "from airflow_delta_maint.app.jobs import execute_job, optimize\n"
         "ctx = JobContext(table=sys.argv[1], spark_allowed=False)\n"
         "code, m = execute_job('optimize', optimize, argparse.Namespace(max_file_size=int(sys.argv[3]), "
         "copy_row_groups=sys.argv[2]), ctx)\n"
         "print(json.dumps({**m, 'job_s': time.perf_counter() - t}, default=str))\n")


def write_files(folder: Path, count: int, mib: float, seed: int) -> list[dict]:
    """``count`` parquet files of one row group of about ``mib`` MiB; their add actions."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = max(1, int(mib * 2**20 / BYTES_PER_ROW))
    words = np.array([f"category-{i:04d}" for i in range(2000)])
    adds = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        first = (seed + i) * rows
        table = pa.table({
            "id": pa.array(np.arange(first, first + rows, dtype=np.int64)),
            "x": pa.array(rng.random(rows)),
            "s": pa.array(words[rng.integers(0, len(words), rows)]),
            "ts": pa.array((1_700_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]"),
                           pa.timestamp("us", tz="UTC")),
            "k": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
        })
        name = f"part-00000-{uuid.UUID(int=seed * 100_000 + i)}-c000.snappy.parquet"
        pq.write_table(table, folder / name, compression="snappy", row_group_size=rows)
        adds.append({"path": name, "partitionValues": {}, "size": (folder / name).stat().st_size,
                     "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": json.dumps({"numRecords": rows})})
    return adds


def write_log(folder: Path, adds: list[dict]) -> None:
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.protocol.schema import from_arrow_schema

    schema = from_arrow_schema(pq.read_schema(folder / adds[0]["path"])).to_json()
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                             "createdTime": 1_700_000_000_000}},
               *({"add": a} for a in adds)]
    (folder / "_delta_log").mkdir(parents=True, exist_ok=True)
    (folder / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def build(work: Path, medium: int, mib: float, tiny_mib: float) -> dict[str, Path]:
    """The two source tables (kept between runs in ``work``)."""
    tables = {"medium": work / "src-medium", "mixed": work / "src-mixed"}
    if all((t / ".done").exists() for t in tables.values()):
        return tables
    for t in tables.values():
        shutil.rmtree(t, ignore_errors=True)
        t.mkdir(parents=True)
    adds = write_files(tables["medium"], medium, mib, seed=1)
    write_log(tables["medium"], adds)
    half = adds[:medium // 2]
    for a in half:
        os.link(tables["medium"] / a["path"], tables["mixed"] / a["path"])
    tiny = write_files(tables["mixed"], int(sum(a["size"] for a in half) / (tiny_mib * 2**20)), tiny_mib, seed=1000)
    write_log(tables["mixed"], half + tiny)
    for t in tables.values():
        (t / ".done").touch()
    return tables


def fresh(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)
    shutil.rmtree(dest / "_delta_log")
    shutil.copytree(src / "_delta_log", dest / "_delta_log")
    return dest


def input_facts(src: Path) -> tuple[int, int, int]:
    """(files, bytes, rows) of a source table."""
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    adds = Snapshot.load(str(src)).add_actions()
    return len(adds), sum(a["size"] for a in adds), sum(json.loads(a["stats"])["numRecords"] for a in adds)


def check(table: Path, rows: int) -> None:
    """One live file holding every row."""
    import pyarrow.parquet as pq

    from airflow_delta_maint.delta.log.snapshot import Snapshot

    adds = Snapshot.load(str(table)).add_actions()
    assert len(adds) == 1, f"{table}: {len(adds)} files after OPTIMIZE"
    assert pq.ParquetFile(table / adds[0]["path"]).metadata.num_rows == rows, f"{table}: rows differ"


def delta_rs(table: Path, codec: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", RS, str(table), codec, str(TARGET)], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    wall, cpu = json.loads([line for line in out if line.startswith("[")][-1])
    return wall, cpu


def _cpu_tree() -> float:
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def ours_spark(table: Path, mode: str) -> tuple[float, float, dict]:
    import argparse as ap

    from airflow_delta_maint.app.context import JobContext
    from airflow_delta_maint.app.jobs import execute_job, optimize

    cpu, started = _cpu_tree(), time.perf_counter()
    code, m = execute_job("optimize", optimize, ap.Namespace(max_file_size=TARGET, copy_row_groups=mode),
                          JobContext(table=str(table), master="local[2]"))
    wall = time.perf_counter() - started
    if code:
        raise RuntimeError(m.get("error"))
    return wall, _cpu_tree() - cpu, m


def ours_local(table: Path, mode: str) -> tuple[float, float, dict]:
    import resource

    r0, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LOCAL, str(table), mode, str(TARGET)], check=True, cwd=REPO,
                          capture_output=True, text=True)
    wall, r1 = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    m = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    if m.get("status") != "committed":
        raise RuntimeError(m.get("error"))
    return wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--medium", type=int, default=24)
    parser.add_argument("--mib", type=float, default=40)
    parser.add_argument("--tiny-mib", type=float, default=1)
    parser.add_argument("--workdir", default=str(OUT / "optimize_copy"))
    parser.add_argument("--out", default=str(OUT / "optimize_copy.md"))
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from benchmarks.bench_guard import machine_lock

    tables = build(work, args.medium, args.mib, args.tiny_mib)
    lines = [f"load average at start: {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f} "
             f"({os.cpu_count()} cores)", "",
             "| table | inputs | run | wall s | CPU s | CPU s / GiB | copied / re-encoded row groups |",
             "|---|---|---|---:|---:|---:|---|"]
    with machine_lock():
        from airflow_delta_maint.app.spark_session import get_spark

        spark = get_spark("local[2]", "bench-optimize-copy")
        spark.range(1).count()
        ours_spark(fresh(tables["mixed"], work / "warm"), "auto")  # the Python workers start and import here
        for name, src in tables.items():
            files, size, rows = input_facts(src)
            gib = size / 2**30
            label = f"{files} files, {size / 2**20:.0f} MiB"
            runs: list[tuple[str, float, float, str]] = []
            for codec in ("snappy", "default"):
                table = fresh(src, work / "run-rs")
                wall, cpu = delta_rs(table, codec)
                check(table, rows)
                runs.append((f"delta-rs compact ({'zstd, its default' if codec == 'default' else codec})", wall, cpu, ""))
            for where, fn in (("ours, warm Spark local[2]", ours_spark), ("ours, whole task on threads", ours_local)):
                for mode in ("auto", "never"):
                    table = fresh(src, work / "run-ours")
                    wall, cpu, m = fn(table, mode)
                    check(table, rows)
                    runs.append((f"{where}, {mode}", wall, cpu,
                                 f"{m['numRowGroupsCopied']} / {m['numRowGroupsReencoded']}"))
            for run_name, wall, cpu, groups in runs:
                line = f"| {name} | {label} | {run_name} | {wall:.2f} | {cpu:.2f} | {cpu / gib:.2f} | {groups} |"
                print(line, flush=True)
                lines.append(line)
        spark.stop()
    lines.append(f"\nload average at end: {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    shutil.rmtree(work / "run-rs", ignore_errors=True)
    shutil.rmtree(work / "run-ours", ignore_errors=True)


if __name__ == "__main__":
    main()
