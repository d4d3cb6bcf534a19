"""Assets by catalog name: each catalog's asset URI (the OpenLineage naming of its tables) is a valid Airflow asset
URI that serializes unchanged; an operator on a table by name puts its metrics on the outlet that names the table
by catalog (or by location), none on a skipped run; a TableCommitsTrigger by name in an AssetWatcher fires with the
asset's URI in its payload; lineage names the same table. On the Unity Catalog contract server and moto's S3."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.execution_time.context import OutletEventAccessors
from airflow.serialization.serialized_objects import BaseSerialization

from airflow_delta_maint.catalogs.glue import glue_lineage
from airflow_delta_maint.catalogs.hive import hive_lineage
from airflow_delta_maint.catalogs.resolved import ResolvedTable, catalog_asset_uri
from airflow_delta_maint.catalogs.unity import unity_lineage
from airflow_delta_maint.operators.lineage import dataset_name, table_uri_matches
from airflow_delta_maint.operators.maintenance import OptimizeOperator
from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger
from tests.airflow.catalogs.test_glue_catalog import rows, write_appends
from tests.airflow.catalogs.test_unity_catalog import store_options, table_info

TABLE = "s3://lake/uca/events"
CASES = [
    (glue_lineage("eu-west-1", "123456789012", "sales", "orders"), "arn:aws:glue:eu-west-1:123456789012:table/sales/orders"),
    (hive_lineage("metastore.internal", 9083, "sales", "orders"), "hive://metastore.internal:9083/sales.orders"),
    (unity_lineage("dbc-1234.cloud.databricks.com", "main.sales.orders"),
     "databricks://dbc-1234.cloud.databricks.com/main.sales.orders"),
]


@pytest.mark.parametrize("lineage, uri", CASES)
def test_catalog_asset_uris_are_airflow_asset_uris_named_as_openlineage_names_tables(lineage, uri):
    assert catalog_asset_uri(lineage) == uri
    assert ResolvedTable("n", "s3://b/t", "c", "conn", lineage=lineage).asset_uri == uri
    asset = Asset(uri=uri)
    assert asset.uri == uri  # Airflow's normalization leaves it as it is
    assert BaseSerialization.deserialize(BaseSerialization.serialize(asset)).uri == uri
    assert dataset_name(uri) == lineage
    assert table_uri_matches(uri, uri.upper().replace("ARN:", "arn:").replace("HIVE:", "hive:")
                             .replace("DATABRICKS:", "databricks:"))  # catalog names are case-insensitive
    other = uri.replace("orders", "returns")
    assert not table_uri_matches(other, uri) and not table_uri_matches("s3://lake/sales/orders", uri)


def test_tables_by_uri_keep_their_names():
    assert catalog_asset_uri(("", "")) == "" and ResolvedTable("n", "/t", "c", "conn").asset_uri == ""
    assert dataset_name("s3://Bucket/Path/T/") == ("s3://Bucket", "Path/T")
    assert table_uri_matches("file:///data/t", "/data/t") and not table_uri_matches("s3://b/T", "s3://b/t")


@pytest.fixture(scope="module")
def uca(unity_catalog):
    write_appends(TABLE, unity_catalog.s3.s3_options, 4)
    unity_catalog.update(tables={"main.shop.events": table_info("main.shop.events", TABLE)})
    return unity_catalog


def test_outlets_and_watchers_by_catalog_name(uca):
    name_uri = f"databricks://{uca.host}/main.shop.events"
    by_name, by_location, other = Asset(uri=name_uri), Asset(uri=TABLE), Asset(uri=f"databricks://{uca.host}/main.x.y")
    before = rows(TABLE, uca.s3.s3_options)

    def optimize() -> tuple[OptimizeOperator, dict, OutletEventAccessors]:
        op = OptimizeOperator(task_id="o", table_name="main.shop.events", catalog_conn_id=uca.conn_id,
                              execution="local", storage_options=store_options(uca),
                              outlets=[by_name, by_location, other])
        events = OutletEventAccessors()
        return op, op.execute({"outlet_events": events}), events

    op, metrics, events = optimize()
    assert metrics["status"] == "committed" and metrics["table_name"] == "main.shop.events"
    assert op.table_outlets() == [by_name, by_location]
    assert events[by_name].extra == events[by_location].extra == metrics and events[other].extra == {}
    lineage = op.get_openlineage_facets_on_complete(None)
    assert (lineage.outputs[0].namespace, lineage.outputs[0].name) == dataset_name(name_uri)
    assert rows(TABLE, uca.s3.s3_options) == before

    op, metrics, events = optimize()  # nothing left to compact: skipped, no event for the table
    assert metrics["status"] == "skipped" and op.outlets == [other]

    trigger = TableCommitsTrigger(table_name="main.shop.events", catalog_conn_id=uca.conn_id, min_commits=3,
                                  since="version", since_version=0, storage_options=store_options(uca),
                                  poke_interval=0.05)
    asset = Asset(uri=name_uri, watchers=[AssetWatcher(name="events_commits", trigger=trigger)])
    assert BaseSerialization.deserialize(BaseSerialization.serialize(asset)).uri == name_uri

    async def first_event():
        runner = trigger.run()
        try:
            return await asyncio.wait_for(runner.__anext__(), 60)
        finally:
            await runner.aclose()

    payload = asyncio.run(first_event()).payload
    assert payload == {"table_uri": TABLE, "table_name": "main.shop.events", "asset_uri": asset.uri,
                       "from_version": 1, "to_version": 4, "commits": 4}
