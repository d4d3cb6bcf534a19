"""Tables by name in the AWS Glue Data Catalog, through the Amazon provider's ``GlueCatalogHook``.

The connection is an ``aws`` connection (keys, a role, a region; ``endpoint_url`` for a Glue-compatible
endpoint). Resource links (``TargetTable``) are followed, across accounts and regions. Glue vends no
storage credentials here: unless the task names a ``storage_conn_id``, the same connection reaches S3.
"""

from __future__ import annotations

from typing import Any

from airflow_delta_maint.hooks.catalogs.resolved import CatalogError, ResolvedTable
from airflow_delta_maint.hooks.catalogs.table_entry import delta_location, table_format
from airflow_delta_maint.hooks.catalogs.table_names import select_names, split_name

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


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


class GlueCatalog:
    """The Glue Data Catalog of an ``aws`` connection."""

    kind = KIND

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        from airflow.providers.amazon.aws.hooks.glue_catalog import GlueCatalogHook

        self.hook = GlueCatalogHook(aws_conn_id=conn_id)

    def _client(self, region: str | None = None) -> Any:
        if region and region != self.hook.conn_region_name:
            return self.hook.get_client_type(region_name=region)
        return self.hook.get_conn()

    def _get(self, database: str, table: str, catalog_id: str | None = None, region: str | None = None) -> dict:
        kwargs = {"DatabaseName": database, "Name": table}
        if catalog_id:
            kwargs["CatalogId"] = catalog_id
        try:
            return self._client(region).get_table(**kwargs)["Table"]
        except Exception as exc:  # botocore's ClientError and its modelled kinds
            code = _error_code(exc)
            if code == "EntityNotFoundException":
                what = f"database {database}" if "Database" in str(exc) else f"table {database}.{table}"
                raise CatalogError(f"Glue (connection {self.conn_id!r}) has no {what}") from None
            if code in ("AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"):
                raise CatalogError(f"Glue (connection {self.conn_id!r}) refused to describe {database}.{table}: "
                                   f"{code}") from None
            raise

    def resolve(self, name: str) -> ResolvedTable:
        """The Delta table ``database.table``, resource links followed."""
        database, table = split_name(name, 2, "Glue")
        entry = self._get(database, table)
        region = self.hook.conn_region_name
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
            for page in self._client().get_paginator("get_tables").paginate(DatabaseName=schema):
                entries.update({e["Name"]: e for e in page.get("TableList", [])})
        except Exception as exc:
            if _error_code(exc) == "EntityNotFoundException":
                raise CatalogError(f"Glue (connection {self.conn_id!r}) has no database {schema}") from None
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


__all__ = ["GlueCatalog", "entry_is_delta", "entry_location", "glue_lineage", "link_target"]
