"""Geospatial types (the ``geospatial`` table feature): ``geometry`` and ``geography`` columns.

A schema names them ``geometry(<crs>)`` and ``geography(<crs>, <algorithm>)`` (delta-spark writes
``geometry(OGC:CRS84)``, ``geography(OGC:CRS84, SPHERICAL)``); Spark also reads the short forms
``geometry``, ``geography``, ``geography(<crs>)`` and ``geography(<algorithm>)``, whose missing parts
default to ``OGC:CRS84`` and ``spherical``. The values are WKB byte arrays, stored in parquet as the
GEOMETRY and GEOGRAPHY logical types with the same CRS and edge algorithm.

In Arrow a column of either type is the GeoArrow extension type ``geoarrow.wkb`` on ``binary``
storage, with the CRS (and, for geography, the edges) as its JSON metadata: pyarrow then writes the
parquet logical type and the bounding-box statistics of geometry columns. The extension type is
registered when this module is imported (so that Arrow IPC and parquet readers of any process that
rewrites files restore it); when another library (geoarrow-pyarrow) registered ``geoarrow.wkb`` first,
its type is used.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_delta_maint.delta.errors import UnsupportedFeatureError

__all__ = ["DEFAULT_ALGORITHM", "DEFAULT_CRS", "EDGE_ALGORITHMS", "GEOARROW_WKB", "GeoArrowWkb", "GeoType",
           "as_geo_array", "geo_type_of_arrow", "is_geo_arrow_type", "parse_geo_type"]

DEFAULT_CRS = "OGC:CRS84"
DEFAULT_ALGORITHM = "spherical"
#: the edge interpolation algorithms of a geography, in the order of parquet's EdgeInterpolationAlgorithm
EDGE_ALGORITHMS = ("spherical", "vincenty", "thomas", "andoyer", "karney")
GEOARROW_WKB = "geoarrow.wkb"

_TYPE_RE = re.compile(r"^(geometry|geography)\s*(?:\(\s*([^(),\s]+)\s*(?:,\s*([A-Za-z]+)\s*)?\))?$", re.IGNORECASE)


@dataclass(frozen=True)
class GeoType:
    """A geospatial column type: ``kind`` (``geometry`` or ``geography``), its CRS and, for a geography,
    its edge algorithm (lower case)."""

    kind: str
    crs: str
    algorithm: str | None = None

    @property
    def is_geography(self) -> bool:
        return self.kind == "geography"

    @property
    def type_name(self) -> str:
        """The type's name in a schema, as delta-spark writes it."""
        return f"geography({self.crs}, {(self.algorithm or DEFAULT_ALGORITHM).upper()})" if self.is_geography \
            else f"geometry({self.crs})"

    def arrow_metadata(self) -> dict[str, str]:
        """The GeoArrow metadata of the column (geometry edges are planar, GeoArrow's default)."""
        return {"crs": self.crs, "edges": self.algorithm or DEFAULT_ALGORITHM} if self.is_geography \
            else {"crs": self.crs}

    def arrow_type(self) -> pa.DataType:
        """The column's Arrow type: ``geoarrow.wkb`` with this type's metadata."""
        return _wkb_type(json.dumps(self.arrow_metadata(), sort_keys=True))


def parse_geo_type(name: str) -> GeoType | None:
    """The geospatial type a schema's type name stands for, or None when it names none.

    Raises:
        UnsupportedFeatureError: a geography names an edge algorithm the protocol does not know.
    """
    m = _TYPE_RE.match(name.strip())
    if m is None:
        return None
    kind, first, second = m.group(1).lower(), m.group(2), m.group(3)
    if kind == "geometry":
        return None if second else GeoType("geometry", first or DEFAULT_CRS)
    if first is not None and second is None and first.lower() in EDGE_ALGORITHMS:
        first, second = None, first  # geography(<algorithm>)
    algorithm = (second or DEFAULT_ALGORITHM).lower()
    if algorithm not in EDGE_ALGORITHMS:
        raise UnsupportedFeatureError(f"unsupported edge algorithm {second!r} of the Delta type {name.strip()!r} "
                                      f"(known: {', '.join(EDGE_ALGORITHMS)})")
    return GeoType("geography", first or DEFAULT_CRS, algorithm)


class GeoArrowWkb(pa.ExtensionType):
    """``geoarrow.wkb``: WKB values on ``binary`` storage, the GeoArrow metadata as JSON text."""

    def __init__(self, metadata: bytes = b"") -> None:
        self._metadata = bytes(metadata)
        super().__init__(pa.binary(), GEOARROW_WKB)

    def __arrow_ext_serialize__(self) -> bytes:
        return self._metadata

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "GeoArrowWkb":
        return cls(serialized)


@functools.cache
def _register() -> None:
    try:
        pa.register_extension_type(GeoArrowWkb())
    except pa.ArrowKeyError:  # another library registered geoarrow.wkb: its type serves
        pass


_register()


@functools.lru_cache(maxsize=64)
def _wkb_type(metadata: str) -> pa.DataType:
    """The registered ``geoarrow.wkb`` type with ``metadata``, made as Arrow's IPC reader makes it."""
    _register()
    field = pa.field("wkb", pa.binary(), metadata={b"ARROW:extension:name": GEOARROW_WKB.encode(),
                                                   b"ARROW:extension:metadata": metadata.encode()})
    made = pa.ipc.read_schema(pa.py_buffer(pa.schema([field]).serialize())).field(0).type
    if not isinstance(made, pa.BaseExtensionType):
        raise UnsupportedFeatureError(f"the registered {GEOARROW_WKB} Arrow type does not read its metadata "
                                      f"{metadata}")
    return made


def is_geo_arrow_type(t: pa.DataType) -> bool:
    """Whether ``t`` is the ``geoarrow.wkb`` extension type (whoever registered it)."""
    return isinstance(t, pa.BaseExtensionType) and t.extension_name == GEOARROW_WKB


def geo_type_of_arrow(t: pa.DataType) -> GeoType | None:
    """The geospatial type of a ``geoarrow.wkb`` Arrow type from its metadata (None for other types)."""
    if not is_geo_arrow_type(t):
        return None
    try:
        meta: Any = json.loads(t.__arrow_ext_serialize__() or b"{}")  # type: ignore[attr-defined]
    except (ValueError, AttributeError):
        meta = {}
    crs = meta.get("crs") if isinstance(meta, dict) else None
    crs = crs if isinstance(crs, str) and crs else DEFAULT_CRS
    edges = str(meta.get("edges") or "planar").lower() if isinstance(meta, dict) else "planar"
    return GeoType("geometry", crs) if edges == "planar" else GeoType("geography", crs, edges)


def as_geo_array(arr: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """WKB values (binary, or any ``geoarrow.wkb`` array) as an array of the extension type ``target``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    storage = target.storage_type  # type: ignore[attr-defined]
    if arr.type != storage:
        arr = arr.cast(storage)
    return pa.ExtensionArray.from_storage(target, arr)
