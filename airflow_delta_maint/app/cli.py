"""The ``delta-maint`` command line (also the spark-submit entry, through ``main.py``)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import traceback
from typing import Any, Sequence

from airflow_delta_maint.delta.errors import DeltaError

from .connect_tasks import remote_url
from .context import JobContext
from .environment_errors import ERROR_TYPE, describe
from .execution import needs_spark
from .fleet_cli import FLEET, add_fleet_parser, run_fleet_command
from .jobs import JOB_MODULES
from .metrics import base_metrics, finish, write_metrics
from .report_cli import REPORT, add_report_parser, run_report
from .run_history import record_run
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


def execute_job(job: str, module: Any, args: argparse.Namespace, ctx: JobContext) -> tuple[int, dict[str, Any]]:
    """Run one parsed job on ``ctx.table``; never raises for the job's own failure.

    Returns (exit code, metrics): 0, 2 for bad input or a refused table (``DeltaError``), 1 for an
    unexpected error; a failed run's metrics carry ``status: failed`` and ``error``. The run is
    appended to the maintenance history when ``args.history_uri`` is set.
    """
    metrics = base_metrics(job, ctx.table)
    code = 0
    try:
        metrics.update(module.run(args, ctx))
    except DeltaError as exc:
        metrics.update(status="failed", error=str(exc), error_type=type(exc).__name__)
        log.debug("%s failed: %s", job, exc)  # reported once, by the caller
        code = 2
    except Exception as exc:  # unexpected: still report it, then fail loudly
        problem = environment_problem(exc) or connect_problem(exc, ctx)
        if problem:  # one line that says what to configure; the whole trace goes to the log
            metrics.update(status="failed", error=problem, error_type=ERROR_TYPE)
            log.exception("%s failed: %s", job, problem)
        else:
            metrics.update(status="failed", error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__)
            log.exception("%s failed", job)
        code = 1
    if metrics.get("version_read") is None:
        metrics["version_read"] = ctx.version_read
    finish(metrics)
    if getattr(args, "history_uri", None):  # never fails the run: a failure is logged and reported under "history"
        spark = ctx._spark
        metrics["history"] = record_run(args.history_uri, metrics, spark_app_id=application_id(spark))
    return code, metrics


def environment_problem(exc: BaseException) -> str | None:
    """One line when ``exc`` failed for a reason of the environment (see :mod:`.environment_errors`)."""
    pyspark = sys.modules.get("pyspark")
    text = "".join(traceback.format_exception(exc))
    return describe(text, getattr(pyspark, "__version__", None))


def connect_problem(exc: BaseException, ctx: JobContext) -> str | None:
    """One line when a job needed what Spark Connect does not offer (RDDs: Z-order and liquid clustering)."""
    text = f"{type(exc).__name__}: {exc}"
    if ctx.connect and "sparkContext" in text and ("NOT_IMPLEMENTED" in text or "NOT_SUPPORTED" in text):
        return ("Spark Connect offers no RDDs, which this run's Z-order or liquid clustering shuffles rows with: "
                "run it with a spark connection (spark-submit)")
    return None


def application_id(spark: Any) -> str | None:
    """The Spark application's id (classic: the SparkContext's; Spark Connect: the server's ``spark.app.id``)."""
    if spark is None:
        return None
    try:
        from .connect_tasks import is_connect

        return spark.conf.get("spark.app.id", None) if is_connect(spark) else spark.sparkContext.applicationId
    except Exception:  # noqa: BLE001 - the id is a detail of the history record
        return None


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
