"""A Hive metastore from a ``hive_metastore`` connection (host, port 9083 by default), as the Hive provider
defines the type; the lookups are :class:`airflow_delta_maint.catalogs.hive.HiveCatalog`'s."""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.catalogs.hive import DEFAULT_PORT
from airflow_delta_maint.catalogs.hive import HiveCatalog as PlainHiveCatalog


class HiveCatalog(PlainHiveCatalog):
    """The Hive metastore of a ``hive_metastore`` connection."""

    def __init__(self, conn: Any) -> None:
        super().__init__(str(conn.host or "localhost"), int(conn.port or DEFAULT_PORT), str(conn.conn_id))


__all__ = ["HiveCatalog"]
