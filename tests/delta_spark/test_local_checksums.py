"""Hadoop's checksum sidecars on local tables: what our jobs overwrite or delete takes its ``.crc`` along.

Spark writes ``.<name>.crc`` beside every file of a table on local disk, and Hadoop's local file system
checks a file against it on every read. A ``_last_checkpoint`` rewritten without its sidecar fails that
check: delta-spark logs the failure, sleeps, retries and lists the whole log on every load.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from airflow_delta_maint.app import cli

pytestmark = pytest.mark.delta_spark


def _hadoop_read(spark, path: Path) -> bytes:
    """Read a file through Hadoop's checksummed local file system, as delta-spark does."""
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(path.as_uri()))
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def _rows(spark, path: Path) -> Counter:
    return Counter(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())


def test_our_checkpoint_leaves_last_checkpoint_readable_by_hadoop(spark, tmp_path):
    path = tmp_path / "t"
    for i in range(11):  # delta-spark checkpoints version 10 and writes _last_checkpoint with its sidecar
        spark.range(i * 5, i * 5 + 5).write.format("delta").mode("append").save(str(path))
    log = path / "_delta_log"
    assert (log / "._last_checkpoint.crc").exists()
    before = _rows(spark, path)
    spark.range(100, 105).write.format("delta").mode("append").save(str(path))

    code, metrics = cli.run(["checkpoint", str(path), "--json"])
    assert code == 0 and metrics["status"] == "committed", metrics

    assert b'"version":11' in _hadoop_read(spark, log / "_last_checkpoint")  # raises ChecksumException if stale
    assert not (log / "._last_checkpoint.crc").exists()
    assert _rows(spark, path) == before + Counter((i,) for i in range(100, 105))


def test_our_vacuum_deletes_the_sidecars_of_the_files_it_deletes(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.range(0, 40).selectExpr("id", "id % 2 AS part")
    for _ in range(2):
        df.write.format("delta").mode("append").partitionBy("part").save(str(path))
    spark.sql(f"DELETE FROM delta.`{path}` WHERE part = 1")  # every file of part=1 removed
    before = _rows(spark, path)
    assert any(n.endswith(".crc") for n in os.listdir(path / "part=1"))

    code, metrics = cli.run(["vacuum", str(path), "--retention-hours", "0", "--ignore-retention-check", "--json"])
    assert code == 0 and metrics["numDeletedFiles"] >= 2, metrics

    assert not (path / "part=1").exists() or os.listdir(path / "part=1") == []
    leftovers = [n for n in os.listdir(path / "part=0") if n.endswith(".crc")]
    live = [n for n in os.listdir(path / "part=0") if n.endswith(".parquet")]
    assert sorted(leftovers) == sorted(f".{n}.crc" for n in live)  # only the live files keep theirs
    assert _rows(spark, path) == before
