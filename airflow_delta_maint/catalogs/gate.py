"""The gate of catalog-managed tables: a writing job runs only where the catalog allows its operation."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import ResolvedTable

#: the Delta features that hand a table's commits to a catalog
CATALOG_FEATURES = frozenset({"catalogManaged", "catalogOwned-preview"})
CATALOG_NAMES = {"glue": "Glue", "hive": "the Hive metastore", "unity": "Unity Catalog"}


def catalog_features(table_uri: str, storage_options: Mapping[str, str]) -> frozenset[str]:
    """The catalog features (``catalogManaged``) among the table's protocol features, read from its log."""
    from airflow_delta_maint.delta.log.table_state import read_table
    from airflow_delta_maint.delta.protocol.features import table_features

    reader, writer = read_table(table_uri, lambda state: table_features(state.protocol),
                                storage_options=storage_options, paths_only=True, what="the catalog check")
    return (reader | writer) & CATALOG_FEATURES


def check_catalog_allows(resolved: ResolvedTable, job: str, storage_options: Mapping[str, str], *, writes: bool,
                         operation: str) -> None:
    """Refuse a writing job on a catalog-managed table unless its catalog reports the operation allowed.

    Jobs that do not write pass: they read the commits the catalog published to the log.

    :param job: the job's name, for the message.
    :param writes: whether the job changes the table.
    :param operation: the job's operation as catalogs name it in their allowed maintenance operations.
    :raises CatalogError: one line naming the table, its catalog and the operation.
    """
    if not writes:
        return
    features = catalog_features(resolved.location, storage_options)
    if not resolved.managed and not features:
        return
    if resolved.allowed_operations is not None and operation in resolved.allowed_operations:
        return
    why = f"the {'/'.join(sorted(features))} table feature" if features else "the catalog"
    allowed = (f"it allows only {', '.join(sorted(resolved.allowed_operations)) or 'none'}"
               if resolved.allowed_operations is not None else "it reports no maintenance operation allowed")
    raise CatalogError(
        f"{resolved.name} is managed by {CATALOG_NAMES.get(resolved.catalog, resolved.catalog)} (connection "
        f"{resolved.catalog_conn_id!r}, {why}): its commits go through the catalog and {allowed}; {job} "
        "refused, nothing written")


__all__ = ["CATALOG_FEATURES", "CATALOG_NAMES", "catalog_features", "check_catalog_allows"]
