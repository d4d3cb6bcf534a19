"""Tables by name in catalogs, over plain client libraries: AWS Glue (boto3), a Hive metastore (hmsclient),
Unity Catalog (databricks-sdk). Imports neither Airflow nor Spark: the Airflow hooks
(:mod:`airflow_delta_maint.hooks.catalogs`) build these from connections, the ``delta-maint`` command line
from its flags and the environment (:mod:`.open_catalog`)."""

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.resolved import ResolvedTable, TableCatalog, VendedCredentials

__all__ = ["CatalogError", "ResolvedTable", "TableCatalog", "VendedCredentials"]
