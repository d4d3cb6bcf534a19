"""``optimize``: compact small files into few large ones (bin-packing), Z-order, liquid clustering, the
auto-compaction policy, purge; committed with ``dataChange=false``."""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.delta.option_values import as_bool
from airflow_delta_maint.delta.plans.auto_compaction import (DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_MAX_PARTITIONS,
                                                             DEFAULT_MIN_NUM_FILES)
from airflow_delta_maint.delta.plans.optimize import DEFAULT_DV_RATIO
from airflow_delta_maint.delta.plans.optimize_options import (COMPRESSIONS, COPY_ROW_GROUPS, DEFAULT_BATCH_BYTES, POLICIES,
                                                              DEFAULT_COMPRESSION, DEFAULT_COPY_ROW_GROUPS,
                                                              DEFAULT_ROW_GROUP_BYTES)
from airflow_delta_maint.delta.protocol.features import Operation
from airflow_delta_maint.delta.storage.leases import DEFAULT_LEASE_SECONDS

from .definition import DELTA_SPARK, NATIVE, JobDefinition, Params
from .engine_option import ENGINE
from .options import FormerName, Option, options


def _policy_of_auto(auto: Any) -> str:
    """The former ``auto`` (a flag, or true/false in a mapping) as the ``policy``."""
    return "auto" if as_bool(auto) else "all"


def _shuffle(params: Params) -> str | None:
    return "Z-order" if params.get("zorder_by") else None


OPTIMIZE = JobDefinition(
    name="optimize",
    summary="Compact small files (bin-packing) or Z-order them; commits with dataChange=false.",
    runner="airflow_delta_maint.app.jobs.optimize",
    operation=Operation.OPTIMIZE,
    writes=True,
    catalog_operation="OPTIMIZE",
    engines=(NATIVE, DELTA_SPARK),
    engine_option="engine",
    spark_work=lambda params: not params.get("dry_run"),
    shuffle=_shuffle,
    reads_older_commits=lambda params: False,
    dry_run_plans_natively=True,
    fleet_default={},
    fleet_rank=1,
    options=options(
        Option("where", "str", "partition predicate, e.g. \"date >= '2024-01-01'\"",
               former_names=(FormerName("predicate", flag=None),)),
        Option("zorder_by", "str", "comma-separated data columns to Z-order by", default=""),
        Option("min_file_size", "int", "files below this many bytes are compacted (default: delta.targetFileSize, "
               "else 1 GiB)"),
        Option("target_file_size", "int", "target size of output files in bytes (default: delta.targetFileSize, "
               "else 1 GiB)", former_names=(FormerName("max_file_size", keyword=True),)),
        Option("max_concurrent_bins", "int", "at most this many bins in one Spark job"),
        Option("batch_bytes", "int", "commit after each this many input bytes (default 50 GiB)",
               default=DEFAULT_BATCH_BYTES),
        Option("bins_per_commit", "int", "commit bins this many together as soon as they are rewritten; 0: one "
               "commit per batch once all its bins are rewritten (default: a quiet table rewrites each batch at "
               "once; a table a writer is committing to, or that one commits to during the run, has its bins "
               "rewritten one at a time, each going in as soon as another writer has committed)"),
        Option("min_file_age", "float", "leave out files younger than this (their modificationTime): spares "
               "writers that are still working on fresh data", metavar="SECONDS"),
        Option("skip_recent_partitions", "int", "leave out partitions that any of the newest N commits changed "
               "data in (appends and the deletion vectors of DELETE, UPDATE, MERGE); a clustered or unpartitioned "
               "table is one partition", metavar="N"),
        Option("wait_for_writer", "float", "busy tables: hold the rewritten bins and commit them right after "
               "another writer's commit, waiting for one at most this long, when a writer's next statement has "
               "usually not started yet", metavar="SECONDS"),
        Option("dv_ratio", "float", "also rewrite files whose deletion vector deletes more than this share of rows",
               default=DEFAULT_DV_RATIO),
        Option("compression", "str", f"parquet compression of the written files (default {DEFAULT_COMPRESSION})",
               choices=tuple(COMPRESSIONS)),
        Option("copy_row_groups", "str", "bin-packing: copy inputs' row groups byte for byte where that is exact "
               "(auto: inputs whose row groups all reach a quarter of row_group_bytes compressed, the rest "
               "re-encoded together; always: every input that can be copied; never: re-encode every row)",
               default=DEFAULT_COPY_ROW_GROUPS, choices=tuple(COPY_ROW_GROUPS)),
        Option("row_group_bytes", "int", "Arrow bytes per row group of the files written (default 128 MiB)",
               default=DEFAULT_ROW_GROUP_BYTES),
        Option("full", "bool", "liquid-clustered tables: recluster every file (after the clustering columns "
               "changed)"),
        Option("min_cube_size", "int", "liquid-clustered tables: files of a ZCube at least this many bytes big are "
               "left alone (default 100 GiB)"),
        Option("target_cube_size", "int", "liquid-clustered tables: at most this many input bytes are clustered "
               "together (default 150 GiB)"),
        Option("rewrite_type_widened", "bool", "rewrite exactly the files that still hold a widened column in its "
               "old type"),
        Option("target_files", "int", "rewrite each selected partition into exactly this many files of even row "
               "counts, splitting files that are too large"),
        Option("policy", "str", "all (default): every partition the options select; auto: the auto-compaction "
               "policy, only partitions that received data since the last OPTIMIZE and have enough small files or "
               "deleted rows", default="all", choices=POLICIES,
               former_names=(FormerName("auto", value=_policy_of_auto, takes_value=False),)),
        Option("all_partitions", "bool", "policy auto: consider every partition, not only those that received data"),
        Option("min_num_files", "int", f"policy auto: small files a partition needs to be chosen (default "
               f"{DEFAULT_MIN_NUM_FILES})", default=DEFAULT_MIN_NUM_FILES),
        Option("max_deleted_rows_ratio", "float", "policy auto: also choose a partition with a file whose deletion "
               "vector deletes more than this share of its rows (default 0.05)",
               default=DEFAULT_MAX_DELETED_ROWS_RATIO),
        Option("max_partitions", "int", f"policy auto: at most this many partitions per run, the worst first "
               f"(default {DEFAULT_MAX_PARTITIONS})", default=DEFAULT_MAX_PARTITIONS),
        Option("lease_seconds", "int", "partitions are reserved for this long against other OPTIMIZE runs (0: no "
               f"reservation; default {DEFAULT_LEASE_SECONDS})", default=DEFAULT_LEASE_SECONDS),
        Option("purge", "bool", "rewrite only the files with deletion vectors, dropping their deleted rows "
               "(delta-spark's REORG TABLE ... APPLY (PURGE)); takes no zorder_by, policy auto or target_files"),
        # held as dry_run_only: an attribute named dry_run would hide the method BaseOperator.dry_run()
        Option("dry_run", "bool", "print the plan; write nothing", attribute="dry_run_only"),
        ENGINE,
    ),
)
