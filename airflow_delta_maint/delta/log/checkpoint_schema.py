"""The schemas a checkpoint is written with, in one place, and the helpers that fill them.

One action per row, every other column null (protocol, "Checkpoints"). Every field is nullable.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from airflow_delta_maint.delta.protocol.actions import ADD, REMOVE, STR_MAP

__all__ = ["ADD_CHECKPOINT", "CHECKPOINT_METADATA", "CHECKPOINT_SCHEMA_V1", "CHECKPOINT_SCHEMA_V2", "DOMAIN", "METADATA",
           "PROTOCOL", "REMOVE_CHECKPOINT", "SIDECAR", "TXN", "action_rows", "json_value", "struct_column"]


TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])


ADD_CHECKPOINT = ADD


REMOVE_CHECKPOINT = pa.struct([f for f in REMOVE if f.name not in ("stats", "tags")])


METADATA = pa.struct([
    ("id", pa.string()),
    ("name", pa.string()),
    ("description", pa.string()),
    ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
    ("schemaString", pa.string()),
    ("partitionColumns", pa.list_(pa.string())),
    ("createdTime", pa.int64()),
    ("configuration", STR_MAP),
])


PROTOCOL = pa.struct([
    ("minReaderVersion", pa.int32()),
    ("minWriterVersion", pa.int32()),
    ("readerFeatures", pa.list_(pa.string())),
    ("writerFeatures", pa.list_(pa.string())),
])


DOMAIN = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])


CHECKPOINT_METADATA = pa.struct([("version", pa.int64()), ("tags", STR_MAP)])


SIDECAR = pa.struct([
    ("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", STR_MAP),
])


CHECKPOINT_SCHEMA_V1 = pa.schema([
    ("txn", TXN), ("add", ADD_CHECKPOINT), ("remove", REMOVE_CHECKPOINT), ("metaData", METADATA),
    ("protocol", PROTOCOL), ("domainMetadata", DOMAIN),
])
"""Columns of a V1-spec checkpoint."""


CHECKPOINT_SCHEMA_V2 = pa.schema(list(CHECKPOINT_SCHEMA_V1) + [
    ("checkpointMetadata", CHECKPOINT_METADATA), ("sidecar", SIDECAR),
])
"""Columns of a V2-spec checkpoint (adds ``checkpointMetadata`` and ``sidecar``)."""


def struct_column(table: pa.Table, target: pa.StructType, overrides: dict[str, pa.Array]) -> pa.Array:
    """A non-null struct array of ``target`` from a table's same-named columns (missing: null)."""
    n = table.num_rows
    children = []
    for f in target:
        if f.name in overrides:
            arr = overrides[f.name]
        elif f.name in table.column_names:
            arr = table.column(f.name)
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
            if arr.type != f.type:
                arr = arr.cast(f.type)
        else:
            arr = pa.nulls(n, f.type)
        children.append(arr)
    return pa.StructArray.from_arrays(children, fields=list(target))


def action_rows(schema: pa.Schema, column: str, values: pa.Array) -> pa.Table:
    """A table of ``schema`` whose ``column`` holds ``values`` and whose other columns are null."""
    n = len(values)
    return pa.table([values if f.name == column else pa.nulls(n, f.type) for f in schema], schema=schema)


def json_value(v: Any) -> Any:
    """A value read from typed statistics as JSON statistics hold it (timestamps as ISO text)."""
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items() if x is not None}
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            return v.isoformat(timespec="milliseconds") + "Z"
        return v.isoformat(timespec="milliseconds")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v) if v != v.to_integral_value() else int(v)
    if isinstance(v, bytes):
        return None
    return v
