"""RDD runner against DataFrame runner (the Spark Connect way) on the 2,000-file OPTIMIZE (not a test).

The table of ``bench_optimize.py`` (about 900 MB in 2,000 files over 8 partitions), rewritten on one
``local[2]`` SparkSession by ``delta-maint optimize`` with ``DELTA_MAINT_SPARK_TASKS=rdd`` (``SparkTasks``:
``parallelize().mapPartitions()``) and ``=dataframe`` (``DataFrameTasks``: ``range().mapInArrow()``),
alternating on fresh copies after one warm-up run of each; wall time of each run.

Usage: python benchmarks/bench_spark_tasks.py [--workdir DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default=str(REPO / "benchmarks" / "out" / "optimize"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from benchmarks.bench_optimize import generate

    work = Path(args.workdir)
    src = work / "src"
    if not (src / "_delta_log").exists():
        work.mkdir(parents=True, exist_ok=True)
        generate(src)
    from airflow_delta_maint.app import cli
    from airflow_delta_maint.app.spark_session import get_spark

    get_spark("local[2]")
    target = str(256 << 20)
    times: dict[str, list[float]] = {"rdd": [], "dataframe": []}
    for n in range(args.repeat + 1):
        for kind in ("rdd", "dataframe"):
            table = work / f"copy-{kind}"
            shutil.rmtree(table, ignore_errors=True)
            shutil.copytree(src, table)
            os.sync()
            os.environ["DELTA_MAINT_SPARK_TASKS"] = kind
            started = time.perf_counter()
            code, m = cli.run(["optimize", str(table), "--min-file-size", target, "--target-file-size", target])
            elapsed = time.perf_counter() - started
            assert code == 0 and m["numRemovedFiles"] == 2000, m
            print(f"{'warm-up' if n == 0 else f'run {n}'} {kind}: {elapsed:.2f} s ({m['numAddedFiles']} files)",
                  flush=True)
            if n:
                times[kind].append(elapsed)
            shutil.rmtree(table, ignore_errors=True)
    for kind, values in times.items():
        print(f"{kind}: median {statistics.median(values):.2f} s, runs {', '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
