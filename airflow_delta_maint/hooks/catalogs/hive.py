"""Tables by name in a Hive metastore, over Thrift with ``hmsclient`` (the client Airflow's Hive provider uses).

The connection is of type ``hive_metastore`` (host, port 9083 by default), as the Hive provider defines
it. The metastore vends no storage credentials: the task's ``storage_conn_id`` (or the worker's
environment) reaches the table's store. Plain (unauthenticated) Thrift only; Kerberos/SASL metastores
are not supported.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.hooks.catalogs.resolved import CatalogError, ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_entry import delta_location, table_format
from airflow_delta_maint.hooks.catalogs.table_names import select_names, split_name

KIND = "hive"
DEFAULT_PORT = 9083


def hive_lineage(host: str, port: int, database: str, table: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a metastore table: ``hive://host:port``, ``db.table``."""
    return f"hive://{host}:{port}", f"{database}.{table}"


def _sd_parts(table: Any) -> tuple[str | None, dict[str, str] | None]:
    sd = getattr(table, "sd", None)
    serde = getattr(sd, "serdeInfo", None) if sd is not None else None
    return (getattr(sd, "location", None) if sd is not None else None,
            getattr(serde, "parameters", None) if serde is not None else None)


class HiveCatalog:
    """The Hive metastore of a ``hive_metastore`` connection."""

    kind = KIND

    def __init__(self, conn: Any) -> None:
        self.conn_id = str(conn.conn_id)
        self.host = str(conn.host or "localhost")
        self.port = int(conn.port or DEFAULT_PORT)

    def _client(self) -> Any:
        from hmsclient.hmsclient import HMSClient

        return HMSClient(host=self.host, port=self.port)

    def _call(self, what: str, call: Any) -> Any:
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException
        from thrift.transport.TTransport import TTransportException

        try:
            with self._client() as client:
                return call(client)
        except NoSuchObjectException:
            raise CatalogError(f"the Hive metastore at {self.host}:{self.port} (connection {self.conn_id!r}) "
                               f"has no {what}") from None
        except TTransportException as exc:
            raise CatalogError(f"cannot reach the Hive metastore at {self.host}:{self.port} (connection "
                               f"{self.conn_id!r}): {exc}") from None

    def resolve(self, name: str) -> ResolvedTable:
        """The Delta table ``database.table``."""
        database, table = split_name(name, 2, "Hive metastore")
        found = self._call(f"table {database}.{table}", lambda c: c.get_table(database, table))
        location, serde = _sd_parts(found)
        found_location = delta_location(f"{database}.{table}", "Hive metastore", found.tableType, found.parameters,
                                        location, serde)
        return ResolvedTable(name=f"{database}.{table}", location=found_location, catalog=KIND,
                             catalog_conn_id=self.conn_id, lineage=hive_lineage(self.host, self.port, database, table),
                             properties={str(k): str(v) for k, v in (found.parameters or {}).items()})

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The Delta tables of database ``schema``, read in one call for all the names selected."""
        def entries(client: Any) -> list[Any]:
            client.get_database(schema)  # an unknown database is an error, not an empty list
            names = select_names(client.get_all_tables(schema), include, exclude)
            return list(client.get_table_objects_by_name(schema, names)) if names else []

        out = []
        for entry in self._call(f"database {schema}", entries):
            location, serde = _sd_parts(entry)
            if table_format(entry.tableType, entry.parameters, serde) == "delta":
                out.append(f"{schema}.{entry.tableName}")
        return sorted(out)


__all__ = ["HiveCatalog", "hive_lineage"]
