"""What a catalog says about a table: its location, format, vended credentials and rules; the common interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.hooks.storage_credentials import StorageCredentials


class CatalogError(AirflowException):
    """A table name a catalog cannot resolve for maintenance, told in one line (nothing was written)."""


@dataclass(frozen=True)
class ResolvedTable:
    """A table found by name in a catalog.

    :param name: the table's name as the catalog spells it (``db.table``, ``catalog.schema.table``).
    :param location: the table's path or URI, where its ``_delta_log`` lives.
    :param catalog: the kind of catalog: ``glue`` or ``hive``.
    :param catalog_conn_id: the Airflow connection the catalog was reached with.
    :param format: the table's format as the catalog records it (always ``delta`` once resolved).
    :param credentials: storage credentials the catalog vended for this table (secrets, masked), or None.
    :param managed: the catalog owns the table's commits (Delta's ``catalogManaged`` feature, or a
        catalog-managed table by the catalog's own account).
    :param allowed_operations: the maintenance operations the catalog allows other engines
        (``OPTIMIZE``, ``VACUUM``, ...), or None when the catalog says nothing.
    :param lineage: the OpenLineage ``(namespace, name)`` of the table in its catalog.
    """

    name: str
    location: str
    catalog: str
    catalog_conn_id: str
    format: str = "delta"
    credentials: StorageCredentials | None = None
    managed: bool = False
    allowed_operations: frozenset[str] | None = None
    lineage: tuple[str, str] = ("", "")
    properties: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # the credentials never show
        return (f"ResolvedTable(name={self.name!r}, location={self.location!r}, catalog={self.catalog!r}, "
                f"managed={self.managed}, vended_credentials={self.credentials is not None})")

    __str__ = __repr__


class TableCatalog(Protocol):
    """A catalog reached through an Airflow connection: resolve names, list a schema's Delta tables."""

    kind: str
    conn_id: str

    def resolve(self, name: str) -> ResolvedTable:
        """The Delta table ``name``; raises :class:`CatalogError` for an unknown name, a view or a non-Delta table."""
        ...

    def list_tables(self, schema: str, include: list[str] | None = None,
                    exclude: list[str] | None = None) -> list[str]:
        """The qualified names of the Delta tables of ``schema`` matching ``include`` and none of ``exclude``."""
        ...


__all__ = ["CatalogError", "ResolvedTable", "TableCatalog"]
