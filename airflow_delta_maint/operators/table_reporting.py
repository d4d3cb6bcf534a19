"""What a maintenance operator reports of its table: the asset event of the table among its outlets, carrying
the run's metrics, and its OpenLineage datasets and facets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

from airflow_delta_maint.hooks.catalogs import ResolvedTable
from airflow_delta_maint.operators.lineage import asset_event_extra, operator_lineage, table_uri_matches

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

__all__ = ["TableReporting"]


class TableReporting:
    """Assets and lineage of an operator that has ``table_uri``, ``outlets``, ``_resolved``, ``_metrics``,
    ``resolve_table()`` and ``log``."""

    table_uri: str
    outlets: list[Any]
    _metrics: dict[str, Any] | None
    log: Any

    @property
    def _resolved(self) -> ResolvedTable | None:
        raise NotImplementedError

    def resolve_table(self) -> ResolvedTable | None:
        raise NotImplementedError

    def table_asset_uris(self) -> list[str]:
        """The URIs that name this table as an asset: its location, and for a table by name its catalog asset URI
        (``arn:aws:glue:...:table/db/t``, ``hive://host:port/db.t``, ``databricks://host/c.s.t``)."""
        resolved = self._resolved
        return [u for u in (self.table_uri, resolved.asset_uri if resolved is not None else "") if u]

    def table_outlets(self) -> list[Asset]:
        """The task's outlets that name this table (by its location or, for a table by name, its catalog)."""
        uris = self.table_asset_uris()
        return [o for o in self.outlets
                if isinstance(o, Asset) and any(table_uri_matches(o.uri, uri) for uri in uris)]

    def report(self, metrics: dict[str, Any], context: Context) -> dict[str, Any]:
        """Keep the run's metrics for lineage; put them on the table's asset event, or drop the event when skipped."""
        if self._resolved is not None:
            metrics.setdefault("table_name", self._resolved.name)
        self._metrics = metrics
        tables = self.table_outlets()
        if tables and metrics.get("status") == "skipped":
            self.outlets = [o for o in self.outlets if o not in tables]  # this run only: no event
            self.log.info("Skipped: no asset event for %s", ", ".join(a.uri for a in tables))
        else:
            extra = asset_event_extra(metrics)
            for asset in tables:
                context["outlet_events"][asset].extra.update(extra)
        return metrics

    def lineage_dataset(self) -> tuple[str, str] | None:
        """The table's OpenLineage dataset by its catalog name (None for a table given by URI)."""
        resolved = self.resolve_table()
        return resolved.lineage if resolved is not None and resolved.lineage[0] else None

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """OpenLineage: the table as input and output dataset."""
        return operator_lineage(self.table_uri or "", dataset=self.lineage_dataset())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets, the output's statistics and the run's metrics."""
        return operator_lineage(self.table_uri or "", self._metrics, dataset=self.lineage_dataset())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """OpenLineage: the datasets of the failed run."""
        return operator_lineage(self.table_uri or "", dataset=self.lineage_dataset())

