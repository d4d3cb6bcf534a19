"""Where a spark-submit's start-up goes, and what overlapping and JVM options save.

A probe (``benchmarks/startup_probe.py``) is submitted with spark-submit (``local[2]``, as the
operators submit: ``--py-files`` bundle, ``spark.pyspark.python``) against a table of 1,000
small files (100 appends x 10 partitions, delta-rs). It marks: Python started, application
imported, snapshot loaded and planned (OPTIMIZE's plan), SparkSession up, first Spark task done;
this script marks the process start and exit. Variants, each run ``--repeat`` times alternating:

- ``sequential``: plan, then start the SparkSession (the application before this change);
- ``overlap``: the SparkSession starts in a thread while the driver plans (the application now);
- ``overlap+c1``: plus ``-XX:TieredStopAtLevel=1`` for the driver JVM (JIT tier 1 only);
- ``overlap+cds``: plus a class-data-sharing archive of the driver JVM's classes
  (``-XX:SharedArchiveFile``, dumped once by a first run with ``-XX:ArchiveClassesAtExit``).

Then the whole task as a DAG runs it: ``OptimizeOperator.execute`` on a fresh copy of the table
(worker check, spark-submit, OPTIMIZE of 1,000 files into 10), with the hook's default start and
with ``spark_submit_kwargs={"fast_jvm_start": True}`` (its archive dumped by a first run).

Usage: ``python benchmarks/bench_startup.py [--repeat 5] [--out FILE]`` (default
``benchmarks/out/startup.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PROBE = REPO / "benchmarks" / "startup_probe.py"
PHASES = (("python", "spark-submit to Python driver"), ("imported", "application imports"),
          ("planned", "snapshot + plan"), ("session", "SparkSession (after planning)"),
          ("first_task", "first Spark task"), ("exit", "exit"))


def make_table(path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(100):
        ids = list(range(i * 10, (i + 1) * 10))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{j}" for j in range(10)]}),
                        mode="append", partition_by=["part"])


def submit(table: Path, bundle: str, overlap: bool, java_options: str | None) -> dict:
    from airflow_delta_maint.hooks.delta_maint import pyspark_home

    home = pyspark_home()
    assert home is not None
    cmd = [str(Path(home) / "bin" / "spark-submit"), "--master", "local[2]",
           "--conf", f"spark.pyspark.python={sys.executable}", "--py-files", bundle]
    if java_options:
        cmd += ["--driver-java-options", java_options]
    cmd += [str(PROBE), str(table)]
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable, PROBE_OVERLAP="1" if overlap else "0")
    t0 = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    t_exit = time.time()
    line = next(x for x in out.splitlines() if x.startswith("PROBE "))
    marks = json.loads(line[len("PROBE "):])["marks"]
    marks["exit"] = t_exit
    return {k: marks[k] - t0 for k in marks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "startup.md"))
    args = parser.parse_args(argv)
    from airflow_delta_maint.hooks.delta_maint import build_package_zip

    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        table = work / "t"
        make_table(table)
        bundle = build_package_zip(work / "cache")
        archive = work / "driver.jsa"
        submit(table, bundle, True, f"-XX:ArchiveClassesAtExit={archive}")  # dumps the CDS archive
        variants = {"sequential": (False, None), "overlap": (True, None),
                    "overlap+c1": (True, "-XX:TieredStopAtLevel=1"),
                    "overlap+cds": (True, f"-XX:SharedArchiveFile={archive}")}
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for r in range(args.repeat):
            for name, (overlap, java) in variants.items():
                marks = submit(table, bundle, overlap, java)
                runs[name].append(marks)
                print(f"round {r + 1} {name}: first task at {marks['first_task']:.2f} s, exit {marks['exit']:.2f} s",
                      flush=True)
        os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
        os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))
        from airflow_delta_maint.operators.maintenance import OptimizeOperator

        def optimize(fast: bool, n: int) -> float:
            copy = work / f"copy{n}"
            shutil.copytree(table, copy)
            kwargs = {"cache_dir": str(work / "cache"), "fast_jvm_start": fast}
            t0 = time.perf_counter()
            m = OptimizeOperator(task_id="o", table_uri=str(copy), spark_submit_kwargs=kwargs).execute(context={})
            elapsed = time.perf_counter() - t0
            assert m["status"] == "committed" and m["numRemovedFiles"] == 1000, m
            shutil.rmtree(copy)
            return elapsed

        optimize(True, -1)  # dumps the archive
        tasks: dict[str, list[float]] = {"default": [], "fast_jvm_start": []}
        for r in range(args.repeat):
            for name in tasks:
                tasks[name].append(optimize(name == "fast_jvm_start", r))
                print(f"round {r + 1} OptimizeOperator {name}: {tasks[name][-1]:.2f} s", flush=True)
        header = "| variant | " + " | ".join(label for _, label in PHASES) + " |"
        lines = [header, "|---|" + "---:|" * len(PHASES)]
        for name, marks in runs.items():
            cells = [f"{statistics.median(m[k] for m in marks):.2f}" for k, _ in PHASES]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        text = ("## Spark start-up\n\nSeconds from the spark-submit process start to each mark, "
                f"median of {args.repeat}:\n\n" + "\n".join(lines) + "\n")
        text += ("\nOptimizeOperator task on the same table, median of "
                 f"{args.repeat}: default {statistics.median(tasks['default']):.2f} s, fast_jvm_start "
                 f"{statistics.median(tasks['fast_jvm_start']):.2f} s "
                 f"({', '.join(f'{t:.2f}' for t in tasks['default'])} against "
                 f"{', '.join(f'{t:.2f}' for t in tasks['fast_jvm_start'])})\n")
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
