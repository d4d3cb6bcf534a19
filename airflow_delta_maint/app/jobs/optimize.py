"""Compact small files (bin-packing) or Z-order them; commits with dataChange=false.

The job's entry points: its command line (:func:`add_arguments`, :func:`run`), :func:`run_optimize`,
the worker's check without Spark (:func:`nothing_to_do`) and the human summary. The options and the
plan they ask for are :mod:`.optimize_options`; the streamed outline behind the check
:mod:`.optimize_check`; running a plan :mod:`.optimize_execution`, its metrics
:mod:`.optimize_metrics`; a large table runs in rounds (:mod:`.optimize_large`).
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.log.table_state import TableState, read_table
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES)
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO
from airflow_delta_maint.delta.storage.leases import DEFAULT_LEASE_SECONDS
from airflow_delta_maint.delta.protocol.features import check_supported

from ..context import JobContext
from ..engines import DELTA_SPARK, add_engine_argument
from ..state_reading import read_state
from .optimize_check import outline_of, skip_reason, streamed_plan_outline
from .optimize_execution import check_spark_for, run_plan
from .optimize_large import RoundSteps, run_in_rounds
from .optimize_options import NAME as NAME  # the job's sub-command (see ``app.jobs``)
from .optimize_options import (COMPRESSIONS, DEFAULT_BATCH_BYTES, DEFAULT_COMPRESSION, auto_decision,
                               check_engine_options, check_run_options, feature_gate, plan_from_params, purge_params)
from airflow_delta_maint.app.rewrite.rewrite_path import RewritePath


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


def nothing_to_do(table: str, storage_options: dict[str, str] | None, params: dict[str, Any]) -> str | None:
    """Without Spark: a reason when the plan is empty, else None. Bad input raises.

    Reads the log in bounded memory (:func:`streamed_plan_outline`): the checkpoint's columns
    ``add.path``, ``add.deletionVector``, ``add.partitionValues``, ``add.size``, ``add.stats``
    (``numRecords`` of files with a deletion vector) and, with ``min_file_age``,
    ``add.modificationTime``, one row group at a time; the commits after it; with ``auto`` or
    ``skip_recent_partitions`` the newest commits' actions. Liquid clustering also reads
    ``add.tags``, ``add.clusteringProvider``; ``target_files`` ``add.stats`` of every file
    (``numRecords``); ``rewrite_type_widened`` the footers of selected data files until one holds
    an old type. The whole snapshot is loaded instead when the streamed read cannot vouch for the
    state (see ``state_stream``).
    """
    check_engine_options(params)
    params = purge_params(params)
    outline = read_table(table, lambda state: outline_of(state, params), storage_options=storage_options,
                         what="OPTIMIZE's check")
    assert outline is not None
    return skip_reason(outline, params)


def run_optimize(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Plan, rewrite (Spark tasks, or threads of this process under local execution) and commit in
    batches, or (engine delta-spark) run delta-spark's OPTIMIZE on what the plan selects. Returns the
    job's metrics."""
    engine = check_engine_options(params)
    check_run_options(params)
    if params.get("bins_per_commit") is None and "_rewrite_path" not in params:
        params = {**params, "_rewrite_path": RewritePath()}  # one path for the whole run, its rounds included
    return read_state(ctx.storage, functools.partial(_optimize, ctx, params, engine), what="OPTIMIZE",
                      streamed=engine != DELTA_SPARK)


def _optimize(ctx: JobContext, params: dict[str, Any], engine: str, state: TableState) -> dict[str, Any]:
    """OPTIMIZE on the table's state: in rounds on a large table's streamed state, else (or where the
    plan needs every file) planned and run on the whole state."""
    if isinstance(state, StreamedState):
        result = run_in_rounds(ctx, params, engine, state, _ROUND_STEPS)
        if result is not None:
            return result
    snapshot = state.eager()
    ctx.version_read = snapshot.version
    check_supported(snapshot.protocol, feature_gate(params), snapshot.metadata)
    decision = auto_decision(snapshot, params)
    plan = plan_from_params(snapshot, params, decision)
    return run_plan(ctx, params, engine, snapshot, plan, decision)


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Run the job with the parsed command line (see :func:`run_optimize`)."""
    params = {k: getattr(args, k) for k in ("predicate", "zorder_by", "min_file_size", "max_file_size",
                                             "max_concurrent_bins", "batch_bytes", "dv_ratio", "compression",
                                             "full", "min_cube_size", "target_cube_size", "rewrite_type_widened",
                                             "target_files", "auto", "all_partitions", "min_num_files",
                                             "max_deleted_rows_ratio", "bins_per_commit", "min_file_age",
                                             "skip_recent_partitions", "wait_for_writer",
                                             "max_partitions", "lease_seconds", "dry_run", "purge", "engine")}
    return run_optimize(ctx, params)


def format_human(m: dict[str, Any]) -> str:
    """The run's metrics in one line (a dry run: its plan)."""
    if m["status"] == "dry_run":
        return json.dumps(m["plan"], indent=2)
    return (f"OPTIMIZE {m['table']}: {m['status']}, version {m.get('version_read')} -> {m.get('version_committed')}; "
            f"removed {m.get('numRemovedFiles', 0)} files ({m.get('numRemovedBytes', 0)} bytes), "
            f"added {m.get('numAddedFiles', 0)} files ({m.get('numAddedBytes', 0)} bytes) in {m['duration_s']}s")


#: the steps OPTIMIZE in rounds borrows from this job (see ``optimize_large``)
_ROUND_STEPS = RoundSteps(outline=streamed_plan_outline, purge=purge_params, plan=plan_from_params, run=run_plan,
                          check_spark=check_spark_for)

