"""Arrow schemas of the Delta actions the core keeps in tables, and small typed views."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from airflow_delta_maint.delta.protocol.table_properties import TableProperties

STR_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR = pa.struct([
    ("storageType", pa.string()),
    ("pathOrInlineDv", pa.string()),
    ("offset", pa.int32()),
    ("sizeInBytes", pa.int32()),
    ("cardinality", pa.int64()),
    ("maxRowIndex", pa.int64()),
])

ADD = pa.struct([
    ("path", pa.string()),
    ("partitionValues", STR_MAP),
    ("size", pa.int64()),
    ("modificationTime", pa.int64()),
    ("dataChange", pa.bool_()),
    ("stats", pa.string()),
    ("tags", STR_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("clusteringProvider", pa.string()),
])

REMOVE = pa.struct([
    ("path", pa.string()),
    ("deletionTimestamp", pa.int64()),
    ("dataChange", pa.bool_()),
    ("extendedFileMetadata", pa.bool_()),
    ("partitionValues", STR_MAP),
    ("size", pa.int64()),
    ("stats", pa.string()),
    ("tags", STR_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
])

ADD_SCHEMA = pa.schema(list(ADD))
REMOVE_SCHEMA = pa.schema(list(REMOVE))


def dv_unique_id(dv: dict | None) -> str:
    """The protocol's unique id of a deletion vector ('' for none): type + path/inline data + @offset."""
    if not dv:
        return ""
    uid = f"{dv.get('storageType', '')}{dv.get('pathOrInlineDv', '')}"
    if dv.get("offset") is not None:
        uid += f"@{dv['offset']}"
    return uid


def file_key(action: dict) -> tuple[str, str]:
    """Reconciliation key of an add or remove: (path, deletion vector unique id)."""
    return action["path"], dv_unique_id(action.get("deletionVector"))


def conform(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """Cast a (struct) array to ``target``: missing fields become nulls, extra fields are dropped."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.type == target:
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        children, names = [], []
        present = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        for f in target:
            names.append(f.name)
            if f.name in present:
                children.append(conform(arr.field(present[f.name]), f.type))
            else:
                children.append(pa.nulls(len(arr), f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=arr.is_null())
    if pa.types.is_map(target) and pa.types.is_map(arr.type):
        return arr.cast(target)
    return arr.cast(target)


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] = ()
    writer_features: tuple[str, ...] = ()
    raw: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_action(cls, p: dict) -> "Protocol":
        return cls(int(p["minReaderVersion"]), int(p["minWriterVersion"]),
                   tuple(p.get("readerFeatures") or ()), tuple(p.get("writerFeatures") or ()), dict(p))

    def to_action(self) -> dict:
        out: dict[str, Any] = {"minReaderVersion": self.min_reader_version,
                               "minWriterVersion": self.min_writer_version}
        if self.min_reader_version >= 3:
            out["readerFeatures"] = list(self.reader_features)
        if self.min_writer_version >= 7:
            out["writerFeatures"] = list(self.writer_features)
        return out


@dataclass(frozen=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    name: str | None = None
    description: str | None = None
    created_time: int | None = None
    format_provider: str = "parquet"
    raw: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_action(cls, m: dict) -> "Metadata":
        fmt = m.get("format") or {}
        return cls(
            id=m.get("id") or "",
            schema_string=m.get("schemaString") or "",
            partition_columns=tuple(m.get("partitionColumns") or ()),
            configuration={k: v for k, v in (m.get("configuration") or {}).items() if v is not None},
            name=m.get("name"), description=m.get("description"), created_time=m.get("createdTime"),
            format_provider=fmt.get("provider") or "parquet", raw=dict(m))

    @cached_property
    def properties(self) -> TableProperties:
        """The table's properties, typed (each parsed once, when first read)."""
        return TableProperties(self.configuration)

    @property
    def schema(self) -> dict:
        return json.loads(self.schema_string) if self.schema_string else {"type": "struct", "fields": []}

    def to_action(self) -> dict:
        return dict(self.raw)
