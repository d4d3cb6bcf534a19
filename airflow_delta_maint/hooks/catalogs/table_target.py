"""A task's table, given by URI or by name in a catalog: the checks on the arguments, the resolution, the
credentials it brings, and the gate of catalog-managed tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from airflow_delta_maint.catalogs import gate
from airflow_delta_maint.app.job_definitions import definition
from airflow_delta_maint.catalogs.gate import CATALOG_FEATURES
from airflow_delta_maint.catalogs.names import as_patterns
from airflow_delta_maint.catalogs.unity_credentials import ENV_TOKEN
from airflow_delta_maint.hooks.catalogs import CatalogError, ResolvedTable, airflow_errors, catalog_for
from airflow_delta_maint.hooks.storage_credentials import (
    AMBIENT_CREDENTIAL_VARS,
    StorageCredentials,
    get_connection,
    mask_value,
    resolve_storage_credentials,
)


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def check_table_arguments(table_uri: object, table_name: object, catalog_conn_id: object, where: str) -> None:
    """Exactly one of ``table_uri`` and ``table_name``; a name needs ``catalog_conn_id``.

    :raises CatalogError: one line naming what is missing or given twice.
    """
    if table_uri and table_name:
        raise CatalogError(f"{where}: give table_uri or table_name, not both")
    if not table_uri and not table_name:
        raise CatalogError(f"{where}: give the table as table_uri (a path or URI) or table_name (with catalog_conn_id)")
    if table_name and not catalog_conn_id and not _templated(table_name):
        raise CatalogError(f"{where}: table_name {table_name!r} needs its catalog connection: pass catalog_conn_id")


def credential_operation(jobs: Iterable[str]) -> str:
    """What vended credentials must allow for these jobs: ``READ`` when every one only reads, else ``READ_WRITE``."""
    return "READ_WRITE" if any(definition(job).writes for job in jobs) else "READ"


def resolve_table_name(table_name: str, catalog_conn_id: str | None, operation: str = "READ") -> ResolvedTable:
    """The table ``table_name`` in the catalog of connection ``catalog_conn_id`` (no Spark), with the storage
    credentials a vending catalog gives for ``operation`` (``READ`` or ``READ_WRITE``)."""
    if not catalog_conn_id:
        raise CatalogError(f"table_name {table_name!r} needs its catalog connection: pass catalog_conn_id")
    return catalog_for(catalog_conn_id).resolve(str(table_name).strip(), operation)


def resolve_refreshed_table_name(table_name: str, catalog_conn_id: str | None,
                                 operation: str = "READ") -> tuple[ResolvedTable, dict[str, str]]:
    """As :func:`resolve_table_name`, for a run that asks for vended credentials again before they expire: the
    table and the variables the application asks with (Unity Catalog with a token; empty elsewhere, and then
    credentials are checked as by :func:`resolve_table_name`)."""
    if not catalog_conn_id:
        raise CatalogError(f"table_name {table_name!r} needs its catalog connection: pass catalog_conn_id")
    catalog = catalog_for(catalog_conn_id)
    inner = getattr(catalog, "catalog", None)
    if not hasattr(inner, "resolve_refreshed"):
        return catalog.resolve(str(table_name).strip(), operation), {}
    with airflow_errors():
        return inner.resolve_refreshed(str(table_name).strip(), operation)  # type: ignore[union-attr]


def list_catalog_tables(catalog_conn_id: str, schema: str, include: str | Sequence[str] | None = None,
                        exclude: str | Sequence[str] | None = None) -> list[str]:
    """The Delta tables of ``schema`` in the catalog of ``catalog_conn_id``, as names ``table_name`` takes:
    matching any ``include`` pattern (all without one) and no ``exclude`` pattern (shell-style, ``orders_*``).
    Usable in a ``@task`` whose output mapped operators expand over."""
    if not str(schema or "").strip():
        raise CatalogError("list_catalog_tables needs a schema (database) to list")
    return catalog_for(catalog_conn_id).list_tables(str(schema).strip(), as_patterns(include), as_patterns(exclude))


def storage_credentials_for(resolved: ResolvedTable, storage_conn_id: str | None,
                            refresh_env: Mapping[str, str] | None = None) -> StorageCredentials | None:
    """The credentials a resolved table is read and written with: what the catalog vended (with ``refresh_env``,
    what the application asks for them again with), else ``storage_conn_id``'s, else (Glue) the catalog's own
    ``aws`` connection when it fits the table's store."""
    if resolved.credentials is not None:
        vended = resolved.credentials
        for secret in vended.secrets:
            mask_value(secret)
        refresh = dict(refresh_env or {})
        if ENV_TOKEN in refresh:
            mask_value(refresh[ENV_TOKEN])
        return StorageCredentials(conn_id=resolved.catalog_conn_id, family=vended.family, env=dict(vended.env),
                                  secrets=vended.secrets + ((refresh[ENV_TOKEN],) if ENV_TOKEN in refresh else ()),
                                  unset=AMBIENT_CREDENTIAL_VARS.get(vended.family, ()), refresh_env=refresh)
    if storage_conn_id:
        return resolve_storage_credentials(storage_conn_id, resolved.location)
    if resolved.catalog == "glue" and resolved.location.startswith(("s3://", "s3a://")):
        from airflow_delta_maint.hooks.storage_credentials import credentials_from_connection

        return credentials_from_connection(get_connection(resolved.catalog_conn_id), resolved.location)
    return None


def check_catalog_allows(resolved: ResolvedTable, job: str, storage_options: Mapping[str, str]) -> None:
    """Refuse a writing job on a catalog-managed table unless its catalog reports the operation allowed
    (:func:`airflow_delta_maint.catalogs.gate.check_catalog_allows`, its error an ``AirflowException``)."""
    defined = definition(job)
    with airflow_errors():
        gate.check_catalog_allows(resolved, job, storage_options, writes=defined.writes,
                                  operation=defined.catalog_operation)


__all__ = ["CATALOG_FEATURES", "check_catalog_allows", "check_table_arguments", "credential_operation",
           "list_catalog_tables", "resolve_refreshed_table_name", "resolve_table_name", "storage_credentials_for"]
