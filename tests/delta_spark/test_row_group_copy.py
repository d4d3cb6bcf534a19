"""delta-spark judges row-group copy: the files it wrote (parquet-java, page indexes on) copied into
one file by ``delta/parquet``, committed in place of them with the statistics merged from their
footers; delta-spark then reads the same rows, skips files with those statistics, and keeps
writing the table."""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote

import pytest

from airflow_delta_maint.app.engines.delta_spark import session_conf
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.parquet.footer import read_footer
from airflow_delta_maint.delta.parquet.format import CODECS
from airflow_delta_maint.delta.parquet.row_group_copy import copy_files
from airflow_delta_maint.delta.protocol.copied_stats import copied_file_stats_reading
from airflow_delta_maint.delta.protocol.stats import stats_json

pytestmark = pytest.mark.delta_spark

APPENDS = 4
ROWS = 250
COLUMNS = ("id BIGINT, v BIGINT, s STRING, d DOUBLE, ts TIMESTAMP, dec DECIMAL(10,2), big DECIMAL(30,4), "
           "n STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, m MAP<STRING, INT>")


def write_table(spark, path: Path) -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta")
    with session_conf(spark, {"spark.sql.session.timeZone": "UTC"}):
        for k in range(APPENDS):
            (spark.range(k * ROWS, (k + 1) * ROWS).selectExpr(
                "id", "1000 - id AS v", "IF(id % 7 = 0, NULL, concat('text-é-', id)) AS s",
                "IF(id % 13 = 0, CAST('NaN' AS DOUBLE), id / 3.0) AS d",
                "timestamp_micros(1700000000000000 + id * 1234567) AS ts",
                "CAST(id / 4 AS DECIMAL(10,2)) AS dec", "CAST(id * 1000003 AS DECIMAL(30,4)) AS big",
                "named_struct('a', CAST(id AS INT), 'b', string(id % 5)) AS n",
                "IF(id % 3 = 0, NULL, array(CAST(id AS INT), NULL)) AS arr",
                "map(string(id % 4), CAST(id AS INT)) AS m")
             .coalesce(1).write.format("delta").mode("append").save(str(path)))


def rows(spark, path: Path) -> list:
    return sorted(tuple(str(v) for v in r) for r in spark.read.format("delta").load(str(path)).collect())


def commit_copy(path: Path) -> tuple[dict, list[dict]]:
    """Copy every live file of the table into one and commit it in their place; returns the add and
    the inputs' adds."""
    snapshot = Snapshot.load(str(path))
    adds = snapshot.add_actions()
    files = [str(path / unquote(a["path"])) for a in adds]
    reference = read_footer(files[0])
    codec = CODECS[reference.row_groups[0]["columns"][0]["meta_data"]["codec"]]
    name = f"part-00000-{uuid.uuid4()}-c000.{codec}.parquet"
    with open(path / name, "wb") as sink:
        result = copy_files(files, sink, reference, codec)
    assert not isinstance(result, str), result
    stats = copied_file_stats_reading(result, snapshot.metadata, str(path / name))
    now = int(time.time() * 1000)
    add = {"path": name, "partitionValues": {}, "size": result.size, "modificationTime": now, "dataChange": False,
           "stats": stats_json(stats)}
    actions = [{"commitInfo": {"timestamp": now, "operation": "OPTIMIZE", "operationParameters": {},
                               "isBlindAppend": False}}]
    actions += [{"remove": {"path": a["path"], "deletionTimestamp": now, "dataChange": False,
                            "extendedFileMetadata": True, "partitionValues": {}, "size": a["size"]}} for a in adds]
    actions.append({"add": add})
    version = snapshot.version + 1
    (path / "_delta_log" / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return add, adds


def merged(adds: list[dict], key: str, column: str, pick) -> object:
    values = [json.loads(a["stats"], parse_float=Decimal)[key].get(column) for a in adds]
    return pick(v for v in values if v is not None)


def test_delta_spark_reads_the_copied_file_and_its_statistics(spark, tmp_path):
    path = tmp_path / "table"
    write_table(spark, path)
    before = rows(spark, path)
    add, inputs = commit_copy(path)
    assert len(inputs) == APPENDS
    assert rows(spark, path) == before
    assert spark.read.parquet(str(path / add["path"])).count() == APPENDS * ROWS
    ours = json.loads(add["stats"], parse_float=Decimal)
    assert ours["numRecords"] == APPENDS * ROWS
    for column in ("id", "v", "dec", "big", "s", "ts", "d"):
        assert ours["minValues"][column] == merged(inputs, "minValues", column, min), column
        assert ours["maxValues"][column] == merged(inputs, "maxValues", column, max), column
    for column in ("id", "s", "d", "arr", "m"):
        assert ours["nullCount"][column] == sum(json.loads(a["stats"])["nullCount"][column] for a in inputs), column
    # delta-spark skips the copied file by its statistics
    assert spark.read.format("delta").load(str(path)).where("id > 100000").count() == 0
    scan = spark.read.format("delta").load(str(path)).where("id = 17")
    assert scan.count() == 1
    # and keeps writing the table
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 10 = 0")
    spark.sql(f"OPTIMIZE delta.`{path}`")
    after = rows(spark, path)
    assert len(after) == APPENDS * ROWS - APPENDS * ROWS // 10
