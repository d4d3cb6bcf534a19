"""The delta-spark engine: delta-spark's own commands on the job's SparkSession, reported in our metrics.

- OPTIMIZE: ``OPTIMIZE delta.`path` [WHERE ...] [ZORDER BY (...)]``, ``OPTIMIZE ... FULL`` on clustered
  tables, ``REORG TABLE delta.`path` [WHERE ...] APPLY (PURGE)`` for ``purge``. Our plan's settings
  (file sizes, deletion-vector ratio, compression) go to delta-spark's session conf for the one
  command and are put back afterwards. Its returned metrics struct becomes our names
  (``numFilesAdded`` -> ``numAddedFiles``, ``filesAdded.totalSize`` -> ``numAddedBytes``, ...); file
  size percentiles are those its commit wrote (computed from the commits' add actions when it wrote
  none).
- VACUUM: ``VACUUM delta.`path` LITE|FULL [USING INVENTORY ...] RETAIN n HOURS [DRY RUN]``; the numbers
  come from its ``VACUUM START`` / ``VACUUM END`` commits (``numDeletedFiles`` -> ``numFilesDeleted``, ...).
- checkpoint and expired-log cleanup: its ``DeltaLog`` through the JVM (``checkpoint(snapshot)``,
  ``cleanUpExpiredLogs(snapshot, ..., retention)``), checked afterwards with our core.

The session must carry delta-spark's extension and a jar built for the session's Spark
(:func:`check_session`); else the run fails before any work with one line saying what to configure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_delta_maint.delta.errors import CommitFailedError, InvalidArgumentError
from airflow_delta_maint.delta.log.listing import LOG_DIR, list_log, read_commit, read_commit_info
from airflow_delta_maint.delta.plans.optimize import SIZE_PERCENTILE_KEYS, size_percentiles
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.plans.vacuum_options import VacuumOptions
from airflow_delta_maint.delta.protocol.schema import parse_schema
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

from . import DEFAULT_PACKAGE, DELTA_CATALOG, DELTA_EXTENSION, DELTA_SPARK, EngineSetupError
from .hadoop_store import prepare_hadoop_store

log = logging.getLogger("delta_maint.delta_spark")

#: delta-spark release (major.minor) -> the Spark release (major.minor) it is built for
SPARK_FOR_DELTA = {"4.4": "4.2", "4.0": "4.0", "3.3": "3.5", "3.2": "3.5", "3.1": "3.5"}
#: Spark release -> the delta-spark coordinates to configure for it
PACKAGE_FOR_SPARK = {"4.2": DEFAULT_PACKAGE, "4.0": "io.delta:delta-spark_2.13:4.0.0",
                     "3.5": "io.delta:delta-spark_2.12:3.3.0"}
_HOW = ("set spark.sql.extensions={ext} and spark.sql.catalog.spark_catalog={cat} and put {pkg} on the "
        "classpath (--packages; the operators and delta-maint outside spark-submit do this for the delta-spark "
        "engine, see [delta_maint] delta_spark_packages)")


def _major_minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def check_versions(spark_version: str, delta_version: str) -> None:
    """Refuse a delta-spark jar built for another Spark release (known pairs: :data:`SPARK_FOR_DELTA`).

    Raises:
        EngineSetupError: naming both versions and the coordinates to configure instead.
    """
    built_for = SPARK_FOR_DELTA.get(_major_minor(delta_version))
    spark = _major_minor(spark_version)
    if built_for is not None and built_for != spark:
        wanted = PACKAGE_FOR_SPARK.get(spark, "the delta-spark release built for it")
        raise EngineSetupError(f"the delta-spark engine: delta-spark {delta_version} is built for Spark {built_for}, "
                               f"the session runs Spark {spark_version}; set [delta_maint] delta_spark_packages "
                               f"(or the Spark connection's spark.jars.packages) to {wanted}")


def check_session(spark: Any) -> str:
    """The delta-spark version of ``spark``'s classpath, after checking the session can run the engine:
    a classic SparkSession with delta-spark's extension and a jar built for its Spark.

    Raises:
        EngineSetupError: one line that says what to configure.
    """
    from airflow_delta_maint.app.runners.connect_tasks import is_connect

    how = _HOW.format(ext=DELTA_EXTENSION, cat=DELTA_CATALOG, pkg=PACKAGE_FOR_SPARK.get(
        _major_minor(spark.version), DEFAULT_PACKAGE))
    if is_connect(spark):
        raise EngineSetupError("the delta-spark engine runs on a classic SparkSession (spark-submit), not on "
                               "Spark Connect; use a spark connection, or engine 'native'")
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if DELTA_EXTENSION not in [e.strip() for e in extensions.split(",")]:
        raise EngineSetupError(f"the delta-spark engine needs a SparkSession with delta-spark: {how}")
    try:
        version = str(spark._jvm.io.delta.package.VERSION())
    except Exception:  # noqa: BLE001 - py4j: the class is not on the classpath
        raise EngineSetupError(f"the delta-spark engine: the session names delta-spark's extension but its jar "
                               f"is not on the classpath: {how}") from None
    check_versions(spark.version, version)
    return version


def session(ctx: Any) -> Any:
    """The job's SparkSession, checked for the engine (:func:`check_session`) and for the table's store
    (:func:`~.hadoop_store.prepare_hadoop_store`)."""
    spark = ctx.spark("the delta-spark engine")
    check_session(spark)
    prepare_hadoop_store(spark, hadoop_path(ctx.table), ctx.storage_options or {})
    return spark


# -- helpers -----------------------------------------------------------------------------------------
def hadoop_path(table: str) -> str:
    """The table's path as Hadoop's filesystems name it (``s3://`` -> ``s3a://``; a relative local path,
    as the command line takes one, made absolute: delta-spark's ``delta.`path``` takes no other)."""
    if table.startswith("s3://"):
        return "s3a://" + table[len("s3://"):]
    if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", table) and not os.path.isabs(table):
        return os.path.abspath(table)
    return table


def table_ref(table: str) -> str:
    """``delta.`path``` for SQL."""
    return "delta.`" + hadoop_path(table).replace("`", "``") + "`"


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partitions_predicate(metadata: Any, partitions: Sequence[Mapping[str, str | None]]) -> str:
    """A WHERE clause that selects exactly these partitions (partition values as the log keeps them,
    keyed by physical name)."""
    logical = {f.physical_name: f.name for f in parse_schema(metadata)}
    ors = []
    for values in partitions:
        ands = [f"{_quote_ident(logical.get(k, k))} IS NULL" if v is None else
                f"{_quote_ident(logical.get(k, k))} = {_literal(str(v))}" for k, v in sorted(values.items())]
        ors.append("(" + " AND ".join(ands) + ")" if ands else "true")
    return " OR ".join(ors) if ors else "false"


@contextlib.contextmanager
def session_conf(spark: Any, settings: Mapping[str, Any]) -> Iterator[None]:
    """Set Spark conf for one command, then put back what was there."""
    before = {k: spark.conf.get(k, None) for k in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, str(value))
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def commits_after(storage: Storage, version: int, operations: Sequence[str]) -> list[tuple[int, dict]]:
    """(version, commitInfo) of the commits after ``version`` whose operation is one of ``operations``."""
    found = []
    for v in sorted(list_log(storage, version + 1).commits):
        if v <= version:
            continue
        info = read_commit_info(storage, v) or {}
        if info.get("operation") in operations:
            found.append((v, info))
    return found


class DeltaSparkCommandError(RuntimeError):
    """delta-spark's command failed: its first line (the whole trace is in the driver's log)."""


def _run_sql(spark: Any, statement: str) -> list[Any]:
    log.info("delta-spark: %s", statement)
    try:
        return spark.sql(statement).collect()
    except Exception as exc:
        log.exception("delta-spark: %s failed", statement)
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise DeltaSparkCommandError(f"delta-spark's {statement.split(' delta.`')[0]} failed: {first}") from exc


# -- OPTIMIZE ----------------------------------------------------------------------------------------
#: our OPTIMIZE options that change the plan in ways delta-spark's OPTIMIZE has no counterpart for
NATIVE_ONLY_OPTIMIZE = ("target_files", "rewrite_type_widened", "min_file_age", "skip_recent_partitions",
                        "wait_for_writer", "bins_per_commit", "min_cube_size", "target_cube_size")


def refuse_native_only(params: Mapping[str, Any], options: Sequence[str], job: str) -> None:
    """Options (named in ``options``) only the native engine has fail before anything runs, naming them."""
    given = [name for name in options if params.get(name) not in (None, False, "")]
    if given:
        raise InvalidArgumentError(f"{job} with the delta-spark engine does not take {', '.join(given)} (native "
                                   "engine only)")


def optimize(ctx: Any, options: OptimizeOptions, snapshot: Any, plan: Any,
             partitions: Sequence[Mapping[str, str | None]] | None) -> dict[str, Any]:
    """Run delta-spark's OPTIMIZE (or REORG ... APPLY (PURGE)) for ``plan`` with the run's ``options``
    (purged: see ``OptimizeOptions.purged``); our metrics.

    ``partitions``: the partitions the run is limited to (the auto-compaction policy's choice, less
    those reserved by other runs), which become the WHERE clause; None: the user's predicate only.
    """
    spark = session(ctx)
    clustered = plan.layout == "hilbert"
    predicates = []
    if plan.predicate:
        predicates.append(f"({plan.predicate})")
    if partitions is not None and snapshot.partition_columns:
        predicates.append(f"({partitions_predicate(snapshot.metadata, partitions)})")
    where = f" WHERE {' AND '.join(predicates)}" if predicates else ""
    ref = table_ref(ctx.table)
    if options.purge:
        statement = f"REORG TABLE {ref}{where} APPLY (PURGE)"
        operations: tuple[str, ...] = ("REORG", "OPTIMIZE")
    else:
        statement = f"OPTIMIZE {ref}{where}"
        if clustered and options.full:
            statement += " FULL"
        if plan.zorder_by and not clustered:
            statement += " ZORDER BY (" + ", ".join(_quote_ident(c) for c in plan.zorder_by) + ")"
        operations = ("OPTIMIZE",)
    compression = options.compression
    settings = {
        "spark.databricks.delta.optimize.minFileSize": plan.min_file_size,
        "spark.databricks.delta.optimize.maxFileSize": plan.target_file_size,
        "spark.databricks.delta.optimize.maxDeletedRowsRatio": options.dv_ratio,
        "spark.sql.parquet.compression.codec": "uncompressed" if compression == "none" else compression,
    }
    with session_conf(spark, settings):
        rows = _run_sql(spark, statement)
    m = rows[0]["metrics"].asDict(recursive=True) if rows and rows[0]["metrics"] is not None else {}
    commits = commits_after(ctx.storage, snapshot.version, operations)
    versions = [v for v, _ in commits]
    sizes = [a["add"]["size"] for v in versions for a in read_commit(ctx.storage, v) if "add" in a]
    dv = m.get("deletionVectorStats") or {}
    out: dict[str, Any] = {
        "numAddedFiles": int(m.get("numFilesAdded") or 0), "numRemovedFiles": int(m.get("numFilesRemoved") or 0),
        "numAddedBytes": int((m.get("filesAdded") or {}).get("totalSize") or 0),
        "numRemovedBytes": int((m.get("filesRemoved") or {}).get("totalSize") or 0),
        "numDeletionVectorsRemoved": int(dv.get("numDeletionVectorsRemoved") or 0),
        **(_committed_size_percentiles(commits) or size_percentiles(sizes)),
        "status": "committed" if versions else "skipped",
        "version_committed": versions[-1] if versions else None, "versions_committed": versions,
        "numBins": int(m.get("numBins") or 0), "numBatches": int(m.get("numBatches") or 0),
        "partitionsOptimized": int(m.get("partitionsOptimized") or 0),
        "totalConsideredFiles": int(m.get("totalConsideredFiles") or 0),
        "totalFilesSkipped": int(m.get("totalFilesSkipped") or 0),
        "statement": statement, "engine": DELTA_SPARK,
    }
    if not versions:
        out["reason"] = "delta-spark's OPTIMIZE found nothing to rewrite"
    if dv.get("numDeletionVectorRowsRemoved") is not None:
        out["numDeletionVectorRowsRemoved"] = int(dv["numDeletionVectorRowsRemoved"])
    for key in ("zOrderStats", "clusteringStats"):
        if m.get(key) is not None:
            out[f"deltaSpark{key[0].upper()}{key[1:]}"] = m[key]
    return out


def _committed_size_percentiles(commits: list[tuple[int, dict]]) -> dict[str, int]:
    """The file-size figures delta-spark wrote in its one commit's ``operationMetrics`` (its own
    percentiles, which the history shows); empty when there is not exactly one such commit."""
    if len(commits) != 1:
        return {}
    metrics = commits[0][1].get("operationMetrics") or {}
    try:
        return {k: int(metrics[k]) for k in SIZE_PERCENTILE_KEYS}
    except (KeyError, TypeError, ValueError):
        return {}


# -- VACUUM ------------------------------------------------------------------------------------------
#: the number of tasks delta-spark's VACUUM lists the table in (Spark's default: 10,000, even for a small table)
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
def _inventory_clause(source: str) -> str:
    path = hadoop_path(source).replace("`", "``")
    if re.search(r"\.csv$", source, re.IGNORECASE):
        raise InvalidArgumentError("the delta-spark engine reads VACUUM inventories in parquet or Delta, not CSV")
    fmt = "delta" if not re.search(r"\.parquet$", source, re.IGNORECASE) and _is_delta_dir(source) else "parquet"
    return f" USING INVENTORY (SELECT path, length, isDir, modificationTime FROM {fmt}.`{path}`)"


def _is_delta_dir(source: str) -> bool:
    try:
        return bool(list_log(Storage(source)).commits)
    except Exception:  # noqa: BLE001 - not a Delta table: read as parquet
        return False


def vacuum(ctx: Any, options: VacuumOptions, snapshot: Any, plan: Any, metrics: dict[str, Any]) -> dict[str, Any]:
    """Run delta-spark's VACUUM with our plan's retention (checked by our core already); our metrics."""
    spark = session(ctx)
    retention_hours = plan.retention_ms / 3_600_000
    statement = f"VACUUM {table_ref(ctx.table)} {'LITE' if plan.mode == 'lite' else 'FULL'}"
    if options.inventory:
        statement += _inventory_clause(options.inventory)
    statement += f" RETAIN {retention_hours!r} HOURS"
    if options.dry_run:
        statement += " DRY RUN"
    settings: dict[str, Any] = {"spark.databricks.delta.vacuum.logging.enabled": "true"}
    if spark.conf.get(LISTING_PARALLELISM, None) is None:  # unset: as many listing tasks as the table needs
        files = int(getattr(snapshot, "num_files", 0) or 0)
        settings[LISTING_PARALLELISM] = min(10_000, max(2 * spark.sparkContext.defaultParallelism, files // 1000))
    if options.ignore_retention_check:
        settings["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    with session_conf(spark, settings):
        rows = _run_sql(spark, statement)
    metrics = {**metrics, "statement": statement, "engine": DELTA_SPARK}
    if options.dry_run:
        keys = sorted(k for k in (ctx.storage.key_for_path(str(r[0])) for r in rows) if k)
        size = 0
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                size += ctx.storage.head(key).size
        metrics.update(status="dry_run", numFilesToDelete=len(keys), sizeOfDataToDelete=size, numFilesDeleted=0,
                       numDeletedFiles=0, numVacuumedDirectories=0, files_to_delete=keys[:1000],
                       files_to_delete_truncated=len(keys) > 1000)
        return metrics
    commits = commits_after(ctx.storage, snapshot.version, ("VACUUM START", "VACUUM END"))
    start = [(v, i) for v, i in commits if i["operation"] == "VACUUM START"]
    end = [(v, i) for v, i in commits if i["operation"] == "VACUUM END"]
    start_metrics = start[-1][1].get("operationMetrics", {}) if start else {}
    end_metrics = end[-1][1].get("operationMetrics", {}) if end else {}
    deleted = int(end_metrics.get("numDeletedFiles") or 0)
    metrics.update(numFilesToDelete=int(start_metrics.get("numFilesToDelete") or 0),
                   sizeOfDataToDelete=int(start_metrics.get("sizeOfDataToDelete") or 0),
                   numFilesDeleted=deleted, numDeletedFiles=deleted,
                   numVacuumedDirectories=int(end_metrics.get("numVacuumedDirectories") or 0))
    if start:
        metrics["version_vacuum_start"] = start[-1][0]
    if end:
        metrics.update(status="committed", version_committed=end[-1][0])
        status = (end[-1][1].get("operationParameters") or {}).get("status")
        if status and status != "COMPLETED":
            raise CommitFailedError(f"delta-spark's VACUUM ended with status {status} (version {end[-1][0]})")
    else:
        metrics.update(status="skipped", reason="no file to delete")
    return metrics


# -- checkpoint and expired-log cleanup ----------------------------------------------------------------
def _delta_log(spark: Any, table: str) -> Any:
    jvm = spark._jvm
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, hadoop_path(table))


def _none(spark: Any) -> Any:
    return spark._jvm.scala.Option.apply(None)


def _latest_snapshot(spark: Any, delta_log: Any) -> Any:
    return delta_log.update(False, _none(spark), _none(spark))


def checkpoint(ctx: Any, version: int | None, latest_version: int) -> dict[str, Any]:
    """Have delta-spark write a checkpoint of ``version`` (default: the latest); its description as
    :func:`airflow_delta_maint.delta.log.checkpoint.write_checkpoint` gives ours."""
    spark = session(ctx)
    target = latest_version if version is None else version
    before = {c.version for c in list_log(ctx.storage).checkpoints}
    delta_log = _delta_log(spark, ctx.table)
    snap = _latest_snapshot(spark, delta_log)
    if version is not None and version != snap.version():
        snap = delta_log.getSnapshotAt(version, _none(spark), _none(spark), False)
    already = target in before
    if not already:
        log.info("delta-spark: checkpoint of %s at version %d", ctx.table, target)
        delta_log.checkpoint(snap, _none(spark))
    found = [c for c in list_log(ctx.storage).checkpoints if c.version == target]
    if not found:  # delta-spark logs a failed checkpoint and goes on: ours is an error
        raise CommitFailedError(f"delta-spark wrote no complete checkpoint of version {target} of {ctx.table} "
                                "(the driver's log has its warning)")
    written = found[-1]
    return {"version": target, "path": written.files[0].key, "kind": written.kind,
            "num_add_files": int(snap.numOfFiles()), "size_bytes": sum(f.size for f in written.files),
            "already_existed": already, "engine": DELTA_SPARK}


def _log_files(storage: Storage) -> dict[str, FileInfo]:
    return {f.key: f for f in storage.list_recursive(LOG_DIR)}


def cleanup_expired_log(ctx: Any, planned: dict[str, Any], retention_ms: int | None) -> dict[str, Any]:
    """Have delta-spark clean up the expired log (``cleanUpExpiredLogs``); ``planned`` is our core's
    dry-run plan of the same cleanup (its counts stay under ``numLogFilesToDelete``)."""
    from airflow_delta_maint.delta.log.cleanup import LogCleanupPlan

    spark = session(ctx)
    before = _log_files(ctx.storage)
    delta_log = _delta_log(spark, ctx.table)
    snap = _latest_snapshot(spark, delta_log)
    # Option[Long] built in the JVM: py4j would turn a Python int below 2^31 into an Integer
    retention = spark._jsparkSession.sql(f"SELECT CAST({int(retention_ms)} AS BIGINT)").head().toSeq().headOption() \
        if retention_ms is not None else _none(spark)
    granularity = getattr(delta_log, "cleanUpExpiredLogs$default$4")()
    log.info("delta-spark: expired log cleanup of %s", ctx.table)
    delta_log.cleanUpExpiredLogs(snap, _none(spark), retention, granularity)
    after = _log_files(ctx.storage)
    gone = [before[k] for k in sorted(set(before) - set(after))]
    counts = LogCleanupPlan(version=planned.get("version_read") or 0, now_ms=0, retention_ms=0, cutoff_ms=0,
                            files=gone).counts()
    out = {k: v for k, v in planned.items() if k not in ("log_files_to_delete", "files_to_delete_by_kind",
                                                         "checkpoint_to_write", "reason", "status")}
    out.update(counts, numLogFilesDeleted=len(gone), sizeOfLogFilesDeleted=sum(f.size for f in gone),
               status="committed" if gone else "skipped", engine=DELTA_SPARK)
    if not gone:
        out["reason"] = planned.get("reason") or "delta-spark deleted no log file"
    return out
