"""Delta table schemas: parse ``schemaString``, column mapping, Arrow schemas, partition values.

Types follow the protocol's "Schema Serialization Format"; physical names and field ids come from
the ``delta.columnMapping.*`` field metadata ("Column Mapping").
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Iterator, Mapping, Sequence, Union

import pyarrow as pa

from airflow_delta_maint.delta.errors import CorruptLogError, InvalidArgumentError, UnsupportedFeatureError
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.geospatial import GeoType, geo_type_of_arrow, parse_geo_type

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
NESTED_IDS_KEY = "delta.columnMapping.nested.ids"
MAPPING_MODE_KEY = "delta.columnMapping.mode"
PARQUET_FIELD_ID = b"PARQUET:field_id"

PRIMITIVE_NAMES = frozenset({
    "string", "long", "integer", "short", "byte", "float", "double", "boolean", "binary", "date",
    "timestamp", "timestamp_ntz", "variant",
})
_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_ARROW_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(),
    "byte": pa.int8(), "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(),
    "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_VARIANT_ARROW = pa.struct([pa.field("value", pa.binary(), nullable=False),
                            pa.field("metadata", pa.binary(), nullable=False)])


# -- types ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrimitiveType:
    """A primitive Delta type; ``name`` is its serialized form (``long``, ``decimal(10,2)``, ...)."""

    name: str

    @property
    def is_decimal(self) -> bool:
        return self.name.startswith("decimal")

    @property
    def precision_scale(self) -> tuple[int, int]:
        """(precision, scale) of a decimal type."""
        m = _DECIMAL_RE.match(self.name)
        if not m:
            raise InvalidArgumentError(f"not a decimal type: {self.name}")
        return int(m.group(1)), int(m.group(2))

    @property
    def geo(self) -> GeoType | None:
        """The geospatial type (``geometry(...)``, ``geography(...)``) this type is, or None."""
        return parse_geo_type(self.name) if self.name[:3].lower() == "geo" else None

    def to_json(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArrayType:
    element_type: "DataType"
    contains_null: bool = True

    def to_json(self) -> dict:
        return {"type": "array", "elementType": self.element_type.to_json(), "containsNull": self.contains_null}


@dataclass(frozen=True)
class MapType:
    key_type: "DataType"
    value_type: "DataType"
    value_contains_null: bool = True

    def to_json(self) -> dict:
        return {"type": "map", "keyType": self.key_type.to_json(), "valueType": self.value_type.to_json(),
                "valueContainsNull": self.value_contains_null}


@dataclass(frozen=True)
class StructField:
    """One field of a struct: logical name, type, nullability and its metadata."""

    name: str
    type: "DataType"
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def physical_name(self) -> str:
        """The column-mapping physical name, or the logical name when the field has none."""
        return str(self.metadata.get(PHYSICAL_NAME_KEY) or self.name)

    @property
    def field_id(self) -> int | None:
        """The column-mapping field id, or None."""
        fid = self.metadata.get(FIELD_ID_KEY)
        return int(fid) if fid is not None else None

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type.to_json(), "nullable": self.nullable,
                "metadata": dict(self.metadata)}


@dataclass(frozen=True)
class StructType:
    fields: tuple[StructField, ...] = ()

    def __iter__(self) -> Iterator[StructField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def field(self, name: str) -> StructField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def to_json(self) -> dict:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}


DataType = Union[PrimitiveType, ArrayType, MapType, StructType]
SchemaLike = Union[str, Mapping[str, Any], StructType, Metadata]


def _parse_type(t: Any) -> DataType:
    if isinstance(t, str):
        name = t.strip()
        if name in PRIMITIVE_NAMES:
            return PrimitiveType(name)
        m = _DECIMAL_RE.match(name)
        if m:
            return PrimitiveType(f"decimal({int(m.group(1))},{int(m.group(2))})")
        if name == "decimal":
            return PrimitiveType("decimal(10,0)")
        if parse_geo_type(name) is not None:  # kept as written: geometry(<crs>), geography(<crs>, <algorithm>)
            return PrimitiveType(name)
        raise UnsupportedFeatureError(f"unsupported Delta data type {name!r}")
    if isinstance(t, Mapping):
        kind = t.get("type")
        if kind == "struct":
            return StructType(tuple(_parse_field(f) for f in t.get("fields") or ()))
        if kind == "array":
            return ArrayType(_parse_type(t["elementType"]), bool(t.get("containsNull", True)))
        if kind == "map":
            return MapType(_parse_type(t["keyType"]), _parse_type(t["valueType"]),
                           bool(t.get("valueContainsNull", True)))
    raise CorruptLogError(f"invalid Delta schema type: {json.dumps(t)[:200]}")


def _parse_field(f: Mapping[str, Any]) -> StructField:
    try:
        return StructField(str(f["name"]), _parse_type(f["type"]), bool(f.get("nullable", True)),
                           dict(f.get("metadata") or {}))
    except KeyError as exc:
        raise CorruptLogError(f"schema field lacks {exc}: {json.dumps(f)[:200]}") from None


def parse_schema(schema: SchemaLike) -> StructType:
    """Parse a Delta ``schemaString`` (JSON text or decoded dict, or a Metadata) into a StructType."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, Metadata):
        schema = schema.schema_string or '{"type":"struct","fields":[]}'
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise CorruptLogError(f"schemaString is not valid JSON: {exc}") from None
    parsed = _parse_type(schema)
    if not isinstance(parsed, StructType):
        raise CorruptLogError("schemaString is not a struct type")
    return parsed


# -- column mapping -----------------------------------------------------------------------------
def column_mapping_mode(configuration: Mapping[str, str] | Metadata | None) -> str:
    """The table's column mapping mode: ``"none"``, ``"id"`` or ``"name"``."""
    if isinstance(configuration, Metadata):
        configuration = configuration.configuration
    mode = ((configuration or {}).get(MAPPING_MODE_KEY) or "none").strip().lower()
    if mode not in ("none", "id", "name"):
        raise UnsupportedFeatureError(f"unsupported column mapping mode {mode!r}")
    return mode


def _has_mapping(schema: StructType) -> bool:
    for f in schema:
        if FIELD_ID_KEY in f.metadata or PHYSICAL_NAME_KEY in f.metadata:
            return True
    return False


# -- arrow ---------------------------------------------------------------------------------------
def _arrow_field(name: str, dtype: DataType, nullable: bool, field_id: int | None, physical: bool,
                 with_ids: bool, nested_ids: Mapping[str, Any], nested_path: str) -> pa.Field:
    meta = {PARQUET_FIELD_ID: str(field_id).encode()} if with_ids and field_id is not None else None
    return pa.field(name, _arrow_type(dtype, physical, with_ids, nested_ids, nested_path), nullable=nullable,
                    metadata=meta)


def _arrow_type(dtype: DataType, physical: bool, with_ids: bool, nested_ids: Mapping[str, Any],
                nested_path: str) -> pa.DataType:
    if isinstance(dtype, PrimitiveType):
        if dtype.is_decimal:
            p, s = dtype.precision_scale
            return pa.decimal128(p, s)
        if dtype.name == "variant":
            return _VARIANT_ARROW
        geo = dtype.geo
        if geo is not None:
            return geo.arrow_type()
        return _ARROW_PRIMITIVES[dtype.name]
    if isinstance(dtype, StructType):
        return pa.struct([_struct_child(f, physical, with_ids) for f in dtype])
    if isinstance(dtype, ArrayType):
        path = f"{nested_path}.element"
        return pa.list_(_arrow_field("element", dtype.element_type, dtype.contains_null,
                                     _nested_id(nested_ids, path), physical, with_ids, nested_ids, path))
    if isinstance(dtype, MapType):
        kp, vp = f"{nested_path}.key", f"{nested_path}.value"
        key = _arrow_field("key", dtype.key_type, False, _nested_id(nested_ids, kp), physical, with_ids,
                           nested_ids, kp)
        value = _arrow_field("value", dtype.value_type, dtype.value_contains_null, _nested_id(nested_ids, vp),
                             physical, with_ids, nested_ids, vp)
        return pa.map_(key, value)
    raise UnsupportedFeatureError(f"unsupported Delta data type {dtype!r}")


def _nested_id(nested_ids: Mapping[str, Any], path: str) -> int | None:
    v = nested_ids.get(path)
    return int(v) if v is not None else None


def _struct_child(f: StructField, physical: bool, with_ids: bool) -> pa.Field:
    name = f.physical_name if physical else f.name
    nested = f.metadata.get(NESTED_IDS_KEY) or {}
    return _arrow_field(name, f.type, f.nullable, f.field_id, physical, with_ids, nested, f.physical_name)


def to_arrow_schema(schema: SchemaLike, physical: bool = True, exclude: Sequence[str] | None = None,
                    mode: str | None = None) -> pa.Schema:
    """The Arrow schema of a Delta schema.

    Args:
        schema: a Metadata, a ``schemaString`` (text or dict) or a parsed StructType.
        physical: name fields by their column-mapping physical names (as in data files).
        exclude: top-level logical column names to leave out; defaults to the partition columns
            when ``schema`` is a Metadata, else nothing.
        mode: column mapping mode; defaults to the Metadata's, or to ``"name"`` when the schema
            carries column mapping metadata. With ``id`` or ``name`` every field carries its
            field id as ``PARQUET:field_id`` metadata.

    Returns:
        The Arrow schema; timestamps are microseconds (UTC for ``timestamp``), decimals decimal128.
    """
    parsed = parse_schema(schema)
    if exclude is None:
        exclude = list(schema.partition_columns) if isinstance(schema, Metadata) else []
    if mode is None:
        mode = column_mapping_mode(schema) if isinstance(schema, Metadata) else (
            "name" if _has_mapping(parsed) else "none")
    with_ids = mode in ("id", "name")
    skip = {c.lower() for c in exclude}
    return pa.schema([_struct_child(f, physical, with_ids) for f in parsed if f.name.lower() not in skip])


def from_arrow_type(t: pa.DataType) -> DataType:
    """The Delta type of an Arrow type (the inverse of the mapping ``to_arrow_schema`` uses)."""
    geo = geo_type_of_arrow(t)
    if geo is not None:
        return PrimitiveType(geo.type_name)
    if pa.types.is_struct(t):
        if t == _VARIANT_ARROW:
            return PrimitiveType("variant")
        return StructType(tuple(StructField(t.field(i).name, from_arrow_type(t.field(i).type), t.field(i).nullable)
                                for i in range(t.num_fields)))
    if pa.types.is_map(t):
        return MapType(from_arrow_type(t.key_type), from_arrow_type(t.item_type), t.item_field.nullable)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ArrayType(from_arrow_type(t.value_type), t.value_field.nullable)
    if pa.types.is_decimal(t):
        return PrimitiveType(f"decimal({t.precision},{t.scale})")
    if pa.types.is_timestamp(t):
        return PrimitiveType("timestamp" if t.tz is not None else "timestamp_ntz")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return PrimitiveType("string")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return PrimitiveType("binary")
    if pa.types.is_date(t):
        return PrimitiveType("date")
    for name, at in _ARROW_PRIMITIVES.items():
        if t == at:
            return PrimitiveType(name)
    raise InvalidArgumentError(f"no Delta type for Arrow type {t}")


def from_arrow_schema(schema: pa.Schema) -> StructType:
    """The Delta StructType of an Arrow schema (field metadata is not carried over)."""
    return StructType(tuple(StructField(f.name, from_arrow_type(f.type), f.nullable) for f in schema))


# -- leaf columns and name resolution -------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column of the schema: its logical and physical paths (tuples of names) and its field."""

    logical_path: tuple[str, ...]
    physical_path: tuple[str, ...]
    field: StructField

    @property
    def type(self) -> DataType:
        return self.field.type

    @property
    def name(self) -> str:
        """The logical path in dotted form, back-quoting parts that need it."""
        return format_column_name(self.logical_path)

    @property
    def physical_name(self) -> str:
        return format_column_name(self.physical_path)


def format_column_name(path: Sequence[str]) -> str:
    """Dotted form of a column path; parts with dots, back-quotes or spaces are back-quoted."""
    return ".".join(p if re.fullmatch(r"[A-Za-z0-9_]+", p) else "`" + p.replace("`", "``") + "`" for p in path)


def _walk(schema: StructType, lp: tuple[str, ...], pp: tuple[str, ...], leaves_only: bool) -> Iterator[Column]:
    for f in schema:
        col = Column(lp + (f.name,), pp + (f.physical_name,), f)
        if isinstance(f.type, StructType):
            if not leaves_only:
                yield col
            yield from _walk(f.type, col.logical_path, col.physical_path, leaves_only)
        else:
            yield col


def all_columns(schema: SchemaLike) -> list[Column]:
    """Every column in schema order, structs and their fields alike (partition columns included)."""
    return list(_walk(parse_schema(schema), (), (), False))


def leaf_columns(schema: SchemaLike, exclude: Sequence[str] | None = None) -> list[Column]:
    """Every non-struct column in schema order (structs are descended into, arrays and maps are leaves).

    ``exclude`` lists top-level logical names to leave out; it defaults to the partition columns
    when ``schema`` is a Metadata.
    """
    parsed = parse_schema(schema)
    if exclude is None:
        exclude = list(schema.partition_columns) if isinstance(schema, Metadata) else []
    skip = {c.lower() for c in exclude}
    return [c for c in _walk(parsed, (), (), True) if c.logical_path[0].lower() not in skip]


def split_column_name(name: str) -> list[str]:
    """Split a dotted column name into parts; back-quoted parts may contain dots (`` `` `` escapes a quote)."""
    parts: list[str] = []
    cur: list[str] = []
    i, quoted, was_quoted = 0, False, False
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == "`":
                if i + 1 < len(name) and name[i + 1] == "`":
                    cur.append("`")
                    i += 1
                else:
                    quoted = False
            else:
                cur.append(ch)
        elif ch == "`":
            quoted, was_quoted = True, True
        elif ch == ".":
            part = "".join(cur)
            parts.append(part if was_quoted else part.strip())
            cur, was_quoted = [], False
        else:
            cur.append(ch)
        i += 1
    if quoted:
        raise InvalidArgumentError(f"unbalanced back-quote in column name {name!r}")
    part = "".join(cur)
    parts.append(part if was_quoted else part.strip())
    if any(p == "" for p in parts):
        raise InvalidArgumentError(f"invalid column name {name!r}")
    return parts


def split_column_list(text: str) -> list[list[str]]:
    """Split a comma-separated list of (dotted, possibly back-quoted) column names into name paths."""
    items: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        if ch == "," and not quoted:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [split_column_name(i.strip()) for i in items if i.strip()]


def resolve_column(schema: SchemaLike, name: str | Sequence[str]) -> Column:
    """Resolve a user-given logical column name (dotted for nested fields) to a column.

    Exact matches win; otherwise names match case-insensitively when that is unambiguous.

    Raises:
        InvalidArgumentError: naming the column when it is not in the schema.
    """
    parsed = parse_schema(schema)
    parts = split_column_name(name) if isinstance(name, str) else list(name)
    shown = name if isinstance(name, str) else format_column_name(parts)
    current: DataType = parsed
    lp: list[str] = []
    pp: list[str] = []
    found: StructField | None = None
    for i, part in enumerate(parts):
        if not isinstance(current, StructType):
            raise InvalidArgumentError(
                f"column {shown!r} not found: {format_column_name(lp)} is not a struct")
        match = [f for f in current if f.name == part]
        if not match:
            match = [f for f in current if f.name.lower() == part.lower()]
        if len(match) != 1:
            known = ", ".join(c.name for c in _walk(parsed, (), (), False))
            why = "is ambiguous" if match else "not found"
            raise InvalidArgumentError(f"column {shown!r} {why} in the table schema (columns: {known})")
        found = match[0]
        lp.append(found.name)
        pp.append(found.physical_name)
        current = found.type
    if found is None:
        raise InvalidArgumentError("empty column name")
    return Column(tuple(lp), tuple(pp), found)


# -- partition values ----------------------------------------------------------------------------
_TS_RE = re.compile(r"^(\d{4,})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?"
                    r"\s*(Z|[+-]\d{2}:?\d{2})?$")


def _parse_timestamp(value: str, ntz: bool) -> dt.datetime:
    m = _TS_RE.match(value.strip())
    if not m:
        raise InvalidArgumentError(f"invalid timestamp partition value {value!r}")
    y, mo, d, h, mi = (int(m.group(i)) for i in range(1, 6))
    s = int(m.group(6) or 0)
    frac = (m.group(7) or "").ljust(6, "0")[:6]
    out = dt.datetime(y, mo, d, h, mi, s, int(frac))
    zone = m.group(8)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        out -= sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return out if ntz else out.replace(tzinfo=dt.timezone.utc)


def parse_partition_value(value: str | None, delta_type: DataType | str) -> Any:
    """A partition value (as serialized in ``partitionValues``) as a Python value.

    Per the protocol's "Partition Value Serialization": null and the empty string are None;
    ``timestamp`` becomes a UTC-aware datetime, ``timestamp_ntz`` a naive one, ``date`` a date,
    ``decimal`` a Decimal, ``binary`` bytes.
    """
    dtype = _parse_type(delta_type) if isinstance(delta_type, str) else delta_type
    if value is None:
        return None
    if not isinstance(dtype, PrimitiveType):
        raise InvalidArgumentError(f"partition columns must have a primitive type, not {dtype!r}")
    name = dtype.name
    if value == "":
        return None
    try:
        if name == "string":
            return value
        if name in ("long", "integer", "short", "byte"):
            return int(value)
        if name in ("float", "double"):
            return float(value)
        if name == "boolean":
            low = value.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(value)
            return low == "true"
        if name == "date":
            y, m, d = value.strip().split("-")
            return dt.date(int(y), int(m), int(d))
        if name in ("timestamp", "timestamp_ntz"):
            return _parse_timestamp(value, name == "timestamp_ntz")
        if dtype.is_decimal:
            return Decimal(value)
        if name == "binary":
            return bytes(ord(c) for c in value) if all(ord(c) < 256 for c in value) else value.encode()
    except (ValueError, InvalidOperation):
        raise InvalidArgumentError(f"invalid {name} partition value {value!r}") from None
    raise InvalidArgumentError(f"unsupported partition column type {name}")


__all__ = [
    "ArrayType", "Column", "DataType", "MapType", "PrimitiveType", "StructField", "StructType",
    "all_columns", "column_mapping_mode", "format_column_name", "from_arrow_schema", "from_arrow_type", "leaf_columns",
    "parse_partition_value", "parse_schema", "resolve_column", "split_column_list", "split_column_name",
    "to_arrow_schema",
]
