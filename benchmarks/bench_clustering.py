"""Liquid clustering benchmark (not a test): Hilbert clustering against this project's own Z-order.

No engine outside the JVM implements liquid clustering (delta-rs has none), so the peer is this
project's Z-order on the same data. Data: the 2,000 files of the OPTIMIZE benchmark
(``bench_optimize.py``, generated there if missing), as one unpartitioned table (the partition
column left out, since clustered tables have none). Two copies: one plain, Z-ordered by
``a, k``; one with the ``clustering`` feature and ``a, k`` as clustering columns, clustered.
Both run in-process on one ``local[2]`` SparkSession after a warm-up job; each layout is timed
``--repeat`` times on fresh copies (medians). Quality: per column, the average number of files
whose min/max range contains a point (``clustering_quality``), and the files a point query on
one column must read, before and after.

Usage: python benchmarks/bench_clustering.py [--workdir DIR] [--target-mb 32] [--repeat 2]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

COLUMNS = ["a", "k"]


def unpartitioned(src: Path, dest: Path, clustered: bool) -> None:
    """A copy of the OPTIMIZE benchmark table without its partition column, every file at the root
    of the log's paths as before; optionally with the clustering feature on ``COLUMNS``."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    log = dest / "_delta_log"
    for f in log.iterdir():
        if not f.name.endswith(".json"):
            f.unlink()
    out = []
    for f in sorted(log.glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                md = action["metaData"]
                schema = json.loads(md["schemaString"])
                schema["fields"] = [x for x in schema["fields"] if x["name"] != "p"]
                md["schemaString"], md["partitionColumns"] = json.dumps(schema), []
            if "add" in action:
                action["add"]["partitionValues"] = {}
            if "protocol" in action and clustered:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["domainMetadata", "clustering"]}
            if "commitInfo" not in action:
                out.append(action)
        f.unlink()
    if clustered:
        out.append({"domainMetadata": {"domain": "delta.clustering", "removed": False,
                                       "configuration": json.dumps({"clusteringColumns": [[c] for c in COLUMNS]})}})
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "CREATE TABLE"}}
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in [info, *out]) + "\n")


def point_reads(path: Path, column: str, points: int = 200) -> float:
    """Files a point query on ``column`` reads, averaged over ``points`` evenly spaced values."""
    import numpy as np

    from airflow_delta_maint.delta.log.snapshot import Snapshot

    bounds = []
    for a in Snapshot.load(str(path)).add_actions():
        s = json.loads(a["stats"])
        bounds.append((s["minValues"][column], s["maxValues"][column]))
    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    qs = np.linspace(lo.min(), hi.max(), points)
    return float(np.mean([np.count_nonzero((lo <= q) & (hi >= q)) for q in qs]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "out" / "clustering"))
    ap.add_argument("--source", default=str(REPO / "benchmarks" / "out" / "optimize" / "src"))
    ap.add_argument("--target-mb", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    src = Path(args.source)
    if not src.exists():
        from benchmarks.bench_optimize import generate

        src.parent.mkdir(parents=True, exist_ok=True)
        generate(src)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    target = str(args.target_mb << 20)

    from airflow_delta_maint.app import cli
    from airflow_delta_maint.app.spark_session import get_spark
    from airflow_delta_maint.delta.plans.clustering import clustering_quality
    from airflow_delta_maint.delta.protocol.schema import resolve_column
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    spark = get_spark("local[2]")
    spark.range(1).count()

    def quality(path: Path) -> dict:
        snap = Snapshot.load(str(path))
        cols = [resolve_column(snap.metadata.schema_string, c) for c in COLUMNS]
        return clustering_quality(snap.add_actions(), cols)

    runs: dict[str, list[float]] = {"zorder": [], "liquid": []}
    results: dict[str, dict] = {}
    before = None
    for i in range(args.repeat):
        for layout in ("zorder", "liquid"):
            table = work / layout
            unpartitioned(src, table, clustered=layout == "liquid")
            subprocess.run(["sync"], check=True)
            if before is None:
                before = (quality(table), {c: point_reads(table, c) for c in COLUMNS})
            extra = ["--zorder-by", ",".join(COLUMNS)] if layout == "zorder" else []
            started = time.perf_counter()
            code, m = cli.run(["optimize", str(table), "--target-file-size", target, *extra])
            runs[layout].append(time.perf_counter() - started)
            assert code == 0 and m["status"] == "committed", m
            results[layout] = {"files": m["numAddedFiles"], "quality": quality(table),
                               "point_reads": {c: point_reads(table, c) for c in COLUMNS}}
            print(f"run {i + 1}: {layout} {runs[layout][-1]:.1f} s", flush=True)
    spark.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    assert before is not None
    print(f"\ninput: 2,000 files, one unpartitioned table; target {args.target_mb} MiB; medians of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| layout | wall time | files out | overlap depth a / k | files read by a point query on a / k | time vs Z-order |")
    print("|---|---:|---:|---:|---:|---:|")
    q, p = before
    print(f"| before (2,000 files) | | 2000 | {q['a']:.1f} / {q['k']:.1f} | {p['a']:.1f} / {p['k']:.1f} | |")
    for layout, label in (("zorder", "Z-order by a, k"), ("liquid", "liquid clustering by a, k (Hilbert)")):
        r = results[layout]
        print(f"| {label} | {med[layout]:.1f} s | {r['files']} | {r['quality']['a']:.1f} / {r['quality']['k']:.1f} | "
              f"{r['point_reads']['a']:.1f} / {r['point_reads']['k']:.1f} | {med[layout] / med['zorder']:.2f} |")
    print("runs (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.1f}" for x in v) for k, v in runs.items()))


if __name__ == "__main__":
    main()
