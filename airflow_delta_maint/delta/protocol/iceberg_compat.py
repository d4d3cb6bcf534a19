"""What a data file this core writes must hold for Iceberg compatibility and materialized partition columns.

- Partition columns are written into every new data file, after the data columns (and the
  materialized row-tracking columns), when the table supports ``materializePartitionColumns`` or has
  Iceberg compatibility (V1 to V3) enabled. Their values come from the add action's
  ``partitionValues``, typed as the protocol's partition value serialization says (an empty or
  missing value is null); under column mapping they take the column's physical name and field id.
- Under Iceberg compatibility V2 and V3 every parquet field carries a field id (column mapping
  gives them: ``delta.columnMapping.id`` and the list/map ids of ``delta.columnMapping.nested.ids``),
  timestamps are INT64 microseconds, and every add action has ``numRecords`` and the tag
  ``ICEBERG_COMPAT_VERSION`` (the files a ``REORG ... UPGRADE UNIFORM`` would otherwise rewrite).
- Under V3 the materialized Row ID and Row Commit Version columns carry Iceberg's reserved field ids
  of ``_row_id`` and ``_last_updated_sequence_number``.
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from airflow_delta_maint.delta.protocol.actions import Metadata, Protocol
from airflow_delta_maint.delta.protocol.schema import PARQUET_FIELD_ID, parse_partition_value, parse_schema, to_arrow_schema

__all__ = [
    "ICEBERG_COMPAT_TAG", "ICEBERG_ROW_ID_FIELD_ID", "ICEBERG_ROW_VERSION_FIELD_ID", "iceberg_compat_version",
    "materializes_partition_columns", "new_file_tags", "partition_arrays", "partition_columns_of", "partition_fields",
    "with_field_id",
]

#: the add action tag that names the Iceberg compatibility version a data file was written for
ICEBERG_COMPAT_TAG = "ICEBERG_COMPAT_VERSION"
#: Iceberg's reserved field ids of ``_row_id`` and ``_last_updated_sequence_number`` (the materialized
#: row-tracking columns' ids under Iceberg compatibility V3)
ICEBERG_ROW_ID_FIELD_ID = 2147483540
ICEBERG_ROW_VERSION_FIELD_ID = 2147483539
_PROPERTIES = {3: "delta.enableIcebergCompatV3", 2: "delta.enableIcebergCompatV2", 1: "delta.enableIcebergCompatV1"}


def iceberg_compat_version(metadata: Metadata) -> int | None:
    """The Iceberg compatibility version the table has enabled (``delta.enableIcebergCompatV<n>=true``), or None."""
    configuration = metadata.configuration
    for version, key in _PROPERTIES.items():
        if str(configuration.get(key, "false")).strip().lower() == "true":
            return version
    return None


def materializes_partition_columns(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether new data files must hold the partition columns: a partitioned table that supports
    ``materializePartitionColumns`` or has Iceberg compatibility enabled."""
    if not metadata.partition_columns:
        return False
    features = set(protocol.writer_features or ()) if protocol.min_writer_version >= 7 else set()
    return "materializePartitionColumns" in features or iceberg_compat_version(metadata) is not None


def new_file_tags(metadata: Metadata) -> dict[str, str]:
    """The tags of a data file this core writes: ``ICEBERG_COMPAT_VERSION`` from Iceberg compatibility V2 on."""
    version = iceberg_compat_version(metadata)
    return {ICEBERG_COMPAT_TAG: str(version)} if version is not None and version >= 2 else {}


def partition_fields(metadata: Metadata) -> list[pa.Field]:
    """The partition columns as parquet fields, in ``partitionColumns`` order: physical names, field
    ids under column mapping, nullable."""
    partitions = [c.lower() for c in metadata.partition_columns]
    others = [f.name for f in parse_schema(metadata.schema_string) if f.name.lower() not in partitions]
    fields = {f.name: f.with_nullable(True) for f in to_arrow_schema(metadata, physical=True, exclude=others)}
    logical = {f.name.lower(): f.physical_name for f in parse_schema(metadata.schema_string)}
    return [fields[logical[c]] for c in partitions]


def partition_columns_of(metadata: Metadata) -> dict[str, tuple[str, object]]:
    """Each partition column's physical name -> (its logical name, its Delta type)."""
    partitions = {c.lower() for c in metadata.partition_columns}
    return {f.physical_name: (f.name, f.type) for f in parse_schema(metadata.schema_string)
            if f.name.lower() in partitions}


def partition_arrays(metadata: Metadata, fields: list[pa.Field], partition_values: Mapping[str, str | None],
                     num_rows: int) -> list[pa.Array]:
    """One constant array per field of :func:`partition_fields` holding the file's partition values.

    ``partition_values`` is keyed as the add action's (physical names under column mapping; logical
    names are accepted too)."""
    columns = partition_columns_of(metadata)
    lowered = {k.lower(): v for k, v in partition_values.items()}
    out = []
    for f in fields:
        logical, dtype = columns[f.name]
        raw = partition_values.get(f.name, lowered.get(f.name.lower(), lowered.get(logical.lower())))
        value = parse_partition_value(raw, dtype)  # type: ignore[arg-type]
        out.append(pa.repeat(pa.scalar(value, f.type), num_rows))
    return out


def with_field_id(field: pa.Field, field_id: int) -> pa.Field:
    """``field`` carrying ``field_id`` as its parquet field id."""
    return field.with_metadata({**(field.metadata or {}), PARQUET_FIELD_ID: str(field_id).encode()})
