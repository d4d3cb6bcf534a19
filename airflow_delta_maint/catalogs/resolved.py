"""What a catalog says about a table: its location, format, vended credentials and rules; the common interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class VendedCredentials:
    """Short-lived storage credentials a catalog vended for one table.

    :param family: the store they reach: ``s3``, ``azure`` or ``gcs``.
    :param env: obstore / delta-rs variables (``AWS_ACCESS_KEY_ID``, ``AZURE_STORAGE_SAS_TOKEN``,
        ``GOOGLE_BEARER_TOKEN``, ...), also valid storage options.
    :param secrets: the values among them that are secrets.
    :param expires_at: when they expire, in seconds since the epoch (None: the catalog did not say).
    :param operation: what they allow: ``READ`` or ``READ_WRITE``.
    """

    family: str
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    expires_at: float | None = None
    operation: str = "READ"

    def __repr__(self) -> str:  # never show a value
        return (f"VendedCredentials(family={self.family!r}, keys={sorted(self.env)}, expires_at={self.expires_at}, "
                f"operation={self.operation!r})")

    __str__ = __repr__


def catalog_asset_uri(lineage: tuple[str, str]) -> str:
    """The Airflow asset URI of a table by its catalog name, built from its OpenLineage ``(namespace, name)``:
    ``arn:aws:glue:{region}:{account}:table/{db}/{table}`` (the Glue table's ARN), ``hive://{host}:{port}/{db}.{table}``,
    ``databricks://{host}/{catalog}.{schema}.{table}``; empty without a namespace."""
    namespace, name = lineage
    if not namespace:
        return ""
    return f"{namespace}:{name}" if namespace.startswith("arn:") else f"{namespace}/{name}"


@dataclass(frozen=True)
class ResolvedTable:
    """A table found by name in a catalog.

    :param name: the table's name as the catalog spells it (``db.table``, ``catalog.schema.table``).
    :param location: the table's path or URI, where its ``_delta_log`` lives.
    :param catalog: the kind of catalog: ``glue``, ``hive`` or ``unity``.
    :param catalog_conn_id: what the catalog was reached with: the Airflow connection's id, or on the
        command line the catalog's kind.
    :param format: the table's format as the catalog records it (always ``delta`` once resolved).
    :param credentials: storage credentials the catalog vended for this table (secrets), or None.
    :param managed: the catalog owns the table's commits (Delta's ``catalogManaged`` feature, or a
        catalog-managed table by the catalog's own account).
    :param allowed_operations: the maintenance operations the catalog allows other engines
        (``OPTIMIZE``, ``VACUUM``, ...), or None when the catalog says nothing.
    :param lineage: the OpenLineage ``(namespace, name)`` of the table in its catalog.
    :param properties: the table's properties (parameters) as the catalog holds them.
    :param table_id: the catalog's own id of the table, where it has one (Unity Catalog).
    """

    name: str
    location: str
    catalog: str
    catalog_conn_id: str
    format: str = "delta"
    credentials: VendedCredentials | None = None
    managed: bool = False
    allowed_operations: frozenset[str] | None = None
    lineage: tuple[str, str] = ("", "")
    properties: dict[str, str] = field(default_factory=dict)
    table_id: str | None = None

    def __repr__(self) -> str:  # the credentials never show
        return (f"ResolvedTable(name={self.name!r}, location={self.location!r}, catalog={self.catalog!r}, "
                f"managed={self.managed}, vended_credentials={self.credentials is not None})")

    __str__ = __repr__

    @property
    def asset_uri(self) -> str:
        """The table's Airflow asset URI by its catalog name (:func:`catalog_asset_uri` of its lineage)."""
        return catalog_asset_uri(self.lineage)


class TableCatalog(Protocol):
    """A catalog: resolve names, list a schema's Delta tables."""

    kind: str
    conn_id: str

    def resolve(self, name: str, operation: str = "READ") -> ResolvedTable:
        """The Delta table ``name``, with credentials for ``operation`` (``READ`` or ``READ_WRITE``) where the
        catalog vends them; raises :class:`CatalogError` for an unknown name, a view or a non-Delta table."""
        ...

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The qualified names of the Delta tables of ``schema`` matching ``include`` and none of ``exclude``."""
        ...


__all__ = ["ResolvedTable", "TableCatalog", "VendedCredentials", "catalog_asset_uri"]
