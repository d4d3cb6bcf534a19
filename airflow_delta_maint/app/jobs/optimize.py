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
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES)
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO
from airflow_delta_maint.delta.plans.optimize_decision import auto_decision, plan_from_options
from airflow_delta_maint.delta.plans.optimize_options import (COMPRESSIONS, DEFAULT_BATCH_BYTES, DEFAULT_COMPRESSION,
                                                              OptimizeOptions)
from airflow_delta_maint.delta.protocol.features import check_supported
from airflow_delta_maint.delta.storage.leases import DEFAULT_LEASE_SECONDS

from ..context import JobContext
from ..engines import DELTA_SPARK, add_engine_argument, check_engine
from ..state_reading import read_state
from .optimize_execution import run_plan
from .optimize_large import run_in_rounds
from airflow_delta_maint.app.rewrite.rewrite_path import RewritePath

#: the job's sub-command (and the metrics' ``operation``)
NAME = "optimize"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options on the command line."""
    parser.add_argument("--where", dest="predicate", help="partition predicate, e.g. \"date >= '2024-01-01'\"")
    parser.add_argument("--zorder-by", default="", help="comma-separated data columns to Z-order by")
    parser.add_argument("--min-file-size", type=int, help="files below this many bytes are compacted "
                        "(default: delta.targetFileSize, else 1 GiB)")
    parser.add_argument("--max-file-size", type=int, help="target size of output files in bytes "
                        "(default: delta.targetFileSize, else 1 GiB)")
    parser.add_argument("--max-concurrent-bins", type=int, help="at most this many bins in one Spark job")
    parser.add_argument("--batch-bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help="commit after each this many input bytes (default 50 GiB)")
    parser.add_argument("--bins-per-commit", type=int, default=None,
                        help="commit bins this many together as soon as they are rewritten; 0: one commit per "
                        "batch once all its bins are rewritten (default: a quiet table rewrites each batch at once; "
                        "a table a writer is committing to, or that one commits to during the run, has its bins "
                        "rewritten one at a time, each going in as soon as another writer has committed)")
    parser.add_argument("--min-file-age", type=float, default=None, metavar="SECONDS",
                        help="leave out files younger than this (their modificationTime): spares writers that "
                        "are still working on fresh data")
    parser.add_argument("--skip-recent-partitions", type=int, default=None, metavar="N",
                        help="leave out partitions that any of the newest N commits changed data in (appends and "
                        "the deletion vectors of DELETE, UPDATE, MERGE); a clustered or unpartitioned table is one "
                        "partition")
    parser.add_argument("--wait-for-writer", type=float, default=None, metavar="SECONDS",
                        help="busy tables: hold the rewritten bins and commit them right after another writer's "
                        "commit, waiting for one at most this long, when a writer's next statement has usually not "
                        "started yet")
    parser.add_argument("--dv-ratio", type=float, default=DEFAULT_DV_RATIO,
                        help="also rewrite files whose deletion vector deletes more than this share of rows")
    parser.add_argument("--compression", default=None, choices=list(COMPRESSIONS),
                        help=f"parquet compression of the written files (default {DEFAULT_COMPRESSION})")
    parser.add_argument("--full", action="store_true",
                        help="liquid-clustered tables: recluster every file (after the clustering columns changed)")
    parser.add_argument("--min-cube-size", type=int, help="liquid-clustered tables: files of a ZCube at least "
                        "this many bytes big are left alone (default 100 GiB)")
    parser.add_argument("--target-cube-size", type=int, help="liquid-clustered tables: at most this many input "
                        "bytes are clustered together (default 150 GiB)")
    parser.add_argument("--rewrite-type-widened", action="store_true",
                        help="rewrite exactly the files that still hold a widened column in its old type")
    parser.add_argument("--target-files", type=int, help="rewrite each selected partition into exactly this many "
                        "files of even row counts, splitting files that are too large")
    parser.add_argument("--auto", action="store_true", help="the auto-compaction policy: only partitions that "
                        "received data since the last OPTIMIZE and have enough small files or deleted rows")
    parser.add_argument("--all-partitions", action="store_true",
                        help="--auto: consider every partition, not only those that received data")
    parser.add_argument("--min-num-files", type=int, default=DEFAULT_MIN_NUM_FILES,
                        help=f"--auto: small files a partition needs to be chosen (default {DEFAULT_MIN_NUM_FILES})")
    parser.add_argument("--max-deleted-rows-ratio", type=float, default=DEFAULT_MAX_DELETED_ROWS_RATIO,
                        help="--auto: also choose a partition with a file whose deletion vector deletes more than "
                        "this share of its rows (default 0.05)")
    parser.add_argument("--max-partitions", type=int, default=DEFAULT_MAX_PARTITIONS,
                        help=f"--auto: at most this many partitions per run, the worst first "
                        f"(default {DEFAULT_MAX_PARTITIONS})")
    parser.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS,
                        help="partitions are reserved for this long against other OPTIMIZE runs (0: no reservation; "
                        f"default {DEFAULT_LEASE_SECONDS})")
    parser.add_argument("--purge", action="store_true",
                        help="rewrite only the files with deletion vectors, dropping their deleted rows (delta-spark's "
                        "REORG TABLE ... APPLY (PURGE)); takes no --zorder-by, --auto or --target-files")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    add_engine_argument(parser)


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
    # one rewrite path for the whole run, its rounds included, unless --bins-per-commit fixes the units
    path = RewritePath() if options.bins_per_commit is None else None
    return read_state(ctx.storage, functools.partial(_optimize, ctx, options, path), what="OPTIMIZE",
                      streamed=options.engine != DELTA_SPARK)


def _optimize(ctx: JobContext, options: OptimizeOptions, path: RewritePath | None, state: TableState) -> dict[str, Any]:
    """OPTIMIZE on the table's state: in rounds on a large table's streamed state, else (or where the
    plan needs every file) planned and run on the whole state."""
    if isinstance(state, StreamedState):
        result = run_in_rounds(ctx, options, state, path)
        if result is not None:
            return result
    snapshot = state.eager()
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, options.feature_gate, snapshot.metadata)
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
