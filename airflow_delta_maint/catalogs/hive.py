"""Tables by name in a Hive metastore, over Thrift with ``hmsclient`` (the client Airflow's Hive provider uses).

Plain (unauthenticated) Thrift only; Kerberos/SASL metastores are not supported. The metastore vends no
storage credentials.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.names import select_names, split_name
from airflow_delta_maint.catalogs.resolved import ResolvedTable
from airflow_delta_maint.catalogs.table_entry import delta_location, table_format

KIND = "hive"
DEFAULT_PORT = 9083


def hive_lineage(host: str, port: int, database: str, table: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a metastore table: ``hive://host:port``, ``db.table``."""
    return f"hive://{host}:{port}", f"{database}.{table}"


def sd_parts(table: Any) -> tuple[str | None, dict[str, str] | None]:
    """A Thrift table's storage location and SerDe parameters."""
    sd = getattr(table, "sd", None)
    serde = getattr(sd, "serdeInfo", None) if sd is not None else None
    return (getattr(sd, "location", None) if sd is not None else None,
            getattr(serde, "parameters", None) if serde is not None else None)


class HiveCatalog:
    """The Hive metastore at ``host:port``; ``conn_id`` names what reached it in errors."""

    kind = KIND

    def __init__(self, host: str, port: int = DEFAULT_PORT, conn_id: str = "hive") -> None:
        self.host = host
        self.port = int(port)
        self.conn_id = conn_id

    def _call(self, what: str, call: Any) -> Any:
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException
        from hmsclient.hmsclient import HMSClient
        from thrift.transport.TTransport import TTransportException

        try:
            with HMSClient(host=self.host, port=self.port) as client:
                return call(client)
        except NoSuchObjectException:
            raise CatalogError(f"the Hive metastore at {self.host}:{self.port} (connection {self.conn_id!r}) "
                               f"has no {what}") from None
        except TTransportException as exc:
            raise CatalogError(f"cannot reach the Hive metastore at {self.host}:{self.port} (connection "
                               f"{self.conn_id!r}): {exc}") from None

    def resolve(self, name: str, operation: str = "READ") -> ResolvedTable:
        """The Delta table ``database.table`` (the metastore vends no credentials)."""
        database, table = split_name(name, 2, "Hive metastore")
        found = self._call(f"table {database}.{table}", lambda c: c.get_table(database, table))
        location, serde = sd_parts(found)
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
            _, serde = sd_parts(entry)
            if table_format(entry.tableType, entry.parameters, serde) == "delta":
                out.append(f"{schema}.{entry.tableName}")
        return sorted(out)


__all__ = ["DEFAULT_PORT", "HiveCatalog", "hive_lineage", "sd_parts"]
