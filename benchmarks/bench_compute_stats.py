"""compute-stats benchmark (not a test): statistics without a rewrite against an OPTIMIZE that rewrites every file, and the
time per 100,000 files when the footers suffice.

1. The same table twice: ``FILES`` files of ``ROWS`` rows (id, a double, a string, a timestamp), written
   by delta-rs in one partition, their statistics then taken out of the log (a writer that never collects
   them). On one copy ``compute-stats`` gives every file statistics; on the other ``optimize`` rewrites
   them all (every file is below its target size; ``--full`` is for liquid-clustered tables only), which
   writes statistics too. Both in-process on one SparkSession started and warmed
   beforehand (JVM start-up excluded); medians of ``--repeat`` runs, each on fresh copies.
2. 100,000 files that need only their footers (integer and string columns of a file written by pyarrow:
   every bound is in the footer), hard links of one file per partition under 100,000 names in 100 partitions, all in
   one commit without statistics. ``compute-stats`` on Spark (``local[2]``) and under local execution
   (threads of this process); then the worker's check on the result (every file has statistics: it reads
   them all).

Usage: python benchmarks/bench_compute_stats.py [--workdir DIR] [--repeat 3] [--out benchmarks/out/compute_stats.md]

Prints the figures as a Markdown section and writes it to ``--out`` (replacing the file);
``docs/benchmarks.md`` is edited by hand from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"  # make bench's outputs (not tracked)
FILES = 32
ROWS = 400_000
MANY = 100_000
PARTITIONS = 100


def strip_stats(path: Path) -> None:
    for commit in sorted((path / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        for action in actions:
            action.get("add", {}).pop("stats", None)
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))


def build_table(root: Path) -> int:
    """FILES delta-rs appends of ROWS rows each, statistics taken out; returns the bytes written."""
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    for i in range(FILES):
        ids = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
        write_deltalake(str(root), pa.table({
            "id": ids, "x": rng.random(ROWS),
            "s": pa.array([f"customer-{v % 100_003:08d}" for v in ids.tolist()]),
            "ts": pa.array(ids * 1_000_000, pa.timestamp("us", tz="UTC")),
        }), mode="append")
    strip_stats(root)
    return sum(f.stat().st_size for f in root.glob("*.parquet"))


def build_many(root: Path) -> None:
    """MANY hard links of one small pyarrow-written file in PARTITIONS partitions, one commit, no statistics."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    data = pa.table({"id": pa.array(range(100), pa.int64()), "s": pa.array([f"v{i}" for i in range(100)])})
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                           for n, t in (("id", "long"), ("s", "string"), ("p", "integer"))]}
    now = int(time.time() * 1000)
    actions: list[dict] = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": ["p"], "configuration": {},
                      "createdTime": now}}]
    for p in range(PARTITIONS):
        folder = root / f"p={p}"
        folder.mkdir()
        source = folder / "source.parquet.tmp"  # one per partition: a file takes some 65,000 links at most
        pq.write_table(data, source)
        size = source.stat().st_size
        for i in range(MANY // PARTITIONS):
            name = f"part-{i:05d}-{uuid.uuid4()}.parquet"
            os.link(source, folder / name)
            actions.append({"add": {"path": f"p={p}/{name}", "partitionValues": {"p": str(p)}, "size": size,
                                    "modificationTime": now, "dataChange": True}})
        source.unlink()
    (root / "_delta_log").mkdir()
    (root / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def copy(src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    os.sync()
    return dest


def run(job: str, path: Path, *args: str, local: bool = False) -> tuple[float, dict]:
    from airflow_delta_maint.app.cli import run as cli_run
    from airflow_delta_maint.app.execution import run_in_process

    t = time.perf_counter()
    if local:
        code, metrics = run_in_process(job, str(path), list(args))
    else:
        code, metrics = cli_run([job, str(path), "--json", *args])
    elapsed = time.perf_counter() - t
    if code:
        raise RuntimeError(metrics)
    return elapsed, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(OUT / "compute_stats.md"),
                        help="write the Markdown section here, replacing the file (default benchmarks/out/compute_stats.md)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-compute-stats-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import contextlib
    import io
    import logging

    logging.basicConfig(level=logging.WARNING)
    t = time.perf_counter()
    table = work / "table"
    data_bytes = build_table(table)
    print(f"built {FILES} files, {data_bytes / 2**20:.0f} MiB, in {time.perf_counter() - t:.1f}s", flush=True)

    from airflow_delta_maint.app.spark_session import get_spark

    spark = get_spark("local[2]", "bench-compute-stats")
    spark.range(1).count()

    results: dict[str, float] = {}
    stats_times, optimize_times = [], []
    added = 0
    for _ in range(args.repeat):
        with contextlib.redirect_stdout(io.StringIO()):
            took, m = run("compute-stats", copy(table, work / "stats"))
        assert m["numFilesUpdated"] == FILES and m["numFilesReadFromData"] == FILES, m  # doubles: from the data
        stats_times.append(took)
        with contextlib.redirect_stdout(io.StringIO()):  # every file is small: OPTIMIZE rewrites them all
            took, m = run("optimize", copy(table, work / "optimize"))
        assert m["numRemovedFiles"] == FILES, m
        optimize_times.append(took)
        added = m["numAddedFiles"]
        print(f"compute-stats {stats_times[-1]:.2f}s, optimize {optimize_times[-1]:.2f}s", flush=True)
    results["stats_s"] = statistics.median(stats_times)
    results["optimize_s"] = statistics.median(optimize_times)

    many = work / "many"
    t = time.perf_counter()
    build_many(many)
    print(f"built {MANY} files in {time.perf_counter() - t:.1f}s", flush=True)
    spark_times, local_times, check_times = [], [], []
    for _ in range(args.repeat):
        with contextlib.redirect_stdout(io.StringIO()):
            took, m = run("compute-stats", copy(many, work / "many-spark"))
        assert m["numFilesUpdated"] == MANY and m["numFilesReadFromData"] == 0, m
        spark_times.append(took)
        took, m = run("compute-stats", copy(many, work / "many-local"), local=True)
        assert m["numFilesUpdated"] == MANY and m["numFilesReadFromData"] == 0, m
        local_times.append(took)
        from airflow_delta_maint.app.jobs import compute_stats

        t = time.perf_counter()
        reason = compute_stats.nothing_to_do(str(work / "many-local"), None, compute_stats.options_from({}))
        check_times.append(time.perf_counter() - t)
        assert reason is not None
        print(f"{MANY} files: spark {spark_times[-1]:.1f}s, local {local_times[-1]:.1f}s, "
              f"check {check_times[-1]:.2f}s", flush=True)
    results["many_spark_s"] = statistics.median(spark_times)
    results["many_local_s"] = statistics.median(local_times)
    results["many_check_s"] = statistics.median(check_times)

    cores = os.cpu_count()
    text = "\n".join([
        "## compute-stats",
        "",
        f"`benchmarks/bench_compute_stats.py` on {cores} cores, medians of {args.repeat} runs, in-process on a warmed "
        "`local[2]` SparkSession.",
        "",
        "| what | seconds |",
        "|---|---|",
        f"| {FILES} files, {data_bytes / 2**20:.0f} MiB (delta-rs, statistics taken out): `compute-stats` | "
        f"{results['stats_s']:.2f} |",
        f"| the same table: `optimize` (rewrites every file into {added} files) | {results['optimize_s']:.2f} |",
        f"| {MANY:,} files whose footers suffice: `compute-stats` on Spark | {results['many_spark_s']:.1f} |",
        f"| the same, local execution (threads of this process) | {results['many_local_s']:.1f} |",
        f"| the worker's check afterwards (every file has statistics) | {results['many_check_s']:.2f} |",
        "",
    ])
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
