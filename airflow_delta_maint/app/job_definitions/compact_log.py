"""``compact-log``: log compaction files (and checkpoints) so readers open few log files."""

from __future__ import annotations

from airflow_delta_maint.delta.log.compaction_options import DEFAULT_MAX_WINDOW_BYTES
from airflow_delta_maint.delta.protocol.features import Operation

from .checkpoint import CLEANUP_EXPIRED_LOG
from .definition import NATIVE, JobDefinition
from .engine_option import ENGINE
from .options import Option, options

COMPACT_LOG = JobDefinition(
    name="compact-log",
    summary="Write log compaction files (and checkpoints) so readers open few log files instead of many commits.",
    runner="airflow_delta_maint.app.jobs.compact_log",
    operation=Operation.COMPACT_LOG,
    writes=True,
    catalog_operation="LOG_COMPACTION",
    driver_only=True,
    engines=(NATIVE,),  # the checkpoint and the cleanup may run on delta-spark: checkpoint_engine
    no_delta_spark=("compact-log runs on the native engine only: delta-spark reads log compaction files but has no "
                    "writer for them (its checkpoint and expired-log cleanup can run on delta-spark: "
                    "--checkpoint-engine delta-spark)"),
    engine_option="checkpoint_engine",
    fleet_default={},
    fleet_rank=3,
    options=options(
        Option("interval", "int", "commits per compaction file (default: table property "
               "delta.logCompactionInterval, else 5)", metavar="N"),
        Option("max_window_bytes", "int", "skip (and report) a window whose commit files total more (default 1 GiB)",
               default=DEFAULT_MAX_WINDOW_BYTES, metavar="B"),
        Option("checkpoint_interval", "int", "first write a checkpoint when M commits follow the last one",
               metavar="M"),
        CLEANUP_EXPIRED_LOG,
        ENGINE,
        Option("checkpoint_engine", "str", "who writes the checkpoint and cleans up the expired log: native "
               "(default) or delta-spark; the compaction files are always written by the native engine",
               metavar="ENGINE", keyword=None, in_docs=False),
    ),
)
