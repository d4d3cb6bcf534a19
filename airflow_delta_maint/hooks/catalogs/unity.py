"""Unity Catalog from an Airflow connection: type ``databricks`` (the Databricks provider's: host, the token
as password) or any type whose extra names ``{"catalog": "unity"}``; the lookups and the credential vending
are :class:`airflow_delta_maint.catalogs.unity.UnityCatalog`'s, over ``databricks-sdk``.

The extra's ``token`` stands in for an empty password; ``vend_credentials: false`` leaves the store to a
``storage_conn_id``. The token is registered with the secrets masker. With a token, a run can ask for the
table's credentials again (:func:`refresh_environ`); then credentials need only
:data:`~airflow_delta_maint.catalogs.unity.REFRESHED_MIN_LIFETIME_S` left when it starts.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.catalogs.unity import MIN_LIFETIME_S, REFRESHED_MIN_LIFETIME_S, workspace_client
from airflow_delta_maint.catalogs.unity import UnityCatalog as PlainUnityCatalog
from airflow_delta_maint.catalogs.unity_credentials import provider_environ
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
        self._token = str(token) if token else None

    @property
    def refreshes(self) -> bool:
        """Whether a run can ask this catalog again (the connection holds a token)."""
        return self._token is not None

    def resolve_refreshed(self, name: str, operation: str) -> tuple[Any, dict[str, str]]:
        """The table, with credentials that need only outlive the run's first request, and the variables the
        application asks for them again with (empty when it cannot: no token, no vended credentials)."""
        self.min_lifetime_s = REFRESHED_MIN_LIFETIME_S if self.refreshes else MIN_LIFETIME_S
        try:
            resolved = self.resolve(name, operation)
        finally:
            self.min_lifetime_s = MIN_LIFETIME_S
        if resolved.credentials is None or self._token is None:
            return resolved, {}
        return resolved, provider_environ(str(self.client.config.host), self._token, resolved.name, operation)


__all__ = ["UnityCatalog", "connection_url"]
