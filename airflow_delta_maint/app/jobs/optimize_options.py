"""OPTIMIZE's options: their checks before the table is read, and the plan they ask for.

The job's parameters (the command line's options as a dict, see ``optimize.run``) give the
auto-compaction policy's choice of partitions (``--auto``), ``--purge``'s settings and the plan
(:func:`~airflow_delta_maint.delta.plans.optimize.plan_optimize`); the engine's options and the run
options are refused here before anything is read.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES, AutoDecision, PartitionCounts,
                                                             PartitionKey, choose_partitions)
from airflow_delta_maint.delta.plans.clustering import is_clustered
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO, OptimizePlan, file_size_settings, plan_optimize
from airflow_delta_maint.delta.plans.recent_writes import leave_out
from airflow_delta_maint.delta.protocol.features import OPTIMIZE_DELTA_SPARK

from ..engines import DELTA_SPARK, engine_of

#: the job's sub-command (and the metrics' ``operation``)
NAME = "optimize"
DEFAULT_BATCH_BYTES = 50 << 30
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
# delta-spark's (Spark's) default: the fastest to write and read; zstd writes files about a
# quarter smaller for some 10-15% more time (docs/benchmarks.md).
DEFAULT_COMPRESSION = "snappy"


def zorder_columns(text: str | Sequence[str] | None) -> list[str]:
    """The Z-order columns of ``--zorder-by`` (comma-separated text, or a list)."""
    if not text:
        return []
    if isinstance(text, str):
        return [c.strip() for c in text.split(",") if c.strip()]
    return list(text)


def auto_decision(snapshot: TableHeader, params: dict[str, Any],
                  counts: Mapping[PartitionKey, PartitionCounts] | None = None) -> AutoDecision | None:
    """The auto-compaction policy's choice of partitions, or None when ``auto`` is off; ``counts``:
    the live files' numbers per partition when streamed from the log (see ``choose_partitions``)."""
    if not params.get("auto"):
        return None
    if params.get("predicate") or params.get("zorder_by") or params.get("rewrite_type_widened"):
        raise InvalidArgumentError("--auto chooses partitions itself: it takes no --where, --zorder-by or "
                                   "--rewrite-type-widened")
    min_size, _ = file_size_settings(snapshot, params.get("min_file_size"), params.get("max_file_size"))
    whole = is_clustered(snapshot.protocol) or not snapshot.partition_columns
    return choose_partitions(
        snapshot, min_file_size=min_size, min_num_files=int(params.get("min_num_files") or DEFAULT_MIN_NUM_FILES),
        max_deleted_rows_ratio=float(params["max_deleted_rows_ratio"]) if params.get("max_deleted_rows_ratio")
        is not None else DEFAULT_MAX_DELETED_ROWS_RATIO,
        max_partitions=int(params.get("max_partitions") or DEFAULT_MAX_PARTITIONS),
        all_partitions=bool(params.get("all_partitions")), whole_table=whole, counts=counts)


def purge_params(params: dict[str, Any]) -> dict[str, Any]:
    """``--purge``: only files with deletion vectors are rewritten (no file counts as small, any deleted
    row is enough), as delta-spark's REORG TABLE ... APPLY (PURGE) does."""
    if not params.get("purge"):
        return params
    given = [flag for key, flag in (("zorder_by", "--zorder-by"), ("auto", "--auto"),
                                    ("target_files", "--target-files"),
                                    ("rewrite_type_widened", "--rewrite-type-widened")) if params.get(key)]
    if given:
        raise InvalidArgumentError(f"--purge rewrites the files with deletion vectors only; it takes no "
                                   f"{', '.join(given)}")
    return {**params, "min_file_size": 1, "dv_ratio": 0.0}


def plan_from_params(snapshot: Snapshot, params: dict[str, Any], decision: AutoDecision | None = None) -> OptimizePlan:
    """The plan ``params`` ask for on ``snapshot``: young files and recently written partitions left
    out, the auto-compaction policy's partitions (``decision``, else decided here) selected."""
    params = purge_params(params)
    if decision is None:
        decision = auto_decision(snapshot, params)
    clustered_auto = decision is not None and is_clustered(snapshot.protocol)
    view, left = leave_out(snapshot, min_file_age_s=params.get("min_file_age"),
                           recent_commits=params.get("skip_recent_partitions"),
                           whole_table=is_clustered(snapshot.protocol) or not snapshot.partition_columns)
    plan = plan_optimize(view, predicate=params.get("predicate"),
                         zorder_by=zorder_columns(params.get("zorder_by")),
                         min_file_size=None if clustered_auto else params.get("min_file_size"),
                         max_file_size=params.get("max_file_size"),
                         dv_ratio=params.get("dv_ratio", DEFAULT_DV_RATIO), full=bool(params.get("full")),
                         min_cube_size=params.get("min_cube_size"), target_cube_size=params.get("target_cube_size"),
                         rewrite_type_widened=bool(params.get("rewrite_type_widened")),
                         partitions=set(decision.chosen) if decision is not None else None,
                         target_files=params.get("target_files"))
    plan.num_table_files = snapshot.num_files
    plan.left_out = left.metrics() if left.any else {}
    return plan


def feature_gate(params: Mapping[str, Any]) -> str:
    """The feature gate's job for this run: OPTIMIZE written natively, or by delta-spark, which honours
    the table's writer features itself (this core only plans, from the log)."""
    return OPTIMIZE_DELTA_SPARK if engine_of(NAME, params) == DELTA_SPARK else "optimize"


def check_engine_options(params: dict[str, Any]) -> str:
    """The run's engine; options the chosen engine cannot honour fail before anything is read."""
    engine = engine_of(NAME, params)
    if engine == DELTA_SPARK:
        from ..engines.delta_spark import NATIVE_ONLY_OPTIMIZE, refuse_native_only

        refuse_native_only(params, NATIVE_ONLY_OPTIMIZE, "OPTIMIZE")
    purge_params(params)
    return engine


def check_run_options(params: dict[str, Any]) -> None:
    """Refuse bad run options before the table is read (on a large table, before minutes of planning)."""
    batch_bytes = params.get("batch_bytes")
    if batch_bytes is not None and int(batch_bytes) <= 0:
        raise InvalidArgumentError(f"batch bytes must be positive, got {batch_bytes}")
    if params.get("max_concurrent_bins") is not None and int(params["max_concurrent_bins"]) <= 0:
        raise InvalidArgumentError(f"max concurrent bins must be positive, got {params['max_concurrent_bins']}")
    if params.get("lease_seconds") is not None and int(params["lease_seconds"]) < 0:
        raise InvalidArgumentError(f"lease seconds must be 0 (no reservation) or positive, got {params['lease_seconds']}")
    compression = params.get("compression") or DEFAULT_COMPRESSION
    if compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"unknown compression {compression!r}; one of {', '.join(COMPRESSIONS)}")
    if float(params.get("wait_for_writer") or 0) < 0:
        raise InvalidArgumentError(f"wait for writer must not be negative, got {params['wait_for_writer']}")
    if params.get("bins_per_commit") is not None and int(params["bins_per_commit"]) < 0:
        raise InvalidArgumentError(f"bins per commit must be 0 (one commit per batch) or positive, "
                                   f"got {params['bins_per_commit']}")

