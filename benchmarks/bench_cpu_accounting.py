"""Where OPTIMIZE's time goes, in CPU seconds (a benchmark, not a test): ours split between the driver,
Spark's JVM and its Python workers, against delta-rs's process, on the speed guard's tables.

On a machine whose cores every side keeps busy, a job's wall time is bounded below by its CPU seconds
divided by the cores, so the ratio of CPU seconds is the floor under the wall-time ratio that
``bench_guard.py`` measures; and CPU seconds move little when other work shares the machine, where
wall times move a lot. Ours runs in this process on a ``local[2]`` SparkSession warmed beforehand (as
in the guard); the CPU of this process and of its descendants (the JVM, the Python workers it forks)
is read before and after each run. delta-rs runs in a fresh process and reports its own ``getrusage``
around the job (its import excluded). Beside the measure from outside, each run's own account of its CPU
(``cpu_driver_s``, ``cpu_tasks_s``, ``cpu_executors_s`` in its metrics); ``--spark-ui`` turns the session's UI
on, whose status API the run reads its executors' CPU from.

Usage: python -m benchmarks.bench_cpu_accounting [--repeat 3] [--only optimize zorder] [--spark-ui]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_guard import OPTIMIZE_SOURCE, OUT, TARGET, fresh_copy, machine_lock, source  # noqa: E402

JOBS = {
    "optimize": (["--target-file-size", str(TARGET)], f"dt.optimize.compact(target_size={TARGET})"),
    "zorder": (["--zorder-by", "a,k", "--target-file-size", str(TARGET)],
               f"dt.optimize.z_order(['a', 'k'], target_size={TARGET})"),
}


def _cpu_by_part() -> dict[str, float]:
    """CPU seconds so far of this process (the driver), the JVM and the Python workers."""
    import psutil

    me = psutil.Process()
    out = {"driver": 0.0, "jvm": 0.0, "python workers": 0.0}
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            part = "driver" if proc.pid == me.pid else "jvm" if "java" in proc.name() else "python workers"
            out[part] += times.user + times.system
    return out


#: what a run reports of its CPU, by part, beside the parts measured from outside
REPORTED = ("cpu_driver_s", "cpu_executors_s", "cpu_tasks_s")
#: the parts measured from outside
PARTS = ("driver", "jvm", "python workers")


def ours(job: str, table: Path) -> tuple[float, dict[str, float]]:
    """Our job in this process on the warm session: (wall seconds, CPU seconds by part, measured from outside
    and, under the names of :data:`REPORTED`, as the run reported them)."""
    import time

    from airflow_delta_maint.app.cli import run

    before, started = _cpu_by_part(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code, metrics = run(["optimize", str(table), *JOBS[job][0], "--json"])
    wall, after = time.perf_counter() - started, _cpu_by_part()
    if code:
        raise RuntimeError(f"{job}: {metrics.get('error')}")
    return wall, {**{k: after[k] - before[k] for k in after}, **{k: float(metrics.get(k) or 0.0) for k in REPORTED}}


def delta_rs(job: str, table: Path) -> tuple[float, float]:
    """delta-rs's job in a fresh process: (wall seconds, CPU seconds), its import excluded."""
    code = ("import resource, time\nfrom deltalake import DeltaTable\n"
            "r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()\n"
            f"dt = DeltaTable({str(table)!r})\n{JOBS[job][1]}\n"
            "r1 = resource.getrusage(resource.RUSAGE_SELF)\n"
            "print(time.perf_counter() - t, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return float(out[-2]), float(out[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=tuple(JOBS), default=list(JOBS))
    parser.add_argument("--spark-ui", action="store_true", help="the session's UI on: runs report their executors' CPU")
    args = parser.parse_args(argv)
    src = source(OPTIMIZE_SOURCE[0])
    rows: list[str] = []
    reported: list[str] = []
    with machine_lock():
        from airflow_delta_maint.app.spark_session import get_spark

        spark = get_spark("local[2]", "bench-cpu-accounting",
                          conf={"spark.ui.enabled": "true", "spark.ui.port": "0"} if args.spark_ui else None)
        spark.range(1).count()
        ours("optimize", fresh_copy(src, "warm"))  # the Python workers start and import here
        for job in args.only:
            runs = []
            for n in range(args.repeat):
                wall, parts = ours(job, fresh_copy(src, f"ours-{n}"))
                rs_wall, rs_cpu = delta_rs(job, fresh_copy(src, f"rs-{n}"))
                runs.append((wall, parts, rs_wall, rs_cpu))
                print(f"{job} {n + 1}: ours {wall:.2f} s, CPU {sum(parts[k] for k in PARTS):.2f} s "
                      f"({', '.join(f'{k} {v:.2f}' for k, v in parts.items())}); delta-rs {rs_wall:.2f} s, "
                      f"CPU {rs_cpu:.2f} s", flush=True)
            med = {k: statistics.median(r[1][k] for r in runs) for k in runs[0][1]}
            cpu, rs_cpu = sum(med[k] for k in PARTS), statistics.median(r[3] for r in runs)
            rows.append(f"| `{job}` | {med['driver']:.2f} | {med['jvm']:.2f} | {med['python workers']:.2f} | "
                        f"{cpu:.2f} | {rs_cpu:.2f} | {cpu / rs_cpu:.2f} | "
                        f"{statistics.median(r[0] for r in runs) / statistics.median(r[2] for r in runs):.2f} |")
            reported.append(f"| `{job}` | {med['driver']:.2f} / {med['cpu_driver_s']:.2f} | {med['jvm']:.2f} / "
                            f"{med['cpu_executors_s']:.2f} | {med['python workers']:.2f} / {med['cpu_tasks_s']:.2f} | "
                            f"{cpu:.2f} / {sum(med[k] for k in REPORTED):.2f} |")
        spark.stop()
    table = ["| job | driver | JVM | Python workers | ours, CPU s | delta-rs, CPU s | CPU ratio | wall ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
             "| job | driver / `cpu_driver_s` | JVM / `cpu_executors_s` | Python workers / `cpu_tasks_s` | "
             "ours / `cpu_s` |", "|---|---:|---:|---:|---:|", *reported]
    text = "\n".join(table)
    print(text)
    (OUT / "cpu_accounting.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
