"""Whether a rewrite's new files hold the partition columns.

The protocol lets a data file hold its partition columns or not; readers take the values from the add
action's ``partitionValues``. They must where ``materializePartitionColumns`` or Iceberg compatibility asks
(:func:`~airflow_delta_maint.delta.protocol.iceberg_compat.materializes_partition_columns`). delta-spark 4.4
writes them into every partitioned table's files by default (``delta.writePartitionColumnsToParquet``), so a
rewrite writes them as the table's files do: then the row groups of such files copy byte for byte, where
outputs without the columns would need every input re-encoded.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.footer import ParquetFooterError
from airflow_delta_maint.delta.plans.optimize import OptimizePlan
from airflow_delta_maint.delta.protocol.iceberg_compat import materializes_partition_columns, partition_columns_of
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage

from .data_files import footer_source

__all__ = ["files_hold_partition_columns", "writes_partition_columns"]


def files_hold_partition_columns(storage: Storage, snapshot: Snapshot, add: dict) -> bool:
    """Whether the data file of ``add`` holds every partition column (by physical name), from its footer."""
    physical = set(partition_columns_of(snapshot.metadata))
    source = footer_source(storage, add)
    try:
        names = set(pq.read_schema(source).names)
    except (OSError, ValueError, ParquetFooterError):   # unreadable here: the rewrite reports it as it reads
        return False
    finally:
        if isinstance(source, RangeReader):
            source.close()
    return bool(physical) and physical <= names


def writes_partition_columns(storage: Storage, snapshot: Snapshot, plan: OptimizePlan) -> bool:
    """Whether the plan's new files hold the partition columns: where the table's features ask for them, or on a
    partitioned table whose files hold them (the first input of the plan is asked)."""
    if materializes_partition_columns(snapshot.protocol, snapshot.metadata):
        return True
    if not snapshot.metadata.partition_columns:
        return False
    first = next((b.files[0] for b in plan.bins if b.files), None)
    return first is not None and files_hold_partition_columns(storage, snapshot, first)
