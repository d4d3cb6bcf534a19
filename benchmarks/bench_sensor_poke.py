"""How long one poke of ``CommitIntervalSensor`` takes on a table with 1,000 and with 100,000 commits.

The tables are generated cheaply on local disk, shaped like a long-lived table written by a
streaming job: commit 0 holds the protocol and metadata; every commit adds one small file and,
from version 100 on, removes the file added 100 commits earlier (a rolling window), with a
commitInfo first as writers put it; one commit a minute. Every 100 commits a checkpoint is
written by this project's checkpoint writer (protocol, metadata, the live files, the unexpired
tombstones) and ``_last_checkpoint`` points at it, as writers do by default. The newest
checkpoint is therefore 0-99 commits behind the latest version; the benchmark tables end 50
commits after one.

Usage: ``python benchmarks/bench_sensor_poke.py [--sizes 1000 100000] [--repeat 100] [--out FILE]``

Prints the figures as a Markdown section and writes it to ``--out`` (default
``benchmarks/out/sensor_poke.md``, replaced on every run); ``docs/benchmarks.md`` is edited by
hand from it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CHECKPOINT_INTERVAL = 100
WINDOW = 100
MIN_COMMITS = 50
SECTION = "## Commit-interval sensor poke"


def _commit(version: int, ts_ms: int) -> bytes:
    info = {"commitInfo": {"timestamp": ts_ms, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                           "isBlindAppend": version < WINDOW, "engineInfo": "bench"}}
    add = {"add": {"path": f"part-{version:08d}.parquet", "partitionValues": {}, "size": 1024,
                   "modificationTime": ts_ms, "dataChange": True,
                   "stats": json.dumps({"numRecords": 10, "minValues": {"id": version * 10},
                                        "maxValues": {"id": version * 10 + 9}, "nullCount": {"id": 0}})}}
    lines = [info]
    if version == 0:
        schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
        lines.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        lines.append({"metaData": {"id": "00000000-0000-0000-0000-000000000001", "format": {"provider": "parquet",
                      "options": {}}, "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {}, "createdTime": ts_ms}})
    lines.append(add)
    if version >= WINDOW:
        lines.append({"remove": {"path": f"part-{version - WINDOW:08d}.parquet", "deletionTimestamp": ts_ms,
                                 "dataChange": True, "size": 1024}})
    return ("\n".join(json.dumps(a) for a in lines) + "\n").encode()


def make_table(path: Path, commits: int) -> float:
    """Write a table of ``commits`` commits with a checkpoint every 100; return the seconds it took."""
    from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from airflow_delta_maint.delta.storage.store import Storage

    started = time.perf_counter()
    if path.exists():
        shutil.rmtree(path)
    log = path / "_delta_log"
    log.mkdir(parents=True)
    now_ms = int(time.time() * 1000)
    first_ms = now_ms - commits * 60_000
    storage = None
    for version in range(commits):
        ts = first_ms + version * 60_000
        (log / f"{version:020d}.json").write_bytes(_commit(version, ts))
        os.utime(log / f"{version:020d}.json", (ts / 1000, ts / 1000))
        if version and version % CHECKPOINT_INTERVAL == 0:
            storage = storage or Storage(str(path))
            write_checkpoint(Snapshot.load(storage, version), now_ms=ts)
    return time.perf_counter() - started


def make_sensor(path: Path, since: str):
    """The real sensor, as a DAG would declare it."""
    from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor

    kwargs = {"since_version": 0} if since == "version" else {}
    return CommitIntervalSensor(task_id=f"wait_{since}", table_uri=str(path), min_commits=MIN_COMMITS,
                                since=since, **kwargs)


@contextlib.contextmanager
def _quiet_stdout():
    """The sensor logs each poke to stdout; send that to /dev/null while timing (both file
    descriptor 1 and ``sys.stdout``, which ``make bench`` also copies to ``benchmarks/out/``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def time_pokes(paths: dict[int, Path], since: str, repeat: int) -> dict[int, list[float]]:
    """Seconds per ``poke()`` at each size; sizes alternate poke by poke so machine load hits all alike."""
    with _quiet_stdout():
        return _time_pokes(paths, since, repeat)


def _time_pokes(paths: dict[int, Path], since: str, repeat: int) -> dict[int, list[float]]:
    sensors = {size: make_sensor(path, since) for size, path in paths.items()}
    for sensor in sensors.values():  # warm-up
        sensor.poke({})
        sensor.poke({})
    times: dict[int, list[float]] = {size: [] for size in paths}
    for _ in range(repeat):
        for size, sensor in sensors.items():
            t0 = time.perf_counter()
            sensor.poke({})
            times[size].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--since", nargs="+", default=["last_optimize", "last_checkpoint", "version",
                                                       "last_compaction"])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench-sensor-poke"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "sensor_poke.md"),
                        help="write the Markdown section here, replacing the file ('' for none)")
    args = parser.parse_args()
    os.environ.setdefault("AIRFLOW_HOME", os.path.join(args.workdir, "airflow"))

    sizes = sorted(args.sizes)
    paths: dict[int, Path] = {}
    entries: dict[int, int] = {}
    for size in sizes:
        # end 50 commits after a checkpoint, whatever the size
        commits = size - size % CHECKPOINT_INTERVAL + CHECKPOINT_INTERVAL // 2 + 1
        paths[size] = Path(args.workdir) / f"table_{size}"
        took = make_table(paths[size], commits)
        entries[size] = len(os.listdir(paths[size] / "_delta_log"))
        print(f"table of {commits} commits, {entries[size]} log entries, written in {took:.1f} s", flush=True)

    results: dict[tuple[str, int], float] = {}
    for since in args.since:
        times = time_pokes(paths, since, args.repeat)
        for size in sizes:
            results[(since, size)] = statistics.median(times[size])
            print(f"since={since:<16} {size:>7} commits: median {results[(since, size)] * 1000:8.3f} ms "
                  f"(min {min(times[size]) * 1000:.3f}, max {max(times[size]) * 1000:.3f})", flush=True)
    for path in paths.values():
        shutil.rmtree(path)

    small, large = sizes[0], sizes[-1]
    header = (f"| since | {small:,} commits ({entries[small]:,} log entries) "
              f"| {large:,} commits ({entries[large]:,} log entries) | ratio |\n|---|---:|---:|---:|\n")
    rows = "".join(
        f"| `{since}` | {results[(since, small)] * 1000:.2f} ms | {results[(since, large)] * 1000:.2f} ms "
        f"| {results[(since, large)] / results[(since, small)]:.2f} |\n" for since in args.since)
    print("\n" + header + rows)
    if args.out:
        write_section(Path(args.out), header + rows, args.repeat, small, large)


def write_section(path: Path, table: str, repeat: int, small: int, large: int) -> None:
    """Write the figures' Markdown section to ``path`` (a file of its own, replaced on every run)."""
    text = f"""{SECTION}

`benchmarks/bench_sensor_poke.py`: the time of one `CommitIntervalSensor.poke()` (median of
{repeat}, pokes at both sizes alternating, `min_commits={MIN_COMMITS}`) on local disk, on a table with {small:,} and with {large:,}
commits. Tables: one small add per commit, from version 100 on also a remove (a rolling window
of 100 live files), one commit a minute, a checkpoint every 100 commits written by this
project's writer with `_last_checkpoint`; each table ends 50 commits after its last checkpoint.
No commit is an OPTIMIZE, so `last_optimize` reads the commitInfo of all {MIN_COMMITS} newest
commits (its worst case). 2-core machine shared with other jobs: the absolute times are rough,
the ratio is the point (target: at most 1.5).

{table}
`last_optimize`, `last_checkpoint` and `version` never list `_delta_log`: they find the latest
version by existence checks from the checkpoint `_last_checkpoint` names, and `last_optimize`
reads at most `min_commits` commit heads backwards. `last_compaction` has to list the log from
the checkpoint on to find log compaction files; on object stores that listing starts at the
checkpoint's key, on local disk it reads the whole folder, so its cost grows with the number of
log entries there.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
