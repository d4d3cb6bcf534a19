"""``--table-name`` on the command line: the table found by name in a catalog (``--catalog``,
``--catalog-option``) with the plain clients of :mod:`airflow_delta_maint.catalogs`; credentials from the
environment's standard chains, never from flags. Vended storage credentials go into this process's
environment (so Spark, started after, reads them the same way), and never into metrics or output."""

from __future__ import annotations

import argparse
import os
from typing import Any

from airflow_delta_maint.catalogs.errors import CatalogError

#: jobs that only read: they get READ credentials and pass the catalog-managed gate
READ_ONLY_JOBS = frozenset({"inspect"})


def add_table_name_arguments(parser: argparse.ArgumentParser, option_type: Any) -> None:
    """``--table-name``, ``--catalog``, ``--catalog-option`` on a job's parser."""
    parser.add_argument("--table-name", metavar="NAME",
                        help="the table by name in a catalog instead of TABLE (db.table; catalog.schema.table for unity)")
    parser.add_argument("--catalog", choices=("glue", "hive", "unity"), help="the catalog --table-name is in")
    parser.add_argument("--catalog-option", action="append", type=option_type, default=[], metavar="K=V",
                        help="a catalog setting (repeatable, no secrets): region_name, endpoint_url, host, port, ...")


def resolve_table_argument(args: argparse.Namespace) -> str | None:
    """Set ``args.table`` from ``--table-name`` (resolved in ``--catalog``); return the name, or None for a table
    given by path.

    :raises CatalogError: both or neither of TABLE and ``--table-name``, no ``--catalog``, a name the catalog
        cannot resolve, a catalog-managed table the catalog does not let this job write.
    """
    name = getattr(args, "table_name", None)
    if not name:
        if not args.table:
            raise CatalogError("give the table as TABLE (a path or URI) or --table-name with --catalog")
        return None
    if args.table:
        raise CatalogError("give TABLE or --table-name, not both")
    if not args.catalog:
        raise CatalogError(f"--table-name {name} needs --catalog glue, hive or unity")
    from airflow_delta_maint.catalogs.gate import check_catalog_allows
    from airflow_delta_maint.catalogs.open_catalog import open_catalog

    catalog = open_catalog(args.catalog, dict(args.catalog_option))
    resolved = catalog.resolve(name, "READ" if args.job in READ_ONLY_JOBS else "READ_WRITE")
    if resolved.credentials is not None:
        os.environ.update(resolved.credentials.env)
    options = {**(resolved.credentials.env if resolved.credentials else {}), **dict(args.storage_option)}
    check_catalog_allows(resolved, args.job, options, READ_ONLY_JOBS)
    args.table = resolved.location
    return resolved.name


__all__ = ["add_table_name_arguments", "resolve_table_argument"]
