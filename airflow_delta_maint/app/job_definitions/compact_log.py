"""``compact-log``: log compaction files (and checkpoints) so readers open few log files."""

from __future__ import annotations

from airflow_delta_maint.delta.log.compaction_options import DEFAULT_MAX_WINDOW_BYTES
from airflow_delta_maint.delta.protocol.features import Operation

from .checkpoint import CHECKPOINT, CLEANUP_EXPIRED_LOG
from .definition import NATIVE, JobDefinition
from .options import FormerName, Option, options

COMPACT_LOG = JobDefinition(
    name="compact-log",
    summary="Write log compaction files (and checkpoints) so readers open few log files instead of many commits.",
    runner="airflow_delta_maint.app.jobs.compact_log",
    operation=Operation.COMPACT_LOG,
    writes=True,
    catalog_operation="LOG_COMPACTION",
    driver_only=True,
    engines=(NATIVE,),  # the compaction files; the checkpoint and the cleanup may run on delta-spark: engine
    engine_option="engine",
    engine_of=CHECKPOINT.name,
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
        Option("engine", "str", "who writes the checkpoint and cleans up the expired log: native (default) or "
               "delta-spark; the compaction files are always written by the native engine (delta-spark has no "
               "writer for them)", default=NATIVE, metavar="ENGINE", keyword=None, in_docs=False,
               former_names=(FormerName("checkpoint_engine"),)),
    ),
)
