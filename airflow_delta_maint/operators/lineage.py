"""What maintenance tells Airflow's asset graph and OpenLineage: asset event extras, datasets and facets.

Everything OpenLineage is imported inside the functions, so the provider works without the
OpenLineage provider installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

#: the run facet's key in OpenLineage events
RUN_FACET_NAME = "deltaMaintenance"
#: asset URI schemes of tables named by their catalog (Glue's ARN, a Hive metastore, Unity Catalog): their
#: names are case-insensitive in the catalog, so they match whatever the case
CATALOG_SCHEMES = frozenset({"arn", "hive", "databricks"})


def dataset_name(table_uri: str) -> tuple[str, str]:
    """
    The OpenLineage ``(namespace, name)`` of a table by the naming spec.

    A local path or ``file://`` URI is ``("file", absolute path)``; an object-store URI is
    ``("scheme://authority", key path)``: ``s3://bucket`` + ``path/to/table``, ``gs://bucket``,
    ``abfss://container@account.dfs.core.windows.net``, ... A table's catalog asset URI splits as the
    OpenLineage naming spec names it: ``arn:aws:glue:{region}:{account}:table/{db}/{table}`` is
    ``("arn:aws:glue:{region}:{account}", "table/{db}/{table}")``; ``hive://host:port/db.table`` is
    ``("hive://host:port", "db.table")``.
    """
    parts = urlsplit(table_uri)
    if parts.scheme.lower() == "arn" and table_uri.count(":") >= 5:  # arn:partition:service:region:account:resource
        head = table_uri.split(":", 5)
        return ":".join(head[:5]), head[5]
    if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # a path (or a Windows drive letter)
        path = parts.path if parts.scheme == "file" else table_uri
        return "file", os.path.abspath(path).rstrip("/") or "/"
    return f"{parts.scheme}://{parts.netloc}", parts.path.strip("/")


def table_uri_matches(asset_uri: str, table_uri: str) -> bool:
    """Whether an asset's URI names the table (``file:///t`` and ``/t`` are the same table; a catalog's
    ``hive://h:9083/Sales.Orders`` and ``hive://h:9083/sales.orders`` too)."""
    asset, table = dataset_name(asset_uri), dataset_name(table_uri)
    if urlsplit(asset_uri).scheme.lower() in CATALOG_SCHEMES:
        return (asset[0].lower(), asset[1].lower()) == (table[0].lower(), table[1].lower())
    return asset == table


def asset_event_extra(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The run's metrics as an asset event's ``extra``: JSON values only (others become strings)."""
    return json.loads(json.dumps(dict(metrics), default=str))


def _output_statistics(metrics: Mapping[str, Any]) -> dict[str, int]:
    stats = {}
    if isinstance(metrics.get("numAddedFiles"), int):
        stats["fileCount"] = metrics["numAddedFiles"]
    if isinstance(metrics.get("numAddedBytes"), int):
        stats["size"] = metrics["numAddedBytes"]
    return stats


def operator_lineage(table_uri: str, metrics: Mapping[str, Any] | None = None,
                     dataset: tuple[str, str] | None = None) -> OperatorLineage:
    """
    The OpenLineage view of one maintenance run: the table as input and output dataset; with the
    run's metrics, the output's statistics (files and bytes written) and a run facet holding them.

    :param table_uri: the table's path or URI.
    :param metrics: the run's metrics, when it finished (None at start and on failure).
    :param dataset: the table's ``(namespace, name)`` in its catalog (a table given by name: ``hive://host:port``
        and ``db.table``, ``arn:aws:glue:region:account`` and ``table/db/table``, ...), instead of its location's.
    """
    import attrs
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset, InputDataset, OutputDataset
    from openlineage.client.facet_v2 import RunFacet, output_statistics_output_dataset

    @attrs.define
    class DeltaMaintenanceRunFacet(RunFacet):
        """The maintenance run's metrics (operation, status, versions, the job's own numbers)."""

        metrics: dict[str, Any] = attrs.field(factory=dict)

    namespace, name = dataset if dataset is not None else dataset_name(table_uri)
    inputs: list[Dataset] = [InputDataset(namespace=namespace, name=name)]
    outputs: list[Dataset] = [OutputDataset(namespace=namespace, name=name)]
    run_facets: dict[str, Any] = {}
    if metrics is not None:
        stats = _output_statistics(metrics)
        if stats:
            outputs = [OutputDataset(namespace=namespace, name=name, outputFacets={
                "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                    rowCount=None, size=stats.get("size"), fileCount=stats.get("fileCount"))})]
        run_facets[RUN_FACET_NAME] = DeltaMaintenanceRunFacet(metrics=asset_event_extra(metrics))
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def inject_parent_job_info(conf: Mapping[str, Any] | None, context: Context) -> dict[str, Any]:
    """
    The Spark conf with the OpenLineage parent job information added (``spark.openlineage.parent*``),
    when ``[openlineage] spark_inject_parent_job_info`` is on, as ``SparkSubmitOperator`` does; keys
    already in ``conf`` win. Unchanged without the OpenLineage provider or with OpenLineage disabled.
    """
    from airflow.sdk.configuration import conf as airflow_conf

    properties = dict(conf or {})
    if not airflow_conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False):
        return properties
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:  # no OpenLineage provider: nothing to report to
        return properties
    if is_disabled():
        return properties
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )

    return inject_parent_job_information_into_spark_properties(properties, context)


__all__ = [
    "CATALOG_SCHEMES", "RUN_FACET_NAME", "asset_event_extra", "dataset_name", "inject_parent_job_info", "operator_lineage",
    "table_uri_matches",
]
