"""delta-spark judges compute-stats: tables it wrote without statistics
(``spark.databricks.delta.stats.collect=false``) or with statistics of fewer columns than its settings
now name (``delta.dataSkippingStatsColumns`` changed after the writes) get them from our job.

Each case writes the same appends a second time into a reference table with statistics on: every
file of ours must then carry exactly the statistics delta-spark wrote for its twin. delta-spark reads
the same rows after the job, a selective filter reads fewer files than before (the scan's
``numFiles`` metric), and delta-spark keeps writing, optimizing and vacuuming the table; delta-rs
reads the same rows too where it can read the table.
"""

from __future__ import annotations

import contextlib
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli
from airflow_delta_maint.app.engines.delta_spark import session_conf
from airflow_delta_maint.delta.log.listing import read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.protocol.schema import all_columns
from airflow_delta_maint.delta.storage.store import Storage
from tests.app.jobs.test_optimize import rows_deltars

pytestmark = pytest.mark.delta_spark

COLLECT = "spark.databricks.delta.stats.collect"
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
APPENDS = 4
ROWS = 100
COLUMNS = ("id BIGINT, v BIGINT, s STRING, d DOUBLE, ts TIMESTAMP, dec DECIMAL(10,2), "
           "n STRUCT<a: INT, b: STRING>")


def create(spark, path: Path, properties: dict[str, str], collect: bool) -> None:
    """The table, then APPENDS appends of one file each: id and v rise from file to file."""
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta" + (f" TBLPROPERTIES ({props})" if props else ""))
    with session_conf(spark, {COLLECT: str(collect).lower(), "spark.sql.session.timeZone": "UTC"}):
        for k in range(APPENDS):
            (spark.range(k * ROWS, (k + 1) * ROWS).selectExpr(
                "id", "1000 - id AS v", "IF(id % 7 = 0, NULL, concat('text-é-', id)) AS s",
                "IF(id % 13 = 0, CAST('NaN' AS DOUBLE), id / 3.0) AS d",
                "timestamp_micros(1700000000000000 + id * 1234567) AS ts",
                "CAST(id / 4 AS DECIMAL(10,2)) AS dec", "named_struct('a', CAST(id AS INT), 'b', string(id % 5)) AS n")
             .coalesce(1).write.format("delta").mode("append").save(str(path)))


def rows(spark, path: Path) -> list[tuple]:
    """The rows delta-spark reads, sorted (NaN as text, so that equal rows compare equal)."""
    return sorted(tuple("NaN" if v != v else v for v in r) for r in spark.read.format("delta").load(str(path)).collect())


def files_read(spark, path: Path, condition: str) -> int:
    """How many files delta-spark's scan of ``condition`` reads (the scan's numFiles metric)."""
    df = spark.read.format("delta").load(str(path)).where(condition)
    df.collect()
    nodes, total = [df._jdf.queryExecution().executedPlan()], 0
    while nodes:
        node = nodes.pop()
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            nodes.append(node.executedPlan())
            continue
        if name == "FileSourceScanExec":
            total += node.metrics().apply("numFiles").value()
        children = node.children().iterator()
        while children.hasNext():
            nodes.append(children.next())
    return total


def stats_by_commit(path: Path) -> list[dict]:
    """The statistics of the file each append wrote, in commit order (as the log holds them now)."""
    live = {a["path"]: a for a in Snapshot.load(str(path)).add_actions()}
    storage = Storage(str(path))
    out = []
    for version in range(1, APPENDS + 1):
        (add,) = [a["add"] for a in read_commit(storage, version) if a.get("add")]
        out.append(json.loads(live[add["path"]].get("stats") or "{}", parse_float=Decimal))
    return out


def logical(path: Path, stats: dict) -> dict:
    """``stats`` keyed by logical names (under column mapping each table has physical names of its own)."""
    names = {c.physical_path: c.logical_path[-1] for c in all_columns(Snapshot.load(str(path)).metadata.schema_string)}

    def rename(tree: object, prefix: tuple[str, ...]) -> object:
        if not isinstance(tree, dict):
            return tree
        return {names.get(prefix + (k,), k): rename(v, prefix + (k,)) for k, v in tree.items()}

    return {k: rename(v, ()) if k in ("minValues", "maxValues", "nullCount") else v for k, v in stats.items()}


def compute_stats(path: Path, *args: str) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        code, m = cli.run(["compute-stats", str(path), "--json", *args])
    assert code == 0, m.get("error")
    return m


def test_a_table_written_without_statistics(spark, tmp_path):
    path, twin = tmp_path / "t", tmp_path / "twin"
    create(spark, path, {}, collect=False)
    create(spark, twin, {}, collect=True)
    expected = rows(spark, path)
    assert all(s == {} for s in stats_by_commit(path))
    assert files_read(spark, path, "id = 150") == APPENDS

    m = compute_stats(path)
    assert (m["status"], m["numFilesWithoutStats"], m["numFilesUpdated"], m["version_committed"]) == \
        ("committed", APPENDS, APPENDS, APPENDS + 1)
    assert m["columns"] == ["id", "v", "s", "d", "ts", "dec", "n.a", "n.b"]
    assert stats_by_commit(path) == stats_by_commit(twin)  # what delta-spark itself writes
    assert rows(spark, path) == expected
    assert rows_deltars(path) == rows_deltars(twin)
    assert files_read(spark, path, "id = 150") == 1
    assert files_read(spark, path, "v > 850") == 2 and files_read(spark, path, "n.a < 50") == 1

    # delta-spark keeps writing, optimizing and vacuuming the table
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 10 = 1")
    spark.range(1000, 1010).selectExpr("id", "0 - id AS v", "'x' AS s", "CAST(0.5 AS DOUBLE) AS d", "current_timestamp() AS ts",
                                       "CAST(1 AS DECIMAL(10,2)) AS dec",
                                       "named_struct('a', 1, 'b', 'y') AS n").write.format("delta") \
        .mode("append").save(str(path))
    spark.sql(f"OPTIMIZE delta.`{path}`")
    with session_conf(spark, {RETENTION_CHECK: "false"}):
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    after = rows(spark, path)
    assert len(after) == len(expected) - APPENDS * ROWS // 10 + 10
    assert [r for r in after if r[0] < 1000] == [r for r in expected if r[0] % 10 != 1]
    assert files_read(spark, path, "id = 150") == 1


def test_deletion_vectors_and_column_mapping(spark, tmp_path):
    # delta-spark's DELETE gives a file without statistics some before it adds a deletion vector, so the
    # files here lose coverage the other way: the statistics columns change after the DELETE
    path, twin = tmp_path / "t", tmp_path / "twin"
    props = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name",
             "delta.minReaderVersion": "3", "delta.minWriterVersion": "7"}
    create(spark, path, {**props, "delta.dataSkippingStatsColumns": "id"}, collect=True)
    create(spark, twin, {**props, "delta.dataSkippingStatsColumns": "id,v,n.b"}, collect=True)
    for table in (path, twin):
        spark.sql(f"DELETE FROM delta.`{table}` WHERE id % 9 = 0")  # a deletion vector on every file
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingStatsColumns' = 'id,v,n.b')")
    expected = rows(spark, path)
    assert files_read(spark, path, "v = 850") == APPENDS

    m = compute_stats(path)
    assert (m["status"], m["numFilesMissingColumns"], m["numFilesUpdated"]) == ("committed", APPENDS, APPENDS)
    ours = stats_by_commit(path)
    assert all(s["tightBounds"] is False and s["numRecords"] == ROWS for s in ours)  # physical rows
    assert all(key.startswith("col-") for s in ours for key in s["nullCount"])  # physical names
    # delta-spark's statistics of the same files after its DELETE (the physical names differ)
    assert [logical(path, x) for x in ours] == [logical(twin, x) for x in stats_by_commit(twin)]
    assert all(a.get("deletionVector") for a in Snapshot.load(str(path)).add_actions())
    assert rows(spark, path) == expected
    assert files_read(spark, path, "v = 850") == 1

    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 9 = 1")
    assert rows(spark, path) == [r for r in expected if r[0] % 9 != 1]


def test_statistics_columns_changed_after_the_writes(spark, tmp_path):
    path, twin = tmp_path / "t", tmp_path / "twin"
    create(spark, path, {"delta.dataSkippingStatsColumns": "id"}, collect=True)
    create(spark, twin, {"delta.dataSkippingStatsColumns": "id,v,n.b"}, collect=True)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingStatsColumns' = 'id,v,n.b')")
    expected = rows(spark, path)
    assert files_read(spark, path, "v = 850") == APPENDS

    dry = compute_stats(path, "--dry-run")
    assert (dry["status"], dry["numFilesMissingColumns"], dry["numFilesWithoutStats"]) == ("dry_run", APPENDS, 0)
    m = compute_stats(path, "--max-files", "3")
    assert (m["numFilesUpdated"], m["numFilesLeftForLaterRuns"]) == (3, 1)
    assert compute_stats(path)["numFilesUpdated"] == 1
    assert stats_by_commit(path) == stats_by_commit(twin)
    assert rows(spark, path) == expected
    assert files_read(spark, path, "v = 850") == 1
    assert compute_stats(path)["status"] == "skipped"


def test_files_written_before_a_type_was_widened(spark, tmp_path):
    path, twin = tmp_path / "t", tmp_path / "twin"
    for table, collect in ((path, False), (twin, True)):
        spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, n INT, dec DECIMAL(5,2)) USING delta "
                  "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
        with session_conf(spark, {COLLECT: str(collect).lower()}):
            for k in range(APPENDS):
                (spark.range(k * ROWS, (k + 1) * ROWS)
                 .selectExpr("id", "CAST(id * 3 AS INT) AS n", "CAST(id / 8 AS DECIMAL(5,2)) AS dec")
                 .coalesce(1).write.format("delta").mode("append").save(str(table)))
        spark.sql(f"ALTER TABLE delta.`{table}` CHANGE COLUMN n TYPE BIGINT")
        spark.sql(f"ALTER TABLE delta.`{table}` CHANGE COLUMN dec TYPE DECIMAL(7,4)")
    expected = rows(spark, path)
    assert files_read(spark, path, "dec = 30.5") == APPENDS

    m = compute_stats(path)
    assert (m["status"], m["numFilesUpdated"], m["numFilesReadFromData"]) == ("committed", APPENDS, APPENDS), m
    # the same values delta-spark wrote in the old types (JSON numbers: 30.5 and 30.5000 alike)
    assert stats_by_commit(path) == stats_by_commit(twin)
    assert rows(spark, path) == expected
    assert files_read(spark, path, "dec = 30.5") == 1
