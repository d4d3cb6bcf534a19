"""The catalog types of the Airflow side: the plain catalogs' (:mod:`airflow_delta_maint.catalogs`), with their
error as an ``AirflowException``, and the translation of the one into the other."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.catalogs.errors import CatalogError as PlainCatalogError
from airflow_delta_maint.catalogs.resolved import ResolvedTable, TableCatalog, VendedCredentials


class CatalogError(AirflowException, PlainCatalogError):
    """A table name a catalog cannot resolve for maintenance, told in one line (nothing was written)."""


@contextlib.contextmanager
def airflow_errors() -> Iterator[None]:
    """Raise a plain catalog's error as :class:`CatalogError` (an ``AirflowException``), its line unchanged."""
    try:
        yield
    except CatalogError:
        raise
    except PlainCatalogError as exc:
        raise CatalogError(str(exc)) from None


__all__ = ["CatalogError", "PlainCatalogError", "ResolvedTable", "TableCatalog", "VendedCredentials",
           "airflow_errors"]
