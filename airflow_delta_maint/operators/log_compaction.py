"""Log compaction (and checkpoints, expired-log cleanup) as an Airflow task, and its check on the worker."""

from __future__ import annotations


from airflow_delta_maint.app.job_definitions.compact_log import COMPACT_LOG
from airflow_delta_maint.operators.base import DeltaMaintenanceOperator


class LogCompactionOperator(DeltaMaintenanceOperator):
    """
    Write log compaction files (and checkpoints) so readers open few log files instead of many commits.

    :param interval: compact every this many commits. (templated)
    :param max_window_bytes: the largest log window one compaction file covers, in bytes. (templated)
    :param checkpoint_interval: also write a checkpoint once this many commits follow the last one. (templated)
    :param cleanup_expired_log: then delete log files older than ``delta.logRetentionDuration``
        (commits, checkpoints, checksums, sidecars), as ``delta-maint cleanup-log`` does.
    :param engine: who writes the checkpoint and cleans up the expired log: ``"native"`` or
        ``"delta-spark"`` (see :class:`DeltaMaintenanceOperator`). The log compaction files are always
        written by the native engine: delta-spark reads them but has no writer for them. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = COMPACT_LOG.name

