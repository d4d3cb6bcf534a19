"""Whole tasks against delta-rs, Spark start-up included (not a test).

OPTIMIZE of the 2,000-file benchmark table (``bench_optimize.py``'s data, generated there if
missing; 256 MiB target) and VACUUM full of the 100,000-file table (``bench_vacuum.py``'s
``build``: 50,000 orphans), each on fresh copies synced to disk:

- this project: ``OptimizeOperator.execute`` / ``VacuumOperator.execute`` (the worker's check,
  spark-submit on ``local[2]``, the job, the metrics), with the hook's default start and with
  ``fast_jvm_start`` (its class-data-sharing archive dumped by a first run); and with
  ``execution="auto"``, which runs both tasks in the worker's process on threads (no Spark);
- delta-rs: a fresh Python process that imports ``deltalake`` and runs ``optimize.compact`` /
  ``vacuum(full=True)`` with the same settings: its whole task.

Medians of ``--repeat`` alternating rounds.

Usage: python benchmarks/bench_whole_task.py [--repeat 3] [--skip-vacuum]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RS_OPTIMIZE = ("import sys, deltalake; "
               "deltalake.DeltaTable(sys.argv[1]).optimize.compact(target_size=int(sys.argv[2]))")
RS_VACUUM = ("import sys, deltalake; "
             "deltalake.DeltaTable(sys.argv[1]).vacuum(retention_hours=0, dry_run=False, "
             "enforce_retention_duration=False, full=True)")


def fresh(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    subprocess.run(["sync"], check=True)
    time.sleep(1)
    return dest


def timed_rs(code: str, *args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "out" / "whole_task"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-vacuum", action="store_true")
    ap.add_argument("--skip-optimize", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))

    from benchmarks import bench_optimize

    src = REPO / "benchmarks" / "out" / "optimize" / "src"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        bench_optimize.generate(src)
    target = 256 << 20
    from airflow_delta_maint.operators.maintenance import OptimizeOperator, VacuumOperator

    def ours_optimize(fast: bool, execution: str = "spark") -> float:
        table = fresh(src, work / "ours")
        kwargs = {"cache_dir": str(work / "cache"), "fast_jvm_start": fast}
        t0 = time.perf_counter()
        m = OptimizeOperator(task_id="o", table_uri=str(table), min_file_size=target, max_file_size=target,
                             lease_seconds=0, spark_submit_kwargs=kwargs, execution=execution).execute(context={})
        took = time.perf_counter() - t0
        assert m["status"] == "committed", m
        return took

    def rs_optimize() -> float:
        table = fresh(src, work / "rs")
        return timed_rs(RS_OPTIMIZE, str(table), str(target))

    ours_optimize(True)  # dumps the class-data-sharing archive
    runs: dict[str, list[float]] = {"rs": [], "default": [], "fast": [], "auto": []}
    for r in range(0 if args.skip_optimize else args.repeat):
        runs["rs"].append(rs_optimize())
        runs["default"].append(ours_optimize(False))
        runs["fast"].append(ours_optimize(True))
        runs["auto"].append(ours_optimize(False, "auto"))
        print(f"OPTIMIZE round {r + 1}: delta-rs {runs['rs'][-1]:.1f} s, ours {runs['default'][-1]:.1f} s, "
              f"ours fast_jvm_start {runs['fast'][-1]:.1f} s, ours auto {runs['auto'][-1]:.1f} s", flush=True)
    med = {k: statistics.median(v) if v else float("nan") for k, v in runs.items()}
    print(f"\nOPTIMIZE, 2,000 files, whole task, medians of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    print("| run | wall time | vs delta-rs |\n|---|---:|---:|")
    print(f"| delta-rs optimize.compact, fresh process | {med['rs']:.1f} s | 1.00 |")
    print(f"| OptimizeOperator, default start | {med['default']:.1f} s | {med['default'] / med['rs']:.2f} |")
    print(f"| OptimizeOperator, fast_jvm_start | {med['fast']:.1f} s | {med['fast'] / med['rs']:.2f} |")
    print(f"| OptimizeOperator, execution auto (threads) | {med['auto']:.1f} s | {med['auto'] / med['rs']:.2f} |")
    # this process runs only the worker's side of the Spark variants; its peak is the local runs'
    print(f"peak RSS of the worker's process (the auto runs): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB")
    print("runs (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.1f}" for x in v) for k, v in runs.items()))
    if args.skip_vacuum:
        return

    from benchmarks import bench_vacuum

    vsrc = work / "vacuum-src"
    if not vsrc.exists():
        bench_vacuum.build(vsrc, tracked=75_000, removed=25_000)  # 100,000 files, 50,000 orphans

    def ours_vacuum(fast: bool, execution: str = "spark") -> float:
        table = fresh(vsrc, work / "vours")
        kwargs = {"cache_dir": str(work / "cache"), "fast_jvm_start": fast}
        t0 = time.perf_counter()
        m = VacuumOperator(task_id="v", table_uri=str(table), retention_hours=0, ignore_retention_check=True,
                           mode="full", spark_submit_kwargs=kwargs, execution=execution).execute(context={})
        took = time.perf_counter() - t0
        assert m["status"] == "committed", m
        return took

    vruns: dict[str, list[float]] = {"rs": [], "default": [], "fast": [], "auto": []}
    for r in range(args.repeat):
        vruns["rs"].append(timed_rs(RS_VACUUM, str(fresh(vsrc, work / "vrs"))))
        vruns["default"].append(ours_vacuum(False))
        vruns["fast"].append(ours_vacuum(True))
        vruns["auto"].append(ours_vacuum(False, "auto"))
        print(f"VACUUM round {r + 1}: delta-rs {vruns['rs'][-1]:.1f} s, ours {vruns['default'][-1]:.1f} s, "
              f"ours fast_jvm_start {vruns['fast'][-1]:.1f} s, ours auto {vruns['auto'][-1]:.1f} s", flush=True)
    vmed = {k: statistics.median(v) for k, v in vruns.items()}
    print(f"\nVACUUM full, whole task, medians of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    print("| run | wall time | vs delta-rs |\n|---|---:|---:|")
    print(f"| delta-rs vacuum(full=True), fresh process | {vmed['rs']:.1f} s | 1.00 |")
    print(f"| VacuumOperator, default start | {vmed['default']:.1f} s | {vmed['default'] / vmed['rs']:.2f} |")
    print(f"| VacuumOperator, fast_jvm_start | {vmed['fast']:.1f} s | {vmed['fast'] / vmed['rs']:.2f} |")
    print(f"| VacuumOperator, execution auto (threads) | {vmed['auto']:.1f} s | {vmed['auto'] / vmed['rs']:.2f} |")
    print(f"peak RSS of the worker's process so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB")
    print("runs (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.1f}" for x in v) for k, v in vruns.items()))


if __name__ == "__main__":
    main()
