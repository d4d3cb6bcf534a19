"""Spark Connect against a classic session, and the RDD runner against the DataFrame runner on VACUUM (not a test).

Two comparisons, each alternating on fresh copies after one warm-up run of each side, medians:

- ``optimize``: the 2,000-file table of ``bench_optimize.py`` (about 900 MB over 8 partitions, target
  256 MiB), bin-packed by ``delta-maint optimize`` as an Airflow task runs it: a fresh process per run,
  either a classic ``local[2]`` session of its own (what spark-submit gives a task) or a client of a Spark
  Connect server (``local[2]`` on 127.0.0.1, started once, its Python workers this virtualenv's), with the
  Z-order by two columns too (Spark Connect shuffles with ``groupBy().applyInArrow``). Wall time of the
  process and the job's own time (``duration_s``); delta-rs (``optimize.compact`` / ``optimize.z_order``)
  in a fresh process beside them, its whole process as the peer of the whole task (``wall_vs_delta_rs``).
- ``vacuum``: full VACUUM of the 100,000-file table of ``bench_vacuum.py`` (50,000 files tracked, the
  other 50,000 orphans), on one ``local[2]`` session, with the RDD runner (``parallelize``) and the
  DataFrame runner (``mapInArrow``) listing the table.

Usage: python -m benchmarks.bench_connect [--repeat 3] [--only optimize|vacuum] [--layout bin-packing|z-order]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT = REPO / "benchmarks" / "out" / "connect"
TARGET = str(256 << 20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConnectServer:
    """A Spark Connect server (local[2]) on 127.0.0.1 for the length of a ``with``; stopped by process id."""

    def __init__(self, work: Path):
        self.work = work
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        from airflow_delta_maint.app.spark_session import default_conf
        from airflow_delta_maint.hooks.spark_install import pyspark_home

        # the server's Python workers are the server's: configured as the application configures its own
        worker_env = [arg for key, value in default_conf().items() if key.startswith("spark.executorEnv.")
                      for arg in ("--conf", f"{key}={value}")]
        log = self.work / "connect-server.log"
        env = dict(os.environ, SPARK_HOME=pyspark_home(), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        env.pop("SPARK_REMOTE", None)
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [str(Path(pyspark_home()) / "bin" / "spark-submit"), "--class",
                 "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
                 "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                 "--conf", f"spark.connect.grpc.binding.port={self.port}", "--conf", "spark.ui.enabled=false",
                 *worker_env],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log.read_text()[-3000:])
            time.sleep(0.5)
        return f"sc://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)


def _task(table: Path, args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """One run as a task runs it: a fresh process; (wall seconds, metrics)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "airflow_delta_maint.app.main", "optimize", str(table), "--json",
                           *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return elapsed, json.loads(done.stdout.strip().splitlines()[-1])


def _delta_rs(table: Path, layout: str) -> tuple[float, float]:
    """delta-rs's OPTIMIZE of the same layout in a fresh process, as a task would run it: (process wall
    seconds, import included; seconds after the import)."""
    call = "dt.optimize.compact(target_size={t})" if layout == "bin-packing" else \
        "dt.optimize.z_order(['a', 'b'], target_size={t})"
    code = ("import time\nfrom deltalake import DeltaTable\nt = time.perf_counter()\n"
            f"dt = DeltaTable({str(table)!r})\n{call.format(t=TARGET)}\nprint(time.perf_counter() - t)\n")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - started, float(out.split()[-1])


def bench_optimize(repeat: int, only_layout: str | None = None) -> list[dict]:
    from benchmarks.bench_optimize import generate

    src = REPO / "benchmarks" / "out" / "optimize" / "src"
    if not (src / "_delta_log").exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        generate(src)
    OUT.mkdir(parents=True, exist_ok=True)
    layouts = {"bin-packing": ["--min-file-size", TARGET, "--target-file-size", TARGET],
               "Z-order": ["--zorder-by", "a,b", "--target-file-size", TARGET]}
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "PYSPARK_GATEWAY_PORT")}
    rows = []
    with ConnectServer(OUT) as url:
        sides = {"classic": base, "connect": dict(base, SPARK_REMOTE=url)}
        for layout, args in layouts.items():
            if only_layout and not layout.lower().startswith(only_layout.lower()):
                continue
            times: dict[str, list[tuple[float, float]]] = {s: [] for s in [*sides, "delta-rs"]}
            for n in range(repeat + 1):
                for side in times:
                    table = OUT / f"copy-{side}"
                    shutil.rmtree(table, ignore_errors=True)
                    shutil.copytree(src, table)
                    os.sync()
                    if side == "delta-rs":
                        wall, took = _delta_rs(table, layout)
                        print(f"{layout} {'warm-up' if n == 0 else f'run {n}'} delta-rs: {wall:.1f} s "
                              f"(after import {took:.1f} s)", flush=True)
                        if n:
                            times[side].append((wall, took))
                        shutil.rmtree(table, ignore_errors=True)
                        continue
                    extra = ["--master", "local[2]"] if side == "classic" else []
                    wall, m = _task(table, [*args, *extra], sides[side])
                    assert m["status"] == "committed" and m["numRemovedFiles"] == 2000, m
                    print(f"{layout} {'warm-up' if n == 0 else f'run {n}'} {side}: {wall:.1f} s "
                          f"(job {m['duration_s']:.1f} s, {m['numAddedFiles']} files)", flush=True)
                    if n:
                        times[side].append((wall, m["duration_s"]))
                    shutil.rmtree(table, ignore_errors=True)
            peer = statistics.median(v[0] for v in times["delta-rs"])
            for side, values in times.items():
                wall = statistics.median(v[0] for v in values)
                rows.append({"comparison": "optimize", "layout": layout, "side": side, "wall_median_s": wall,
                             "wall_vs_delta_rs": round(wall / peer, 3),
                             "job_median_s": statistics.median(v[1] for v in values),
                             "runs": [round(v[0], 1) for v in values]})
    return rows


def bench_vacuum(repeat: int) -> list[dict]:
    from airflow_delta_maint.app import cli
    from airflow_delta_maint.app.spark_session import get_spark
    from benchmarks.bench_vacuum import build, copy

    src = OUT / "vacuum-src"
    if not (src / "_delta_log").exists():
        shutil.rmtree(src, ignore_errors=True)
        OUT.mkdir(parents=True, exist_ok=True)
        build(src, tracked=50_000, removed=0)
    get_spark("local[2]")
    times: dict[str, list[float]] = {"rdd": [], "dataframe": []}
    for n in range(repeat + 1):
        for kind in times:
            table = copy(src, OUT / f"vacuum-{kind}")
            os.environ["DELTA_MAINT_SPARK_TASKS"] = kind
            started = time.perf_counter()
            code, m = cli.run(["vacuum", str(table), "--json", "--retention-hours", "0", "--ignore-retention-check"])
            elapsed = time.perf_counter() - started
            assert code == 0 and m["numFilesDeleted"] == 50_000, m
            print(f"vacuum {'warm-up' if n == 0 else f'run {n}'} {kind}: {elapsed:.1f} s", flush=True)
            if n:
                times[kind].append(elapsed)
            shutil.rmtree(table, ignore_errors=True)
    return [{"comparison": "vacuum", "side": kind, "wall_median_s": statistics.median(v),
             "runs": [round(x, 1) for x in v]} for kind, v in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=["optimize", "vacuum"])
    parser.add_argument("--layout", choices=["bin-packing", "z-order"], help="only this OPTIMIZE layout")
    args = parser.parse_args()
    rows: list[dict] = []
    if args.only in (None, "optimize"):
        rows += bench_optimize(args.repeat, args.layout)
    if args.only in (None, "vacuum"):
        rows += bench_vacuum(args.repeat)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"results-{args.only or 'all'}.json").write_text(json.dumps(rows, indent=2))
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
