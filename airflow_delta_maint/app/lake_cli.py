"""``delta-maint plan-lake``: a night's maintenance of many tables under a budget; its dry run says what it would
cost and changes nothing."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError

from .common_flags import DRY_RUN, HISTORY_URI, JSON, STORAGE_OPTION, key_value
from .settings import Settings
from .spark_session import add_session_arguments, session_conf

PLAN_LAKE = "plan-lake"


def add_lake_parser(sub: Any) -> None:
    """Add the ``plan-lake`` sub-command to the ``delta-maint`` parser's sub-parsers."""
    p = sub.add_parser(PLAN_LAKE, help="maintain many tables under a budget: the jobs that gain most per CPU-second")
    p.add_argument("tables", nargs="*", metavar="TABLE", help="tables (paths or URIs), each with the fleet's "
                   "default jobs; or --spec")
    p.add_argument("--spec", metavar="SPEC", help="a fleet spec (JSON file, path or URI) listing tables and jobs")
    p.add_argument("--budget", action="append", type=key_value, default=[], metavar="LIMIT=N",
                   help="a limit of the night (repeatable): cpu_s, bytes_rewritten, max_tables, deadline_s, cores")
    p.add_argument("--gain-weight", action="append", type=key_value, default=[], metavar="GAIN=W",
                   help="what a unit of a gain is worth, in files a reader no longer opens (repeatable; see "
                   "docs/fleet.md): files_removed, log_files_not_replayed, dv_bytes_purged, deletion_vectors_dropped, "
                   "files_given_stats, bytes_freed")
    p.add_argument(HISTORY_URI, metavar="URI", help="the maintenance history: the nights each job has waited, "
                   "and where the runs and the deferred jobs are recorded")
    p.add_argument(DRY_RUN, action="store_true", help="print the plan (chosen, deferred, costs); run nothing")
    p.add_argument(JSON, action="store_true", help="print the plan and the results as JSON")
    p.add_argument(STORAGE_OPTION, action="append", type=key_value, default=[], metavar="K=V",
                   help="object-store option for every table and the history (repeatable)")
    p.add_argument("--master", help="Spark master for a run outside spark-submit (default local[*])")
    p.add_argument("--local", action="store_true", help="run the chosen jobs in this process, on threads, without "
                   "Spark (small tables)")
    add_session_arguments(p)


def _spec(args: argparse.Namespace) -> Any:
    from .fleet import FleetJob, FleetSpec, FleetTable
    from .job_definitions import definition, fleet_defaults
    from .metrics import read_metrics

    options = dict(args.storage_option)
    if args.spec and args.tables:
        raise InvalidArgumentError("plan-lake takes tables or --spec, not both")
    if args.spec:
        try:
            raw = read_metrics(args.spec, options)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot read the fleet spec {args.spec}: {exc}") from None
        spec = FleetSpec.from_json(raw)
        spec.history_uri = spec.history_uri or args.history_uri
        return spec
    if not args.tables:
        raise InvalidArgumentError("plan-lake needs tables or --spec")
    jobs = [FleetJob(name, definition(name).options.to_argv(values, name)) for name, values in fleet_defaults().items()]
    return FleetSpec([FleetTable(t, list(jobs), options) for t in args.tables], args.history_uri)


def run_plan_lake(args: argparse.Namespace, *, quiet: bool = False) -> tuple[int, dict[str, Any]]:
    """Plan the night (and run it, unless a dry run); exit code 0, or 2 for bad input or a failed table. A run
    on this process's threads (``--local``) starts each chosen table's jobs from the plan's read of its log."""
    from airflow_delta_maint.delta.log.snapshot_cache import keeping_snapshots

    with keeping_snapshots() if args.local and not args.dry_run else contextlib.nullcontext():
        return _plan_and_run(args, quiet)


def _plan_and_run(args: argparse.Namespace, quiet: bool) -> tuple[int, dict[str, Any]]:
    from airflow_delta_maint.delta.health.lake_budget import Budget, gain_weights

    from .fleet import merge, run_fleet
    from .lake_plan import budgeted, decide_by_estimates, lake_history, look_at_lake

    try:
        settings = Settings.from_environ(os.environ)
        budget = Budget.from_mapping(dict(args.budget))
        weights = gain_weights(dict(args.gain_weight))
        spec = _spec(args)
        started = time.process_time()
        look = look_at_lake(spec)  # one read of each table's log: the checks and the estimates
        decision = decide_by_estimates(spec, look)
        history = lake_history(spec.history_uri, dict(args.storage_option))
        cut, plan = budgeted(spec, decision, budget, history=history, spent_cpu_s=time.process_time() - started,
                             look=look, weights=weights)
    except DeltaError as exc:
        print(f"delta-maint {PLAN_LAKE}: error: {exc}", file=sys.stderr)
        return 2, {"status": "failed", "error": str(exc)}
    result: dict[str, Any] = {"status": "dry_run" if args.dry_run else "committed", "plan": plan.as_dict()}
    if not args.dry_run:
        conf = session_conf(dict(args.conf), delta_spark=False, quiet=quiet, cache_dir=settings.cache_dir)
        ran = run_fleet(cut.to_run, args.master, spark_allowed=not args.local, settings=settings, spark_conf=conf,
                        history_options=dict(args.storage_option)) if cut.to_run.tables else []
        entries = merge(spec, cut, ran)
        record_known(spec.history_uri, cut, dict(args.storage_option), ran)
        result["tables"] = entries
        if any(e["status"] == "failed" for e in entries):
            result["status"] = "failed"
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print(format_plan(result["plan"]))
        for e in result.get("tables", []):
            print(f"{e['status']:10} {e['table']}" + (f"  ({e['error']})" if e.get("error") else ""))
    return (2 if result["status"] == "failed" else 0), result


def record_known(history_uri: str | None, decision: Any, storage_options: dict[str, str],
                 ran: Sequence[Mapping[str, Any]] = ()) -> None:
    """Record the jobs that did not run (deferred, nothing to do, a failed check; and those the run left when its
    budget ran out, from ``ran``) in the history, in one append: the nights a job waits are counted from these."""
    if not history_uri:
        return
    from airflow_delta_maint.delta.health.run_log import append_runs, run_record

    left = [m for e in ran for m in e.get("jobs", []) if m.get("left")]
    rows = [run_record(m) for known in decision.known for m in known if m is not None] + [run_record(m) for m in left]
    if rows:
        append_runs(history_uri, rows, storage_options)


def format_plan(plan: dict[str, Any]) -> str:
    """The plan for a person: the budget and what it buys, then each run chosen, each deferred, and each with
    nothing to gain once its table's earlier jobs have run."""
    from airflow_delta_maint.delta.health.lake_budget import GAIN_WEIGHTS

    used, budget = plan["used"], {k: v for k, v in plan["budget"].items() if v is not None and k != "cores"}
    lines = [f"budget {json.dumps(budget) if budget else 'none'}: {used['runs']} runs on {used['tables']} tables, "
             f"{used['cpu_s']:g} predicted CPU-s, {used['bytes_rewritten']} bytes rewritten"]
    own = {k: v for k, v in plan.get("gain_weights", {}).items() if GAIN_WEIGHTS.get(k) != v}
    if own:
        lines.append(f"gain weights of this lake: {json.dumps(own, sort_keys=True)}")
    for p in plan["chosen"]:
        lines.append(f"  run   {p['rank']:>3} {p['job']:<14} {p['table']}  ~{p['predicted_cpu_s']:g} CPU-s, "
                     f"gain {p['gain_value']:g}  ({p['reason']})")
    for p in plan["deferred"]:
        lines.append(f"  wait      {p['job']:<14} {p['table']}  ~{p['predicted_cpu_s']:g} CPU-s, "
                     f"gain {p['gain_value']:g}  ({p['reason']})")
    for p in plan.get("nothing_to_gain", []):
        lines.append(f"  skip      {p['job']:<14} {p['table']}  ({p['reason']})")
    return "\n".join(lines)
