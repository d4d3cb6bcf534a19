"""The two engines describe the same table change: each job runs natively on one copy and on delta-spark
(``--engine delta-spark``) on another copy of the same delta-spark-written table, in this process's
session (which carries delta-spark's jars). Rows stay the same on both; the live files change as the
metrics say, and alike on both; the metrics carry the same contract names. Bad input fails with one
clear error and changes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_delta_maint.app.engines import DELTA_SPARK, ENGINES, NATIVE, EngineSetupError
from airflow_delta_maint.app.engines.run import run_job_with_engine
from airflow_delta_maint.app.engines.delta_spark import check_versions
from airflow_delta_maint.delta.health.run_log import read_runs
from airflow_delta_maint.delta.log.listing import list_log
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.storage.store import Storage
from tests.delta_spark_session import REPO

pytestmark = pytest.mark.delta_spark

COMMON = {"operation", "table", "status", "version_read", "version_committed", "started_at", "duration_s", "engine"}
OPTIMIZE_NAMES = COMMON | {"numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes",
                           "numDeletionVectorsRemoved", "minFileSize", "p25FileSize", "p50FileSize", "p75FileSize",
                           "maxFileSize", "versions_committed", "numBins", "numBatches", "totalConsideredFiles",
                           "totalFilesSkipped", "predicate", "zOrderBy", "minFileSizeSetting", "maxFileSizeSetting"}
VACUUM_NAMES = COMMON | {"mode", "retention_hours", "cutoff_timestamp", "numFilesToDelete", "sizeOfDataToDelete",
                         "numFilesDeleted", "numDeletedFiles", "numVacuumedDirectories"}
OLD_S = 40 * 86400


def _rows(spark, path: Path) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())


def _live(path: Path) -> dict[str, int]:
    """The live files as our core reads them: count, bytes, files with deletion vectors."""
    snap = Snapshot.load(str(path))
    files = snap.files
    return {"files": files.num_rows, "bytes": sum(files.column("size").to_pylist()),
            "dv_files": sum(files.column("deletionVector").is_valid().to_pylist()), "version": snap.version}


def _data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and "_delta_log" not in p.parts
            and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def source(spark, tmp_path_factory) -> Path:
    """Partitioned by p, deletion vectors on; small files from several appends, then a DELETE (DVs)."""
    path = tmp_path_factory.mktemp("engines") / "source"
    rows = "SELECT id, CAST(id % 3 AS STRING) AS p, id * 7 % 101 AS v, CONCAT('row-', id) AS s FROM range({a}, {b})"
    spark.sql(rows.format(a=0, b=600)).repartition(3).write.format("delta").partitionBy("p") \
        .option("delta.enableDeletionVectors", "true").save(str(path))
    for i in range(3):
        spark.sql(rows.format(a=600 + i * 100, b=700 + i * 100)).repartition(2).write.format("delta") \
            .mode("append").save(str(path))
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    return path


@pytest.fixture(scope="module")
def vacuum_source(spark, source, tmp_path_factory) -> Path:
    """The source after delta-spark's OPTIMIZE (removed files, old deletion vectors) plus an old orphan file."""
    path = tmp_path_factory.mktemp("engines") / "vacuum-source"
    shutil.copytree(source, path)
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    orphan = path / "p=1" / "part-99999-orphan.c000.snappy.parquet"
    shutil.copy(next((path / "p=1").glob("*.parquet")), orphan)
    os.utime(orphan, (time.time() - OLD_S, time.time() - OLD_S))
    return path


def _both(spark, src: Path, tmp_path: Path, job: str, *argv: str) -> dict[str, dict]:
    """Run ``job`` with each engine on its own copy of ``src``; rows unchanged on both. Per engine: the
    metrics, the live files before and after, the data files before and after."""
    out = {}
    for engine in ENGINES:
        path = tmp_path / engine
        shutil.copytree(src, path)
        rows, live, files = _rows(spark, path), _live(path), _data_files(path)
        code, metrics = run_job_with_engine(job, str(path), engine, argv, spark=spark)
        assert code == 0, metrics
        assert metrics["engine"] == engine
        assert _rows(spark, path) == rows, f"{engine}: rows changed"
        out[engine] = {"m": metrics, "before": live, "after": _live(path), "files_before": files,
                       "files_after": _data_files(path), "path": path}
    return out


def _assert_same_optimize(runs: dict[str, dict]) -> None:
    for engine, r in runs.items():
        m, before, after = r["m"], r["before"], r["after"]
        assert m["status"] == "committed", (engine, m)
        assert OPTIMIZE_NAMES <= set(m), (engine, sorted(OPTIMIZE_NAMES - set(m)))
        # the live files changed exactly as the metrics say
        assert after["files"] == before["files"] - m["numRemovedFiles"] + m["numAddedFiles"], engine
        assert after["bytes"] == before["bytes"] - m["numRemovedBytes"] + m["numAddedBytes"], engine
        assert after["version"] == m["version_committed"] == m["versions_committed"][-1]
    native, delta = runs[NATIVE]["m"], runs[DELTA_SPARK]["m"]
    for key in ("numRemovedFiles", "numRemovedBytes", "numAddedFiles", "numDeletionVectorsRemoved", "numBins"):
        assert native[key] == delta[key], (key, native[key], delta[key])
    assert runs[NATIVE]["after"]["files"] == runs[DELTA_SPARK]["after"]["files"]
    assert runs[NATIVE]["after"]["dv_files"] == runs[DELTA_SPARK]["after"]["dv_files"]


def test_optimize_where(spark, source, tmp_path):
    runs = _both(spark, source, tmp_path, "optimize", "--where", "p = '1'")
    _assert_same_optimize(runs)
    assert runs[DELTA_SPARK]["m"]["statement"].endswith("WHERE (p = '1')")
    assert runs[NATIVE]["m"]["numRemovedFiles"] > 1


def test_optimize_zorder(spark, source, tmp_path):
    runs = _both(spark, source, tmp_path, "optimize", "--zorder-by", "v")
    _assert_same_optimize(runs)
    assert runs[DELTA_SPARK]["m"]["zOrderBy"] == ["v"] and "ZORDER BY (`v`)" in runs[DELTA_SPARK]["m"]["statement"]
    assert runs[NATIVE]["after"]["dv_files"] == 0


def test_optimize_purge_of_deletion_vectors(spark, source, tmp_path):
    runs = _both(spark, source, tmp_path, "optimize", "--purge")
    _assert_same_optimize(runs)
    assert runs[DELTA_SPARK]["m"]["statement"].startswith("REORG TABLE ")
    assert runs[NATIVE]["m"]["numDeletionVectorsRemoved"] == runs[NATIVE]["before"]["dv_files"] > 0
    assert all(r["after"]["dv_files"] == 0 for r in runs.values())


def test_optimize_auto_policy_becomes_the_where(spark, source, tmp_path):
    """The auto-compaction policy chooses partitions on our side; delta-spark gets them as its WHERE."""
    runs = _both(spark, source, tmp_path, "optimize", "--policy", "auto", "--min-num-files", "2", "--max-partitions", "2")
    _assert_same_optimize(runs)
    assert runs[NATIVE]["m"]["autoCompaction"] == runs[DELTA_SPARK]["m"]["autoCompaction"]
    assert " WHERE ((`p` = " in runs[DELTA_SPARK]["m"]["statement"]


def test_optimize_dry_run_plans_with_our_core_and_runs_nothing(spark, source, tmp_path):
    runs = _both(spark, source, tmp_path, "optimize", "--dry-run")
    for r in runs.values():
        assert r["m"]["status"] == "dry_run" and r["after"] == r["before"]
        assert r["files_after"] == r["files_before"]
    assert runs[NATIVE]["m"]["plan"] == runs[DELTA_SPARK]["m"]["plan"]


def _assert_same_vacuum(runs: dict[str, dict], status: str = "committed") -> None:
    for engine, r in runs.items():
        m = r["m"]
        assert m["status"] == status, (engine, m)
        assert VACUUM_NAMES <= set(m), (engine, sorted(VACUUM_NAMES - set(m)))
        assert r["after"]["files"] == r["before"]["files"] and r["after"]["bytes"] == r["before"]["bytes"]
        deleted = r["files_before"] - r["files_after"]
        assert len(deleted) == m["numFilesDeleted"] == m["numDeletedFiles"], engine
    native, delta = runs[NATIVE], runs[DELTA_SPARK]
    for key in ("numFilesToDelete", "sizeOfDataToDelete", "numFilesDeleted"):
        assert native["m"][key] == delta["m"][key], (key, native["m"][key], delta["m"][key])
    assert native["files_after"] == delta["files_after"]


def test_vacuum_full(spark, vacuum_source, tmp_path):
    runs = _both(spark, vacuum_source, tmp_path, "vacuum", "--retention-hours", "0", "--ignore-retention-check")
    _assert_same_vacuum(runs)
    assert "p=1/part-99999-orphan.c000.snappy.parquet" not in runs[DELTA_SPARK]["files_after"]
    assert runs[DELTA_SPARK]["m"]["version_committed"] == runs[DELTA_SPARK]["m"]["version_vacuum_start"] + 1


def test_vacuum_lite(spark, vacuum_source, tmp_path):
    runs = _both(spark, vacuum_source, tmp_path, "vacuum", "--mode", "lite", "--retention-hours", "0",
                 "--ignore-retention-check")
    _assert_same_vacuum(runs)
    assert all("p=1/part-99999-orphan.c000.snappy.parquet" in r["files_after"] for r in runs.values())


def test_vacuum_dry_run(spark, vacuum_source, tmp_path):
    runs = _both(spark, vacuum_source, tmp_path, "vacuum", "--retention-hours", "0", "--ignore-retention-check",
                 "--dry-run")
    for r in runs.values():
        assert r["m"]["status"] == "dry_run" and r["files_after"] == r["files_before"]
        assert r["after"]["version"] == r["before"]["version"]
    assert runs[NATIVE]["m"]["numFilesToDelete"] == runs[DELTA_SPARK]["m"]["numFilesToDelete"] > 0
    assert runs[NATIVE]["m"]["files_to_delete"] == runs[DELTA_SPARK]["m"]["files_to_delete"]



@pytest.fixture(scope="module")
def clustered_source(spark, tmp_path_factory) -> Path:
    """A table delta-spark created with CLUSTER BY (v): several small appends, none clustered yet."""
    path = tmp_path_factory.mktemp("engines") / "clustered"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, v BIGINT, s STRING) USING delta CLUSTER BY (v)")
    for i in range(4):
        spark.sql(f"SELECT id, id * 7919 % 1000 AS v, CONCAT('row-', id) AS s FROM range({i * 500}, {i * 500 + 500})") \
            .repartition(3).write.format("delta").mode("append").save(str(path))
    return path


def test_optimize_full_on_a_clustered_table(spark, clustered_source, tmp_path):
    """--full (OPTIMIZE ... FULL on delta-spark) reclusters every file of a liquid-clustered table on both."""
    runs = _both(spark, clustered_source, tmp_path, "optimize", "--full")
    for engine, r in runs.items():
        m, before, after = r["m"], r["before"], r["after"]
        assert m["status"] == "committed", (engine, m)
        assert m["numRemovedFiles"] == before["files"] == 12, engine  # every file, clustered or not
        assert after["files"] == before["files"] - m["numRemovedFiles"] + m["numAddedFiles"], engine
        assert after["bytes"] == before["bytes"] - m["numRemovedBytes"] + m["numAddedBytes"], engine
        assert after["version"] == m["version_committed"]
    assert runs[DELTA_SPARK]["m"]["statement"].endswith(" FULL")
    assert "deltaSparkClusteringStats" in runs[DELTA_SPARK]["m"]
    # the new files are clustered on both: delta-spark's own clustering provider sees them as such
    for r in runs.values():
        files = spark.sql(f"DESCRIBE DETAIL delta.`{r['path']}`").collect()[0]
        assert files["clusteringColumns"] == ["v"]


def _inventory(path: Path, leave_out: set[str]) -> Path:
    """A parquet inventory of every object under ``path`` (delta-spark's columns, full paths) but ``leave_out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(f"file:{p}", p.stat().st_size, False, int(p.stat().st_mtime * 1000))
            for p in sorted(path.rglob("*")) if p.is_file() and str(p.relative_to(path)) not in leave_out]
    rows += [(f"file:{p}", 0, True, int(p.stat().st_mtime * 1000)) for p in sorted(path.rglob("*")) if p.is_dir()]
    out = path.parent / f"{path.name}-inventory.parquet"
    pq.write_table(pa.table({"path": [r[0] for r in rows], "length": pa.array([r[1] for r in rows], pa.int64()),
                             "isDir": [r[2] for r in rows], "modificationTime": pa.array([r[3] for r in rows], pa.int64())}),
                   out)
    return out


def test_vacuum_using_an_inventory(spark, vacuum_source, tmp_path):
    """--inventory (USING INVENTORY on delta-spark): the same files deleted on both; an old orphan the
    inventory does not list stays on both."""
    unlisted = "p=2/part-99998-unlisted.c000.snappy.parquet"
    out = {}
    for engine in ENGINES:
        path = tmp_path / engine
        shutil.copytree(vacuum_source, path)
        shutil.copy(next((path / "p=2").glob("*.parquet")), path / unlisted)
        os.utime(path / unlisted, (time.time() - OLD_S, time.time() - OLD_S))
        inventory = _inventory(path, {unlisted})
        rows, files = _rows(spark, path), _data_files(path)
        code, m = run_job_with_engine("vacuum", str(path), engine, ["--retention-hours", "24",
                                      "--ignore-retention-check", "--inventory", str(inventory)], spark=spark)
        assert code == 0 and m["status"] == "committed", (engine, m)
        assert _rows(spark, path) == rows
        after = _data_files(path)
        assert unlisted in after and "p=1/part-99999-orphan.c000.snappy.parquet" not in after, engine
        assert len(files - after) == m["numFilesDeleted"] > 0, engine
        out[engine] = (m, after)
    assert "USING INVENTORY (SELECT path, length, isDir, modificationTime FROM parquet." in out[DELTA_SPARK][0]["statement"]
    assert out[NATIVE][1] == out[DELTA_SPARK][1]
    assert out[NATIVE][0]["numFilesDeleted"] == out[DELTA_SPARK][0]["numFilesDeleted"]

def test_checkpoint(spark, source, tmp_path):
    """Also: both runs go to the maintenance history, which says which engine did the work."""
    history = tmp_path / "history"
    runs = _both(spark, source, tmp_path, "checkpoint", "--history-uri", str(history))
    records = read_runs(str(history)).to_pylist()
    assert [(r["operation"], r["status"]) for r in records] == [("checkpoint", "committed")] * 2
    assert [json.loads(r["metrics"])["engine"] for r in records] == [NATIVE, DELTA_SPARK]
    assert records[0]["engine"].startswith("airflow-delta-maint") and records[1]["engine"].startswith("delta-spark via ")
    for engine, r in runs.items():
        m = r["m"]
        assert m["status"] == "committed" and m["checkpoint_version"] == r["before"]["version"], (engine, m)
        assert any(c.version == m["checkpoint_version"] for c in list_log(Storage(str(r["path"]))).checkpoints)
        assert r["after"] == r["before"]
    native, delta = runs[NATIVE]["m"]["checkpoint"], runs[DELTA_SPARK]["m"]["checkpoint"]
    for key in ("version", "kind", "num_add_files", "already_existed"):
        assert native[key] == delta[key], key


def test_cleanup_log(spark, source, tmp_path):
    """Commits 0..N-2 and the checkpoint are 40 days old; a retention of one day lets both engines delete
    every log file before the checkpoint, and the same ones."""
    src = tmp_path / "src"
    shutil.copytree(source, src)
    latest = _live(src)["version"]
    run_job_with_engine("checkpoint", str(src), NATIVE, ["--version", str(latest - 1)], spark=spark)
    old = time.time() - OLD_S
    for f in (src / "_delta_log").iterdir():  # a minute apart, in version order (equal times form one group)
        digits = f.name.lstrip(".")[:20]
        if digits.isdigit() and int(digits) < latest:
            os.utime(f, (old + 60 * int(digits), old + 60 * int(digits)))
    runs = _both(spark, src, tmp_path, "cleanup-log", "--retention-hours", "24")
    names = {}
    for engine, r in runs.items():
        m = r["m"]
        assert m["status"] == "committed" and m["numLogFilesDeleted"] > 0, (engine, m)
        assert r["after"] == r["before"]
        names[engine] = sorted(p.name for p in (r["path"] / "_delta_log").iterdir() if not p.name.startswith("."))
    assert runs[NATIVE]["m"]["numCommitFilesDeleted"] == runs[DELTA_SPARK]["m"]["numCommitFilesDeleted"] > 0
    assert names[NATIVE] == names[DELTA_SPARK]


# -- bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, why", [  # one table per reason (UniForm's Iceberg metadata)
    ("uniform-iceberg", "Iceberg metadata under metadata/, which optimize does not convert to Iceberg"),
])
def test_tables_only_delta_spark_rewrites_are_optimized_with_it(spark, delta_tables, tmp_path, name, why):
    """Where the native rewrite cannot honour a table (a UniForm table whose Iceberg metadata exists: the
    native engine converts no commit to Iceberg) it refuses, says why and names the engine that can; with
    delta-spark the same run plans on our core from the log and delta-spark rewrites: the rows, row
    ids, schema and protocol are what they were, and delta-spark keeps writing."""
    from tests.delta_spark import judge
    from tests.delta_spark.tables import TABLES

    table = next(t for t in TABLES if t.name == name)
    read = dict(row_tracking=table.row_tracking, key=table.key)
    native, delta = tmp_path / NATIVE, tmp_path / DELTA_SPARK
    shutil.copytree(delta_tables[name], native)
    shutil.copytree(delta_tables[name], delta)
    for root in (native, delta):  # what delta-iceberg's converter leaves (io.delta:delta-iceberg_2.13:4.4.0 does not resolve)
        (root / "metadata").mkdir()
        (root / "metadata" / "00000-0a.metadata.json").write_text("{}")
    files = sorted(str(p.relative_to(native)) for p in native.rglob("*"))
    code, m = run_job_with_engine("optimize", str(native), NATIVE, spark=spark)
    assert code == 2 and why in m["error"] and "engine='delta-spark'" in m["error"], m
    assert sorted(str(p.relative_to(native)) for p in native.rglob("*")) == files
    before = judge.read_state(spark, str(delta), **read)
    code, m = run_job_with_engine("optimize", str(delta), DELTA_SPARK, spark=spark)
    assert code == 0 and m["status"] == "committed" and m["numRemovedFiles"] > 1, m
    after = judge.read_state(spark, str(delta), **read)
    judge.assert_same_table(before, after)
    judge.assert_history_shows_our_commit(spark, str(delta), m)
    assert _live(delta)["files"] == before.num_files - m["numRemovedFiles"] + m["numAddedFiles"]
    judge.assert_keeps_writing(spark, str(delta), before_job_version=before.version, kept_versions=[before.version],
                               key=table.key, row_tracking=table.row_tracking, clustered=table.clustered)


def test_unknown_engine_and_native_only_runs_change_nothing(spark, source, tmp_path):
    path = tmp_path / "t"
    shutil.copytree(source, path)
    before = (_live(path), sorted(os.listdir(path / "_delta_log")))
    code, m = run_job_with_engine("optimize", str(path), "spark-delta", spark=spark)
    assert code == 2 and m["error"] == "unknown engine 'spark-delta': one of native, delta-spark"
    code, m = run_job_with_engine("vacuum", str(path), DELTA_SPARK, ["--keep-versions", "1"], spark=spark)
    assert code == 2 and "\n" not in m["error"] and "does not take keep_versions" in m["error"]
    assert (_live(path), sorted(os.listdir(path / "_delta_log"))) == before


#: the command line in a process whose SparkSession someone else started plain (no delta-spark jar, no
#: extension), as a session under a spark-submit without delta-spark's packages is
_ON_A_PLAIN_SESSION = """\
import sys
from pyspark.sql import SparkSession
SparkSession.builder.master("local[1]").getOrCreate()
from airflow_delta_maint.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_session_without_the_delta_extension_fails_before_any_work(source, tmp_path):
    """A plain SparkSession (no delta-spark jar, no extension): one line that says what to configure."""
    path = tmp_path / "t"
    shutil.copytree(source, path)
    before = (_live(path), _data_files(path), sorted(os.listdir(path / "_delta_log")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    done = subprocess.run([sys.executable, "-c", _ON_A_PLAIN_SESSION, "optimize", str(path),
                           "--engine", "delta-spark", "--master", "local[1]", "--json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("delta-maint optimize: error:")]
    assert error == ["delta-maint optimize: error: the delta-spark engine needs a SparkSession with delta-spark: "
                     "set spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension and "
                     "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog and put "
                     "io.delta:delta-spark_2.13:4.4.0 on the classpath (--packages; the operators and delta-maint "
                     "outside spark-submit do this for the delta-spark engine, see [delta_maint] "
                     "delta_spark_packages)"]
    assert (_live(path), _data_files(path), sorted(os.listdir(path / "_delta_log"))) == before


def test_a_jar_built_for_another_spark_is_refused():
    check_versions("4.2.0", "4.4.0")
    with pytest.raises(EngineSetupError) as info:
        check_versions("4.2.0", "4.0.1")
    assert str(info.value) == ("the delta-spark engine: delta-spark 4.0.1 is built for Spark 4.0, the session runs "
                               "Spark 4.2.0; set [delta_maint] delta_spark_packages (or the Spark connection's "
                               "spark.jars.packages) to io.delta:delta-spark_2.13:4.4.0")
    with pytest.raises(EngineSetupError, match="built for Spark 4.2, the session runs Spark 4.0.0"):
        check_versions("4.0.0", "4.4.0")


def test_log_compaction_with_delta_spark_checkpoints(spark, source, tmp_path):
    """compact-log --engine delta-spark: the compaction files are ours, the checkpoint delta-spark's."""
    path = tmp_path / "t"
    shutil.copytree(source, path)
    rows, before = _rows(spark, path), _live(path)
    code, m = run_job_with_engine("compact-log", str(path), DELTA_SPARK, ["--interval", "2", "--checkpoint-interval", "2"],
                                  spark=spark)
    assert code == 0 and m["status"] == "committed", m
    assert m["checkpoint_engine"] == DELTA_SPARK and m["checkpoint"]["engine"] == DELTA_SPARK
    listing = list_log(Storage(str(path)))
    assert [c.version for c in listing.checkpoints] == [before["version"]] == [m["checkpoint"]["version"]]
    assert len(listing.compactions) == m["numWindowsWritten"]  # windows start after the new checkpoint
    assert _rows(spark, path) == rows and _live(path) == before
