"""Snapshot load time at 1,000 commits after a checkpoint, with and without log compaction files.

Builds one table (delta-rs writes version 0 and its checkpoint; the 1,000 commits after it are
appends of one file each, every tenth also removing an older file, written as JSON with
statistics like a real writer's), copies it three times (no compaction files; compaction
interval 10; interval 100) and times loading the latest snapshot with this project's reader
and with delta-rs 1.6.0 (``DeltaTable(...)`` plus ``file_uris()``), on local disk and, with
``--s3``, on a moto S3 server on 127.0.0.1 (compact-log itself then runs against S3).

Run: ``.venv/bin/python benchmarks/bench_log_compaction.py [--commits 1000] [--repeat 7] [--s3]
[--plot docs/img/log_compaction_load.png]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.delta.log.compaction import compact_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage

LABELS = (("no compaction files", None), ("interval 10", 10), ("interval 100", 100))


def build_table(path: Path, commits: int) -> None:
    """Version 0 with a checkpoint, then ``commits`` hand-written append commits."""
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64()), "name": ["x"]}), mode="append")
    DeltaTable(str(path)).create_checkpoint()
    log = path / "_delta_log"
    live: list[str] = []
    t0 = int(time.time() * 1000)
    for v in range(1, commits + 1):
        name = f"part-00000-{uuid.UUID(int=v)}-c000.snappy.parquet"
        stats = json.dumps({"numRecords": 1000, "minValues": {"id": v * 1000, "name": "a"},
                            "maxValues": {"id": v * 1000 + 999, "name": "z"}, "nullCount": {"id": 0, "name": 0}})
        actions: list[dict] = [
            {"commitInfo": {"timestamp": t0 + v, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                            "clientVersion": "bench", "operationMetrics": {"numFiles": 1, "numOutputRows": 1000}}},
            {"add": {"path": name, "partitionValues": {}, "size": 10_000 + v, "modificationTime": t0 + v,
                     "dataChange": True, "stats": stats}},
        ]
        if v % 10 == 0 and live:
            gone = live.pop(0)
            actions.append({"remove": {"path": gone, "deletionTimestamp": t0 + v, "dataChange": True,
                                       "extendedFileMetadata": True, "partitionValues": {}, "size": 10_000}})
        live.append(name)
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` in seconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@contextlib.contextmanager
def moto_s3() -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """A moto S3 server on a free local port with bucket ``bench``: (our options, delta-rs options)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": endpoint}
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT"), timeout=10)
        yield ({**creds, "client.allow_http": "true"}, {**creds, "AWS_ALLOW_HTTP": "true"})
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def upload(local: Path, storage: Storage) -> None:
    """Copy a table's ``_delta_log`` (data files are not needed to load a snapshot)."""
    for f in sorted((local / "_delta_log").iterdir()):
        if f.is_file():
            storage.put(f"_delta_log/{f.name}", f.read_bytes())


def measure(variants: dict[str, str], expected: list[str], commits: int, repeat: int,
            ours_opts: dict[str, str] | None, rs_opts: dict[str, str] | None) -> dict[str, dict[str, float]]:
    """Median load times of each variant with both readers (after checking they agree)."""
    results: dict[str, dict[str, float]] = {}
    for label, uri in variants.items():
        snap = Snapshot.load(uri, storage_options=ours_opts, compactions="trust")
        assert sorted(snap.paths) == expected and snap.version == commits
        assert len(DeltaTable(uri, storage_options=rs_opts).file_uris()) == len(expected)
        ours = timed(lambda: Snapshot.load(uri, storage_options=ours_opts, compactions="trust"), repeat)
        rs = timed(lambda: DeltaTable(uri, storage_options=rs_opts).file_uris(), repeat)
        results[label] = {"ours": ours, "delta-rs": rs, "log files": len(snap.segment.replay)}
    return results


def report(title: str, results: dict[str, dict[str, float]]) -> None:
    base_ours = results["no compaction files"]["ours"]
    base_rs = results["no compaction files"]["delta-rs"]
    print(f"\n{title}\n")
    print("| log after the checkpoint | files replayed | this project | speed-up | delta-rs 1.6.0 | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        print(f"| {label} | {r['log files']} | {r['ours'] * 1000:.1f} ms | {base_ours / r['ours']:.1f}x "
              f"| {r['delta-rs'] * 1000:.1f} ms | {base_rs / r['delta-rs']:.1f}x |")


def plot(path: str, panels: dict[str, dict[str, dict[str, float]]], commits: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    for ax, (title, results) in zip(axes[0], panels.items()):
        labels = list(results)
        x = range(len(labels))
        w = 0.38
        b1 = ax.bar([i - w / 2 for i in x], [results[lbl]["ours"] * 1000 for lbl in labels], w,
                    label="airflow-delta-maint reader")
        b2 = ax.bar([i + w / 2 for i in x], [results[lbl]["delta-rs"] * 1000 for lbl in labels], w,
                    label="delta-rs 1.6.0")
        ax.bar_label(b1, fmt="%.0f", fontsize=8)
        ax.bar_label(b2, fmt="%.0f", fontsize=8)
        ax.set_xticks(list(x), labels)
        ax.set_ylabel("latest snapshot load, ms (median)")
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"{commits} commits after a checkpoint, with and without log compaction files")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\nplot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--s3", action="store_true", help="also measure on a local moto S3 server")
    parser.add_argument("--plot", help="write a bar chart PNG here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-lc-"))
    panels: dict[str, dict[str, dict[str, float]]] = {}
    try:
        base = work / "base"
        build_table(base, args.commits)
        expected = sorted(Snapshot.load(str(base), compactions="ignore").paths)
        local: dict[str, str] = {}
        for label, interval in LABELS:
            path = work / label.replace(" ", "_")
            shutil.copytree(base, path)
            if interval is not None:
                t = time.perf_counter()
                m = compact_log(str(path), interval=interval)
                print(f"compact-log {label} (local): {m['numWindowsWritten']} files, {m['numBytesWritten']} bytes, "
                      f"{time.perf_counter() - t:.2f} s")
            local[label] = str(path)
        panels["local disk"] = measure(local, expected, args.commits, args.repeat, None, None)
        report(f"Local disk, {args.commits} commits after a checkpoint (median of {args.repeat}):",
               panels["local disk"])
        if args.s3:
            with moto_s3() as (ours_opts, rs_opts):
                remote: dict[str, str] = {}
                for label, interval in LABELS:
                    uri = f"s3://bench/{label.replace(' ', '_')}"
                    upload(base, Storage(uri, ours_opts))
                    if interval is not None:
                        t = time.perf_counter()
                        m = compact_log(uri, ours_opts, interval=interval)
                        print(f"compact-log {label} (S3): {m['numWindowsWritten']} files, "
                              f"{time.perf_counter() - t:.2f} s")
                    remote[label] = uri
                repeat = max(3, args.repeat // 2)
                panels["S3 (moto on 127.0.0.1)"] = measure(remote, expected, args.commits, repeat,
                                                           ours_opts, rs_opts)
                report(f"S3 (moto server on 127.0.0.1), {args.commits} commits after a checkpoint "
                       f"(median of {repeat}):", panels["S3 (moto on 127.0.0.1)"])
        if args.plot:
            plot(args.plot, panels, args.commits)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
