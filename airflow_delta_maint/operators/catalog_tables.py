"""The Delta tables of a catalog schema, as a task whose output mapped maintenance tasks expand over."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_delta_maint.app.client_logs import quieted_client_loggers
from airflow_delta_maint.hooks.catalogs.table_target import list_catalog_tables

if TYPE_CHECKING:
    from airflow.sdk import Context


class ListCatalogTablesOperator(BaseOperator):
    """
    List the Delta tables of a database (schema) in a catalog; the XCom value is their names.

    Views and tables of other formats are left out. Any maintenance operator expands over the output,
    one task instance per table::

        tables = ListCatalogTablesOperator(task_id="tables", catalog_conn_id="glue", schema="sales",
                                           exclude=["tmp_*"])
        OptimizeOperator.partial(task_id="optimize", catalog_conn_id="glue").expand(table_name=tables.output)

    and :class:`~airflow_delta_maint.operators.fleet.MaintainTablesOperator` takes it as ``table_names``.
    The same listing is :func:`~airflow_delta_maint.hooks.catalogs.table_target.list_catalog_tables` for a
    ``@task``.

    :param catalog_conn_id: the catalog's connection (type ``aws`` for Glue, ``hive_metastore``;
        see ``docs/catalogs.md``).
    :param schema: the database to list. (templated)
    :param include: shell-style patterns of table names to keep (all without one), a list or a
        comma-separated string. (templated)
    :param exclude: patterns of table names to leave out. (templated)
    """

    template_fields: Sequence[str] = ("schema", "include", "exclude")
    ui_color = "#00add4"

    def __init__(self, *, catalog_conn_id: str, schema: str, include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.catalog_conn_id = catalog_conn_id
        self.schema = schema
        self.include = include
        self.exclude = exclude

    def execute(self, context: Context) -> list[str]:
        with quieted_client_loggers(self.log.isEnabledFor(logging.DEBUG)):  # a task logger at DEBUG shows them
            names = list_catalog_tables(self.catalog_conn_id, self.schema, self.include, self.exclude)
        self.log.info("%d Delta tables in %s: %s", len(names), self.schema, ", ".join(names[:50]))
        return names


__all__ = ["ListCatalogTablesOperator"]
