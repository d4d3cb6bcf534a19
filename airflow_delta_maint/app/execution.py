"""Which runs need Spark, and running a job in this process (no spark-submit, no Spark).

Log compaction, checkpoints, expired-log cleanup, ``inspect`` and lite VACUUM do their work on
the driver with the Delta core alone; OPTIMIZE and full VACUUM fan work out to Spark tasks.
Lite VACUUM turns to Spark tasks only from ``SPARK_DELETE_MIN`` (a million) files to delete.
This module imports no pyspark: the Airflow worker uses it to run driver-only jobs itself.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError

from .context import JobContext
from .jobs import JOB_MODULES

#: jobs whose work never starts Spark
DRIVER_ONLY_JOBS = frozenset({"compact-log", "checkpoint", "cleanup-log", "inspect"})


def needs_spark(job: str, params: Mapping[str, Any]) -> bool:
    """True when the job (with these parsed options) starts Spark for its work.

    Lite VACUUM counts as driver-only: it starts Spark only to delete a million files or more.
    """
    if job in DRIVER_ONLY_JOBS:
        return False
    if job == "vacuum":
        return (params.get("mode") or "full") != "lite"
    if job == "optimize":
        return not params.get("dry_run")
    return True


def job_parser(job: str, module: Any | None = None) -> argparse.ArgumentParser:
    """A parser of one job's own options (and ``--history-uri``) that raises instead of exiting."""
    module = module if module is not None else importlib.import_module(JOB_MODULES[job])
    parser = argparse.ArgumentParser(prog=f"delta-maint {job}", exit_on_error=False, add_help=False)
    module.add_arguments(parser)
    parser.add_argument("--history-uri", metavar="URI")
    return parser


def parse_job_args(job: str, argv: Sequence[str], module: Any | None = None) -> argparse.Namespace:
    """Parse a job's options; bad options raise ``InvalidArgumentError`` with one clear message."""
    if job not in JOB_MODULES:
        raise InvalidArgumentError(f"unknown job {job!r} (jobs: {', '.join(JOB_MODULES)})")
    try:
        namespace, unknown = job_parser(job, module).parse_known_args([str(a) for a in argv])
    except (argparse.ArgumentError, SystemExit) as exc:
        raise InvalidArgumentError(f"invalid options for {job}: {exc}") from None
    if unknown:
        raise InvalidArgumentError(f"invalid options for {job}: unknown {' '.join(unknown)}")
    return namespace


def run_in_process(job: str, table: str, argv: Sequence[str], storage_options: Mapping[str, str] | None = None,
                   *, spark_allowed: bool = False, master: str | None = None) -> tuple[int, dict[str, Any]]:
    """Run one job on ``table`` in this process and return (exit code, metrics) as ``delta-maint`` would.

    The metrics object is the one the application writes (same fields, same ``error`` on failure).
    ``storage_options`` may hold credentials: they go to the job's storage only, never into the
    metrics. With ``spark_allowed`` false a job that would start Spark fails with a clear error.
    """
    from .cli import execute_job  # the command line's own run, so metrics and failures are the same

    module = importlib.import_module(JOB_MODULES[job]) if job in JOB_MODULES else None
    args = parse_job_args(job, argv, module)
    ctx = JobContext(table=table, storage_options=dict(storage_options or {}), master=master,
                     spark_allowed=spark_allowed)
    return execute_job(job, module, args, ctx)


#: "auto" runs a driver-only job in the Airflow worker's process up to this many bytes of log.
#: A snapshot's peak memory is about 17 times its log bytes (measured: a 70 MB checkpoint of a
#: million files loads in 1,183 MiB peak RSS, docs/benchmarks.md), so 16 MiB of log stays under
#: about 300 MiB on the worker; the same bound keeps lite VACUUM (which reads every commit since
#: its watermark, a remove action taking 150 bytes or more) far below the million files from
#: which it turns to Spark tasks.
LOCAL_MAX_LOG_BYTES = 16 << 20

EXECUTIONS = ("spark", "local", "auto")


def log_bytes(table: str, storage_options: Mapping[str, str] | None = None) -> int:
    """Bytes of the log a driver-only job reads at most: the newest checkpoint and every commit file.

    One listing of ``_delta_log``, no file read. Commits before the checkpoint count too, since lite
    VACUUM may read them.
    """
    from airflow_delta_maint.delta.log import list_log
    from airflow_delta_maint.delta.storage import Storage

    listing = list_log(Storage(table, dict(storage_options or {})))
    checkpoint = listing.checkpoints[-1].files if listing.checkpoints else ()
    return sum(f.size for f in checkpoint) + sum(f.size for f in listing.commits.values())


def choose_execution(requested: str, job: str, params: Mapping[str, Any], table: str,
                     storage_options: Mapping[str, str] | None = None,
                     max_log_bytes: int = LOCAL_MAX_LOG_BYTES) -> tuple[str, str]:
    """Where a run goes: ``("local" | "spark", why)``.

    ``spark`` always submits; ``local`` runs in this process and refuses a job that needs Spark;
    ``auto`` runs driver-only jobs locally while the log is at most ``max_log_bytes``.

    Raises:
        InvalidArgumentError: an unknown ``requested`` value, or ``local`` for a job that needs Spark.
    """
    requested = str(requested).strip().lower()
    if requested not in EXECUTIONS:
        raise InvalidArgumentError(f"execution must be one of {', '.join(EXECUTIONS)}, got {requested!r}")
    if requested == "spark":
        return "spark", "execution 'spark'"
    if needs_spark(job, params):
        if requested == "local":
            what = f"{job} --mode {params.get('mode') or 'full'}" if job == "vacuum" else job
            raise InvalidArgumentError(f"{what} needs Spark; local execution runs only log compaction, checkpoints, "
                                       "expired-log cleanup, inspect and lite VACUUM")
        return "spark", f"{job} needs Spark"
    if requested == "local":
        return "local", "execution 'local'"
    size = log_bytes(table, storage_options)
    if size > max_log_bytes:
        return "spark", f"the log holds {size} bytes, more than {max_log_bytes} for a run on the worker"
    return "local", f"driver-only job, the log holds {size} bytes (at most {max_log_bytes})"
