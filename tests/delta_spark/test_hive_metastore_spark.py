"""Tables by name in a real Hive metastore, registered by delta-spark: Spark's Hive catalog creates the database,
a partitioned Delta table, a view and a parquet table through the metastore's Thrift server; our operators
maintain the Delta table by that name (no Spark on our side) and refuse the view and the parquet table; delta-spark
then reads the rows back by name, shows our OPTIMIZE in the table's history and keeps writing to it.

The catalog implementation is fixed when a SparkSession starts, and this pytest process's shared one
(``conftest.spark``) has none, so delta-spark runs here in a child Python process with its own SparkSession
(``python -m tests.delta_spark.test_hive_metastore_spark``): it reads one SQL statement a line on its standard
input and answers each with one JSON line of rows, marked so that the JVM's own output on stdout is passed over.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from tests.delta_spark_session import CACHE, REPO
from tests.hive_metastore import start_hive_metastore
from tests.storage.servers import free_port

# the metastore is a server this module starts; delta_spark and spark come from the folder (tests/tiers.py)
pytestmark = pytest.mark.services

#: the prefix of the child's answers on stdout
ANSWER = "@@hive-spark@@ "
ORDER_COLUMNS = ("id", "amount", "region")
#: a JVM that lives a minute: one core, one shuffle partition, the client compiler only
FAST = {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def serve(metastore_port: int, warehouse: str) -> None:
    """A delta-spark SparkSession on the Hive metastore at ``127.0.0.1:metastore_port``; SQL from stdin, rows
    (or the error's first line) as JSON lines on stdout."""
    from tests.delta_spark_session import start_delta_spark

    hive = {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": f"thrift://127.0.0.1:{metastore_port}",
            "spark.sql.warehouse.dir": warehouse}
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".session.lock", "w") as lock:  # Ivy resolves into one cache on the machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        spark = start_delta_spark(master="local[1]", app_name="airflow-delta-maint-hive-metastore", **hive, **FAST)
    print(ANSWER + json.dumps({"ready": spark.conf.get("spark.sql.catalogImplementation")}), flush=True)
    for line in sys.stdin:
        try:
            answer: dict[str, Any] = {"rows": [r.asDict(recursive=True) for r in spark.sql(line).collect()]}
        except Exception as exc:  # the statement's failure is the test's to judge
            answer = {"error": (str(exc).strip().splitlines() or [type(exc).__name__])[0]}
        print(ANSWER + json.dumps(answer, default=str), flush=True)
    spark.stop()


class HiveSpark:
    """The child process running delta-spark on the metastore; :meth:`sql` runs one statement there."""

    def __init__(self, metastore_port: int, workdir: Path) -> None:
        self.log = workdir / "spark.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.delta_spark.test_hive_metastore_spark", str(metastore_port),
                 str(workdir / "warehouse")], cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(REPO), "HADOOP_USER_NAME": "maint"})

    def wait_ready(self) -> None:
        assert self._answer().get("ready") == "hive"

    def _answer(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        for line in out:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER):])
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"delta-spark's process exited ({self.proc.wait()}):\n{tail}")

    def sql(self, statement: str) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None and "\n" not in statement
        self.proc.stdin.write(statement + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        if "error" in answer:
            raise AssertionError(f"delta-spark: {statement}: {answer['error']}")
        return answer["rows"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


@pytest.fixture(scope="module")
def hive_spark(tmp_path_factory):
    """delta-spark on a Hive metastore (its JVM and the metastore's start side by side), the connection
    ``hive_lake`` (type hive_metastore) reaching the metastore, and database ``sales``: ``orders`` (Delta,
    partitioned by region, written by six INSERTs), the view ``v`` and the parquet table ``flat``."""
    port = free_port()
    spark = HiveSpark(port, tmp_path_factory.mktemp("hive-spark"))
    server = None
    try:
        server = start_hive_metastore(tmp_path_factory.mktemp("hive-metastore"), port)
        spark.wait_ready()
        spark.sql("CREATE DATABASE sales")
        spark.sql("CREATE TABLE sales.orders (id BIGINT, amount DOUBLE, region STRING) USING delta "
                  "PARTITIONED BY (region)")
        for i in range(6):
            spark.sql("INSERT INTO sales.orders VALUES " + ", ".join(
                f"({i * 4 + j}, {(i * 4 + j) * 1.5}, '{('eu', 'us')[j % 2]}')" for j in range(4)))
        spark.sql("CREATE VIEW sales.v AS SELECT id, amount FROM sales.orders WHERE region = 'eu'")
        spark.sql("CREATE TABLE sales.flat (id BIGINT, note STRING) USING parquet")
        spark.sql("INSERT INTO sales.flat VALUES (1, 'a'), (2, 'b')")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_HIVE_LAKE", json.dumps({"conn_type": "hive_metastore", "host": "127.0.0.1",
                                                              "port": port}))
            yield spark
    finally:
        spark.stop()
        if server is not None:
            server.stop()


def orders(spark: HiveSpark) -> list[tuple]:
    return sorted(tuple(r[c] for c in ORDER_COLUMNS) for r in spark.sql("SELECT * FROM sales.orders"))


def tree(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file()}


def test_spark_registered_tables_maintained_by_name_and_read_back_by_spark(hive_spark):
    from airflow_delta_maint.operators.maintenance import InspectTableOperator, OptimizeOperator

    before = orders(hive_spark)
    assert len(before) == 24
    files_before = hive_spark.sql("DESCRIBE DETAIL sales.orders")[0]["numFiles"]
    assert files_before >= 12  # six INSERTs, two partitions each
    metrics = OptimizeOperator(task_id="o", table_name="sales.orders", catalog_conn_id="hive_lake",
                               execution="local").execute({})
    assert metrics["status"] == "committed" and metrics["table_name"] == "sales.orders"
    assert metrics["numRemovedFiles"] == files_before and metrics["numAddedFiles"] == 2
    assert metrics["version_read"] == 6 and metrics["version_committed"] == 7
    inspect = InspectTableOperator(task_id="i", table_name="sales.orders", catalog_conn_id="hive_lake",
                                   execution="local").execute({})
    assert inspect["version_read"] == 7 and inspect["table_name"] == "sales.orders"

    assert orders(hive_spark) == before
    assert hive_spark.sql("DESCRIBE DETAIL sales.orders")[0]["numFiles"] == 2
    latest = hive_spark.sql("DESCRIBE HISTORY sales.orders LIMIT 1")[0]
    assert (latest["version"], latest["operation"]) == (7, "OPTIMIZE")
    hive_spark.sql("INSERT INTO sales.orders VALUES (100, 150.0, 'eu')")
    assert orders(hive_spark) == sorted([*before, (100, 150.0, "eu")])
    assert hive_spark.sql("DESCRIBE HISTORY sales.orders LIMIT 1")[0]["version"] == 8


@pytest.mark.parametrize("name, message", [
    ("sales.v", r"^Hive metastore table sales.v is a view, not a Delta table"),
    ("sales.flat", r"^Hive metastore table sales.flat is not a Delta table \(its format is parquet\)$"),
])
def test_spark_registered_view_and_parquet_table_refused_in_one_line(hive_spark, name, message):
    from airflow_delta_maint.catalogs.errors import CatalogError
    from airflow_delta_maint.operators.maintenance import OptimizeOperator

    warehouse = Path(hive_spark.log).parent / "warehouse"
    files = tree(warehouse)
    with pytest.raises(CatalogError, match=message) as refused:
        OptimizeOperator(task_id="o", table_name=name, catalog_conn_id="hive_lake", execution="local").execute({})
    assert "\n" not in str(refused.value)
    assert tree(warehouse) == files
    assert sorted(r["id"] for r in hive_spark.sql(f"SELECT id FROM {name}")) == (
        [1, 2] if name == "sales.flat" else sorted(r[0] for r in orders(hive_spark) if r[2] == "eu"))


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
