"""This project's engine against delta-spark on the same Spark and the same data (not a test).

Every line is one maintenance job, run by each engine on its own fresh copy of the same source table:

- ``bin-packing``: OPTIMIZE of the OPTIMIZE benchmark's table (2,000 files, about 900 MB, 8 partitions;
  ``bench_optimize.generate``); delta-spark: ``OPTIMIZE delta.`path```;
- ``z-order``: the same table Z-ordered by ``a, k``; delta-spark: ``OPTIMIZE ... ZORDER BY (a, k)``;
- ``liquid clustering``: an unpartitioned copy clustered by ``a, k`` (``bench_clustering.unpartitioned``);
  both engines' OPTIMIZE cluster it;
- ``dv purge``: a copy of the first table on which delta-spark's ``DELETE`` marked 20% of the rows of
  every file deleted with deletion vectors; ours ``optimize --purge``, delta-spark ``REORG TABLE ...
  APPLY (PURGE)``;
- ``vacuum full``: 100,000 files, 50,000 of them orphans (25,000 tombstoned 20 days ago, 25,000 never
  committed; ``bench_vacuum.build``), retention 0; delta-spark ``VACUUM ... RETAIN 0 HOURS``;
- ``vacuum lite``: 100,000 files referenced 30 days ago, then two weeks of daily rewrites (each day
  1,000 files replaced by 1,000 new ones); default 7-day retention, so the rewrites of the week past the
  retention are deleted; delta-spark ``VACUUM ... LITE``;
- ``bin-packing, written by delta-spark``, ``bin-packing, variant``, ``bin-packing, iceberg-compat-v2``: OPTIMIZE
  of 4,000,000 rows in 400 files that delta-spark wrote (``build_spark_written``): the same rows as a plain
  table, with a VARIANT column more (each row's values as a JSON object), and as an Iceberg-compatible table
  (column mapping, ``delta.enableIcebergCompatV2``, UniForm's property recorded); delta-spark ``OPTIMIZE``;
- ``checkpoint``: a log of 1,000,000 checkpointed adds with statistics over 10,000 partitions and 1,000
  commits after it (``bench_worker_checks.generate``, no data files); ours ``checkpoint``, delta-spark
  ``DeltaLog.forTable(...).update()`` then ``checkpoint(snapshot)``.

delta-spark runs its own SQL on the session, not through this project's ``--engine delta-spark`` (whose
planning on our core would add to its time), with the settings our engine gives it: the same file sizes
as ours (1 GiB, both defaults), the retention check off for ``RETAIN 0 HOURS`` and VACUUM's listing in
``max(2 x cores, files / 1000)`` tasks instead of Spark's 10,000.

Each run is a fresh Python process that starts its own ``local[2]`` SparkSession with the same settings
(``spark.driver.memory=4g``, 8 shuffle partitions, no UI); delta-spark's session adds its jars (from the
Ivy cache of ``tests/delta_spark_session.py``), extension and catalog; ours has none. The process
reports the time to start the session, the job's time, and peak memory: the Python driver's VmHWM, the
JVM's (driver and, in local mode, executors), and the largest sum of the Python workers' RSS seen while
the job ran (sampled every 0.2 s; ours does its data work there, delta-spark in the JVM). The session's
first job runs on the JVM only, so our job's time includes starting Spark's Python workers. The engines
alternate, each run on a fresh copy synced to disk; medians of ``--repeat`` runs.

Usage: ``.venv/bin/python -m benchmarks.bench_delta_spark [--repeat 3] [--only NAME ...]``; prints a
Markdown table and writes it to ``benchmarks/out/delta_spark.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OUT = REPO / "benchmarks" / "out"
WORK = OUT / "delta_spark"
DAY_MS = 86_400_000
LOCK = Path("/tmp/bench.lock")

#: name -> (source table, our job and arguments, delta-spark's statement or "checkpoint")
WORKLOADS: dict[str, tuple[str, tuple[str, list[str]], str]] = {
    "bin-packing": ("optimize", ("optimize", []), "OPTIMIZE {ref}"),
    "z-order": ("optimize", ("optimize", ["--zorder-by", "a,k"]), "OPTIMIZE {ref} ZORDER BY (a, k)"),
    "liquid clustering": ("clustered", ("optimize", []), "OPTIMIZE {ref}"),
    "dv purge": ("dv20", ("optimize", ["--purge"]), "REORG TABLE {ref} APPLY (PURGE)"),
    "vacuum full": ("vacuum_full", ("vacuum", ["--retention-hours", "0", "--ignore-retention-check"]),
                    "VACUUM {ref} RETAIN 0 HOURS"),
    "vacuum lite": ("vacuum_lite", ("vacuum", ["--mode", "lite"]), "VACUUM {ref} LITE"),
    "checkpoint": ("checkpoint_1m", ("checkpoint", []), "checkpoint"),
    # the same rows written by delta-spark three ways: a plain table, with a VARIANT column, Iceberg-compatible
    "bin-packing, written by delta-spark": ("spark_plain", ("optimize", []), "OPTIMIZE {ref}"),
    "bin-packing, variant": ("spark_variant", ("optimize", []), "OPTIMIZE {ref}"),
    "bin-packing, iceberg-compat-v2": ("spark_iceberg", ("optimize", []), "OPTIMIZE {ref}"),
}

BASE_CONF = {
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
}


# -- source tables ------------------------------------------------------------------------------------
def _session(engine: str):
    """A ``local[2]`` session with ``BASE_CONF``; delta-spark's jars, extension and catalog for its engine."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if engine == "delta-spark":
        from tests.delta_spark_session import start_delta_spark

        # delta-spark's state reconstruction in as many tasks as our shuffles (its default: 50)
        return start_delta_spark("local[2]", "bench-delta-spark", **BASE_CONF,
                                 **{"spark.databricks.delta.snapshotPartitions": "8"})
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("bench-native")
    for key, value in {**BASE_CONF, "spark.pyspark.python": os.environ["PYSPARK_PYTHON"]}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def _write_commit(log: Path, version: int, actions: list[dict], when_ms: int) -> None:
    path = log / f"{version:020d}.json"
    path.write_text("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
    os.utime(path, (when_ms / 1000, when_ms / 1000))


def build_vacuum_lite(root: Path, days: int = 14, per_day: int = 1000) -> None:
    """100,000 files referenced since 30 days ago, then ``days`` daily commits (the last one a day ago),
    each replacing ``per_day`` referenced files with as many new ones."""
    from benchmarks.bench_vacuum import build

    build(root, tracked=100_000, removed=0)
    now = int(time.time() * 1000)
    log = root / "_delta_log"
    live = sorted(p.relative_to(root).as_posix() for p in root.glob("p=*/*.parquet"))
    version = 2
    for day in range(days, 0, -1):
        when = now - day * DAY_MS
        actions: list[dict] = [{"commitInfo": {"timestamp": when, "operation": "OPTIMIZE",
                                               "operationParameters": {}}}]
        gone, live = live[:per_day], live[per_day:]
        for name in gone:
            part = name.split("/", 1)[0].split("=", 1)[1]
            actions.append({"remove": {"path": name, "deletionTimestamp": when, "dataChange": False,
                                       "partitionValues": {"p": part}, "size": 12}})
        for i in range(per_day):
            part = str(i % 100)
            name = f"p={part}/part-r{version:03d}-{i:05d}-{uuid.uuid4()}.parquet"
            with open(root / name, "wb") as fh:
                fh.write(b"PAR1tinyPAR1")
            os.utime(root / name, (when / 1000, when / 1000))
            actions.append({"add": {"path": name, "partitionValues": {"p": part}, "size": 12,
                                    "modificationTime": when, "dataChange": False}})
            live.append(name)
        _write_commit(log, version, actions, when)
        version += 1


def build_dv20(src: Path, dest: Path) -> None:
    """A copy of ``src`` with deletion vectors on, then delta-spark's DELETE of 20% of every file's rows."""
    shutil.copytree(src, dest)
    spark = _session("delta-spark")
    ref = f"delta.`{dest}`"
    spark.sql(f"ALTER TABLE {ref} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM {ref} WHERE id % 5 = 0")
    spark.stop()


#: rows and files of the tables delta-spark writes for the feature workloads
SPARK_WRITTEN_ROWS, SPARK_WRITTEN_FILES = 4_000_000, 400
_SPARK_WRITTEN = {
    "spark_plain": ("", {}),
    "spark_variant": (", v VARIANT", {}),
    "spark_iceberg": ("", {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true",
                           "delta.universalFormat.enabledFormats": "iceberg"}),
}


def build_spark_written(name: str, dest: Path) -> None:
    """``SPARK_WRITTEN_ROWS`` rows in ``SPARK_WRITTEN_FILES`` files, written by delta-spark: the same rows in
    each table (ids, a key column, a double, a string), plus a variant of each row's values in ``v`` on the
    variant table; the Iceberg-compatible table has column mapping and icebergCompatV2."""
    extra, properties = _SPARK_WRITTEN[name]
    spark = _session("delta-spark")
    ref = f"delta.`{dest}`"
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"CREATE TABLE {ref} (id BIGINT, a INT, k INT, b DOUBLE, s STRING{extra}) USING delta"
              + (f" TBLPROPERTIES ({props})" if props else ""))
    columns = ["id", "CAST(id % 97 AS INT) AS a", "CAST(id % 1013 AS INT) AS k", "CAST(id * 0.37 AS DOUBLE) AS b",
               "concat('name-', CAST(id % 5000 AS STRING)) AS s"]
    if extra:
        columns.append("parse_json(concat('{\"n\": ', CAST(id AS STRING), ', \"tag\": \"t', CAST(id % 13 AS STRING), "
                       "'\", \"ok\": ', IF(id % 2 = 0, 'true', 'false'), '}')) AS v")
    rows = spark.range(SPARK_WRITTEN_ROWS).selectExpr(*columns).repartition(SPARK_WRITTEN_FILES)
    rows.write.format("delta").mode("append").save(str(dest))
    spark.stop()


def source(name: str) -> Path:
    """The cached source table ``name`` (built on first use)."""
    path = WORK / "src" / name
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if name == "optimize":
        from benchmarks.bench_optimize import generate

        generate(path)
    elif name == "clustered":
        from benchmarks.bench_clustering import unpartitioned

        unpartitioned(source("optimize"), path, clustered=True)
    elif name == "dv20":
        build_dv20(source("optimize"), path)
    elif name == "vacuum_full":
        from benchmarks.bench_vacuum import build

        build(path, tracked=75_000, removed=25_000)
    elif name == "vacuum_lite":
        build_vacuum_lite(path)
    elif name in _SPARK_WRITTEN:
        build_spark_written(name, path)
    elif name == "checkpoint_1m":
        from benchmarks.bench_worker_checks import generate as generate_log

        shutil.copytree(generate_log(1_000_000, "multipart"), path)
    else:
        raise ValueError(name)
    (path / ".done").touch()
    print(f"built {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return path


def fresh_copy(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    (dest / ".done").unlink(missing_ok=True)
    subprocess.run(["sync"], check=True)
    time.sleep(1)
    return dest


def data_files(root: Path) -> int:
    return sum(len(files) for d, _, files in os.walk(root) if "_delta_log" not in d)


# -- one run, in a fresh process ----------------------------------------------------------------------
def _vm_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        children = []
        for task in Path(f"/proc/{p}/task").glob("*"):  # a thread's children are listed under that thread
            try:
                children += (task / "children").read_text().split()
            except OSError:
                continue
        out += [int(c) for c in children]
        todo += [int(c) for c in children]
    return out


def _is_python(pid: int) -> bool:
    """Whether ``pid`` runs Python (the JVM also forks short-lived helpers: a fork shows the JVM's RSS)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("python")
    except OSError:
        return False


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class WorkerMemory(threading.Thread):
    """The largest sum of the RSS of the JVM's Python workers, sampled while a job runs."""

    def __init__(self, jvm_pid: int):
        super().__init__(daemon=True)
        self.jvm_pid, self.peak, self.done = jvm_pid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, sum(_rss(p) for p in _descendants(self.jvm_pid) if _is_python(p)))


def _run_peer(spark, workload: str, table: Path) -> dict:
    statement = WORKLOADS[workload][2]
    if statement == "checkpoint":
        jvm = spark._jvm
        none = jvm.scala.Option.apply(None)
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table))
        snapshot = delta_log.update(False, none, none)
        delta_log.checkpoint(snapshot, none)
        return {"version": snapshot.version(), "files": snapshot.numOfFiles()}
    conf = {"spark.databricks.delta.optimize.minFileSize": str(1 << 30),
            "spark.databricks.delta.optimize.maxFileSize": str(1 << 30),
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism":
                str(max(2 * spark.sparkContext.defaultParallelism, data_files(table) // 1000))}
    for key, value in conf.items():
        spark.conf.set(key, value)
    rows = spark.sql(statement.format(ref=f"delta.`{table}`")).collect()
    if rows and "metrics" in rows[0].asDict():
        m = rows[0]["metrics"].asDict(recursive=True)
        return {"numRemovedFiles": m.get("numFilesRemoved"), "numAddedFiles": m.get("numFilesAdded")}
    return {}


def same_work(ours: dict, peer: dict) -> bool:
    """Whether two runs did the same work: as many files removed and added (OPTIMIZE), written
    (checkpoint), or deleted (VACUUM: as many data files left; delta-spark's local file system also
    writes a ``.crc`` file beside each file it writes, left out here)."""
    o, d = ours["result"], peer["result"]
    if "numRemovedFiles" in d:
        return (o["numRemovedFiles"], o["numAddedFiles"]) == (d["numRemovedFiles"], d["numAddedFiles"])
    if "files" in d:
        return o == d
    return ours["files_after"] == peer["files_after"]


def _run_ours(spark, workload: str, table: Path) -> dict:
    from airflow_delta_maint.app.engines.run import run_job_with_engine

    job, argv = WORKLOADS[workload][1]
    code, metrics = run_job_with_engine(job, str(table), "native", argv, spark=spark)
    if code:
        raise RuntimeError(f"{job} failed: {metrics}")
    if job == "checkpoint":
        return {"version": metrics["checkpoint"]["version"], "files": metrics["checkpoint"]["num_add_files"]}
    keys = ("numRemovedFiles", "numAddedFiles", "numDeletionVectorsRemoved")
    return {k: metrics[k] for k in keys if k in metrics}


def child(engine: str, workload: str, table: Path) -> dict:
    """One run in this process: start the session, run the job; times and peak memory."""
    started = time.perf_counter()
    spark = _session(engine)
    spark.range(2).count()  # the JVM's executors are up (no Python worker: ours starts them in its job)
    session_s = time.perf_counter() - started
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    workers = WorkerMemory(jvm_pid)
    workers.start()
    files_before = data_files(table)
    started = time.perf_counter()
    result = (_run_peer if engine == "delta-spark" else _run_ours)(spark, workload, table)
    job_s = time.perf_counter() - started
    workers.done.set()
    workers.join()
    out = {"engine": engine, "workload": workload, "session_s": session_s, "job_s": job_s,
           "python_driver_rss": _vm_hwm(os.getpid()), "jvm_rss": _vm_hwm(jvm_pid),
           "python_workers_rss": workers.peak, "files_before": files_before, "files_after": data_files(table),
           "result": result}
    spark.stop()
    return out


def measure(engine: str, workload: str, table: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_delta_spark", "--child", engine, workload,
                           str(table)], cwd=REPO, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{engine} {workload} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return json.loads(lines[-1][len("RESULT "):])


# -- the comparison -----------------------------------------------------------------------------------
def _hold_quiet() -> bool:
    """Take the machine's benchmark lock (other benchmarks wait while it exists); False if another holds it."""
    try:
        with open(LOCK, "x") as fh:
            fh.write(str(os.getpid()))
        return True
    except FileExistsError:
        return LOCK.read_text().strip() == str(os.getpid())


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f}"


def report(results: dict[str, dict[str, list[dict]]]) -> str:
    rows = ["| job | ours (s) | delta-spark (s) | ratio | ours incl. start (s) | delta-spark incl. start (s) | ratio "
            "| driver peak MiB, ours: Python + JVM | delta-spark: Python + JVM | Python workers MiB, ours / delta-spark | same work |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for workload, by_engine in results.items():
        o, d = by_engine["native"], by_engine["delta-spark"]

        def med(runs: list[dict], key: str) -> float:
            return statistics.median(r[key] for r in runs)

        oj, dj = med(o, "job_s"), med(d, "job_s")
        os_, ds = statistics.median(r["job_s"] + r["session_s"] for r in o), \
            statistics.median(r["job_s"] + r["session_s"] for r in d)
        rows.append(f"| {workload} | {oj:.1f} | {dj:.1f} | **{oj / dj:.2f}** | {os_:.1f} | {ds:.1f} | {os_ / ds:.2f} "
                    f"| {_mib(max(r['python_driver_rss'] for r in o))} + {_mib(max(r['jvm_rss'] for r in o))} "
                    f"| {_mib(max(r['python_driver_rss'] for r in d))} + {_mib(max(r['jvm_rss'] for r in d))} "
                    f"| {_mib(max(r['python_workers_rss'] for r in o))} / {_mib(max(r['python_workers_rss'] for r in d))} "
                    f"| {'yes' if all(same_work(a, b) for a in o for b in d) else 'NO'} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="workload names (default: all)")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "WORKLOAD", "TABLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, workload, table = args.child
        print("RESULT " + json.dumps(child(engine, workload, Path(table))), flush=True)
        return
    names = args.only or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    for name in names:
        source(WORKLOADS[name][0])
    while not _hold_quiet():
        time.sleep(10)
    try:
        run_all(names, args.repeat)
    finally:
        LOCK.unlink(missing_ok=True)


def run_all(names: list[str], repeat: int) -> None:
    results: dict[str, dict[str, list[dict]]] = {}
    for name in names:
        src = source(WORKLOADS[name][0])
        results[name] = {"native": [], "delta-spark": []}
        for i in range(repeat):
            order = ("native", "delta-spark") if i % 2 == 0 else ("delta-spark", "native")
            for engine in order:
                table = fresh_copy(src, WORK / "run" / f"{name.replace(' ', '_')}-{engine}")
                r = measure(engine, name, table)
                results[name][engine].append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
                shutil.rmtree(table, ignore_errors=True)
        print(report({name: results[name]}).splitlines()[-1], flush=True)
    text = report(results)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "delta_spark.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
