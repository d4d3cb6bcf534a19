"""A table's health report as an Airflow task (changes nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_delta_maint.operators.base import DeltaMaintenanceOperator
from airflow_delta_maint.operators.options import job_options


class InspectTableOperator(DeltaMaintenanceOperator):
    """
    Report a table's health (files, small files, tombstones, log state); changes nothing.

    :param version: inspect this version instead of the latest. (templated)
    :param small_file_bytes: files below this size count as small. (templated)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = "inspect"
    template_fields: Sequence[str] = (*DeltaMaintenanceOperator.template_fields, "version", "small_file_bytes")

    def __init__(
        self,
        *,
        version: int | str | None = None,
        small_file_bytes: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.version = version
        self.small_file_bytes = small_file_bytes

    def job_args(self) -> list[str]:
        return job_options({"version": self.version, "small_file_bytes": self.small_file_bytes})
