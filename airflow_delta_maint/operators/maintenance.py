"""Operators that run the Delta maintenance jobs (OPTIMIZE, VACUUM, log compaction, statistics) with spark-submit.

The public import path of the maintenance operators. Each lives in a module of its own: the
common base in :mod:`~airflow_delta_maint.operators.base`, the command-line options in
:mod:`~airflow_delta_maint.operators.options`, and one module per job.
"""

from __future__ import annotations

from airflow_delta_maint.operators.base import DeltaMaintenanceOperator
from airflow_delta_maint.operators.compute_stats import ComputeStatsOperator
from airflow_delta_maint.operators.inspect_table import InspectTableOperator
from airflow_delta_maint.operators.log_compaction import LogCompactionOperator
from airflow_delta_maint.operators.optimize import OptimizeOperator
from airflow_delta_maint.operators.options import available_jobs
from airflow_delta_maint.operators.vacuum import VacuumOperator

__all__ = [
    "DeltaMaintenanceOperator", "OptimizeOperator", "VacuumOperator", "LogCompactionOperator",
    "InspectTableOperator", "ComputeStatsOperator", "available_jobs",
]
