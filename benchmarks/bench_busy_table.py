"""OPTIMIZE on a busy table: a delta-spark writer against our OPTIMIZE and delta-spark's own (not a test).

Each scenario races, on a fresh table, one delta-spark writer against one OPTIMIZE engine run over
and over, every run a fresh process as a scheduler would start it:

- the table: delta-spark 4.4 creates it partitioned by ``p`` (4 partitions), with deletion
  vectors and row tracking, from 12 appends of 2,000 rows (96 small files);
- the writer (a process of its own with delta-spark): one statement started every ``--interval``
  seconds (the next at once when one runs longer), cycling INSERT, DELETE, UPDATE and MERGE; each
  touches 12 random keys, in the two hot partitions (``p2``, ``p3``: recent data) with
  probability ``--hot`` (0.8) and anywhere else otherwise, with the partitions in its predicate
  as a partitioned pipeline writes it. The writer keeps a model of the rows (applying only the
  statements that succeeded) and, at the end, reads the table with delta-spark and compares:
  rows lost, rows not in the model, stable row ids shared;
- the optimizer: our ``delta-maint optimize`` (bin-packing and Z-order by ``v`` in turn), with
  the options of the scenario, or delta-spark's ``OPTIMIZE`` (and ``ZORDER BY (v)`` in turn), as
  soon as the previous run ended, until the writer's last statement.

Per scenario: the optimizer runs, those with work (ours: status committed, or bins dropped; delta-
spark's: files removed, or a failure), those that landed (a commit), the share landed of those
with work, bins rebased and deletion vectors carried (ours), the writer's statements and those
that failed with a concurrent-modification error, the failures per landed run, and the rows lost.

Usage: python -m benchmarks.bench_busy_table [--duration 240] [--interval 7] [--scenarios A,B,...]
Scenarios: ours, ours-one-commit, ours-bin-by-bin, ours-min-file-age, ours-skip-recent, ours-wait-for-writer,
delta-spark, none.
The results go to benchmarks/out/busy_table/results.json and are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT = REPO / "benchmarks" / "out" / "busy_table"
PARTITIONS = 4
HOT = ("p2", "p3")
KEYS_PER_STATEMENT = 12
INITIAL_APPENDS, ROWS_PER_APPEND = 12, 2000
OURS = [sys.executable, "-m", "airflow_delta_maint.app.main", "optimize"]
#: our OPTIMIZE's options per scenario (bin-packing and Z-order runs alternate)
SCENARIOS: dict[str, list[str] | None] = {
    "ours": [],
    "ours-one-commit": ["--bins-per-commit", "0"],
    "ours-bin-by-bin": ["--bins-per-commit", "1"],
    "ours-min-file-age": ["--min-file-age", "60"],
    "ours-skip-recent": ["--skip-recent-partitions", "4"],
    "ours-wait-for-writer": ["--wait-for-writer", "20"],
    "delta-spark": None,
    "none": None,
}
CONFLICT_WORDS = ("Concurrent", "concurrent", "conflict")


def partition(key: int) -> str:
    return f"p{key % PARTITIONS}"


def java_error(exc: BaseException) -> str:
    """The Java exception (class: message) behind a Py4J error, else the error's first line."""
    text = str(exc)
    found = re.search(r"([\w.]+(?:Exception|Error)): ([^\n]*)", text)
    return (f"{found.group(1).rsplit('.', 1)[-1]}: {found.group(2)}" if found else text.strip().splitlines()[0])[:300]


# -- the writer (a process of its own) ------------------------------------------------------------
def writer_main(path: str, duration: float, interval: float, hot: float, seed: int, work: Path) -> None:
    from tests.delta_spark_session import start_delta_spark

    spark = start_delta_spark(master="local[2]", app_name="busy-table-writer")
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, p STRING, v BIGINT) USING delta PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true')")
    model: dict[int, tuple[str, int]] = {}
    for k in range(INITIAL_APPENDS):
        lo, hi = k * ROWS_PER_APPEND, (k + 1) * ROWS_PER_APPEND
        (spark.range(lo, hi).selectExpr("id", f"concat('p', id % {PARTITIONS}) AS p", "id % 1000 AS v")
         .repartition(2).write.format("delta").mode("append").save(path))
        model.update({i: (partition(i), i % 1000) for i in range(lo, hi)})
    next_id = INITIAL_APPENDS * ROWS_PER_APPEND
    rng = random.Random(seed)
    (work / "ready").write_text("ready")
    records = []
    started = time.time()
    n = 0
    while time.time() - started < duration:
        due = started + n * interval
        if time.time() < due:
            time.sleep(due - time.time())
        kind = ("insert", "delete", "update", "merge")[n % 4]
        parts = list(HOT) if rng.random() < hot else [f"p{rng.randrange(PARTITIONS)}"]
        live = [i for i in model if model[i][0] in parts]
        keys = sorted(rng.sample(live, min(KEYS_PER_STATEMENT, len(live))))
        new = []
        while len(new) < KEYS_PER_STATEMENT // 2:
            if partition(next_id) in parts:
                new.append(next_id)
            next_id += 1
        in_parts = ", ".join(f"'{p}'" for p in parts)
        in_keys = ", ".join(map(str, keys))
        if kind == "insert":
            sql = f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, '{partition(i)}', {i % 1000})" for i in new)
        elif kind == "delete":
            sql = f"DELETE FROM {table} WHERE p IN ({in_parts}) AND id IN ({in_keys})"
        elif kind == "update":
            sql = f"UPDATE {table} SET v = v + 1 WHERE p IN ({in_parts}) AND id IN ({in_keys})"
        else:
            source = ", ".join(f"({i}, '{partition(i)}', {7000 + i % 1000})" for i in keys[:6] + new)
            sql = (f"MERGE INTO {table} AS t USING (SELECT * FROM VALUES {source} AS s(id, p, v)) AS s "
                   f"ON t.p IN ({in_parts}) AND t.p = s.p AND t.id = s.id "
                   "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
        t0 = time.time()
        try:
            spark.sql(sql)
            ok, error = True, ""
        except Exception as exc:  # a lost race: nothing of the statement committed
            ok, error = False, java_error(exc)
        records.append({"op": kind, "started": t0, "duration_s": round(time.time() - t0, 2), "ok": ok,
                        "error": error})
        if ok:
            if kind == "insert":
                model.update({i: (partition(i), i % 1000) for i in new})
            elif kind == "delete":
                for i in keys:
                    model.pop(i, None)
            elif kind == "update":
                for i in keys:
                    model[i] = (model[i][0], model[i][1] + 1)
            else:
                for i in keys[:6] + new:
                    model[i] = (partition(i), 7000 + i % 1000)
        n += 1
    (work / "statements.json").write_text(json.dumps(records))
    (work / "writer-done").write_text("done")
    while not (work / "judge").exists():  # the optimizer's last run finishes first
        time.sleep(0.5)
    rows = spark.read.format("delta").load(path).select(
        "id", "p", "v", "_metadata.row_id", "_metadata.row_commit_version").collect()
    seen = {r.id: (r.p, r.v) for r in rows}
    row_ids = [r.row_id for r in rows]
    result = {
        "rows_expected": len(model), "rows_read": len(rows),
        "rows_lost": sum(1 for i in model if i not in seen),
        "rows_not_in_model": sum(1 for i in seen if i not in model),
        "rows_changed": sum(1 for i in model if i in seen and seen[i] != model[i]),
        "rows_read_twice": len(rows) - len(seen),
        "row_ids_shared": len(row_ids) - len(set(row_ids)),
    }
    (work / "judged.json").write_text(json.dumps(result))
    spark.stop()


# -- delta-spark's own OPTIMIZE (a process of its own, each run) -------------------------------------
def delta_optimize_main(path: str, zorder: bool) -> None:
    from tests.delta_spark_session import start_delta_spark

    spark = start_delta_spark(master="local[2]", app_name="busy-table-delta-optimize")
    sql = f"OPTIMIZE delta.`{path}`" + (" ZORDER BY (v)" if zorder else "")
    try:
        row = spark.sql(sql).collect()[0]
        metrics = row.metrics.asDict()
        out = {"ok": True, "removed": metrics.get("numFilesRemoved", 0), "added": metrics.get("numFilesAdded", 0)}
    except Exception as exc:
        out = {"ok": False, "error": java_error(exc)}
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


# -- one scenario -------------------------------------------------------------------------------------
def run_optimizer(name: str, path: str, n: int, work: Path) -> dict[str, Any]:
    zorder = n % 2 == 1
    started = time.time()
    if name == "delta-spark":
        proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_busy_table", "_delta-optimize", path]
                              + (["--zorder"] if zorder else []), cwd=REPO, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        res = json.loads(line[7:]) if line else {"ok": False, "error": (proc.stderr or "no result")[-300:]}
        work_done = (not res["ok"]) or res.get("removed", 0) > 0
        return {"engine": name, "zorder": zorder, "started": started, "ended": time.time(), "had_work": work_done,
                "landed": res["ok"] and res.get("removed", 0) > 0, "error": res.get("error", "")}
    args = [*OURS, path, "--json", "--master", "local[2]", *(SCENARIOS[name] or [])]
    if zorder:
        args += ["--zorder-by", "v"]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    try:
        m = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        m = {"status": "failed", "error": (proc.stderr or "no metrics")[-300:]}
    landed = m.get("status") == "committed"
    had_work = landed or m.get("numBinsDroppedByConflicts", 0) > 0 or m.get("status") == "failed"
    return {"engine": name, "zorder": zorder, "started": started, "ended": time.time(), "had_work": had_work,
            "landed": landed, "status": m.get("status"), "commits": len(m.get("versions_committed") or []),
            "rebased": m.get("numBinsRebased", 0), "carried": m.get("numDeletionVectorsCarried", 0),
            "dropped": m.get("numBinsDroppedByConflicts", 0),
            "dropped_reasons": [d["reason"][:120] for d in m.get("droppedBins", [])],
            "error": m.get("error", ""), "reason": m.get("reason", ""), "path": m.get("rewritePath")}


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    work = OUT / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = str(work / "table")
    with open(work / "writer.log", "wb") as log:
        writer = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_busy_table", "_writer", path,
                                   "--duration", str(args.duration), "--interval", str(args.interval),
                                   "--hot", str(args.hot), "--seed", str(args.seed), "--work", str(work)],
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        while not (work / "ready").exists():
            if writer.poll() is not None:
                raise RuntimeError(f"the writer failed: see {work / 'writer.log'}")
            time.sleep(0.5)
        runs: list[dict[str, Any]] = []
        while name != "none" and not (work / "writer-done").exists():
            runs.append(run_optimizer(name, path, len(runs), work))
            r = runs[-1]
            print(f"  {name} run {len(runs)}: {'zorder' if r['zorder'] else 'binpack'} "
                  f"{'landed' if r['landed'] else 'with work, not landed' if r['had_work'] else 'no work'} "
                  f"{r.get('status', '')} {r.get('path') or ''} {r.get('error', '')[:100]}", flush=True)
        if name == "none":
            while not (work / "writer-done").exists() and writer.poll() is None:
                time.sleep(1)
        (work / "judge").write_text("judge")
        writer.wait(timeout=600)
    finally:
        if writer.poll() is None:
            writer.kill()
    statements = json.loads((work / "statements.json").read_text())
    judged = json.loads((work / "judged.json").read_text())
    failed = [s for s in statements if not s["ok"]]
    conflicts = [s for s in failed if any(w in s["error"] for w in CONFLICT_WORDS)]
    with_work = [r for r in runs if r["had_work"]]
    landed = [r for r in runs if r["landed"]]
    span = (statements[-1]["started"] - statements[0]["started"]) if len(statements) > 1 else 0.0
    result = {
        "scenario": name, "options": SCENARIOS.get(name) or [], "runs": len(runs), "runs_with_work": len(with_work),
        "runs_landed": len(landed), "share_landed": round(len(landed) / len(with_work), 3) if with_work else None,
        "bins_rebased": sum(r.get("rebased", 0) for r in runs),
        "dvs_carried": sum(r.get("carried", 0) for r in runs),
        "bins_dropped": sum(r.get("dropped", 0) for r in runs),
        "commits": sum(r.get("commits", 1 if r["landed"] else 0) for r in runs),
        "statements": len(statements), "seconds_per_statement": round(span / max(1, len(statements) - 1), 2),
        "statement_median_s": sorted(s["duration_s"] for s in statements)[len(statements) // 2] if statements else 0,
        "statements_failed": len(failed), "statements_failed_conflict": len(conflicts),
        "failed_per_landed_run": round(len(conflicts) / len(landed), 2) if landed else None,
        "failure_kinds": sorted({s["error"].split(":")[0][:80] for s in failed}),
        "paths": {p: sum(1 for r in runs if r.get("path") == p) for p in sorted({str(r.get("path")) for r in runs
                                                                                   if r.get("path")})},
        **judged,
        "run_details": runs,
    }
    (work / "result.json").write_text(json.dumps(result, indent=1))
    return result


def table_row(r: dict[str, Any]) -> str:
    share = f"{r['runs_landed']}/{r['runs_with_work']}" + (f" ({r['share_landed']:.0%})" if r["share_landed"] is not None
                                                           else "")
    return (f"| {r['scenario']} | {' '.join(r['options']) or '-'} | {r['runs']} | {share} | {r['commits']} | "
            f"{r['bins_rebased']} / {r['dvs_carried']} / {r['bins_dropped']} | "
            f"{r['statements_failed_conflict']}/{r['statements']} ({r['seconds_per_statement']} s apart) | "
            f"{r['failed_per_landed_run'] if r['failed_per_landed_run'] is not None else '-'} | {r['rows_lost']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=240.0, help="seconds the writer starts statements for")
    ap.add_argument("--interval", type=float, default=7.0, help="seconds between the starts of two statements")
    ap.add_argument("--hot", type=float, default=0.8, help="share of statements in the hot partitions")
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--scenarios", default="ours,delta-spark,ours-one-commit,ours-bin-by-bin,ours-min-file-age,"
                    "ours-skip-recent,ours-wait-for-writer")
    args = ap.parse_args()
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        print(f"scenario {name}: {args.duration:.0f} s of writes, one statement every {args.interval} s", flush=True)
        results.append(run_scenario(name, args))
        (OUT / "results.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "run_details"}
                                                      for r in results], indent=1))
    print("\n| scenario | options | runs | landed / with work | commits | bins rebased / DVs carried / bins "
          "dropped | writer statements failed | failed per landed run | rows lost |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(table_row(r))


def _sub(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("path")
    ap.add_argument("--duration", type=float, default=240.0)
    ap.add_argument("--interval", type=float, default=7.0)
    ap.add_argument("--hot", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--work")
    ap.add_argument("--zorder", action="store_true")
    a = ap.parse_args(argv)
    if a.mode == "_writer":
        writer_main(a.path, a.duration, a.interval, a.hot, a.seed, Path(a.work))
    else:
        delta_optimize_main(a.path, a.zorder)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        _sub(sys.argv[1:])
    else:
        main()
