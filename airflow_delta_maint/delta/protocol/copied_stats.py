"""Delta statistics (``add.stats``) of a file made by copying row groups (``delta/parquet``),
merged from the inputs' footers with ``stats.py``'s own rules, so they equal what a rewrite of the
same rows by our writer gives.

Bounds the footers cannot prove (no statistics, inexact or possibly truncated byte-array bounds,
float bounds of writers that leave NaN out, lone deprecated byte-array bounds, INT96 timestamps)
are listed by ``copied_columns_needing_data``: read those columns from the output and pass them to
``copied_file_stats``, or let ``copied_file_stats_reading`` do it.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.parquet.bounds_view import delta_bounds_view
from airflow_delta_maint.delta.parquet.footer import Source
from airflow_delta_maint.delta.parquet.row_group_copy import CopyResult
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.stats import StatsCollector, columns_needing_data, file_stats

__all__ = ["copied_columns_needing_data", "copied_file_stats", "copied_file_stats_gathered", "copied_file_stats_reading"]


def copied_columns_needing_data(result: CopyResult, metadata: Metadata,
                                required: Sequence[Sequence[str]] = ()) -> list[str]:
    """Top-level physical columns whose statistics the inputs' footers cannot prove."""
    return columns_needing_data(delta_bounds_view(result), metadata, required)


def copied_file_stats(result: CopyResult, metadata: Metadata, table: pa.Table | None = None,
                      tight_bounds: bool | None = None) -> dict:
    """The copied file's statistics; ``table`` holds the output's columns that
    ``copied_columns_needing_data`` names (without it, what they lack is left out)."""
    return file_stats(delta_bounds_view(result), metadata, table=table, tight_bounds=tight_bounds)


def copied_file_stats_reading(result: CopyResult, metadata: Metadata, output: Source,
                              tight_bounds: bool | None = None) -> dict:
    """The copied file's statistics, reading from ``output`` (the copied file) only the columns the
    footers cannot prove."""
    view = delta_bounds_view(result)
    need = columns_needing_data(view, metadata)
    table = None
    if need:
        table = pq.ParquetFile(output, coerce_int96_timestamp_unit="us").read(columns=need, use_threads=False)
    return file_stats(view, metadata, table=table, tight_bounds=tight_bounds)


def copied_file_stats_gathered(result: CopyResult, collector: StatsCollector, output: Source,
                               tight_bounds: bool | None = None) -> dict:
    """The copied file's statistics, the float and double values taken from ``collector`` (every row of
    the file given to its ``update``: the tables re-encoded into it, the watched columns of each copied
    input), and only the columns the footers and the collector cannot prove read from ``output``."""
    def read(need: list[str]) -> pa.Table:
        return pq.ParquetFile(output, coerce_int96_timestamp_unit="us").read(columns=need, use_threads=False)

    return collector.footer_stats(delta_bounds_view(result), read, tight_bounds)
