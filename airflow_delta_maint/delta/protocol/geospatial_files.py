"""Geospatial columns in the data files of a table: which parquet leaves hold them and the logical type
each must carry (GEOMETRY or GEOGRAPHY with the column's CRS and edge algorithm, spelled out as
delta-spark writes them).

``set_geo_types`` gives a file this project wrote (pyarrow leaves the default CRS and algorithm out)
those logical types; ``geo_reference`` does the same to the reference footer of a row-group copy, so
that delta-spark's files match it and the copied output keeps their types.
"""

from __future__ import annotations

import os
from typing import Iterator

from airflow_delta_maint.delta.parquet.compact import encode
from airflow_delta_maint.delta.parquet.footer import Footer
from airflow_delta_maint.delta.parquet.geo_logical_types import GeoLogicalType, set_file_geo_types, with_geo_types
from airflow_delta_maint.delta.protocol.schema import (ArrayType, DataType, MapType, PrimitiveType, SchemaLike,
                                                       StructType, parse_schema)

__all__ = ["geo_reference", "has_geo_columns", "parquet_geo_types", "set_geo_types"]

_Path = tuple[str, ...]


def _walk(dtype: DataType, path: _Path) -> Iterator[tuple[_Path, GeoLogicalType]]:
    if isinstance(dtype, PrimitiveType):
        geo = dtype.geo
        if geo is not None:
            yield path, GeoLogicalType(geo.crs, geo.algorithm if geo.is_geography else None)
    elif isinstance(dtype, StructType):
        for f in dtype:
            yield from _walk(f.type, path + (f.physical_name,))
    elif isinstance(dtype, ArrayType):
        yield from _walk(dtype.element_type, path + ("list", "element"))
    elif isinstance(dtype, MapType):
        yield from _walk(dtype.key_type, path + ("key_value", "key"))
        yield from _walk(dtype.value_type, path + ("key_value", "value"))


def parquet_geo_types(schema: SchemaLike) -> dict[_Path, GeoLogicalType]:
    """The parquet leaf paths (physical names; lists as ``list.element``, maps as ``key_value.key`` /
    ``.value``) of the schema's geospatial columns, with the logical type each carries."""
    return dict(_walk(parse_schema(schema), ()))


def has_geo_columns(schema: SchemaLike) -> bool:
    """Whether the schema has a geometry or geography column, at any depth."""
    return bool(parquet_geo_types(schema))


def set_geo_types(path: str | os.PathLike[str], schema: SchemaLike) -> bool:
    """Give the geospatial leaves of the local parquet file ``path`` the table's logical types (its
    footer rewritten in place when they differ); whether the file changed."""
    types = parquet_geo_types(schema)
    return set_file_geo_types(path, types) if types else False


def geo_reference(reference: Footer, schema: SchemaLike) -> Footer:
    """``reference`` (a footer pyarrow wrote for the table's file schema) with the table's geospatial
    logical types (the same footer when it has them already)."""
    elements = with_geo_types(reference.schema, parquet_geo_types(schema))
    if elements is None:
        return reference
    metadata = reference.metadata.copy()
    metadata["schema"] = elements
    raw = encode(metadata)
    return Footer(metadata, len(raw), reference.file_size - reference.length + len(raw), raw)
