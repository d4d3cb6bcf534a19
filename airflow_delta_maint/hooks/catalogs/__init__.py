"""Tables by name from catalogs: AWS Glue and a Hive metastore.

A name resolves on the Airflow worker, without Spark, to the table's location, format and the storage
credentials the catalog vends (:class:`~.resolved.ResolvedTable`); after that the path-based machinery
runs unchanged. One module per catalog, each on a maintained client library; :func:`catalog_for` picks
the catalog from the connection's type.
"""

from __future__ import annotations

from airflow_delta_maint.hooks.catalogs.resolved import CatalogError, ResolvedTable, TableCatalog

#: connection type -> catalog kind (a connection's extra ``{"catalog": "glue" | "hive"}`` wins)
CONN_TYPE_CATALOGS = {"aws": "glue", "hive_metastore": "hive"}
CATALOG_NAMES = {"glue": "Glue", "hive": "the Hive metastore"}


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
    if kind == "glue":
        from airflow_delta_maint.hooks.catalogs.glue import GlueCatalog

        return GlueCatalog(conn_id)
    if kind == "hive":
        from airflow_delta_maint.hooks.catalogs.hive import HiveCatalog

        return HiveCatalog(conn)
    raise CatalogError(
        f"catalog connection {conn_id!r} has type {conn.conn_type!r}: use type aws (Glue) or hive_metastore "
        '(a Hive metastore), or name the catalog in its extra ({"catalog": "glue" | "hive"})')


__all__ = ["CATALOG_NAMES", "CatalogError", "ResolvedTable", "TableCatalog", "catalog_for", "catalog_kind"]
