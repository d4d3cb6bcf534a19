"""Run one job with a given engine on a given SparkSession: for benchmarks and tests that compare the
engines on the same session and table copies."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError

from ..context import JobContext
from ..execution import parse_job_args
from ..job_definitions import definition
from ..jobs import execute_job
from ..settings import Settings
from . import NATIVE, normalize


def run_job_with_engine(job: str, table: str, engine: str = NATIVE, argv: Sequence[str] = (), *,
                        spark: Any = None, storage_options: Mapping[str, str] | None = None,
                        master: str | None = None, settings: Settings | None = None) -> tuple[int, dict[str, Any]]:
    """Run one job on ``table`` with ``engine`` in this process, on ``spark`` (a SparkSession; for
    delta-spark one with its extension) or, without one, on the session :func:`..spark_session.get_spark`
    gives. Returns (exit code, metrics) as the command line would with the option ``engine=ENGINE``.
    ``settings``: the application's settings (default: this process's environment).

    For benchmarks and tests that compare the engines on the same session.
    """
    defined = definition(job)
    takes_engine = "engine" in defined.options.names()
    if not takes_engine and normalize(engine) != NATIVE:
        raise InvalidArgumentError(f"{job} runs on the native engine only")
    extra = [defined.options["engine"].flag, str(engine)] if takes_engine else []
    args = parse_job_args(job, [*[str(a) for a in argv], *extra])
    ctx = JobContext(table=table, storage_options=dict(storage_options or {}), master=master, _spark=spark,
                     settings=settings if settings is not None else Settings.from_environ(os.environ))
    return execute_job(job, defined.module(), args, ctx)
