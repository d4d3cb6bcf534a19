"""Snapshot load of a table with 1,000,000 active files: this project's reader against delta-rs.

The table (cached under ``benchmarks/out/``) has a classic checkpoint at version 100 holding
1,000,000 add actions (partitioned by ``date``, with JSON statistics of four columns, as a
real writer produces) and 20,000 remove tombstones, then 100 commits after it; each commit
appends 10 files and removes 5 files the checkpoint holds. There are no data files: both
readers read only the log.

Each measurement runs in a fresh interpreter and reports its own wall time and peak RSS:
- ours: ``Snapshot.load(path)`` then the active paths (``snapshot.paths``) and sizes;
- delta-rs 1.6.0: ``DeltaTable(path)`` then ``get_add_actions()``.

Run: ``.venv/bin/python -m benchmarks.bench_snapshot_load [--files 1000000] [--commits 100]
[--repeat 3]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
CHECKPOINT_VERSION = 100
COMMIT_ADDS = 10
COMMIT_REMOVES = 5
TOMBSTONES = 20_000
DAYS = 1_000
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "date", "type": "string", "nullable": True, "metadata": {}},
]}


def _date(i: int) -> str:
    return f"2023-{1 + (i // 28) % 12:02d}-{1 + i % 28:02d}-{i // 336:02d}"


def _stats(i: int) -> str:
    return (f'{{"numRecords":{10_000 + i % 5000},"minValues":{{"id":{i * 10_000},"name":"aa{i % 97:02d}",'
            f'"amount":{(i % 1000) / 7:.4f},"ts":"2023-05-01T10:{i % 60:02d}:00.000Z"}},'
            f'"maxValues":{{"id":{i * 10_000 + 9_999},"name":"zz{i % 89:02d}","amount":{(i % 1000) * 3.5:.4f},'
            f'"ts":"2023-05-02T11:{i % 60:02d}:59.999Z"}},"nullCount":{{"id":0,"name":{i % 3},"amount":0,"ts":0}}}}')


def _path(i: int, day: int) -> str:
    return f"date={_date(day)}/part-{i % 4:05d}-{uuid.UUID(int=i + 1)}-c000.snappy.parquet"


def build_table(root: Path, files: int, commits: int) -> None:
    """Write the checkpoint parquet with pyarrow and the commits after it as JSON."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    str_map = pa.map_(pa.string(), pa.string())
    dv = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                    ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
    add_t = pa.struct([("path", pa.string()), ("partitionValues", str_map), ("size", pa.int64()),
                       ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
                       ("tags", str_map), ("deletionVector", dv), ("baseRowId", pa.int64()),
                       ("defaultRowCommitVersion", pa.int64()), ("clusteringProvider", pa.string())])
    remove_t = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                          ("extendedFileMetadata", pa.bool_()), ("partitionValues", str_map), ("size", pa.int64()),
                          ("stats", pa.string()), ("tags", str_map), ("deletionVector", dv),
                          ("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64())])
    meta_t = pa.struct([("id", pa.string()), ("name", pa.string()), ("description", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", str_map)])),
                        ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                        ("createdTime", pa.int64()), ("configuration", str_map)])
    proto_t = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    txn_t = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
    schema = pa.schema([("txn", txn_t), ("add", add_t), ("remove", remove_t), ("metaData", meta_t),
                        ("protocol", proto_t)])

    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    t0 = 1_700_000_000_000
    head = pa.table({
        "txn": pa.nulls(2, txn_t), "add": pa.nulls(2, add_t), "remove": pa.nulls(2, remove_t),
        "metaData": pa.array([None, {"id": "bench-1m", "format": {"provider": "parquet", "options": []},
                                     "schemaString": json.dumps(SCHEMA), "partitionColumns": ["date"],
                                     "createdTime": t0, "configuration": [("delta.checkpointInterval", "100")]}],
                             meta_t),
        "protocol": pa.array([{"minReaderVersion": 1, "minWriterVersion": 2}, None], proto_t),
    }, schema=schema)
    chunk = 100_000
    with pq.ParquetWriter(log / f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet", schema,
                          compression="snappy") as writer:
        writer.write_table(head)
        for lo in range(0, files, chunk):
            idx = range(lo, min(files, lo + chunk))
            days = [i % DAYS for i in idx]
            adds = pa.StructArray.from_arrays([
                pa.array([_path(i, d) for i, d in zip(idx, days)], pa.string()),
                pa.array([[("date", _date(d))] for d in days], str_map),
                pa.array([1_000_000 + (i * 7919) % 120_000_000 for i in idx], pa.int64()),
                pa.array([t0 + i for i in idx], pa.int64()),
                pa.array([False] * len(idx), pa.bool_()),
                pa.array([_stats(i) for i in idx], pa.string()),
                pa.nulls(len(idx), str_map), pa.nulls(len(idx), dv), pa.nulls(len(idx), pa.int64()),
                pa.nulls(len(idx), pa.int64()), pa.nulls(len(idx), pa.string()),
            ], fields=list(add_t))
            n = len(idx)
            writer.write_table(pa.table({"txn": pa.nulls(n, txn_t), "add": adds, "remove": pa.nulls(n, remove_t),
                                         "metaData": pa.nulls(n, meta_t), "protocol": pa.nulls(n, proto_t)},
                                        schema=schema))
        gone = range(files, files + TOMBSTONES)
        removes = pa.array([{"path": _path(i, i % DAYS), "deletionTimestamp": t0 + i, "dataChange": True,
                             "extendedFileMetadata": True, "partitionValues": [("date", _date(i % DAYS))],
                             "size": 1_000_000} for i in gone], remove_t)
        n = len(gone)
        writer.write_table(pa.table({"txn": pa.nulls(n, txn_t), "add": pa.nulls(n, add_t), "remove": removes,
                                     "metaData": pa.nulls(n, meta_t), "protocol": pa.nulls(n, proto_t)},
                                    schema=schema))
    next_id = files + TOMBSTONES
    for c in range(commits):
        version = CHECKPOINT_VERSION + 1 + c
        ts = t0 + 10_000_000 + c
        actions: list[dict] = [{"commitInfo": {"timestamp": ts, "operation": "WRITE",
                                               "operationParameters": {"mode": "Append"}, "readVersion": version - 1,
                                               "isBlindAppend": False}}]
        for k in range(COMMIT_REMOVES):
            i = (c * COMMIT_REMOVES + k) * 997 % files
            actions.append({"remove": {"path": _path(i, i % DAYS), "deletionTimestamp": ts, "dataChange": True,
                                       "extendedFileMetadata": True, "partitionValues": {"date": _date(i % DAYS)},
                                       "size": 1_000_000 + (i * 7919) % 120_000_000}})
        for _ in range(COMMIT_ADDS):
            i, next_id = next_id, next_id + 1
            actions.append({"add": {"path": _path(i, i % DAYS), "partitionValues": {"date": _date(i % DAYS)},
                                    "size": 50_000_000, "modificationTime": ts, "dataChange": True,
                                    "stats": _stats(i)}})
        (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    (log / "_last_checkpoint").write_text(json.dumps({"version": CHECKPOINT_VERSION, "size": files + TOMBSTONES + 1}))


def table_path(files: int, commits: int) -> Path:
    """The cached table for these parameters, built on first use."""
    root = OUT / f"snapshot_{files}_files_{commits}_commits"
    done = root / ".complete"
    if not done.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        build_table(root, files, commits)
        done.write_text("ok")
        print(f"built {root} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return root


def _peak_rss_bytes() -> int:
    """This process's peak RSS. ``VmHWM`` rather than ``ru_maxrss``: Linux carries ``ru_maxrss``
    over ``exec`` from the forking parent, so it can report the parent's size."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(reader: str, path: str) -> dict:
    """One measurement in this (fresh) interpreter: import, load, list files."""
    started = time.perf_counter()
    if reader == "ours":
        from airflow_delta_maint.delta.log.snapshot import Snapshot

        imported = time.perf_counter()
        snap = Snapshot.load(path)
        paths = snap.paths
        total = snap.size_bytes
        num_files, version = len(paths), snap.version
    else:
        from deltalake import DeltaTable

        imported = time.perf_counter()
        dt = DeltaTable(path)
        actions = dt.get_add_actions()
        num_files, version = actions.num_rows, dt.version()
        total = None
    done = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"reader": reader, "load_s": done - imported, "total_s": done - started, "num_files": num_files,
            "version": version, "size_bytes": total, "peak_rss": _peak_rss_bytes(),
            "cpu_s": usage.ru_utime + usage.ru_stime}


def _env() -> dict[str, str]:
    """The children's environment: bytecode cached under ``out/`` as an installed package would have it."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    return env


def measure(reader: str, path: Path) -> dict:
    """Run ``child`` in a fresh interpreter; add the wall time seen from outside."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_snapshot_load", "--child", reader, str(path)],
                         check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                         env=_env())
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


def baseline_rss(reader: str) -> int:
    """Peak RSS of an interpreter that only imports the reader (to separate import cost)."""
    module = "airflow_delta_maint.delta.log.snapshot" if reader == "ours" else "deltalake"
    code = f"import {module}; from benchmarks.bench_snapshot_load import _peak_rss_bytes; print(_peak_rss_bytes())"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], env=_env())
    return int(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("READER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    path = table_path(args.files, args.commits)
    expected_files = args.files - args.commits * COMMIT_REMOVES + args.commits * COMMIT_ADDS
    runs: dict[str, list[dict]] = {"ours": [], "delta-rs": []}
    for reader in runs:  # warm-up: fills the bytecode cache and the page cache
        measure(reader, path)
    for _ in range(args.repeat):
        for reader in runs:
            r = measure(reader, path)
            assert r["num_files"] == expected_files, r
            assert r["version"] == CHECKPOINT_VERSION + args.commits, r
            runs[reader].append(r)
    summary = {}
    for reader, results in runs.items():
        summary[reader] = {
            "load_s": statistics.median(r["load_s"] for r in results),
            "wall_s": statistics.median(r["wall_s"] for r in results),
            "cpu_s": statistics.median(r["cpu_s"] for r in results),
            "peak_mib": max(r["peak_rss"] for r in results) / 2**20,
            "import_mib": baseline_rss(reader) / 2**20,
        }
    ours, rs = summary["ours"], summary["delta-rs"]
    print(f"\nSnapshot load, {args.files:,} files in a classic checkpoint + {args.commits} commits "
          f"({expected_files:,} active), median of {args.repeat} fresh processes\n")
    print("| reader | load + file list (s) | process wall (s) | process CPU (s) | peak RSS (MiB) |"
          " RSS after imports only (MiB) |")
    print("|---|---|---|---|---|---|")
    for label, r in (("this project: `Snapshot.load` + `paths`", ours),
                     ("delta-rs 1.6.0: `DeltaTable` + `get_add_actions()`", rs)):
        print(f"| {label} | {r['load_s']:.2f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['peak_mib']:.0f} |"
              f" {r['import_mib']:.0f} |")
    print(f"\nratio ours/delta-rs: time {ours['load_s'] / rs['load_s']:.2f}x, "
          f"peak memory {ours['peak_mib'] / rs['peak_mib']:.2f}x")


if __name__ == "__main__":
    main()
