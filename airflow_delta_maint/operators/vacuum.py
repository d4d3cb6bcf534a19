"""VACUUM as an Airflow task, and its check on the worker (lite mode) for nothing to delete."""

from __future__ import annotations


from airflow_delta_maint.app.job_definitions.vacuum import VACUUM
from airflow_delta_maint.operators.base import DeltaMaintenanceOperator


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
    :param keep_versions: also keep every file these versions read (``"12,40"``), so time travel to them keeps
        working. (templated)
    :param inventory: read the files under the table from this inventory (parquet, CSV or Delta; columns path,
        length, isDir, modificationTime) instead of listing them (full mode). (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = VACUUM.name

