"""Tables by name in the AWS Glue Data Catalog, over a boto3 Glue client.

Resource links (``TargetTable``) are followed, across accounts and regions. Glue vends no storage
credentials: the same AWS credentials (or a storage connection) reach S3. The Airflow side hands in
clients made by the Amazon provider's ``GlueCatalogHook``; the command line, boto3's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.names import select_names, split_name
from airflow_delta_maint.catalogs.resolved import ResolvedTable
from airflow_delta_maint.catalogs.table_entry import delta_location, table_format

KIND = "glue"
#: resource links followed at most (a link to a link ...), so a loop ends
MAX_LINKS = 5


def glue_lineage(region: str, account: str, database: str, table: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a Glue table: ``arn:aws:glue:{region}:{account}``, ``table/{db}/{table}``."""
    return f"arn:aws:glue:{region}:{account}", f"table/{database}/{table}"


def link_target(entry: dict[str, Any]) -> dict[str, str] | None:
    """Where a resource link points (``CatalogId``, ``DatabaseName``, ``Name``, ``Region``), or None for a table."""
    target = entry.get("TargetTable")
    return dict(target) if isinstance(target, dict) and target.get("Name") else None


def entry_location(name: str, entry: dict[str, Any]) -> str:
    """A (non-link) Glue table entry's Delta location; refuses views, other formats, placeholders without a path."""
    sd = entry.get("StorageDescriptor") or {}
    serde = (sd.get("SerdeInfo") or {}).get("Parameters")
    return delta_location(name, "Glue", entry.get("TableType"), entry.get("Parameters"), sd.get("Location"), serde)


def entry_is_delta(entry: dict[str, Any]) -> bool:
    """Whether a (non-link) Glue table entry is a Delta table."""
    sd = entry.get("StorageDescriptor") or {}
    return table_format(entry.get("TableType"), entry.get("Parameters"),
                        (sd.get("SerdeInfo") or {}).get("Parameters")) == "delta"


def error_code(exc: Exception) -> str:
    """The AWS error code of a botocore ``ClientError`` (empty for anything else)."""
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def raise_unreachable(exc: Exception, where: str) -> None:
    """Raise one line for botocore's failures that carry no AWS answer (a refused connection, a timeout, no
    credentials); return for anything else."""
    if getattr(exc, "response", None) is None and type(exc).__module__.startswith("botocore"):
        line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CatalogError(f"cannot reach {where}: {line}") from None


class GlueCatalog:
    """A Glue Data Catalog reached through boto3 Glue clients.

    :param client_for: a Glue client for a region (None: the home region).
    :param region: the home region.
    :param conn_id: what the catalog was reached with, named in errors (an Airflow connection's id).
    """

    kind = KIND

    def __init__(self, client_for: Callable[[str | None], Any], region: str, conn_id: str) -> None:
        self.client_for = client_for
        self.region = region
        self.conn_id = conn_id

    def _where(self) -> str:
        return f"Glue (connection {self.conn_id!r})"

    def _get(self, database: str, table: str, catalog_id: str | None = None, region: str | None = None) -> dict:
        kwargs = {"DatabaseName": database, "Name": table}
        if catalog_id:
            kwargs["CatalogId"] = catalog_id
        try:
            return self.client_for(region if region != self.region else None).get_table(**kwargs)["Table"]
        except Exception as exc:  # botocore's ClientError and its modelled kinds
            code = error_code(exc)
            if code == "EntityNotFoundException":
                what = f"database {database}" if "Database" in str(exc) else f"table {database}.{table}"
                raise CatalogError(f"{self._where()} has no {what}") from None
            if code in ("AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"):
                raise CatalogError(f"{self._where()} refused to describe {database}.{table}: {code}") from None
            raise_unreachable(exc, self._where())
            raise

    def resolve(self, name: str, operation: str = "READ") -> ResolvedTable:
        """The Delta table ``database.table``, resource links followed (Glue vends no credentials)."""
        database, table = split_name(name, 2, "Glue")
        entry = self._get(database, table)
        region = self.region
        for _ in range(MAX_LINKS):
            target = link_target(entry)
            if target is None:
                break
            region = target.get("Region") or region
            entry = self._get(target["DatabaseName"], target["Name"], target.get("CatalogId"), region)
        else:
            raise CatalogError(f"Glue table {name} is a chain of more than {MAX_LINKS} resource links")
        real = f"{entry.get('DatabaseName', database)}.{entry.get('Name', table)}"
        shown = name if real == f"{database}.{table}" else f"{name} (a resource link to {real})"
        location = entry_location(shown, entry)
        params = {str(k): str(v) for k, v in (entry.get("Parameters") or {}).items()}
        return ResolvedTable(
            name=f"{database}.{table}", location=location, catalog=KIND, catalog_conn_id=self.conn_id,
            lineage=glue_lineage(region, str(entry.get("CatalogId", "")), str(entry.get("DatabaseName", database)),
                                 str(entry.get("Name", table))),
            properties=params)

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The Delta tables (and resource links to Delta tables) of database ``schema``."""
        entries: dict[str, dict] = {}
        try:
            for page in self.client_for(None).get_paginator("get_tables").paginate(DatabaseName=schema):
                entries.update({e["Name"]: e for e in page.get("TableList", [])})
        except Exception as exc:
            if error_code(exc) == "EntityNotFoundException":
                raise CatalogError(f"{self._where()} has no database {schema}") from None
            raise_unreachable(exc, self._where())
            raise
        out = []
        for name in select_names(entries, include, exclude):
            entry = entries[name]
            if link_target(entry) is not None:
                try:
                    self.resolve(f"{schema}.{name}")
                except CatalogError:
                    continue
            elif not entry_is_delta(entry):
                continue
            out.append(f"{schema}.{name}")
        return out


__all__ = ["GlueCatalog", "entry_is_delta", "entry_location", "error_code", "glue_lineage", "link_target"]
