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

    def nothing_to_do(self, params: dict[str, Any]) -> str | None:
        """
        Lite mode: a reason when no commit left the retention window since the last VACUUM's
        watermark, or when the commits that did removed no expired file that is no longer needed
        and the watermark would not move. Full mode: always None, since only a listing of the
        table (a Spark job) can prove it has no orphan files. Bad input (an unsupported table, a
        bad mode or retention, lite mode on a log whose early commits were cleaned up) raises.
        """
        from airflow_delta_maint.delta.plans.vacuum import lite_check

        plan, found = lite_check(self.table_uri, self.worker_storage_options, params,
                                 params.get("mode") or "full")
        if plan.lite is None:
            return None
        if plan.lite.empty:
            return (f"no commit left the retention window since the last VACUUM (watermark "
                    f"{plan.lite.watermark}, newest commit outside the window {plan.latest_outside})")
        assert found is not None
        if found.files or found.watermark != plan.lite.watermark:
            return None  # files to delete, or a watermark to advance (else the log range to read grows)
        return (f"commits {plan.lite.start} to {plan.lite.end} removed no file that has expired and is no "
                f"longer needed, and the watermark stays at {plan.lite.watermark}")
