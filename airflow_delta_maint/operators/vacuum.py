"""VACUUM as an Airflow task, and its check on the worker (lite mode) for nothing to delete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_delta_maint.operators.base import DeltaMaintenanceOperator
from airflow_delta_maint.operators.options import as_bool, job_options


class VacuumOperator(DeltaMaintenanceOperator):
    """
    Delete data files that no table version inside the retention window references (VACUUM).

    Returns the run's metrics (``numFilesDeleted``, ...).

    :param retention_hours: keep files needed by versions newer than this many hours (default: the
        table's ``delta.deletedFileRetentionDuration``, 168 hours). (templated)
    :param mode: ``full`` (list the table's files) or ``lite`` (use the log only). (templated)
    :param dry_run: list what would be deleted; delete nothing. (templated, as the attribute
        ``dry_run_only``)
    :param ignore_retention_check: allow a retention shorter than the table's own setting. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "vacuum"
    template_fields: Sequence[str] = (
        *DeltaMaintenanceOperator.template_fields, "retention_hours", "mode", "dry_run_only", "ignore_retention_check",
    )

    def __init__(
        self,
        *,
        retention_hours: float | str | None = None,
        mode: str | None = None,
        dry_run: bool = False,
        ignore_retention_check: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.retention_hours = retention_hours
        self.mode = mode
        self.dry_run_only = dry_run
        self.ignore_retention_check = ignore_retention_check

    def job_args(self) -> list[str]:
        return job_options({"retention_hours": self.retention_hours, "mode": self.mode,
                            "dry_run": as_bool(self.dry_run_only),
                            "ignore_retention_check": as_bool(self.ignore_retention_check)})
