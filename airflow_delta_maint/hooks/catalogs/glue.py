"""Glue through the Amazon provider's ``GlueCatalogHook``: the connection's keys, role, region and endpoint.

The lookups are :class:`airflow_delta_maint.catalogs.glue.GlueCatalog`'s; this module gives it the hook's
clients. Glue vends no storage credentials: unless the task names a ``storage_conn_id``, the same
connection reaches S3.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.catalogs.glue import GlueCatalog as PlainGlueCatalog


class GlueCatalog(PlainGlueCatalog):
    """The Glue Data Catalog of an ``aws`` connection."""

    def __init__(self, conn_id: str) -> None:
        from airflow.providers.amazon.aws.hooks.glue_catalog import GlueCatalogHook

        self.hook = GlueCatalogHook(aws_conn_id=conn_id)
        super().__init__(self._client, str(self.hook.conn_region_name or ""), conn_id)

    def _client(self, region: str | None) -> Any:
        if region and region != self.hook.conn_region_name:
            return self.hook.get_client_type(region_name=region)
        return self.hook.get_conn()


__all__ = ["GlueCatalog"]
