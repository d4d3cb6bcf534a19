"""Unity Catalog from an Airflow connection: type ``databricks`` (the Databricks provider's: host, the token
as password) or any type whose extra names ``{"catalog": "unity"}``; the lookups and the credential vending
are :class:`airflow_delta_maint.catalogs.unity.UnityCatalog`'s, over ``databricks-sdk``.

The extra's ``token`` stands in for an empty password; ``vend_credentials: false`` leaves the store to a
``storage_conn_id``. The token is registered with the secrets masker.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.catalogs.unity import UnityCatalog as PlainUnityCatalog
from airflow_delta_maint.catalogs.unity import workspace_client
from airflow_delta_maint.hooks.catalogs.resolved import CatalogError


def connection_url(conn: Any) -> str:
    """The server's URL from a connection's host (with or without a scheme) and port."""
    host = str(conn.host or "").strip().rstrip("/")
    if not host:
        raise CatalogError(f"Unity Catalog connection {conn.conn_id!r} has no host")
    if "://" not in host:
        host = f"{str(conn.schema or 'https').strip() or 'https'}://{host}"
    return f"{host}:{conn.port}" if conn.port else host


class UnityCatalog(PlainUnityCatalog):
    """The Unity Catalog of a connection."""

    def __init__(self, conn: Any) -> None:
        from airflow_delta_maint.hooks.storage_credentials import mask_value

        extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
        token = conn.password or extra.get("token")
        if token:
            mask_value(str(token))
        vend = str(extra.get("vend_credentials", True)).strip().lower() not in ("false", "0", "no")
        super().__init__(workspace_client(connection_url(conn), str(token) if token else None), str(conn.conn_id),
                         vend=vend)


__all__ = ["UnityCatalog", "connection_url"]
