"""A table's health report as an Airflow task (changes nothing)."""

from __future__ import annotations


from airflow_delta_maint.app.job_definitions.inspect import INSPECT
from airflow_delta_maint.operators.base import DeltaMaintenanceOperator


class InspectTableOperator(DeltaMaintenanceOperator):
    """
    Report a table's health (files, small files, tombstones, log state); changes nothing.

    :param version: inspect this version instead of the latest. (templated)
    :param small_file_bytes: files below this size count as small. (templated)
    :param files: also list the live files' paths in the metrics. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = INSPECT.name

