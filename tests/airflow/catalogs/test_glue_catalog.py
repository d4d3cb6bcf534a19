"""Tables by name in Glue (moto's Glue and S3 servers): registered as Spark on EMR and a crawler register them,
resolved by the Amazon provider's hook, maintained by name, their rows read back; the connection's secret
stays out of command lines, metrics and rendered fields."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowException
from deltalake import DeltaTable, write_deltalake

from airflow_delta_maint.hooks.catalogs import CatalogError, catalog_for
from airflow_delta_maint.hooks.catalogs.table_target import list_catalog_tables
from airflow_delta_maint.operators.catalog_tables import ListCatalogTablesOperator
from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator, VacuumOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor
from tests.airflow.operators.conftest import argv_of

ROWS = 10


def write_appends(uri: str, options: dict[str, str], commits: int) -> None:
    for i in range(commits):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{j % 2}" for j in range(ROWS)]}),
                        mode="append", partition_by=["part"], storage_options=options)


def rows(uri: str, options: dict[str, str]) -> list[tuple]:
    data = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    return sorted(zip(data.column("id").to_pylist(), data.column("part").to_pylist()))


def spark_on_emr(name: str, path: str) -> dict:
    """A Delta table as Spark on EMR registers it: a placeholder location, the path in the SerDe."""
    return {"Name": name, "TableType": "EXTERNAL_TABLE",
            "Parameters": {"spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"},
            "StorageDescriptor": {"Location": f"s3://lake/warehouse/{name}-__PLACEHOLDER__",
                                  "Columns": [{"Name": "col", "Type": "array<string>"}],
                                  "SerdeInfo": {"Parameters": {"path": path, "serialization.format": "1"}}}}


def by_crawler(name: str, location: str, classification: str = "delta") -> dict:
    return {"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": {"classification": classification},
            "StorageDescriptor": {"Location": location, "Columns": [{"Name": "id", "Type": "bigint"}]}}


@pytest.fixture(scope="module")
def lake(glue_catalog):
    """Database ``sales``: ``orders`` (EMR), ``returns`` (crawler), ``orders_link`` (a resource link into
    ``shared``), ``recent`` (a view), ``raw`` (parquet), ``tmp_scratch`` (Delta); database ``shared``."""
    g, options = glue_catalog.glue, glue_catalog.s3_options
    for uri, commits in (("s3://lake/orders", 6), ("s3://lake/returns", 3), ("s3://lake/scratch", 2)):
        write_appends(uri, options, commits)
    g.create_database(DatabaseInput={"Name": "sales"})
    g.create_database(DatabaseInput={"Name": "shared"})
    g.create_table(DatabaseName="sales", TableInput=spark_on_emr("orders", "s3a://lake/orders"))
    g.create_table(DatabaseName="sales", TableInput=by_crawler("returns", "s3://lake/returns/"))
    g.create_table(DatabaseName="sales", TableInput=spark_on_emr("tmp_scratch", "s3://lake/scratch"))
    g.create_table(DatabaseName="sales", TableInput=by_crawler("raw", "s3://lake/raw/", "parquet"))
    g.create_table(DatabaseName="sales", TableInput={"Name": "recent", "TableType": "VIRTUAL_VIEW",
                                                     "ViewOriginalText": "SELECT * FROM orders"})
    g.create_table(DatabaseName="shared", TableInput={"Name": "orders_link", "TargetTable": {
        "CatalogId": "123456789012", "DatabaseName": "sales", "Name": "orders"}})
    return glue_catalog


def test_names_resolve_to_locations_and_lineage(lake):
    glue = catalog_for(lake.conn_id)
    orders = glue.resolve("sales.orders")
    assert orders.location == "s3://lake/orders" and orders.catalog == "glue" and orders.credentials is None
    assert orders.lineage == ("arn:aws:glue:us-east-1:123456789012", "table/sales/orders")
    assert glue.resolve("sales.returns").location == "s3://lake/returns/"
    link = glue.resolve("shared.orders_link")
    assert link.location == "s3://lake/orders" and link.name == "shared.orders_link"
    assert link.lineage[1] == "table/sales/orders"  # the table the link stands for


def test_listing_keeps_delta_tables_and_links_to_them(lake):
    assert list_catalog_tables(lake.conn_id, "sales") == ["sales.orders", "sales.returns", "sales.tmp_scratch"]
    assert list_catalog_tables(lake.conn_id, "sales", exclude="tmp_*") == ["sales.orders", "sales.returns"]
    assert list_catalog_tables(lake.conn_id, "shared", include=["orders*"]) == ["shared.orders_link"]
    op = ListCatalogTablesOperator(task_id="tables", catalog_conn_id=lake.conn_id, schema="sales", include="ret*")
    assert op.execute({}) == ["sales.returns"]


@pytest.mark.parametrize("name, message", [
    ("sales.nope", r"^Glue \(connection 'glue_lake'\) has no table sales.nope$"),
    ("nodb.orders", r"^Glue \(connection 'glue_lake'\) has no database nodb$"),
    ("sales.recent", r"^Glue table sales.recent is a view, not a Delta table: views cannot be maintained$"),
    ("sales.raw", r"^Glue table sales.raw is not a Delta table \(its format is parquet\)$"),
    ("orders", r"is not of the form database.table"),
])
def test_bad_names_fail_in_one_line_and_write_nothing(lake, name, message):
    before = DeltaTable("s3://lake/orders", storage_options=lake.s3_options).version()
    with pytest.raises(CatalogError, match=message):
        OptimizeOperator(task_id="o", table_name=name, catalog_conn_id=lake.conn_id, execution="local").execute({})
    assert DeltaTable("s3://lake/orders", storage_options=lake.s3_options).version() == before
    with pytest.raises(CatalogError, match="has no database"):
        list_catalog_tables(lake.conn_id, "nodb")


def test_optimize_and_inspect_by_name_keep_the_rows(lake):
    """OPTIMIZE through the resource link, with the catalog's connection as the S3 credentials."""
    before = rows("s3://lake/orders", lake.s3_options)
    inspect = InspectTableOperator(task_id="i", table_name="sales.returns", catalog_conn_id=lake.conn_id,
                                   execution="local").execute({})
    assert inspect["version_read"] == 2 and inspect["table_name"] == "sales.returns"
    op = OptimizeOperator(task_id="o", table_name="shared.orders_link", catalog_conn_id=lake.conn_id,
                          execution="local")
    metrics = op.execute({})
    assert metrics["status"] == "committed" and metrics["table"] == "s3://lake/orders"
    assert metrics["numRemovedFiles"] == 12 and metrics["numAddedFiles"] == 2
    assert rows("s3://lake/orders", lake.s3_options) == before
    assert DeltaTable("s3://lake/orders", storage_options=lake.s3_options).history(1)[0]["operation"] == "OPTIMIZE"
    lineage = op.get_openlineage_facets_on_complete(None)
    assert (lineage.outputs[0].namespace, lineage.outputs[0].name) == (
        "arn:aws:glue:us-east-1:123456789012", "table/sales/orders")

    # the connection's secret: in the worker's options only, never in metrics, rendered fields or repr
    assert lake.secret not in json.dumps(metrics) and lake.secret not in json.dumps(inspect)
    rendered = {f: getattr(op, f) for f in op.template_fields}
    assert lake.secret not in json.dumps(rendered, default=str) and lake.secret not in repr(op._resolved)


def test_the_catalog_connection_reaches_spark_submit_through_the_environment_only(lake):
    op = VacuumOperator(task_id="v", table_name="sales.tmp_scratch", catalog_conn_id=lake.conn_id)
    op.resolve_storage_credentials()
    hook = op.get_hook()
    cmd = hook.build_command("vacuum", op.table_uri, argv_of(op), "/tmp/m.json", op.table_storage_options)
    assert not any(lake.secret in part for part in cmd) and "s3://lake/scratch" in cmd
    assert not any(lake.secret in str(v) for v in hook._conf.values())
    assert hook.submit_env()["AWS_SECRET_ACCESS_KEY"] == lake.secret
    from airflow.sdk.log import _secrets_masker

    assert lake.secret not in str(_secrets_masker().redact(f"x {lake.secret} y"))  # masked


def test_sensor_and_fleet_by_name(lake):
    seen = CommitIntervalSensor(task_id="s", table_name="sales.returns", catalog_conn_id=lake.conn_id,
                                min_commits=2, since="last_checkpoint").poke({})
    assert seen.is_done and seen.xcom_value["to_version"] == 2
    before = rows("s3://lake/returns", lake.s3_options)
    results = MaintainTablesOperator(task_id="m", table_names=["sales.returns", "sales.tmp_scratch"],
                                     catalog_conn_id=lake.conn_id, jobs={"optimize": {}, "inspect": {}},
                                     execution="auto").execute({})
    assert [(r["table_name"], r["status"]) for r in results] == [("sales.returns", "committed"),
                                                                 ("sales.tmp_scratch", "committed")]
    assert rows("s3://lake/returns", lake.s3_options) == before
    with pytest.raises(AirflowException, match="has no table sales.gone"):
        MaintainTablesOperator(task_id="m", table_names=["sales.returns", "sales.gone"],
                               catalog_conn_id=lake.conn_id).execute({})
