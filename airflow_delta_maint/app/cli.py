"""The ``delta-maint`` command line (also the spark-submit entry, through ``main.py``).

It reads the application's settings from the environment (:class:`~.settings.Settings`) and hands them
to the job on its context. Outside spark-submit it starts the job's SparkSession itself: with ``--conf``,
with delta-spark's packages, extension and catalog for ``engine='delta-spark'`` (as the Airflow hook
adds them to a submission), and, unless ``--verbose``, without Spark's start-up chatter (:mod:`.console`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Sequence

from airflow_delta_maint.app.runners.connect_tasks import remote_url
from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError
from .client_logs import quieted_client_loggers
from .context import JobContext
from .execution import needs_spark, uses_delta_spark
from .fleet_cli import FLEET, add_fleet_parser, run_fleet_command
from .common_flags import HISTORY_URI, JSON, METRICS_OUT, SEEN_VERSION, STORAGE_OPTION, TABLE_NAME, key_value
from .lake_cli import PLAN_LAKE, add_lake_parser, run_plan_lake
from .job_definitions import JOBS, JobDefinition, definition
from .jobs import execute_job, refused
from .metrics import write_metrics
from airflow_delta_maint.app.report.command import REPORT, add_report_parser, run_report
from .settings import Settings
from .table_by_name import (
    add_table_name_arguments,
    drop_credential_refresh,
    install_credential_refresh,
    resolve_table_argument,
)
from .spark_session import add_session_arguments, session_conf, start_in_background

log = logging.getLogger("delta_maint")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="delta-maint", description="Maintain Delta Lake tables.")
    sub = parser.add_subparsers(dest="job", required=True, metavar="JOB")
    for name, job in JOBS.items():
        p = sub.add_parser(name, help=job.summary)
        p.add_argument("table", nargs="?", help=f"table path or URI (s3://, gs://, abfss://, file://); or {TABLE_NAME}")
        p.add_argument(JSON, action="store_true", help="print the metrics as one JSON object")
        p.add_argument(METRICS_OUT, metavar="URI", help="also write the metrics JSON here")
        p.add_argument(STORAGE_OPTION, action="append", type=key_value, default=[], metavar="K=V",
                       help="object-store option (repeatable), e.g. AWS_ENDPOINT_URL=http://...")
        p.add_argument("--master", help="Spark master for a run outside spark-submit (default local[*])")
        p.add_argument(HISTORY_URI, metavar="URI",
                       help="append this run to the maintenance history (a Delta table) at URI")
        # the version the submitting task's check saw: the run reports whether it planned on a newer one
        p.add_argument(SEEN_VERSION, type=int, help=argparse.SUPPRESS)
        add_table_name_arguments(p, key_value)
        add_session_arguments(p)
        job.options.add_to(p)
    add_report_parser(sub)
    add_fleet_parser(sub)
    add_lake_parser(sub)
    return parser


def run(argv: Sequence[str] | None = None, *, console: bool = False) -> tuple[int, dict[str, Any]]:
    """Parse arguments, run one job, print and write its metrics. Returns (exit code, metrics).

    ``console``: the run is a person's or a script's (the ``delta-maint`` command): a SparkSession it
    starts itself shows no start-up chatter unless ``--verbose``. Without it (the application file that
    spark-submit and the Airflow hook run, tests) Spark's output is left as it is.
    """
    args = build_parser().parse_args(argv)
    with quieted_client_loggers(bool(getattr(args, "verbose", False))):
        return _run_parsed(args, console)


def _run_parsed(args: argparse.Namespace, console: bool) -> tuple[int, dict[str, Any]]:
    """:func:`run` once its arguments are parsed (the client libraries' loggers quiet unless ``--verbose``)."""
    if args.job == REPORT:
        return run_report(args)
    quiet = console and not args.verbose and not _spark_runs_elsewhere(args.master)
    if quiet:
        from .console import silence_python_warnings

        silence_python_warnings()
    if args.job == FLEET:
        return run_fleet_command(args, quiet=quiet)
    if args.job == PLAN_LAKE:
        return run_plan_lake(args, quiet=quiet)
    job = definition(args.job)
    refreshed = False
    try:
        try:
            name = resolve_table_argument(args)
            refreshed = install_credential_refresh(args)
        except CatalogError as exc:
            raise InvalidArgumentError(str(exc)) from None
        settings = Settings.from_environ(os.environ)
    except DeltaError as exc:
        code, metrics = refused(args.job, args.table or args.table_name or "", exc)
    else:
        try:
            code, metrics = _run_job(args, job, settings, quiet)
        finally:
            if refreshed:
                drop_credential_refresh(args)
        if name:
            metrics["table_name"] = name
    if args.metrics_out:
        write_metrics(metrics, args.metrics_out, dict(args.storage_option))
    if args.json:
        print(json.dumps(metrics, sort_keys=True, default=str))
    elif code == 0:
        print(job.format_human(metrics))
    if code:
        print(f"delta-maint {args.job}: error: {metrics['error']}", file=sys.stderr)
    return code, metrics


def _spark_runs_elsewhere(master: str | None) -> bool:
    """True under spark-submit (its JVM is up, its conf applies) or against Spark Connect."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT") or remote_url(master))


def _run_job(args: argparse.Namespace, job: JobDefinition, settings: Settings, quiet: bool) -> tuple[int, dict[str, Any]]:
    params = vars(args)
    conf = {} if _spark_runs_elsewhere(args.master) else session_conf(
        dict(args.conf), delta_spark=uses_delta_spark(args.job, params), quiet=quiet, cache_dir=settings.cache_dir)
    if _spark_runs_elsewhere(args.master) and needs_spark(args.job, params):
        # under spark-submit (or against Spark Connect) the worker already found work: start Spark
        # (open the session, add the artifacts) while the driver plans
        start_in_background(args.master)
    ctx = JobContext(table=args.table, storage_options=dict(args.storage_option), master=args.master,
                     settings=settings, spark_conf=conf)
    return execute_job(job.name, job.module(), args, ctx)


def main(argv: Sequence[str] | None = None, *, console: bool = True) -> int:
    """The ``delta-maint`` command (``console``, see :func:`run`); ``app/main.py`` runs it with
    ``console=False``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if console:  # standard output carries the result; what Spark's JVM prints there goes to standard error
        from .console import children_print_to_stderr

        children_print_to_stderr()
    code, _ = run(argv, console=console)
    return code


if __name__ == "__main__":
    sys.exit(main())
