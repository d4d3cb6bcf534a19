"""The engines that do a job's data work: ``native`` (this application's own, the default) and
``delta-spark`` (delta-spark's own commands on the job's SparkSession).

The job modules keep the worker-side contract around either engine: the skip checks, the
auto-compaction policy, dry runs, the metrics object and the maintenance history record. This
module chooses and validates the engine; :mod:`.delta_spark` runs delta-spark's commands;
:mod:`.run` runs one job with a given engine on a given session (benchmarks, tests). Nothing
here imports pyspark at import time (the Airflow side reads the job modules' options).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError, InvalidArgumentError
from ..job_definitions import definition, jobs_run_by
from ..job_definitions.definition import DELTA_SPARK, NATIVE

ENGINES = (NATIVE, DELTA_SPARK)

#: what a SparkSession needs for the delta-spark engine (the hook adds these for engine delta-spark)
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: delta-spark's Maven coordinates for Spark 4.2 (the default of ``[delta_maint] delta_spark_packages``)
DEFAULT_PACKAGE = "io.delta:delta-spark_2.13:4.4.0"


class EngineSetupError(DeltaError):
    """The SparkSession cannot run the delta-spark engine (no Delta extension, no jar, a jar built for
    another Spark); raised before any work."""


def normalize(engine: Any) -> str:
    """``engine`` as a name of :data:`ENGINES` (``None`` or empty: native); an unknown name raises."""
    name = str(engine).strip().lower() if engine is not None else ""
    if not name:
        return NATIVE
    name = {"delta_spark": DELTA_SPARK, "deltaspark": DELTA_SPARK}.get(name, name)
    if name not in ENGINES:
        raise InvalidArgumentError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    return name


def check_engine(job: str, engine: Any) -> str:
    """The engine for ``job``: its normalized name. An unknown engine, or one the job's definition does not
    list, raises ``InvalidArgumentError`` before anything is read or written."""
    name = normalize(engine)
    defined = definition(job)
    if defined.engine_of:  # the engine option chooses another job's engine (compact-log: its checkpoint's)
        return check_engine(defined.engine_of, name)
    if name not in defined.engines:
        raise InvalidArgumentError(f"{job} has no {name} engine; the {name} engine runs "
                                   f"{', '.join(jobs_run_by(name))}")
    return name


def engine_of(job: str, params: Mapping[str, Any]) -> str:
    """The checked engine of a job's parsed options (native when the job has no ``engine``)."""
    return check_engine(job, params.get("engine"))
