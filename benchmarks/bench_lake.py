"""A lake maintained night after night by three policies, each on its own copy: everything, threshold, budgeted.

The lake: ``--tables`` delta-rs tables on local disk with skewed sizes and five write patterns (streaming appends
of tiny files, daily batch loads, writers that collect no statistics, deletes that write deletion vectors as
delta-spark's do (``lake_deletes.py``; delta-rs's own rewrite files), quiet tables),
every table with a 0-hour retention so VACUUM and the log's cleanup have work every night. Between nights the
writers write the same rows into each copy.

Each night each policy runs one fleet application in this process (the jobs on threads, no Spark):

- **everything**: every job (OPTIMIZE, compute-stats, VACUUM, checkpoint, log compaction, the log's cleanup) on
  every table;
- **threshold**: the jobs whose cheap check finds work (the fleet's decision);
- **budgeted**: the lake plan (``plan-lake``) with a CPU budget of half what "everything" spent on average a night,
  learning its cost model from its own history.

Measured each night: the CPU-seconds of the application (``time.process_time``: the whole process, every
thread), small files left (what a compaction of each partition would remove), files without statistics, log
files a reader replays, deleted rows' bytes still read, what a full scan of every table opens (data files, bytes,
and the log files its reader opens: the checkpoint and the commits after it),
and for the budgeted policy each run's predicted CPU-seconds against its measure. The rows of every table are
compared with the writers' at the end of each policy.

Usage: ``python -m benchmarks.bench_lake [--tables 200] [--nights 10] [--out benchmarks/out/lake.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

POLICIES = ("everything", "threshold", "budgeted")
PATTERNS = ("streaming", "batch", "nostats", "deletes", "quiet")
#: every job that changes a table, in the order a night runs them
JOBS = (("optimize", []), ("compute-stats", []), ("vacuum", []), ("checkpoint", []), ("compact-log", []),
        ("cleanup-log", []))
RETENTION = {"delta.deletedFileRetentionDuration": "interval 0 hours",
             "delta.logRetentionDuration": "interval 0 hours"}
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}


@dataclass
class LakeTable:
    name: str
    pattern: str
    weight: int  # the skew: how much its writers write
    next_id: int = 0


@dataclass
class Night:
    policy: str
    night: int
    cpu_s: float
    measures: dict[str, int]  # after the night's maintenance
    gains: dict[str, int]  # the debts before the maintenance minus after
    predictions: list[tuple[float, float]] = field(default_factory=list)
    max_nights_waiting: int = 0
    #: the budgeted plan's runs by job: chosen, chosen for having waited, deferred, predicted CPU-s chosen
    plan_by_job: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the CPU-seconds each job's runs measured (their reads, work and commits; not the look, plan or record)
    cpu_by_job: dict[str, float] = field(default_factory=dict)
    #: chosen runs the application did not start because the night's budget was spent, by job
    left_by_job: dict[str, int] = field(default_factory=dict)


def make_lake(n: int, seed: int) -> list[LakeTable]:
    rng = random.Random(seed)
    tables = []
    for i in range(n):
        weight = min(8, max(1, int(rng.paretovariate(1.3))))
        tables.append(LakeTable(f"t{i:03d}", PATTERNS[i % len(PATTERNS)], weight))
    return tables


def _rows(t: LakeTable, n: int) -> Any:
    import pyarrow as pa

    ids = list(range(t.next_id, t.next_id + n))
    t.next_id += n
    return pa.table({"id": pa.array(ids, pa.int64()), "value": pa.array([(i * 7919) % 10007 for i in ids], pa.int64()),
                     "kind": pa.array([f"k{i % 3}" for i in ids])})


def _strip_stats(path: Path) -> None:
    """The newest commit's adds lose their statistics (a writer that collects none)."""
    log = path / "_delta_log"
    newest = max(log.glob("*.json"), key=lambda p: p.name)
    actions = [json.loads(line) for line in newest.read_text().splitlines() if line.strip()]
    for a in actions:
        a.get("add", {}).pop("stats", None)
    newest.write_text("".join(json.dumps(a) + "\n" for a in actions))


def write_night(root: Path, tables: list[LakeTable], night: int) -> None:
    """The writers of one night (the same rows into each copy: ``tables`` carry the ids written so far)."""
    from deltalake import write_deltalake

    from benchmarks.lake_deletes import delete_with_vectors

    for t in tables:
        path = root / t.name
        if night == 0:  # the first load
            write_deltalake(str(path), _rows(t, 2000 * t.weight), mode="append",
                            configuration={**RETENTION, **(DELETION_VECTORS if t.pattern == "deletes" else {})})
            continue
        if t.pattern == "streaming":
            for _ in range(3 * t.weight):
                write_deltalake(str(path), _rows(t, 40), mode="append")
        elif t.pattern == "batch":
            write_deltalake(str(path), _rows(t, 1500 * t.weight), mode="append")
        elif t.pattern == "nostats":
            for _ in range(t.weight):
                write_deltalake(str(path), _rows(t, 200), mode="append")
                _strip_stats(path)
        elif t.pattern == "deletes":
            write_deltalake(str(path), _rows(t, 300 * t.weight), mode="append")
            delete_with_vectors(str(path), "id", lambda ids, n=night: ids % 11 == n % 11)


def expected_rows(tables: list[LakeTable], nights: int) -> dict[str, int]:
    """The rows each table holds after ``nights`` nights of writers (deletes computed the writers' way)."""
    out = {}
    for t in tables:
        ids = 2000 * t.weight
        per_night = {"streaming": 3 * t.weight * 40, "batch": 1500 * t.weight, "nostats": 200 * t.weight,
                     "deletes": 300 * t.weight, "quiet": 0}[t.pattern]
        alive = set(range(ids))
        for night in range(1, nights):
            alive |= set(range(ids, ids + per_night))
            ids += per_night
            if t.pattern == "deletes":
                alive = {i for i in alive if i % 11 != night % 11}
        out[t.name] = len(alive)
    return out


def measure(root: Path, tables: list[LakeTable]) -> dict[str, int]:
    """What the lake leaves readers, from each table's log (no data file read)."""
    from airflow_delta_maint.app.lake_plan import table_inputs

    totals = {"small_files_left": 0, "files_without_stats": 0, "log_files_to_replay": 0, "deleted_bytes_read": 0,
              "scan_files": 0, "scan_bytes": 0, "scan_log_files": 0}
    for t in tables:
        x = table_inputs(str(root / t.name), {})
        h = x.health
        totals["small_files_left"] += max(0, h.excess_small_files)
        totals["files_without_stats"] += h.files_without_stats + h.files_missing_stats_columns
        totals["log_files_to_replay"] += h.commits_since_checkpoint
        totals["deleted_bytes_read"] += int(h.deleted_rows / h.num_records * h.size_bytes) if h.num_records else 0
        totals["scan_files"] += h.num_files
        totals["scan_bytes"] += h.size_bytes
        # what the scan's reader opens of the log: its checkpoint and the commits after it (the listing aside)
        totals["scan_log_files"] += h.commits_since_checkpoint + int(x.checkpointed)
    return totals


def _spec(root: Path, tables: list[LakeTable], history: str) -> Any:
    from airflow_delta_maint.app.fleet import FleetJob, FleetSpec, FleetTable

    return FleetSpec([FleetTable(str(root / t.name), [FleetJob(j, list(a)) for j, a in JOBS]) for t in tables], history)


GAINS = {"small_files_removed": "small_files_left", "files_given_stats": "files_without_stats",
         "deleted_bytes_purged": "deleted_bytes_read", "log_files_not_replayed": "log_files_to_replay"}


def _gains(before: dict[str, int], after: dict[str, int], entries: list[dict[str, Any]]) -> dict[str, int]:
    gains = {gain: before[debt] - after[debt] for gain, debt in GAINS.items()}
    gains["runs"] = sum(1 for e in entries for m in e.get("jobs", []) if m.get("status") == "committed")
    return gains


def _cpu_by_job(entries: list[dict[str, Any]]) -> dict[str, float]:
    by_job: dict[str, float] = {}
    for e in entries:
        for m in e.get("jobs", []):
            if isinstance(m.get("cpu_s"), (int, float)):
                by_job[m["operation"]] = round(by_job.get(m["operation"], 0.0) + float(m["cpu_s"]), 3)
    return by_job


def _left_by_job(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Chosen runs the application left when the budget ran out (it measured more than the plan predicted)."""
    left: dict[str, int] = {}
    for e in entries:
        for m in e.get("jobs", []):
            if m.get("left"):
                left[m["operation"]] = left.get(m["operation"], 0) + 1
    return left


def run_night(policy: str, root: Path, tables: list[LakeTable], history: str, budget_cpu_s: float | None,
              weights: Mapping[str, float] | None = None) -> tuple[float, list[dict[str, Any]], Any]:
    """One fleet application of ``policy``; (CPU-seconds, the tables' results, the plan or None)."""
    from airflow_delta_maint.delta.log.snapshot_cache import keeping_snapshots

    with keeping_snapshots():  # as plan-lake --local and the operator on the worker run a night
        return _night(policy, root, tables, history, budget_cpu_s, weights)


def _night(policy: str, root: Path, tables: list[LakeTable], history: str, budget_cpu_s: float | None,
           weights: Mapping[str, float] | None) -> tuple[float, list[dict[str, Any]], Any]:
    from airflow_delta_maint.app.fleet import decide, merge, run_fleet
    from airflow_delta_maint.app.lake_cli import record_known
    from airflow_delta_maint.app.lake_plan import budgeted, decide_by_estimates, lake_history, look_at_lake
    from airflow_delta_maint.delta.health.lake_budget import GAIN_WEIGHTS, Budget

    spec = _spec(root, tables, history)
    started = time.process_time()
    plan = None
    if policy == "everything":
        entries = run_fleet(spec, spark_allowed=False)
    else:
        if policy == "budgeted":  # one look at each table's log: the checks and the estimates
            look = look_at_lake(spec)
            PHASES["look"] += time.process_time() - started
            decision = decide_by_estimates(spec, look)
            mark = time.process_time()
            learned = lake_history(history)
            PHASES["history"] += time.process_time() - mark
            PHASES["total_bias"] = learned.model.total_bias
            decision, plan = budgeted(spec, decision, Budget(cpu_s=budget_cpu_s), history=learned,
                                      spent_cpu_s=time.process_time() - started, look=look,
                                      weights=weights or GAIN_WEIGHTS)
        else:
            decision = decide(spec)
        PHASES["plan"] += time.process_time() - started
        mark = time.process_time()
        ran = run_fleet(decision.to_run, spark_allowed=False) if decision.to_run.tables else []
        PHASES["run"] += time.process_time() - mark
        entries = merge(spec, decision, ran)
        mark = time.process_time()
        record_known(history, decision, {}, ran)
        PHASES["record"] += time.process_time() - mark
    return time.process_time() - started, entries, plan


#: CPU-seconds of a night's parts (the budgeted policy: its look, the history's read, the whole plan, the run,
#: the record of what did not run), reset each night
PHASES: dict[str, float] = {}


def run_policy(policy: str, work: Path, tables: list[LakeTable], nights: int, budget_cpu_s: float | None,
               progress: Callable[[str], None], weights: Mapping[str, float] | None = None) -> list[Night]:
    import copy

    from deltalake import DeltaTable, QueryBuilder

    from airflow_delta_maint.delta.health.cost_model import RAN
    from airflow_delta_maint.delta.health.lake_budget import STARVATION_NIGHTS

    root = work / policy
    history = str(work / f"{policy}-history")
    writers = copy.deepcopy(tables)
    out = []
    for night in range(nights):
        write_night(root, writers, night)
        before = measure(root, writers)
        PHASES.clear()
        PHASES.update(look=0.0, history=0.0, plan=0.0, run=0.0, record=0.0)
        cpu, entries, plan = run_night(policy, root, writers, history, budget_cpu_s, weights)
        predictions = []
        if plan is not None:
            predicted = {(p.candidate.table, p.candidate.job): p.candidate.cpu_s for p in plan.chosen}
            for e in entries:
                for m in e["jobs"]:
                    key = (e["table"], m.get("operation"))
                    if m.get("status") in RAN and not m.get("deferred") and key in predicted and m.get("cpu_s"):
                        predictions.append((predicted[key], float(m["cpu_s"])))
        waiting = max((p.candidate.table_nights_waiting for p in plan.entries), default=0) if plan else 0
        by_job: dict[str, dict[str, float]] = {}
        for p in plan.entries if plan else ():
            row = by_job.setdefault(p.candidate.job, {"chosen": 0, "waited": 0, "deferred": 0, "predicted_cpu_s": 0.0})
            if p.chosen:
                row["chosen"] += 1
                row["waited"] += p.candidate.nights_waiting >= STARVATION_NIGHTS
                row["predicted_cpu_s"] = round(row["predicted_cpu_s"] + p.candidate.cpu_s, 3)
            else:
                row["deferred"] += 1
        after = measure(root, writers)
        out.append(Night(policy, night, cpu, after, _gains(before, after, entries), predictions, waiting, by_job,
                         _cpu_by_job(entries), _left_by_job(entries)))
        progress(f"{policy} night {night}: {cpu:.1f} CPU-s, {out[-1].gains['runs']} runs, {out[-1].measures}")
        if by_job:
            progress("  " + ", ".join(f"{j}: {v}" for j, v in by_job.items()))
        progress("  CPU-s: " + ", ".join(f"{k} {v:.2f}" for k, v in PHASES.items()))
        progress("  runs' CPU-s by job: " + ", ".join(f"{k} {v:.2f}" for k, v in out[-1].cpu_by_job.items()))
        if out[-1].left_by_job:
            progress(f"  left when the budget ran out: {out[-1].left_by_job}")
    expected = expected_rows(tables, nights)
    for t in writers:
        # delta-rs's SQL reader applies deletion vectors (its pyarrow reader refuses them)
        counted = QueryBuilder().register("t", DeltaTable(str(root / t.name)))
        read = counted.execute("SELECT count(*) AS n, count(DISTINCT id) AS d FROM t").read_all()
        got, distinct = read.column("n")[0].as_py(), read.column("d")[0].as_py()
        assert got == distinct == expected[t.name], (policy, t.name, got, distinct, expected[t.name])
    return out


def summarize(results: dict[str, list[Night]]) -> dict[str, Any]:
    every, budgeted = results["everything"], results["budgeted"]

    def total(nights: list[Night], key: str) -> int:
        return sum(n.gains[key] for n in nights)

    def scanned(nights: list[Night], key: str) -> int:
        """What full scans after each night's maintenance read, summed over the nights."""
        return sum(n.measures[key] for n in nights)

    def vs_everything(*keys: str) -> float:
        """What the budgeted policy's scans read of ``keys`` together over what "everything"'s read."""
        return round(sum(scanned(budgeted, k) for k in keys) / max(1, sum(scanned(every, k) for k in keys)), 3)

    errors_after_3 = [abs(p - m) / m for n in budgeted[3:] for p, m in n.predictions if m > 0]
    logs_counted = all("scan_log_files" in n.measures for n in every + budgeted)
    last = {policy: nights[-1].measures for policy, nights in results.items()}
    return {
        "cpu_s": {p: round(sum(n.cpu_s for n in ns), 2) for p, ns in results.items()},
        "cpu_share_of_everything": round(sum(n.cpu_s for n in budgeted) / max(1e-9, sum(n.cpu_s for n in every)), 3),
        "gain_share_of_everything": {
            key: round(total(budgeted, key) / total(every, key), 3) if total(every, key) else None for key in GAINS},
        "gains": {p: {key: total(ns, key) for key in GAINS} for p, ns in results.items()},
        "scan_files_vs_everything": vs_everything("scan_files"),
        "scan_bytes_vs_everything": vs_everything("scan_bytes"),
        # the log files a scan opens too (a reader replays the commits after the checkpoint), and both together
        # (None: an earlier run's nights, reused, did not count them)
        "scan_log_files_vs_everything": vs_everything("scan_log_files") if logs_counted else None,
        "scan_all_files_vs_everything": vs_everything("scan_files", "scan_log_files") if logs_counted else None,
        "median_prediction_error_after_3_nights": round(statistics.median(errors_after_3), 3) if errors_after_3 else None,
        "max_nights_waiting": max(n.max_nights_waiting for n in budgeted),
        "last_night": last,
    }


def plot(results: dict[str, list[Night]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("cpu_s", "small_files_left", "files_without_stats", "log_files_to_replay")
    fig, axes = plt.subplots(1, len(keys), figsize=(16, 3.6))
    for ax, key in zip(axes, keys):
        for policy, nights in results.items():
            ys = [n.cpu_s if key == "cpu_s" else n.measures[key] for n in nights]
            ax.plot([n.night for n in nights], ys, marker="o", label=policy)
        ax.set_title(key.replace("_", " "))
        ax.set_xlabel("night")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> None:
    from airflow_delta_maint.app.common_flags import key_value
    from airflow_delta_maint.delta.errors import InvalidArgumentError
    from airflow_delta_maint.delta.health.lake_budget import gain_weights

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "lake.json"))
    parser.add_argument("--policies", default=",".join(POLICIES), help="the policies to run (comma-separated)")
    parser.add_argument("--reuse", help="an earlier run's JSON: the nights of the policies not run now (same lake)")
    parser.add_argument("--gain-weight", action="append", type=key_value, default=[], metavar="GAIN=W",
                        help="the budgeted plan's weight of a gain in place of the default (repeatable)")
    args = parser.parse_args(argv)
    try:
        weights = gain_weights(dict(args.gain_weight))
    except InvalidArgumentError as exc:  # one line, as for any bad argument
        parser.error(str(exc))
    wanted = [p for p in args.policies.split(",") if p]
    import logging

    logging.getLogger("delta_maint").setLevel(logging.WARNING)
    logging.getLogger("airflow_delta_maint").setLevel(logging.WARNING)
    tables = make_lake(args.tables, args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    results: dict[str, list[Night]] = {}
    try:
        t0 = time.monotonic()

        def progress(text: str) -> None:
            print(f"[{time.monotonic() - t0:6.0f} s] {text}", flush=True)

        if args.reuse:
            earlier = json.loads(Path(args.reuse).read_text())["nights"]
            for policy in POLICIES:
                if policy not in wanted:
                    results[policy] = [Night(**n) for n in earlier if n["policy"] == policy]
        if "everything" in wanted:
            results["everything"] = run_policy("everything", work, tables, args.nights, None, progress)
        budget = statistics.mean(n.cpu_s for n in results["everything"][1:]) / 2
        progress(f"the budgeted policy's budget: {budget:.2f} CPU-s a night")
        if "threshold" in wanted:
            results["threshold"] = run_policy("threshold", work, tables, args.nights, None, progress)
        if "budgeted" in wanted:
            results["budgeted"] = run_policy("budgeted", work, tables, args.nights, budget, progress, weights)
        results = {p: results[p] for p in POLICIES}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "nights": [n.__dict__ for ns in results.values() for n in ns]},
                              indent=1, default=str))
    plot(results, out.with_suffix(".png"))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
