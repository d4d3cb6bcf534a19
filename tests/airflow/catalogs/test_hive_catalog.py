"""Tables by name in a real Hive metastore (Thrift, started by the test): registered as Spark registers a Delta
table, resolved with hmsclient, maintained by name, their rows read back."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hmsclient.genthrift.hive_metastore import ttypes
from hmsclient.hmsclient import HMSClient

from airflow_delta_maint.hooks.catalogs import CatalogError, catalog_for
from airflow_delta_maint.hooks.catalogs.table_target import list_catalog_tables
from airflow_delta_maint.operators.fleet import MaintainTablesOperator
from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator
from airflow_delta_maint.sensors.commit_interval import CommitIntervalSensor


def write_appends(path, commits: int) -> None:
    for i in range(commits):
        ids = list(range(i * 10, (i + 1) * 10))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{j % 2}" for j in ids]}),
                        mode="append", partition_by=["part"])


def rows(path) -> list[tuple]:
    data = DeltaTable(str(path)).to_pyarrow_table()
    return sorted(zip(data.column("id").to_pylist(), data.column("part").to_pylist()))


def spark_delta_table(db: str, name: str, path: str, warehouse: str) -> ttypes.Table:
    """A Delta table as Spark's Hive catalog registers one: provider delta, the path in the SerDe, a placeholder."""
    sd = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("col", "array<string>", "from deserializer")],
        location=f"file:{warehouse}/{name}-__PLACEHOLDER__",
        inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
        serdeInfo=ttypes.SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                                   parameters={"path": path, "serialization.format": "1"}))
    return ttypes.Table(tableName=name, dbName=db, owner="maint", sd=sd, partitionKeys=[], tableType="EXTERNAL_TABLE",
                        parameters={"spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"})


@pytest.fixture(scope="module")
def sales(hive_metastore, tmp_path_factory):
    """Database ``sales``: Delta tables ``orders`` and ``returns``, a view ``recent``, a Hive table ``raw``."""
    root = tmp_path_factory.mktemp("hive-tables")
    write_appends(root / "orders", 6)
    write_appends(root / "returns", 2)
    with HMSClient(host="127.0.0.1", port=hive_metastore.port) as client:
        client.create_database(ttypes.Database(name="sales", locationUri=f"file:{root}/sales.db", parameters={}))
        client.create_table(spark_delta_table("sales", "orders", f"file:{root}/orders", f"{root}/sales.db"))
        client.create_table(spark_delta_table("sales", "returns", str(root / "returns"), f"{root}/sales.db"))
        client.create_table(ttypes.Table(
            tableName="recent", dbName="sales", owner="maint", tableType="VIRTUAL_VIEW", partitionKeys=[],
            viewOriginalText="SELECT * FROM orders", viewExpandedText="SELECT * FROM sales.orders", parameters={},
            sd=ttypes.StorageDescriptor(cols=[ttypes.FieldSchema("id", "bigint", "")],
                                        serdeInfo=ttypes.SerDeInfo(parameters={}))))
        raw = spark_delta_table("sales", "raw", f"file:{root}/raw", f"{root}/sales.db")
        raw.parameters = {"EXTERNAL": "TRUE"}
        raw.sd.serdeInfo.parameters = {}
        raw.sd.location = f"file:{root}/raw"
        client.create_table(raw)
    return root, hive_metastore.port


def test_names_resolve_and_list_from_the_metastore(sales):
    root, port = sales
    orders = catalog_for("hive_lake").resolve("sales.orders")
    assert orders.location == f"file:{root}/orders" and orders.catalog == "hive"
    assert orders.lineage == (f"hive://127.0.0.1:{port}", "sales.orders")
    assert list_catalog_tables("hive_lake", "sales") == ["sales.orders", "sales.returns"]
    assert list_catalog_tables("hive_lake", "sales", include="ret*") == ["sales.returns"]


@pytest.mark.parametrize("name, message", [
    ("sales.nope", r"^the Hive metastore at 127.0.0.1:\d+ \(connection 'hive_lake'\) has no table sales.nope$"),
    ("sales.recent", r"^Hive metastore table sales.recent is a view, not a Delta table"),
    ("sales.raw", r"^Hive metastore table sales.raw is not a Delta table \(its format is hive\)$"),
])
def test_bad_names_fail_in_one_line(sales, name, message):
    root, _ = sales
    before = DeltaTable(str(root / "orders")).version()
    with pytest.raises(CatalogError, match=message):
        OptimizeOperator(task_id="o", table_name=name, catalog_conn_id="hive_lake", execution="local").execute({})
    assert DeltaTable(str(root / "orders")).version() == before
    with pytest.raises(CatalogError, match="has no database nodb"):
        list_catalog_tables("hive_lake", "nodb")


def test_optimize_sensor_and_fleet_by_name_keep_the_rows(sales):
    root, port = sales
    before = rows(root / "orders")
    op = OptimizeOperator(task_id="o", table_name="sales.orders", catalog_conn_id="hive_lake", execution="local")
    metrics = op.execute({})
    assert metrics["status"] == "committed" and metrics["numRemovedFiles"] == 12 and metrics["numAddedFiles"] == 2
    assert rows(root / "orders") == before
    lineage = op.get_openlineage_facets_on_complete(None)
    assert (lineage.inputs[0].namespace, lineage.inputs[0].name) == (f"hive://127.0.0.1:{port}", "sales.orders")
    inspect = InspectTableOperator(task_id="i", table_name="sales.orders", catalog_conn_id="hive_lake",
                                   execution="local").execute({})
    assert inspect["version_read"] == 6
    seen = CommitIntervalSensor(task_id="s", table_name="sales.returns", catalog_conn_id="hive_lake",
                                min_commits=2, since="last_checkpoint").poke({})
    assert seen.is_done and seen.xcom_value["to_version"] == 1
    results = MaintainTablesOperator(task_id="m", table_names="sales.orders, sales.returns",
                                     catalog_conn_id="hive_lake", jobs={"optimize": {}},
                                     execution="auto").execute({})
    assert [(r["table_name"], r["status"]) for r in results] == [("sales.orders", "skipped"),
                                                                 ("sales.returns", "committed")]


def test_an_unreachable_metastore_fails_in_one_line(monkeypatch):
    from tests.storage.servers import free_port

    monkeypatch.setenv("AIRFLOW_CONN_HIVE_DOWN", f'{{"conn_type": "hive_metastore", "host": "127.0.0.1", '
                                                 f'"port": {free_port()}}}')
    with pytest.raises(CatalogError, match=r"^cannot reach the Hive metastore at 127.0.0.1:\d+ \(connection "
                                           r"'hive_down'\)"):
        catalog_for("hive_down").resolve("sales.orders")


def test_catalog_managed_tables_are_refused_by_writing_jobs_and_read_by_the_others(sales, hive_metastore):
    """A table whose protocol hands its commits to a catalog (``catalogManaged``): OPTIMIZE and the fleet refuse
    it in one line naming the catalog, before anything is written; inspect and the sensor read it."""
    root, _ = sales
    path = root / "managed"
    write_appends(path, 4)
    first = path / "_delta_log" / f"{0:020d}.json"
    lines = first.read_text().splitlines()
    lines = [json.dumps({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [
        "catalogManaged"], "writerFeatures": ["catalogManaged"]}}) if '"protocol"' in line else line for line in lines]
    first.write_text("\n".join(lines) + "\n")
    with HMSClient(host="127.0.0.1", port=hive_metastore.port) as client:
        client.create_table(spark_delta_table("sales", "managed", str(path), f"{root}/sales.db"))
    log_before = sorted(p.name for p in (path / "_delta_log").iterdir())
    refused = (r"^sales.managed is managed by the Hive metastore \(connection 'hive_lake', the catalogManaged table "
               r"feature\): its commits go through the catalog and it reports no maintenance operation allowed; "
               r"optimize refused, nothing written$")
    with pytest.raises(CatalogError, match=refused):
        OptimizeOperator(task_id="o", table_name="sales.managed", catalog_conn_id="hive_lake",
                         execution="local").execute({})
    with pytest.raises(CatalogError, match="sales.managed is managed by the Hive metastore"):
        MaintainTablesOperator(task_id="m", table_names=["sales.returns", "sales.managed"],
                               catalog_conn_id="hive_lake", execution="auto").execute({})
    assert sorted(p.name for p in (path / "_delta_log").iterdir()) == log_before
    inspect = InspectTableOperator(task_id="i", table_name="sales.managed", catalog_conn_id="hive_lake",
                                   execution="local").execute({})
    assert inspect["version_read"] == 3 and inspect["status"] != "failed"
    seen = CommitIntervalSensor(task_id="s", table_name="sales.managed", catalog_conn_id="hive_lake",
                                min_commits=3, since="last_checkpoint").poke({})
    assert seen.is_done and seen.xcom_value == {"from_version": 0, "to_version": 3, "commits": 4}
