"""Tables by name from catalogs: AWS Glue, a Hive metastore, Unity Catalog.

A name resolves on the Airflow worker, without Spark, to the table's location, format and the storage
credentials the catalog vends (:class:`~.resolved.ResolvedTable`); after that the path-based machinery
runs unchanged. The lookups live in :mod:`airflow_delta_maint.catalogs` (plain clients, shared with the
command line); this package builds them from Airflow connections. :func:`catalog_for` picks the catalog
from the connection's type.
"""

from __future__ import annotations

from airflow_delta_maint.hooks.catalogs.resolved import CatalogError, ResolvedTable, TableCatalog, airflow_errors

#: connection type -> catalog kind (a connection's extra ``{"catalog": "glue" | "hive" | "unity"}`` wins)
CONN_TYPE_CATALOGS = {"aws": "glue", "hive_metastore": "hive", "databricks": "unity", "unity_catalog": "unity"}
CATALOG_NAMES = {"glue": "Glue", "hive": "the Hive metastore", "unity": "Unity Catalog"}


def catalog_kind(conn_type: str | None, extra: dict | None) -> str | None:
    """The catalog a connection reaches: its extra's ``catalog``, else by type; None when neither says."""
    named = str((extra or {}).get("catalog", "")).strip().lower()
    if named:
        return named if named in CATALOG_NAMES else None
    return CONN_TYPE_CATALOGS.get(str(conn_type or "").lower())


def catalog_for(conn_id: str) -> TableCatalog:
    """The catalog behind Airflow connection ``conn_id``.

    :raises CatalogError: a missing connection, or one that names no supported catalog.
    """
    from airflow_delta_maint.hooks.storage_credentials import get_connection

    if not conn_id:
        raise CatalogError("a table name needs its catalog connection: pass catalog_conn_id")
    try:
        conn = get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException and the task SDK's lookup errors
        raise CatalogError(f"catalog connection {conn_id!r} cannot be found: {str(exc).splitlines()[0]}") from None
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
    kind = catalog_kind(conn.conn_type, extra)
    with airflow_errors():
        if kind == "glue":
            from airflow_delta_maint.hooks.catalogs.glue import GlueCatalog

            return AirflowCatalog(GlueCatalog(conn_id))
        if kind == "hive":
            from airflow_delta_maint.hooks.catalogs.hive import HiveCatalog

            return AirflowCatalog(HiveCatalog(conn))
        if kind == "unity":
            from airflow_delta_maint.hooks.catalogs.unity import UnityCatalog

            return AirflowCatalog(UnityCatalog(conn))
    raise CatalogError(
        f"catalog connection {conn_id!r} has type {conn.conn_type!r}: use type aws (Glue), hive_metastore "
        '(a Hive metastore) or databricks (Unity Catalog), or name the catalog in its extra ({"catalog": "glue" | '
        '"hive" | "unity"})')


class AirflowCatalog:
    """A plain catalog whose errors are raised as :class:`CatalogError` (an ``AirflowException``)."""

    def __init__(self, catalog: TableCatalog) -> None:
        self.catalog = catalog
        self.kind = catalog.kind
        self.conn_id = catalog.conn_id

    def resolve(self, name: str, operation: str = "READ") -> ResolvedTable:
        """The Delta table ``name`` (see :meth:`TableCatalog.resolve`)."""
        with airflow_errors():
            return self.catalog.resolve(name, operation)

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The Delta tables of ``schema`` (see :meth:`TableCatalog.list_tables`)."""
        with airflow_errors():
            return self.catalog.list_tables(schema, include, exclude)


__all__ = ["CATALOG_NAMES", "AirflowCatalog", "CatalogError", "ResolvedTable", "TableCatalog", "catalog_for",
           "catalog_kind"]
