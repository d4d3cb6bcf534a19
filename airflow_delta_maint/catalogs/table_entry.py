"""A metastore's table entry read the way Spark writes it (Glue and the Hive metastore share the shape).

Spark registers a Delta table in a Hive-style metastore with the real path in the SerDe's ``path``
parameter and, for tables it cannot describe to Hive, a placeholder location (``<path>-__PLACEHOLDER__``);
it marks the format in ``spark.sql.sources.provider``. Glue crawlers set ``classification=delta``; Athena
and others set ``table_type=DELTA``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError

PLACEHOLDER_SUFFIX = "-__PLACEHOLDER__"
VIEW_TYPES = frozenset({"VIRTUAL_VIEW", "MATERIALIZED_VIEW", "VIEW"})


def _lower(params: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k).lower(): str(v).strip() for k, v in (params or {}).items() if v is not None}


def table_format(table_type: str | None, parameters: Mapping[str, Any] | None,
                 serde_parameters: Mapping[str, Any] | None = None) -> str:
    """The entry's format: ``view``, ``delta``, or what else it names (``parquet``, ``iceberg``, ``hive``, ...)."""
    if str(table_type or "").upper() in VIEW_TYPES:
        return "view"
    params = _lower(parameters)
    provider = params.get("spark.sql.sources.provider", "").lower()
    named = [provider, params.get("table_type", "").lower(), params.get("classification", "").lower()]
    if "delta" in named:
        return "delta"
    if "spark.sql.sources.provider" not in params and _lower(serde_parameters).get("provider", "") == "delta":
        return "delta"
    return next((n for n in named if n), "hive")


def real_location(location: str | None, serde_parameters: Mapping[str, Any] | None) -> str | None:
    """The table's path: the SerDe's ``path`` where Spark put it (always so behind a placeholder
    location), else the storage descriptor's location; None when neither is usable."""
    path = _lower(serde_parameters).get("path") or None
    loc = str(location or "").strip() or None
    if path:
        return path
    if loc is None or loc.endswith(PLACEHOLDER_SUFFIX) or "__PLACEHOLDER__" in loc:
        return None
    return loc


def s3_uri(location: str) -> str:
    """``s3a://`` and ``s3n://`` (Hadoop's schemes, as EMR and Spark record them) as ``s3://``."""
    for scheme in ("s3a://", "s3n://"):
        if location.startswith(scheme):
            return "s3://" + location[len(scheme):]
    return location


def delta_location(name: str, catalog: str, table_type: str | None, parameters: Mapping[str, Any] | None,
                   location: str | None, serde_parameters: Mapping[str, Any] | None) -> str:
    """The location of a Delta table entry; refuses a view, a table of another format, one without a path.

    :raises CatalogError: one line naming the table, the catalog and what the entry is.
    """
    fmt = table_format(table_type, parameters, serde_parameters)
    if fmt == "view":
        raise CatalogError(f"{catalog} table {name} is a view, not a Delta table: views cannot be maintained")
    if fmt != "delta":
        raise CatalogError(f"{catalog} table {name} is not a Delta table (its format is {fmt})")
    found = real_location(location, serde_parameters)
    if not found:
        raise CatalogError(f"{catalog} table {name} is a Delta table without a location (neither its storage "
                           f"location nor its SerDe's path parameter names one)")
    return s3_uri(found)


__all__ = ["PLACEHOLDER_SUFFIX", "delta_location", "real_location", "s3_uri", "table_format"]
