"""Reading catalog entries without a server: names, include/exclude, Spark's placeholder locations, resource
links, Delta detection, the table arguments and the catalog-managed gate's wording."""

from __future__ import annotations

import json

import pytest

from airflow_delta_maint.catalogs.errors import CatalogError
from airflow_delta_maint.catalogs.glue import entry_is_delta, entry_location, glue_lineage, link_target
from airflow_delta_maint.catalogs.hive import hive_lineage
from airflow_delta_maint.catalogs.names import as_patterns, select_names, split_name
from airflow_delta_maint.catalogs.table_entry import real_location, table_format
from airflow_delta_maint.hooks.catalogs import ResolvedTable, catalog_for, catalog_kind
from airflow_delta_maint.hooks.catalogs.table_target import check_table_arguments
from airflow_delta_maint.operators.lineage import operator_lineage
from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from airflow_delta_maint.triggers.table_commits import TableCommitsTrigger

EMR = {"Name": "events", "DatabaseName": "lake", "TableType": "EXTERNAL_TABLE", "CatalogId": "123456789012",
       "Parameters": {"spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"},
       "StorageDescriptor": {"Location": "s3://lake/warehouse/events-__PLACEHOLDER__",
                             "SerdeInfo": {"Parameters": {"path": "s3a://lake/events", "serialization.format": "1"}}}}


@pytest.mark.parametrize("name, parts, expected", [
    ("sales.orders", 2, ["sales", "orders"]),
    (" sales . orders ", 2, ["sales", "orders"]),
    ("`my.db`.orders", 2, ["my.db", "orders"]),
    ("main.sales.orders", 3, ["main", "sales", "orders"]),
])
def test_names_split_into_their_parts(name, parts, expected):
    assert split_name(name, parts, "Glue") == expected


@pytest.mark.parametrize("name, parts", [("orders", 2), ("a.b.c", 2), ("sales.", 2), ("`a.b", 2), ("a.b", 3), ("", 2)])
def test_malformed_names_are_refused_in_one_line(name, parts):
    with pytest.raises(CatalogError, match="is not of the form") as exc:
        split_name(name, parts, "Glue")
    assert "\n" not in str(exc.value)


def test_include_and_exclude_patterns():
    names = ["orders", "orders_tmp", "Customers", "tmp_x", "events"]
    assert select_names(names) == sorted(names)
    assert select_names(names, include=["orders*", "customers"]) == ["Customers", "orders", "orders_tmp"]
    assert select_names(names, exclude="*tmp*") == ["Customers", "events", "orders"]
    assert select_names(names, include="orders*", exclude=["*_tmp"]) == ["orders"]
    assert as_patterns(" a*, ,b ") == ["a*", "b"] and as_patterns(None) == []


def test_spark_placeholder_location_gives_way_to_the_serde_path():
    assert entry_location("lake.events", EMR) == "s3://lake/events"
    assert real_location("s3://b/t-__PLACEHOLDER__", {}) is None
    assert real_location("s3://b/t", None) == "s3://b/t"
    assert real_location("s3://b/t", {"path": "s3://b/other"}) == "s3://b/other"


@pytest.mark.parametrize("table_type, params, serde, expected", [
    ("EXTERNAL_TABLE", {"spark.sql.sources.provider": "DELTA"}, {}, "delta"),
    ("EXTERNAL_TABLE", {"table_type": "DELTA"}, {}, "delta"),
    ("EXTERNAL_TABLE", {"classification": "delta"}, {}, "delta"),
    ("MANAGED_TABLE", {}, {"provider": "delta"}, "delta"),
    ("VIRTUAL_VIEW", {"spark.sql.sources.provider": "delta"}, {}, "view"),
    ("EXTERNAL_TABLE", {"classification": "parquet"}, {}, "parquet"),
    ("EXTERNAL_TABLE", {"table_type": "ICEBERG"}, {}, "iceberg"),
    ("MANAGED_TABLE", {}, {}, "hive"),
])
def test_delta_is_recognised_from_what_each_writer_records(table_type, params, serde, expected):
    assert table_format(table_type, params, serde) == expected


def test_views_and_other_formats_are_refused_naming_what_they_are():
    view = {**EMR, "TableType": "VIRTUAL_VIEW"}
    with pytest.raises(CatalogError, match=r"^Glue table lake.v is a view, not a Delta table"):
        entry_location("lake.v", view)
    parquet = {**EMR, "Parameters": {"classification": "parquet"}}
    with pytest.raises(CatalogError, match=r"is not a Delta table \(its format is parquet\)$"):
        entry_location("lake.p", parquet)
    assert not entry_is_delta(parquet) and entry_is_delta(EMR)
    lost = {**EMR, "StorageDescriptor": {"Location": "s3://b/t-__PLACEHOLDER__"}}
    with pytest.raises(CatalogError, match="without a location"):
        entry_location("lake.t", lost)


def test_resource_links_name_their_target():
    link = {"Name": "events_link", "TargetTable": {"CatalogId": "210987654321", "DatabaseName": "lake",
                                                   "Name": "events", "Region": "eu-west-1"}}
    assert link_target(link) == link["TargetTable"]
    assert link_target(EMR) is None


def test_lineage_names_by_the_openlineage_naming_spec():
    assert glue_lineage("eu-west-1", "123456789012", "lake", "events") == (
        "arn:aws:glue:eu-west-1:123456789012", "table/lake/events")
    assert hive_lineage("metastore", 9083, "sales", "orders") == ("hive://metastore:9083", "sales.orders")
    lineage = operator_lineage("s3://lake/events", dataset=glue_lineage("eu-west-1", "1", "lake", "events"))
    assert [(d.namespace, d.name) for d in lineage.inputs + lineage.outputs] == [
        ("arn:aws:glue:eu-west-1:1", "table/lake/events")] * 2


def test_connection_types_choose_the_catalog():
    assert catalog_kind("aws", {}) == "glue" and catalog_kind("hive_metastore", None) == "hive"
    assert catalog_kind("http", {"catalog": "Hive"}) == "hive" and catalog_kind("unity_catalog", {}) == "unity"
    assert catalog_kind("databricks", {}) == "unity" and catalog_kind("http", {"catalog": "unity"}) == "unity"
    assert catalog_kind("http", {}) is None and catalog_kind("aws", {"catalog": "nope"}) is None


def test_a_connection_of_another_type_or_none_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NOT_A_CATALOG", json.dumps({"conn_type": "http", "host": "h"}))
    with pytest.raises(CatalogError, match="has type 'http': use type aws"):
        catalog_for("not_a_catalog")
    with pytest.raises(CatalogError, match="catalog connection 'nowhere' cannot be found"):
        catalog_for("nowhere")


def test_exactly_one_of_uri_and_name_and_a_name_needs_its_catalog():
    with pytest.raises(CatalogError, match="give table_uri or table_name, not both"):
        OptimizeOperator(task_id="o", table_uri="/t", table_name="a.b", catalog_conn_id="glue")
    with pytest.raises(CatalogError, match="give the table as table_uri"):
        InspectTableOperator(task_id="i")
    with pytest.raises(CatalogError, match="table_name 'a.b' needs its catalog connection: pass catalog_conn_id"):
        OptimizeOperator(task_id="o", table_name="a.b")
    with pytest.raises(CatalogError, match="needs its catalog connection"):
        CommitIntervalSensor(task_id="s", table_name="a.b", min_commits=3)
    with pytest.raises(ValueError, match="give table_uri, or table_name with catalog_conn_id"):
        TableCommitsTrigger(table_name="a.b", min_commits=3)
    check_table_arguments(None, "{{ params.table }}", None, "t")  # a template: checked once rendered
    op = OptimizeOperator(task_id="o", table_name="lake.events", catalog_conn_id="glue")
    assert "table_name" in op.template_fields and op.table_uri == ""  # its location once resolved


def test_a_name_trigger_serializes_ids_only_and_keeps_uri_triggers_as_they_were():
    by_name = TableCommitsTrigger(table_name="lake.events", catalog_conn_id="glue", min_commits=3)
    _, kwargs = by_name.serialize()
    assert kwargs["table_name"] == "lake.events" and kwargs["catalog_conn_id"] == "glue"
    assert kwargs["table_uri"] is None
    _, by_uri = TableCommitsTrigger(table_uri="s3://b/t", min_commits=3).serialize()
    assert "table_name" not in by_uri  # the state key of existing watchers does not move


def test_resolved_tables_never_show_their_credentials():
    from airflow_delta_maint.catalogs.resolved import VendedCredentials

    creds = VendedCredentials("s3", {"AWS_SECRET_ACCESS_KEY": "vended-secret-value"}, ("vended-secret-value",))
    assert "vended-secret-value" not in repr(creds)
    table = ResolvedTable("sales.orders", "s3://b/t", "glue", "lake", credentials=creds)
    assert "vended-secret-value" not in repr(table) and "vended-secret-value" not in str(table)


def test_a_deferred_sensor_by_name_hands_the_trigger_ids_only():
    from airflow_delta_maint.triggers.commit_interval import CommitIntervalTrigger

    trigger = CommitIntervalTrigger(None, 3, table_name="lake.events", catalog_conn_id="glue")
    path, kwargs = trigger.serialize()
    assert kwargs["table_name"] == "lake.events" and kwargs["catalog_conn_id"] == "glue" and kwargs["table_uri"] is None
    assert trigger.label == "lake.events (catalog glue)"
