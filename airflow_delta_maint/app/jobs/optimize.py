"""Compact small files (bin-packing) or Z-order them; commits with dataChange=false.

The job's entry points: its command line (:func:`add_arguments`, :func:`options_from`, :func:`run`),
:func:`run_optimize`, the worker's check without Spark (:func:`nothing_to_do`) and the human summary.
The typed options are the core's :mod:`~airflow_delta_maint.delta.plans.optimize_options`; the plan
they ask for and the reason to skip :mod:`~airflow_delta_maint.delta.plans.optimize_decision`;
running a plan :mod:`.optimize_execution`, its metrics :mod:`.optimize_metrics`; a large table runs in
rounds (:mod:`.optimize_large`).
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any, Mapping

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.plans import optimize_decision
from airflow_delta_maint.delta.plans.optimize_decision import PlanOutline, auto_decision, plan_from_options
from airflow_delta_maint.delta.plans.optimize_options import (OptimizeOptions)
from airflow_delta_maint.delta.protocol.features import check_supported
from airflow_delta_maint.delta.protocol.row_tracking import row_tracking
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.protocol.uniform_iceberg import check_no_iceberg_metadata

from ..context import JobContext
from ..job_definitions.optimize import OPTIMIZE
from ..engines import DELTA_SPARK, check_engine
from ..state_reading import read_state
from .optimize_execution import run_plan
from .optimize_large import run_in_rounds
from airflow_delta_maint.app.rewrite.copy_estimate import PlannedRewrite
from airflow_delta_maint.app.rewrite.rewrite_cadence import RewriteCadence

#: the job's sub-command (and the metrics' ``operation``)
NAME = OPTIMIZE.name




def options_from(params: Mapping[str, Any]) -> OptimizeOptions:
    """The run's typed options from its parsed command line (``vars`` of the namespace); a bad value,
    or an option the chosen engine cannot honour, raises ``InvalidArgumentError`` before anything is read."""
    engine = check_engine(NAME, params.get("engine"))
    if engine == DELTA_SPARK:
        from ..engines.delta_spark import NATIVE_ONLY_OPTIMIZE, refuse_native_only

        refuse_native_only(params, NATIVE_ONLY_OPTIMIZE, "OPTIMIZE")
    return OptimizeOptions.from_mapping({**params, "engine": engine})


def nothing_to_do(table: str, storage_options: Mapping[str, str] | None, options: OptimizeOptions) -> str | None:
    """Without Spark: the core's reason when the plan is empty
    (:func:`~airflow_delta_maint.delta.plans.optimize_decision.nothing_to_do`), else None. Bad input raises."""
    return optimize_decision.nothing_to_do(table, storage_options, options)


def run_optimize(ctx: JobContext, options: OptimizeOptions) -> dict[str, Any]:
    """Plan, rewrite (Spark tasks, or threads of this process under local execution) and commit in
    batches, or (engine delta-spark) run delta-spark's OPTIMIZE on what the plan selects. Returns the
    job's metrics."""
    # one rewrite path for the whole run, its rounds included, unless bins_per_commit fixes the units
    path = RewriteCadence() if options.bins_per_commit is None else None
    return read_state(ctx.storage, functools.partial(_optimize, ctx, options, path), what="OPTIMIZE",
                      streamed=options.engine != DELTA_SPARK)


def _optimize(ctx: JobContext, options: OptimizeOptions, path: RewriteCadence | None, state: TableState) -> dict[str, Any]:
    """OPTIMIZE on the table's state: in rounds on a large table's streamed state, else (or where the
    plan needs every file) planned and run on the whole state."""
    if isinstance(state, StreamedState):
        result = run_in_rounds(ctx, options, state, path)
        if result is not None:
            return result
    snapshot = state.eager()
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, options.feature_gate, snapshot.metadata)
    check_no_iceberg_metadata(ctx.storage, snapshot.metadata, options.feature_gate)
    decision = auto_decision(snapshot, options)
    plan = plan_from_options(snapshot, options, decision)
    return run_plan(ctx, options, snapshot, plan, decision, path=path)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Run the job with the parsed command line (see :func:`run_optimize`)."""
    return run_optimize(ctx, options_from(vars(args)))


def format_human(m: dict[str, Any]) -> str:
    """The run's metrics in one line (a dry run: its plan)."""
    if m["status"] == "dry_run":
        return json.dumps(m["plan"], indent=2)
    return (f"OPTIMIZE {m['table']}: {m['status']}, version {m.get('version_read')} -> {m.get('version_committed')}; "
            f"removed {m.get('numRemovedFiles', 0)} files ({m.get('numRemovedBytes', 0)} bytes), "
            f"added {m.get('numAddedFiles', 0)} files ({m.get('numAddedBytes', 0)} bytes) in {m['duration_s']}s")


def local_rewrite_bytes(table: str, storage_options: Mapping[str, str] | None, params: Mapping[str, Any]) -> int | None:
    """Bytes of data files an OPTIMIZE with these options would rewrite, planned on this machine
    from the log alone; None when the plan needs Spark (Z-order, liquid clustering) (see :func:`local_rewrite`)."""
    planned = local_rewrite(table, storage_options, params)
    return None if planned is None else planned.bytes


def local_rewrite(table: str, storage_options: Mapping[str, str] | None,
                  params: Mapping[str, Any]) -> PlannedRewrite | None:
    """The rewrite an OPTIMIZE with these options would do, planned on this machine from the log alone:
    its bytes and its bins' files (for the copy estimate); None when the plan needs Spark.

    Reads the log streamed (``streamed_plan_outline``): per-partition aggregates for the auto
    policy, and the candidate files' rows only (small files, deletion vectors past the ratio) for
    their bins; the whole snapshot only for what the stream does not plan (liquid clustering,
    ``target_files``, ``rewrite_type_widened``, a distrusted checkpoint). It runs only once the log
    is found to hold at most ``LOCAL_MAX_LOG_BYTES``, which also bounds the candidates it keeps.
    Before that the execution choice reads nothing but the log's listing (its size)."""
    from airflow_delta_maint.delta.log.table_state import read_table
    from airflow_delta_maint.delta.plans.optimize_decision import outline_of

    options = options_from(params)
    storage = Storage(table, dict(storage_options or {}))

    def planned(state: TableState) -> PlannedRewrite | None:
        outline = outline_of(state, options.purged(), candidates=True)
        if outline is None:  # what the stream does not plan: the plan of the whole state
            outline = outline_of(state.eager(), options.purged())
        assert outline is not None
        return planned_rewrite(state, outline, options, storage)

    return read_table(storage, planned, what="the execution choice")


def planned_rewrite(state: TableState, outline: PlanOutline, options: OptimizeOptions,
                    storage: Storage) -> PlannedRewrite | None:
    """The rewrite of a plan's outline with its bytes (None: the plan needs Spark): bin-packing and even
    splits run on the worker too; only bin-packing copies row groups, never on tables whose rewrite
    materializes row tracking."""
    if outline.layout not in ("binpack", "even") or outline.input_bytes is None:
        return None
    if outline.layout != "binpack" or options.copy_row_groups == "never" or outline.bin_files is None:
        return PlannedRewrite(outline.input_bytes)
    hidden = row_tracking(state.protocol, state.metadata, state.domains).hidden_columns
    return PlannedRewrite(outline.input_bytes, storage, options, outline.bin_files, copies=not hidden)


def look(table: str, storage_options: Mapping[str, str] | None, options: OptimizeOptions, *,
         plan_bytes: bool) -> tuple[str | None, int, PlannedRewrite | None]:
    """The worker's one read of the log for a task: why the job would do nothing (None: it has work), the
    version it saw and, with ``plan_bytes``, the rewrite its plan does (:func:`planned_rewrite`; None: the
    plan needs Spark, or it was not asked for). ``plan_bytes`` keeps the plan's candidate files: ask for it only once the log
    is known to be small (the execution choice's bound)."""
    from airflow_delta_maint.delta.log.table_state import read_table
    from airflow_delta_maint.delta.plans.optimize_decision import outline_of, skip_reason

    purged = options.purged()
    storage = Storage(table, dict(storage_options or {}))

    def seen(state: TableState) -> tuple[str | None, int, PlannedRewrite | None]:
        outline = outline_of(state, purged, candidates=plan_bytes)
        if outline is None:  # what the stream does not plan: the plan of the whole state
            outline = outline_of(state.eager(), purged)
        assert outline is not None
        planned = planned_rewrite(state, outline, options, storage) if plan_bytes else None
        return skip_reason(outline, purged), outline.version, planned

    return read_table(storage, seen, what="OPTIMIZE's check")
