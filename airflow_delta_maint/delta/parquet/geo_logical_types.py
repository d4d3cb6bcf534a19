"""The GEOMETRY and GEOGRAPHY logical types of a footer's schema, set to what a table wants.

pyarrow writes a ``geoarrow.wkb`` column as GEOMETRY or GEOGRAPHY, but leaves out a CRS that means
longitude/latitude (``OGC:CRS84``, ``EPSG:4326``) and a geography's default algorithm, which the
parquet specification lets it do. Other writers (delta-spark) spell both out. ``with_geo_types`` sets
each geospatial leaf's logical type to the one given, so that files this project writes carry the
table's CRS and algorithm exactly and keep matching other writers' files for row-group copies;
``set_file_geo_types`` does that to a written file's footer, in place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Mapping

from airflow_delta_maint.delta.parquet.compact import Struct
from airflow_delta_maint.delta.parquet.footer import file_bytes, read_footer
from airflow_delta_maint.delta.parquet.format import LOGICAL_TYPE

__all__ = ["GEO_LOGICAL_TYPES", "GeoLogicalType", "adopt_geo_types", "element_paths", "set_file_geo_types",
           "with_geo_types"]

GEO_LOGICAL_TYPES = ("GEOMETRY", "GEOGRAPHY")
#: parquet's EdgeInterpolationAlgorithm, by value
_ALGORITHMS = ("spherical", "vincenty", "thomas", "andoyer", "karney")
_BYTE_ARRAY = 6


@dataclass(frozen=True)
class GeoLogicalType:
    """A GEOMETRY (``algorithm`` None) or GEOGRAPHY logical type with its CRS and edge algorithm."""

    crs: str
    algorithm: str | None = None

    def logical_type(self) -> Struct:
        """The LogicalType struct of a footer's schema element."""
        out = Struct(LOGICAL_TYPE)
        if self.algorithm is None:
            out["GEOMETRY"] = Struct(LOGICAL_TYPE.fields[17].kind)  # type: ignore[arg-type]
            out["GEOMETRY"]["crs"] = self.crs
        else:
            out["GEOGRAPHY"] = Struct(LOGICAL_TYPE.fields[18].kind)  # type: ignore[arg-type]
            out["GEOGRAPHY"]["crs"] = self.crs
            out["GEOGRAPHY"]["algorithm"] = _ALGORITHMS.index(self.algorithm.lower())
        return out


def _geo_kind(element: Struct) -> str | None:
    logical = element.get("logicalType")
    if logical is None:
        return None
    return next((k for k in GEO_LOGICAL_TYPES if logical.get(k) is not None), None)


def element_paths(schema: list[Struct]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Each element of a footer's schema (root aside) with its path of names from the root."""
    stack: list[tuple[tuple[str, ...], int]] = [((), int(schema[0].get("num_children") or 0))] if schema else []
    for i in range(1, len(schema)):
        while stack and stack[-1][1] == 0:
            stack.pop()
        if not stack:
            return
        parent, left = stack[-1]
        stack[-1] = (parent, left - 1)
        path = parent + (str(schema[i].get("name")),)
        yield i, path
        children = int(schema[i].get("num_children") or 0)
        if children:
            stack.append((path, children))


def with_geo_types(schema: list[Struct], types: Mapping[tuple[str, ...], GeoLogicalType]) -> list[Struct] | None:
    """``schema`` with the BYTE_ARRAY leaves at the paths of ``types`` given those logical types; None when
    nothing changes."""
    if not types:
        return None
    out = list(schema)
    changed = False
    for i, path in element_paths(schema):
        geo = types.get(path)
        if geo is None or schema[i].get("type") != _BYTE_ARRAY or schema[i].get("num_children"):
            continue
        wanted = geo.logical_type()
        if schema[i].get("logicalType") != wanted:
            element = schema[i].copy()
            element["logicalType"] = wanted
            out[i], changed = element, True
    return out if changed else None


def adopt_geo_types(schema: list[Struct], reference: list[Struct]) -> list[Struct] | None:
    """``schema`` with each geospatial leaf's logical type taken from the same leaf of ``reference`` where
    that is of the same kind (GEOMETRY or GEOGRAPHY): the values are the same WKB whatever the CRS says.
    None when nothing changes or the schemas do not line up."""
    if len(schema) != len(reference):
        return None
    out = list(schema)
    changed = False
    for i, (el, ref) in enumerate(zip(schema, reference)):
        kind = _geo_kind(el)
        if kind is None or kind != _geo_kind(ref) or el.get("name") != ref.get("name"):
            continue
        if el.get("logicalType") != ref.get("logicalType"):
            element = el.copy()
            element["logicalType"] = ref.get("logicalType")
            out[i], changed = element, True
    return out if changed else None


def set_file_geo_types(path: str | os.PathLike[str], types: Mapping[tuple[str, ...], GeoLogicalType]) -> bool:
    """Give the geospatial leaves of the local parquet file ``path`` the logical types ``types`` (by
    path of names), rewriting its footer in place; whether it changed."""
    if not types:
        return False
    footer = read_footer(path)
    schema = with_geo_types(footer.schema, types)
    if schema is None:
        return False
    metadata = footer.metadata.copy()
    metadata["schema"] = schema
    start = footer.file_size - footer.length - 8
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(file_bytes(metadata))
        fh.truncate()
    return True

