"""A table by name on the command line: the table found by name in a catalog (with the catalog's kind and
settings) with the plain clients of :mod:`airflow_delta_maint.catalogs`; credentials from the
environment's standard chains, never from flags. Vended storage credentials go into this process's
environment (so Spark, started after, reads them the same way), and never into metrics or output.

Unity Catalog's credentials are asked for again before they expire (:func:`install_credential_refresh`) when the
run knows how: the command line's client holds a token (``DATABRICKS_HOST``/``DATABRICKS_TOKEN``), or the Airflow
hook set ``DELTA_MAINT_UNITY_*`` in the environment; a run of delta-spark's engine does not refresh (its Hadoop
store reads the environment once)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.delta.storage.store import register_credential_provider

from .common_flags import CATALOG, CATALOG_OPTION, TABLE_NAME
from .job_definitions import definition


def add_table_name_arguments(parser: argparse.ArgumentParser, option_type: Any) -> None:
    """The table's name, its catalog and the catalog's settings on a job's parser."""
    parser.add_argument(TABLE_NAME, metavar="NAME",
                        help="the table by name in a catalog instead of TABLE (db.table; catalog.schema.table for unity)")
    parser.add_argument(CATALOG, choices=("glue", "hive", "unity"), help=f"the catalog {TABLE_NAME} is in")
    parser.add_argument(CATALOG_OPTION, action="append", type=option_type, default=[], metavar="K=V",
                        help="a catalog setting (repeatable, no secrets): region_name, endpoint_url, host, port, ...")


def resolve_table_argument(args: argparse.Namespace) -> str | None:
    """Set ``args.table`` from the table's name (resolved in its catalog); return the name, or None for a table
    given by path.

    :raises CatalogError: both or neither of TABLE and a name, no catalog, a name the catalog
        cannot resolve, a catalog-managed table the catalog does not let this job write.
    """
    name = getattr(args, "table_name", None)
    if not name:
        if not args.table:
            raise CatalogError(f"give the table as TABLE (a path or URI) or {TABLE_NAME} with {CATALOG}")
        return None
    if args.table:
        raise CatalogError(f"give TABLE or {TABLE_NAME}, not both")
    if not args.catalog:
        raise CatalogError(f"{TABLE_NAME} {name} needs {CATALOG} glue, hive or unity")
    from airflow_delta_maint.catalogs.gate import check_catalog_allows
    from airflow_delta_maint.catalogs.open_catalog import open_catalog

    catalog = open_catalog(args.catalog, dict(args.catalog_option))
    job = definition(args.job)
    operation = "READ_WRITE" if job.writes else "READ"
    provider = None
    if args.catalog == "unity" and _refreshes(args):
        from airflow_delta_maint.catalogs.unity import REFRESHED_MIN_LIFETIME_S
        from airflow_delta_maint.catalogs.unity_credentials import provider_for_client

        provider = provider_for_client(getattr(catalog, "client", None), name, operation)
        if provider is not None:
            catalog.min_lifetime_s = REFRESHED_MIN_LIFETIME_S  # type: ignore[attr-defined]
    resolved = catalog.resolve(name, operation)
    if resolved.credentials is not None:
        os.environ.update(resolved.credentials.env)
        if provider is not None:
            provider.full_name = resolved.name
            args.credential_provider = provider
    options = {**(resolved.credentials.env if resolved.credentials else {}), **dict(args.storage_option)}
    check_catalog_allows(resolved, job.name, options, writes=job.writes, operation=job.catalog_operation)
    args.table = resolved.location
    return resolved.name


def _refreshes(args: argparse.Namespace) -> bool:
    """Whether this run can ask for credentials again: our engine's (obstore's) stores can, delta-spark's cannot."""
    from airflow_delta_maint.app.execution import uses_delta_spark

    return not uses_delta_spark(args.job, vars(args))


def install_credential_refresh(args: argparse.Namespace) -> bool:
    """Register for the run's table the credential provider of its catalog (a Unity Catalog client with a
    token) or the one the Airflow hook described in the environment (``DELTA_MAINT_UNITY_*``); True when one was
    registered (:func:`drop_credential_refresh` removes it)."""
    from airflow_delta_maint.catalogs.unity_credentials import provider_from_environ

    provider = getattr(args, "credential_provider", None) or provider_from_environ(os.environ)
    if provider is None or not args.table or not _refreshes(args):
        return False
    register_credential_provider(args.table, provider)
    return True


def drop_credential_refresh(args: argparse.Namespace) -> None:
    """Remove the provider :func:`install_credential_refresh` registered."""
    register_credential_provider(args.table, None)


__all__ = ["add_table_name_arguments", "drop_credential_refresh", "install_credential_refresh",
           "resolve_table_argument"]
