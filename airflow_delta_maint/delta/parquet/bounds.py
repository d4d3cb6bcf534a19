"""Which column-chunk statistics still hold once a chunk is copied into a file of another writer.

A reader decides how far to trust a file's min/max from the file's ``created_by`` (bugs of old
parquet-mr and parquet-cpp releases) and its column orders. A copied chunk changes both, so its
statistics are cleaned for the new file (``statistics_for_copy``): the deprecated ``min``/``max``
stay only where their signed order is the column's order, bounds of writers known to have written
wrong ones go, and ``min_value``/``max_value`` go when the input's column order is not the output's.

Delta statistics need more: exact values, as a rewrite of the rows would compute them.
``delta_bounds_view`` builds a footer, for ``delta/protocol/stats.py`` to read, holding only the
bounds that prove such values (see there for the rules).
"""

from __future__ import annotations

import re

from airflow_delta_maint.delta.parquet.compact import Struct
from airflow_delta_maint.delta.parquet.format import PHYSICAL_TYPES

__all__ = ["BINARY_TRUNCATION_BYTES", "is_signed_order", "statistics_for_copy", "view_statistics",
           "writer_version", "writes_float_bounds_with_nan", "writes_wrong_unsigned_bounds"]

#: parquet-java cuts binary bounds to this many bytes when asked to truncate them; a bound this long
#: without an exactness flag may have been cut
BINARY_TRUNCATION_BYTES = 64
_SIGNED_PHYSICAL = frozenset({"BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE"})
_UNSIGNED_CONVERTED = frozenset({11, 12, 13, 14})  # UINT_8 .. UINT_64
_VERSION = re.compile(r"^\s*(\S+)\s+version\s+(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_MIN_MAX = ("max", "min", "max_value", "min_value", "is_max_value_exact", "is_min_value_exact")


def writer_version(created_by: str) -> tuple[str, tuple[int, int, int]]:
    """A writer's application name (lower case) and version from ``created_by``
    (``"parquet-mr version 1.13.1 (build ...)"``); ``("", (0, 0, 0))`` when it says nothing."""
    m = _VERSION.match(created_by or "")
    if not m:
        return (created_by or "").strip().lower(), (0, 0, 0)
    return m.group(1).lower(), tuple(int(g or 0) for g in m.groups()[1:])  # type: ignore[return-value]


def writes_wrong_unsigned_bounds(created_by: str) -> bool:
    """Whether readers distrust this writer's bounds of columns not in signed order: parquet-mr
    before 1.10 and parquet-cpp before 1.3 compared them signed; a file naming no writer is
    unknown."""
    app, version = writer_version(created_by)
    return (not app or (app == "parquet-mr" and version < (1, 10, 0))
            or (app == "parquet-cpp" and version < (1, 3, 0)))


def writes_float_bounds_with_nan(created_by: str) -> bool:
    """Whether the writer's float and double bounds count NaN as Spark does (parquet-mr's do; other
    writers leave NaN out, so their bounds prove nothing about it)."""
    return (created_by or "").lower().startswith("parquet-mr")


def is_signed_order(element: Struct) -> bool:
    """Whether a leaf's values sort as its physical type compared signed (the deprecated min/max
    order): numbers, booleans and integer-backed decimals, not unsigned integers or byte arrays."""
    physical = PHYSICAL_TYPES[element["type"]] if element.get("type") is not None else ""
    if physical not in _SIGNED_PHYSICAL:
        return False
    logical = element.get("logicalType")
    if logical is not None and "INTEGER" in logical and logical["INTEGER"].get("isSigned") is False:
        return False
    return element.get("converted_type") not in _UNSIGNED_CONVERTED


def statistics_for_copy(stats: Struct, element: Struct, created_by: str, same_order: bool) -> Struct:
    """The statistics a copied chunk keeps in the output (see the module's docstring)."""
    out = stats.copy()
    signed = is_signed_order(element)
    if not signed:
        out["min"] = out["max"] = None
        if writes_wrong_unsigned_bounds(created_by):
            out["min_value"] = out["max_value"] = None
    if not same_order:
        out["min_value"] = out["max_value"] = out["is_min_value_exact"] = out["is_max_value_exact"] = None
    if "min_value" not in out or "max_value" not in out:
        out["is_min_value_exact"] = out["is_max_value_exact"] = None
    return out


def _drop_bounds(stats: Struct) -> Struct:
    out = stats.copy()
    for name in _MIN_MAX:
        out[name] = None
    return out


def view_statistics(stats: Struct, element: Struct, created_by: str) -> Struct:
    """The statistics a copied chunk (already cleaned by ``statistics_for_copy``) shows in the
    Delta bounds view: its bounds only where they are the exact minimum and maximum.

    Dropped: bounds a writer marked inexact; byte-array bounds of ``BINARY_TRUNCATION_BYTES`` or
    more without exactness flags (they may have been cut); float and double bounds of writers that
    leave NaN out (``writes_float_bounds_with_nan``); lone deprecated bounds of byte arrays.
    """
    physical = PHYSICAL_TYPES[element["type"]] if element.get("type") is not None else ""
    if stats.get("is_min_value_exact") is False or stats.get("is_max_value_exact") is False:
        return _drop_bounds(stats)
    if physical in ("FLOAT", "DOUBLE") and not writes_float_bounds_with_nan(created_by):
        return _drop_bounds(stats)
    if physical in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
        lo, hi = stats.get("min_value"), stats.get("max_value")
        if lo is None or hi is None:
            return _drop_bounds(stats)
        flagged = stats.get("is_min_value_exact") is True and stats.get("is_max_value_exact") is True
        if not flagged and max(len(lo), len(hi)) >= BINARY_TRUNCATION_BYTES:
            return _drop_bounds(stats)
    return stats
