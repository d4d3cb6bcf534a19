"""``delta-maint fleet SPEC``: run a fleet spec's jobs in one application (one SparkSession)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError

from .common_flags import JSON, METRICS_OUT, STORAGE_OPTION, key_value
from .settings import Settings
from .spark_session import add_session_arguments, session_conf

FLEET = "fleet"


def add_fleet_parser(sub: Any) -> None:
    """Add the ``fleet`` sub-command to the ``delta-maint`` parser's sub-parsers."""
    p = sub.add_parser(FLEET, help="run the jobs of many tables, listed in a JSON spec file, in one application")
    p.add_argument("spec", metavar="SPEC", help="the fleet spec: a JSON file (path or URI)")
    p.add_argument(JSON, action="store_true", help="print the results (one entry per table) as JSON")
    p.add_argument(METRICS_OUT, metavar="URI", help="also write the results JSON here")
    p.add_argument(STORAGE_OPTION, action="append", type=key_value, default=[], metavar="K=V",
                   help="object-store option for reading the spec and writing the results (repeatable)")
    p.add_argument("--master", help="Spark master for a run outside spark-submit (default local[*])")
    add_session_arguments(p)


def run_fleet_command(args: argparse.Namespace, *, quiet: bool = False) -> tuple[int, dict[str, Any]]:
    """Run the spec; exit code 0 when every table succeeded, 2 when one failed or the spec (or a
    setting) is bad. ``quiet``: a session started here shows no start-up chatter (see ``cli.run``)."""
    from .execution import parse_job_args, uses_delta_spark
    from .fleet import FleetSpec, run_fleet
    from .metrics import read_metrics, write_metrics
    from .runners.connect_tasks import remote_url

    options = dict(args.storage_option)
    try:
        settings = Settings.from_environ(os.environ)
        try:
            raw = read_metrics(args.spec, options)
        except (OSError, ValueError) as exc:
            from airflow_delta_maint.delta.errors import InvalidArgumentError

            raise InvalidArgumentError(f"cannot read the fleet spec {args.spec}: {exc}") from None
        spec = FleetSpec.from_json(raw)
        delta_spark = any(uses_delta_spark(j.job, vars(parse_job_args(j.job, j.args)))
                          for t in spec.tables for j in t.jobs)
    except DeltaError as exc:
        print(f"delta-maint fleet: error: {exc}", file=sys.stderr)
        return 2, {"status": "failed", "error": str(exc)}
    elsewhere = bool(os.environ.get("PYSPARK_GATEWAY_PORT") or remote_url(args.master))
    conf = {} if elsewhere else session_conf(dict(args.conf), delta_spark=delta_spark, quiet=quiet,
                                             cache_dir=settings.cache_dir)
    entries = run_fleet(spec, args.master, settings=settings, spark_conf=conf)
    result = {"status": "failed" if any(e["status"] == "failed" for e in entries) else "committed",
              "tables": entries}
    if args.metrics_out:
        write_metrics(result, args.metrics_out, options)
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        for e in entries:
            print(f"{e['status']:10} {e['table']}" + (f"  ({e['error']})" if e.get("error") else ""))
    failed = [e["table"] for e in entries if e["status"] == "failed"]
    if failed:
        print(f"delta-maint fleet: error: failed tables: {', '.join(failed)}", file=sys.stderr)
        return 2, result
    return 0, result
