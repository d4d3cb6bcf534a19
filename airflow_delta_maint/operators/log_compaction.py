"""Log compaction (and checkpoints, expired-log cleanup) as an Airflow task, and its check on the worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_delta_maint.operators.base import DeltaMaintenanceOperator
from airflow_delta_maint.operators.options import job_options


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

    job = "compact-log"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields, "interval", "max_window_bytes", "checkpoint_interval",
    )

    def __init__(
        self,
        *,
        interval: int | str | None = None,
        max_window_bytes: int | str | None = None,
        checkpoint_interval: int | str | None = None,
        cleanup_expired_log: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.interval = interval
        self.max_window_bytes = max_window_bytes
        self.checkpoint_interval = checkpoint_interval
        self.cleanup_expired_log = cleanup_expired_log

    def job_args(self) -> list[str]:
        return job_options({"interval": self.interval, "max_window_bytes": self.max_window_bytes,
                            "checkpoint_interval": self.checkpoint_interval,
                            "cleanup_expired_log": bool(self.cleanup_expired_log)})

    def engine_args(self) -> list[str]:
        """The engine applies to the checkpoint and the expired-log cleanup (``--checkpoint-engine``)."""
        from airflow_delta_maint.app.engines import NATIVE

        engine = self.resolved_engine()
        if engine == NATIVE and self.engine is None:
            return []
        return ["--checkpoint-engine", engine]
