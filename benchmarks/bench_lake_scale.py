"""A lake of a thousand tables, from the worker: the night's plan, and the triggers watching every table.

- **plan**: ``--tables`` tables (default 1,000) on local disk, logs only (their adds name files that are not
  written: the plan reads the log alone), with skewed histories: most tables a few commits, a few hundreds,
  some with deletes, some written without statistics. ``delta-maint plan-lake --dry-run --json`` plans the night
  for all of them with a CPU budget, in a process of its own, as a worker runs it. Measured: wall time, the
  process's peak RSS (``ru_maxrss`` of the child), whether any JVM was started under it (polled every 0.1 s),
  and the plan's counts.
- **triggers**: the same number of tables, each a few commits, on a moto S3 server (a child process), and one
  :class:`~airflow_delta_maint.triggers.table_commits.TableCommitsTrigger` per table, all running in one asyncio
  loop of one process, as Airflow's triggerer runs them (its ``TriggerRunner`` awaits each trigger's ``run()``
  on one loop), for ``--polls`` poll intervals of ``--poke-interval`` seconds. Measured: that process's peak
  RSS (Airflow and the provider imported, as in the triggerer), and the store calls per table by kind (the
  store-call counter, each check counting its own), of a first check and of a later one (``list`` must stay at
  most 1 per check). The same watchers in a real ``airflow triggerer`` are measured by ``bench_lake_triggerer``.

Usage: ``.venv/bin/python -m benchmarks.bench_lake_scale [--tables 1000] [--part plan|triggers|both]``; prints a
JSON object and writes it to ``benchmarks/out/lake_scale.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"
SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]})


def table_commits(rng: random.Random, now_ms: int) -> list[list[dict]]:
    """One table's commits: a skewed number of appends of 1-20 small files; a third delete some files; a fifth are
    written without statistics."""
    commits: list[list[dict]] = [[
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": SCHEMA, "partitionColumns": ["p"], "configuration": {},
                      "createdTime": now_ms}}]]
    appends = min(300, int(rng.paretovariate(1.2) * 3))
    with_stats = rng.random() > 0.2
    live: list[dict] = []
    for c in range(appends):
        actions: list[dict] = [{"commitInfo": {"timestamp": now_ms + c, "operation": "WRITE"}}]
        for _ in range(rng.randint(1, 20)):
            part = f"d{rng.randint(0, 3)}"
            rows = rng.randint(10, 5000)
            add: dict[str, Any] = {"path": f"p={part}/part-{uuid.uuid4()}.parquet", "partitionValues": {"p": part},
                                   "size": rows * 9 + 400, "modificationTime": now_ms + c, "dataChange": True}
            if with_stats:
                add["stats"] = json.dumps({"numRecords": rows, "minValues": {"id": 0}, "maxValues": {"id": rows},
                                           "nullCount": {"id": 0}})
            actions.append({"add": add})
            live.append(add)
        commits.append(actions)
    if rng.random() < 0.33 and len(live) > 4:
        gone = rng.sample(live, len(live) // 4)
        commits.append([{"commitInfo": {"timestamp": now_ms + appends, "operation": "DELETE"}}] + [
            {"remove": {"path": a["path"], "deletionTimestamp": now_ms + appends, "dataChange": True,
                        "partitionValues": a["partitionValues"], "size": a["size"]}} for a in gone])
    return commits


def commit_bytes(actions: list[dict]) -> bytes:
    return ("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n").encode()


def write_local_lake(root: Path, tables: int, seed: int = 7) -> list[str]:
    rng, now = random.Random(seed), int(time.time() * 1000)
    paths = []
    for i in range(tables):
        log = root / f"t{i:04d}" / "_delta_log"
        log.mkdir(parents=True)
        for version, actions in enumerate(table_commits(rng, now)):
            (log / f"{version:020d}.json").write_bytes(commit_bytes(actions))
        paths.append(str(log.parent))
    return paths


def _java_under(pid: int) -> bool:
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            for c in children:
                try:
                    if Path(os.readlink(f"/proc/{c}/exe")).name == "java":
                        return True
                except OSError:
                    pass
            todo += children
    return False


def measure_plan(tables: int, cpu_budget: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="lake-scale-"))
    try:
        started = time.perf_counter()
        paths = write_local_lake(root, tables)
        built_s = time.perf_counter() - started
        argv = [sys.executable, "-m", "airflow_delta_maint.app.main", "plan-lake", *paths, "--dry-run", "--json",
                "--budget", f"cpu_s={cpu_budget}"]
        started = time.perf_counter()
        with open(root / "out.json", "w+") as out_fh, open(root / "err.txt", "w+") as err_fh:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=out_fh, stderr=err_fh, text=True)
            java = False
            while proc.poll() is None:
                java = java or _java_under(proc.pid)
                time.sleep(0.1)
            out_fh.seek(0)
            err_fh.seek(0)
            out, err = out_fh.read(), err_fh.read()
        wall_s = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        if proc.returncode:
            raise RuntimeError(f"plan-lake failed ({proc.returncode}): {err[-3000:]}")
        plan = json.loads(out.strip().splitlines()[-1])["plan"]
        return {"tables": tables, "build_s": round(built_s, 1), "wall_s": round(wall_s, 1),
                "peak_rss_mib": round(peak / (1 << 20)), "jvm_started": java,
                "chosen": len(plan.get("chosen", [])), "deferred": len(plan.get("deferred", []))}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the triggers ---------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moto(port: int) -> subprocess.Popen:
    code = ("from moto.server import ThreadedMotoServer; import time; "
            f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); s.start(); "
            "time.sleep(1e9)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto did not start")


def write_s3_lake(endpoint: str, tables: int, seed: int = 11) -> list[str]:
    import boto3
    from concurrent.futures import ThreadPoolExecutor

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    s3.create_bucket(Bucket="lake")
    rng, now = random.Random(seed), int(time.time() * 1000)
    puts = []
    for i in range(tables):
        commits = table_commits(rng, now)[:4]     # a few commits each: the triggers read the newest only
        for version, actions in enumerate(commits):
            puts.append((f"t{i:04d}/_delta_log/{version:020d}.json", commit_bytes(actions)))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket="lake", Key=kv[0], Body=kv[1]), puts))
    return [f"s3://lake/t{i:04d}" for i in range(tables)]


def _rss_now() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _count_checks(trigger: Any, first: Any, later: Any, done: list[int]) -> None:
    """Make each check of ``trigger`` count its store calls into ``first`` (its first check) or ``later``, and
    ``done`` the checks finished (first, later)."""
    from airflow_delta_maint.delta.storage.store_calls import counting

    original, seen = trigger.check, [0]

    async def check() -> dict[str, int]:
        index = 0 if seen[0] == 0 else 1
        with counting(first if index == 0 else later):   # the check's thread gets this task's context
            try:
                return await original()
            finally:
                seen[0] += 1
                done[index] += 1

    trigger.check = check


async def _watch(uris: list[str], polls: int, interval: float) -> dict[str, Any]:
    from airflow_delta_maint.delta.storage.store_calls import StoreCalls
    from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

    triggers = [TableCommitsTrigger(table_uri=u, min_commits=1000, poke_interval=interval) for u in uris]
    first, later, done = StoreCalls(), StoreCalls(), [0, 0]
    for t in triggers:
        _count_checks(t, first, later, done)
    peak, started = _rss_now(), time.perf_counter()
    tasks = [asyncio.create_task(anext(t.run())) for t in triggers]   # none fires: 1,000 commits are not reached

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss_now())
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    await asyncio.sleep(polls * interval)
    elapsed = time.perf_counter() - started
    for task in (*tasks, sampler):
        task.cancel()
    await asyncio.gather(*tasks, sampler, return_exceptions=True)

    def per_check(calls: Any, checks: int) -> dict[str, float]:
        return {kind: round(f["calls"] / max(1, checks), 2) for kind, f in calls.counts().items() if f["calls"]}

    return {"peak": peak, "elapsed": elapsed, "checks": {"first": done[0], "later": done[1]},
            "first": per_check(first, done[0]), "later": per_check(later, done[1])}


def measure_triggers(tables: int, polls: int, interval: float) -> dict[str, Any]:
    port = _free_port()
    moto = _moto(port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        started = time.perf_counter()
        uris = write_s3_lake(endpoint, tables)
        built_s = time.perf_counter() - started
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"})
        rss_before_import = _rss_now()
        import airflow_delta_maint.triggers.table_commits  # noqa: F401  (Airflow and the provider, as in the triggerer)

        watched = asyncio.run(_watch(uris, polls, interval))
        return {"tables": tables, "poke_interval_s": interval, "watched_s": round(watched["elapsed"], 1),
                "build_s": round(built_s, 1), "rss_before_import_mib": round(rss_before_import / (1 << 20)),
                "peak_rss_mib": round(watched["peak"] / (1 << 20)), "checks": watched["checks"],
                "calls_per_first_check": watched["first"], "calls_per_later_check": watched["later"]}
    finally:
        moto.kill()
        moto.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--part", choices=("plan", "triggers", "both"), default="both")
    parser.add_argument("--cpu-budget", type=float, default=60.0, help="the plan's cpu_s budget")
    parser.add_argument("--polls", type=int, default=3, help="poll intervals watched (at least 2)")
    parser.add_argument("--poke-interval", type=float, default=20.0)
    args = parser.parse_args()
    result: dict[str, Any] = {}
    if args.part in ("plan", "both"):
        result["plan"] = measure_plan(args.tables, args.cpu_budget)
        print(json.dumps(result["plan"]), file=sys.stderr, flush=True)
    if args.part in ("triggers", "both"):
        result["triggers"] = measure_triggers(args.tables, args.polls, args.poke_interval)
    text = json.dumps(result, indent=1)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "lake_scale.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
