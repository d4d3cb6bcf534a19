"""VACUUM benchmark (not a test): full mode against delta-rs, and lite against full.

Table: 100 partition folders x 1,000 tiny files = 100,000 files, all 30 days old. The log (commit
JSON written directly, then a delta-rs checkpoint at version 1) adds 75,000 of them in version 0 and removes 25,000 in version 1 (20 days
ago); 25,000 more are untracked. So 50,000 files are orphans: 25,000 tombstoned, 25,000 untracked.

1. full mode (``--retention-hours 0 --ignore-retention-check``) vs delta-rs
   ``DeltaTable.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)``
   on identical copies (each copy synced to disk before its run, so every run finds the
   file system in the same state). Ours runs in-process on a SparkSession started beforehand
   and warmed with one JVM-only job, so JVM start-up is excluded. The first of our runs pays
   for starting Spark's Python workers (cold); then delta-rs and ours alternate ``--repeat``
   times (medians).
2. lite vs full on a nightly-style table: 100,000 referenced files, a watermark at version 0, and
   version 1 removing 1,000 files 20 days ago (default 7-day retention); medians of ``--repeat``.

Usage: python benchmarks/bench_vacuum.py [--workdir DIR] [--repeat 3] [--out benchmarks/out/vacuum.md]

Prints the figures as a Markdown section and writes it to ``--out`` (replacing the file);
``docs/benchmarks.md`` is edited by hand from it.
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
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"  # make bench's outputs (not tracked)
DAY_MS = 86_400_000
PARTITIONS = 100
PER_PARTITION = 1000


def _write_commit(log: Path, version: int, actions: list[dict], when_ms: int) -> None:
    path = log / f"{version:020d}.json"
    path.write_text("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
    os.utime(path, (when_ms / 1000, when_ms / 1000))


def build(root: Path, tracked: int, removed: int, watermark: int | None = None) -> dict:
    """Create the files and the log; return counts. ``tracked`` files are added in version 0,
    the first ``removed`` of them removed in version 1; the rest of the 100,000 are untracked."""
    now = int(time.time() * 1000)
    old_s = (now - 30 * DAY_MS) / 1000
    root.mkdir(parents=True)
    log = root / "_delta_log"
    log.mkdir()
    names = []
    for p in range(PARTITIONS):
        folder = root / f"p={p}"
        folder.mkdir()
        for i in range(PER_PARTITION):
            name = f"p={p}/part-{i:05d}-{uuid.uuid4()}.parquet"
            with open(root / name, "wb") as fh:
                fh.write(b"PAR1tinyPAR1")
            os.utime(root / name, (old_s, old_s))
            names.append(name)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
    v0 = [{"commitInfo": {"timestamp": now - 30 * DAY_MS, "operation": "WRITE", "operationParameters": {}}},
          {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
          {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(schema), "partitionColumns": ["p"], "configuration": {},
                        "createdTime": now - 30 * DAY_MS}}]
    for name in names[:tracked]:
        part = name.split("/", 1)[0].split("=", 1)[1]
        v0.append({"add": {"path": name, "partitionValues": {"p": part}, "size": 12,
                           "modificationTime": now - 30 * DAY_MS, "dataChange": True}})
    _write_commit(log, 0, v0, now - 30 * DAY_MS)
    v1 = [{"commitInfo": {"timestamp": now - 20 * DAY_MS, "operation": "DELETE", "operationParameters": {}}}]
    for name in names[:removed]:
        part = name.split("/", 1)[0].split("=", 1)[1]
        v1.append({"remove": {"path": name, "deletionTimestamp": now - 20 * DAY_MS, "dataChange": True,
                              "partitionValues": {"p": part}, "size": 12}})
    _write_commit(log, 1, v1, now - 20 * DAY_MS)
    from deltalake import DeltaTable

    DeltaTable(str(root)).create_checkpoint()  # a table this size has checkpoints; both sides read it
    if watermark is not None:
        (log / "_last_vacuum_info").write_text(json.dumps({"latestCommitVersionOutsideOfRetentionWindow": watermark}))
    return {"files": len(names), "tracked": tracked, "removed": removed, "untracked": len(names) - tracked}


def copy(src: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    subprocess.run(["sync"], check=True)
    time.sleep(1)
    return dest


def count_files(root: Path) -> int:
    return sum(len(files) for d, _, files in os.walk(root) if "_delta_log" not in d)


def run_delta_rs(path: Path) -> tuple[float, int]:
    code = (
        "import sys, time\n"
        "from deltalake import DeltaTable\n"
        "t = time.perf_counter()\n"
        f"dt = DeltaTable({str(path)!r})\n"
        "n = len(dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True))\n"
        "print(time.perf_counter() - t, n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def run_ours(path: Path, *args: str) -> tuple[float, dict]:
    from airflow_delta_maint.app.cli import run

    t = time.perf_counter()
    code, metrics = run(["vacuum", str(path), "--json", *args])
    elapsed = time.perf_counter() - t
    if code:
        raise RuntimeError(metrics)
    return elapsed, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(OUT / "vacuum.md"),
                        help="write the Markdown section here, replacing the file (default benchmarks/out/vacuum.md)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-vacuum-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import logging

    logging.basicConfig(level=logging.WARNING)

    t = time.perf_counter()
    orphans = work / "orphans"
    shutil.rmtree(orphans, ignore_errors=True)
    counts = build(orphans, tracked=75_000, removed=25_000)
    print(f"built {counts} in {time.perf_counter() - t:.1f}s", flush=True)

    from airflow_delta_maint.app.spark_session import get_spark

    t = time.perf_counter()
    spark = get_spark("local[2]", "bench-vacuum")
    startup = time.perf_counter() - t
    print(f"SparkSession start-up (excluded): {startup:.1f}s", flush=True)

    t = time.perf_counter()
    spark.range(1).count()  # the JVM's first job (class loading, code generation): start-up too
    startup += time.perf_counter() - t

    results: dict[str, float | int] = {}
    ours = copy(orphans, work / "ours")
    elapsed, m = run_ours(ours, "--retention-hours", "0", "--ignore-retention-check")
    assert count_files(ours) == 50_000, count_files(ours)
    results["ours_full_cold_s"] = elapsed
    results["ours_full_deleted"] = m["numDeletedFiles"]
    print(f"ours full (cold Python workers): {elapsed:.2f}s, {m['numDeletedFiles']} files", flush=True)
    rs_times, ours_times = [], []
    for _ in range(args.repeat):
        rs_copy = copy(orphans, work / "rs")
        took, results["delta_rs_deleted"] = run_delta_rs(rs_copy)
        rs_times.append(took)
        print(f"delta-rs full vacuum: {took:.2f}s, {results['delta_rs_deleted']} files", flush=True)
        ours = copy(orphans, work / "ours")
        took, m = run_ours(ours, "--retention-hours", "0", "--ignore-retention-check")
        assert count_files(ours) == 50_000, count_files(ours)
        ours_times.append(took)
        print(f"ours full (warm Python workers): {took:.2f}s, {m['numDeletedFiles']} files", flush=True)
    shutil.rmtree(rs_copy)
    shutil.rmtree(ours)
    results["delta_rs_s"] = statistics.median(rs_times)
    results["ours_full_warm_s"] = statistics.median(ours_times)
    spread = (f"delta-rs {min(rs_times):.2f}-{max(rs_times):.2f} s, "
              f"ours {min(ours_times):.2f}-{max(ours_times):.2f} s")

    # finding what to delete on the orphan table: dry runs (nothing changes, one copy serves all)
    dry = copy(orphans, work / "dry")
    for mode in ("full", "lite"):
        times = []
        for _ in range(max(3, args.repeat)):
            took, m = run_ours(dry, "--retention-hours", "0", "--ignore-retention-check", "--mode", mode, "--dry-run")
            times.append(took)
        results[f"dry_{mode}_s"] = statistics.median(times)
        results[f"dry_{mode}_found"] = m["numFilesToDelete"]
        print(f"dry run {mode}: {results[f'dry_{mode}_s']:.3f}s, {m['numFilesToDelete']} files found", flush=True)
    shutil.rmtree(dry)

    # lite vs full on the same orphan table (lite sees only the 25,000 tombstoned files)
    lite_copy = copy(orphans, work / "lite-orphans")
    results["ours_lite_orphans_s"], m = run_ours(lite_copy, "--retention-hours", "0", "--ignore-retention-check",
                                                 "--mode", "lite")
    results["ours_lite_orphans_deleted"] = m["numDeletedFiles"]
    print(f"ours lite on the orphan table: {results['ours_lite_orphans_s']:.2f}s, {m['numDeletedFiles']} files", flush=True)
    shutil.rmtree(lite_copy)
    shutil.rmtree(orphans)

    nightly = work / "nightly"
    shutil.rmtree(nightly, ignore_errors=True)
    build(nightly, tracked=100_000, removed=1_000, watermark=0)
    for mode in ("full", "lite"):
        times = []
        for _ in range(args.repeat):
            c = copy(nightly, work / f"nightly-{mode}")
            elapsed, m = run_ours(c, "--mode", mode)
            times.append(elapsed)
            print(f"nightly {mode}: {elapsed:.2f}s, {m['numDeletedFiles']} files", flush=True)
        results[f"nightly_{mode}_s"] = statistics.median(times)
        results[f"nightly_{mode}_deleted"] = m["numDeletedFiles"]
        shutil.rmtree(c)
    shutil.rmtree(nightly)
    spark.stop()

    ratio_cold = results["ours_full_cold_s"] / results["delta_rs_s"]
    ratio_warm = results["ours_full_warm_s"] / results["delta_rs_s"]
    speedup = results["nightly_full_s"] / results["nightly_lite_s"]
    dry_speedup = results["dry_full_s"] / results["dry_lite_s"]
    load = os.getloadavg()[0]
    section = f"""
## VACUUM

`python benchmarks/bench_vacuum.py --repeat {args.repeat}` on {time.strftime('%Y-%m-%d')}, 2 cores, `local[2]`,
load average {load:.1f} when it finished. Table: 100 partition folders x 1,000 tiny files = 100,000 files;
50,000 orphans (25,000 removed 20 days ago, 25,000 never committed), all 30 days old. Every run gets a fresh
copy synced to disk. JVM start-up (SparkSession and its first JVM-only job, {startup:.1f} s) is excluded;
"cold" is our first run, which starts Spark's Python workers; delta-rs and "warm" are medians of
{args.repeat} alternating runs ({spread}).

| run | time (s) | files deleted |
|---|---:|---:|
| delta-rs 1.6.0 `vacuum(retention_hours=0, enforce_retention_duration=False, full=True)` | {results['delta_rs_s']:.2f} | {results['delta_rs_deleted']} |
| ours, full, first run (cold Python workers) | {results['ours_full_cold_s']:.2f} | {results['ours_full_deleted']} |
| ours, full, later runs (warm Python workers) | {results['ours_full_warm_s']:.2f} | {results['ours_full_deleted']} |
| ours, lite, same table (sees only the tombstoned files) | {results['ours_lite_orphans_s']:.2f} | {results['ours_lite_orphans_deleted']} |

Full mode / delta-rs: {ratio_cold:.2f} (cold), {ratio_warm:.2f} (warm); target <= 1.0.

Finding what to delete on the same table (`--dry-run`, median of {max(3, args.repeat)}): full mode lists
{results['dry_full_found']} candidates in {results['dry_full_s']:.3f} s, lite mode reads them ({results['dry_lite_found']}, the
tombstoned ones) from the log in {results['dry_lite_s']:.3f} s: lite is {dry_speedup:.1f}x faster.

Nightly run, 100,000 referenced files, watermark at version 0, version 1 removed 1,000 files 20 days ago,
default 7-day retention:

| mode | time (s) | files deleted |
|---|---:|---:|
| full (lists 100,000 files) | {results['nightly_full_s']:.2f} | {results['nightly_full_deleted']} |
| lite (reads version 1) | {results['nightly_lite_s']:.2f} | {results['nightly_lite_deleted']} |

Lite is {speedup:.1f}x faster than full; target >= 10x.
"""
    print(section)
    write_section(Path(args.out), section)


def write_section(path: Path, section: str) -> None:
    """Write the figures' Markdown section to ``path`` (a file of its own, replaced on every run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(section.lstrip("\n"))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
