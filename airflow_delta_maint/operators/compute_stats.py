"""compute-stats as an Airflow task: live files get the statistics readers skip files by, without a
rewrite; its check on the worker skips Spark when every file already has them."""

from __future__ import annotations


from airflow_delta_maint.app.job_definitions.compute_stats import COMPUTE_STATS
from airflow_delta_maint.operators.base import DeltaMaintenanceOperator


class ComputeStatsOperator(DeltaMaintenanceOperator):
    """
    Give live files without statistics, or whose statistics leave out a column the table now covers,
    their statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``), computed from
    their parquet footers (their data where a footer cannot prove a value) and committed without
    rewriting any file (``COMPUTE STATS``, ``dataChange=false``).

    Returns the run's metrics (``numFilesWithoutStats``, ``numFilesMissingColumns``,
    ``numFilesUpdated``, ...). Skips Spark when no live file needs statistics.

    :param where: partition predicate: only files of matching partitions, e.g.
        ``"date >= '2024-01-01'"``. (templated)
    :param columns: also collect statistics of these columns (a list, or comma-separated names, dotted
        for nested fields), beyond ``delta.dataSkippingStatsColumns`` /
        ``delta.dataSkippingNumIndexedCols``. (templated)
    :param max_files: give at most this many files statistics per run. (templated)
    :param dry_run: report the files that need statistics; compute and commit nothing. (templated, as
        the attribute ``dry_run_only``)

    Other parameters: see :class:`DeltaMaintenanceOperator`.
    """

    job = COMPUTE_STATS.name

