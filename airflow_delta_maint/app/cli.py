"""The ``delta-maint`` command line (also the spark-submit entry, through ``main.py``)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from typing import Any, Sequence

from airflow_delta_maint.app.runners.connect_tasks import remote_url
from .context import JobContext
from .execution import needs_spark
from .fleet_cli import FLEET, add_fleet_parser, run_fleet_command
from .jobs import JOB_MODULES, execute_job
from .metrics import write_metrics
from airflow_delta_maint.app.report.command import REPORT, add_report_parser, run_report
from .spark_session import start_in_background

log = logging.getLogger("delta_maint")


def _storage_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"storage option must be KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="delta-maint", description="Maintain Delta Lake tables.")
    sub = parser.add_subparsers(dest="job", required=True, metavar="JOB")
    for name, module_name in JOB_MODULES.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        p.add_argument("table", help="table path or URI (s3://, gs://, abfss://, file://)")
        p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
        p.add_argument("--metrics-out", metavar="URI", help="also write the metrics JSON here")
        p.add_argument("--storage-option", action="append", type=_storage_option, default=[], metavar="K=V",
                       help="object-store option (repeatable), e.g. AWS_ENDPOINT_URL=http://...")
        p.add_argument("--master", help="Spark master for a run outside spark-submit (default local[*])")
        p.add_argument("--history-uri", metavar="URI",
                       help="append this run to the maintenance history (a Delta table) at URI")
        module.add_arguments(p)
    add_report_parser(sub)
    add_fleet_parser(sub)
    return parser


def run(argv: Sequence[str] | None = None) -> tuple[int, dict[str, Any]]:
    """Parse arguments, run one job, print and write its metrics. Returns (exit code, metrics)."""
    args = build_parser().parse_args(argv)
    if args.job == REPORT:
        return run_report(args)
    if args.job == FLEET:
        return run_fleet_command(args)
    module = importlib.import_module(JOB_MODULES[args.job])
    if (os.environ.get("PYSPARK_GATEWAY_PORT") or remote_url(args.master)) and needs_spark(args.job, vars(args)):
        # under spark-submit (or against Spark Connect) the worker already found work: start Spark
        # (open the session, add the artifacts) while the driver plans
        start_in_background(args.master)
    ctx = JobContext(table=args.table, storage_options=dict(args.storage_option), master=args.master)
    code, metrics = execute_job(args.job, module, args, ctx)
    if args.metrics_out:
        write_metrics(metrics, args.metrics_out, dict(args.storage_option))
    if args.json:
        print(json.dumps(metrics, sort_keys=True, default=str))
    elif code == 0:
        print(getattr(module, "format_human", _format_human)(metrics))
    if code:
        print(f"delta-maint {args.job}: error: {metrics['error']}", file=sys.stderr)
    return code, metrics


def _format_human(metrics: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in metrics.items())


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    code, _ = run(argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
