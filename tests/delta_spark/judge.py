"""delta-spark's verdict on a table one of our maintenance jobs touched.

Every check asks delta-spark 4.4 itself (SQL on ``delta.`path```, its DataFrame reader, and for what SQL does
not show, its own ``DeltaLog`` snapshot through the JVM): a job maintained the table when delta-spark reads
the same rows, row ids, schema, protocol and properties as before; its DESCRIBE DETAIL and DESCRIBE HISTORY
agree with our snapshot and our commit; it loads our checkpoints and log compaction files with the commits
they cover out of the way; and it keeps writing the table afterwards.

- :func:`read_state` is what delta-spark reads at one version (:class:`TableState`). Every state it returns
  is remembered by (table, version): :func:`assert_keeps_writing` compares time travel with it later.
- :func:`assert_same_table`: rows, row ids, schema, protocol and properties identical.
- :func:`assert_detail_matches_our_snapshot`: DESCRIBE DETAIL against our engine's snapshot.
- :func:`assert_history_shows_our_commit`: the DESCRIBE HISTORY row of our commit has the operation,
  operationParameters and operationMetrics delta-spark writes for the same job (``DeltaOperations.scala``
  and what delta-spark 4.4.0 commits on this machine: :data:`OPTIMIZE_METRICS`, :data:`VACUUM_START_METRICS`,
  :data:`VACUUM_END_METRICS`, :func:`expected_optimize_parameters`).
- :func:`assert_log_files_load`: in copies of the table, each checkpoint with the commits it covers deleted,
  and each set of log compaction files with the commits they cover hidden (delta-spark wants every commit
  file listed, so a hidden commit keeps its name and its commitInfo, and loses its actions), read by
  delta-spark: the same state as expected. Also every Hadoop checksum sidecar in ``_delta_log`` matches
  its file (a stale one makes delta-spark log a ChecksumException and retry on every read).
- :func:`assert_keeps_writing`: INSERT, MERGE, UPDATE, DELETE by delta-spark against a Python model of the
  rows, time travel, RESTORE, its own OPTIMIZE and VACUUM.

Rows are compared as multisets of canonical tuples (:func:`canon`): values that compare equal across
runs and Arrow/Spark types (maps as sorted items, variants as their JSON text, geometries as SRID + WKB).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import math
import os
import re
import shutil
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable
from urllib.parse import unquote, urlparse

# ---------------------------------------------------------------------------------------------------------
# what delta-spark writes (DeltaOperations.scala: DeltaOperationMetrics.OPTIMIZE / VACUUM_START / VACUUM_END;
# confirmed against the commits delta-spark 4.4.0 writes for OPTIMIZE, OPTIMIZE FULL, ZORDER BY, VACUUM and
# VACUUM LITE here)

OPTIMIZE_METRICS = ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "minFileSize",
                    "p25FileSize", "p50FileSize", "p75FileSize", "maxFileSize", "numDeletionVectorsRemoved")
VACUUM_START_METRICS = ("numFilesToDelete", "sizeOfDataToDelete")
VACUUM_END_METRICS = ("numDeletedFiles", "numVacuumedDirectories")
# additive OPTIMIZE metrics: a run committed in several batches reports their sums
_ADDITIVE = ("numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "numDeletionVectorsRemoved")
DEFAULT_DELETED_FILE_RETENTION_MS = 7 * 24 * 3600 * 1000

# jobs that write no commit, as delta-spark writes none for a checkpoint, a log compaction or log cleanup
_NO_COMMIT_JOBS = ("inspect", "checkpoint", "compact-log", "cleanup-log")

_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_COMPACTIONS_FOR_READS = "spark.databricks.delta.deltaLog.minorCompaction.useForReads"
_ROW_ID, _ROW_VERSION = "__judge_row_id", "__judge_row_commit_version"


@dataclass(frozen=True)
class TableState:
    """What delta-spark reads at one version of a table."""

    version: int
    rows: Counter               # canonical row tuples over all columns (schema order), deletion vectors applied
    row_ids: Counter | None     # row-tracking tables: (key value, row_id, row_commit_version); else None
    schema: str                 # the table schema's JSON with column metadata, plus partition/clustering columns
    protocol: dict              # minReaderVersion, minWriterVersion, sorted readerFeatures / writerFeatures
    properties: dict            # DESCRIBE DETAIL properties (the metadata's configuration at a past version)
    num_files: int              # DESCRIBE DETAIL numFiles
    size_in_bytes: int          # DESCRIBE DETAIL sizeInBytes
    # the latest version's DESCRIBE DETAIL row as read with the rest (None at a past version); not compared
    detail: dict | None = field(default=None, compare=False, repr=False)


# every state read_state returned, by (table, version): what time travel to that version must read later
_STATES: dict[tuple[str, int], TableState] = {}
# the key column each row-tracking state was read with (by id; the state is kept alive here)
_ROW_ID_KEYS: dict[int, tuple[TableState, str]] = {}


# ---------------------------------------------------------------------------------------------------------
# canonical values


def canon(v: Any) -> Any:
    """A hashable value that compares equal across runs and types (see the module docstring)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else v
    if isinstance(v, dict):
        return ("map", tuple(sorted(((canon(k), canon(x)) for k, x in v.items()), key=repr)))
    if isinstance(v, (list, tuple)):  # a Row (struct) is a tuple
        return tuple(canon(x) for x in v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return ("ts", v.isoformat())
    if isinstance(v, (dt.date, dt.time)):
        return ("d", v.isoformat())
    if isinstance(v, dt.timedelta):
        return ("interval", v.total_seconds())
    if isinstance(v, decimal.Decimal):
        return ("dec", str(v))
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("b", bytes(v).hex())
    if hasattr(v, "toJson") and type(v).__name__ == "VariantVal":
        return ("variant", v.toJson())
    if hasattr(v, "wkb") and hasattr(v, "srid"):  # pyspark Geometry / Geography
        return (type(v).__name__.lower(), v.srid, bytes(v.wkb).hex())
    return (type(v).__name__, repr(v))


def _show(items: Iterable, limit: int = 5) -> str:
    items = sorted(items, key=repr)
    shown = ", ".join(repr(i) for i in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _counter_diff(name: str, before: Counter, after: Counter) -> str | None:
    if before == after:
        return None
    missing, extra = before - after, after - before
    return (f"{name} differ: {sum(before.values())} before, {sum(after.values())} after; "
            f"{sum(missing.values())} missing: {_show(missing.elements())}; "
            f"{sum(extra.values())} extra: {_show(extra.elements())}")


def _dict_diff(name: str, before: dict, after: dict) -> str | None:
    if before == after:
        return None
    keys = sorted(set(before) | set(after))
    changes = {k: (before.get(k, "<absent>"), after.get(k, "<absent>")) for k in keys if before.get(k) != after.get(k)
               or (k in before) != (k in after)}
    return f"{name} differ (before, after): {changes}"


# ---------------------------------------------------------------------------------------------------------
# delta-spark's own view (the JVM DeltaLog) for what SQL does not show


def _ref(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _java(spark, scala_collection):
    return spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_collection)


def _delta_log(spark, path: str, fresh: bool = False):
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog
    if fresh:  # build delta-spark's view from the files as they are now, not from a cached snapshot
        delta_log.invalidateCache(spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(path))
    return delta_log.forTable(spark._jsparkSession, path)


def _snapshot(spark, path: str, version: int | None = None, fresh: bool = False):
    log = _delta_log(spark, path, fresh)
    if version is None:
        return log.update(getattr(log, "update$default$1")(), getattr(log, "update$default$2")(),
                          getattr(log, "update$default$3")())
    return log.getSnapshotAt(version, getattr(log, "getSnapshotAt$default$2")(),
                             getattr(log, "getSnapshotAt$default$3")(), getattr(log, "getSnapshotAt$default$4")())


def _latest_version(spark, path: str) -> int:
    return int(_snapshot(spark, path).version())


def _protocol(spark, snap, table_features: list[str] | None = None) -> dict:
    """The protocol as feature sets: every feature the table supports (DESCRIBE DETAIL tableFeatures, implicit
    ones of a legacy protocol included) as writerFeatures, the reader-writer ones among them as readerFeatures."""
    p = snap.protocol()
    supported = list(_java(spark, p.implicitlyAndExplicitlySupportedFeatures()))
    readers = {f.name() for f in supported if f.isReaderWriterFeature()}
    writers = sorted(table_features) if table_features is not None else sorted(f.name() for f in supported)
    return {"minReaderVersion": int(p.minReaderVersion()), "minWriterVersion": int(p.minWriterVersion()),
            "readerFeatures": sorted(f for f in writers if f in readers), "writerFeatures": writers}


def _schema_json(spark, snap) -> str:
    meta = snap.metadata()
    schema = json.loads(meta.schemaString())
    schema["partitionColumns"] = list(_java(spark, meta.partitionColumns()))
    clustering = None
    for d in _java(spark, snap.domainMetadata()):
        if d.domain() == "delta.clustering" and not d.removed():
            clustering = json.loads(d.configuration()).get("clusteringColumns")
    schema["clusteringColumns"] = clustering
    return json.dumps(schema, sort_keys=True)


def _top_fields(spark, snap) -> list[dict]:
    return json.loads(snap.metadata().schemaString())["fields"]


def _detail(spark, path: str) -> dict:
    return spark.sql(f"DESCRIBE DETAIL {_ref(path)}").collect()[0].asDict()


def _reader(spark, path: str, version: int | None = None):
    r = spark.read.format("delta")
    if version is not None:
        r = r.option("versionAsOf", version)
    return r.load(path)


def _collect(spark, path: str, version: int | None, with_ids: bool) -> tuple[list[str], list[dict]]:
    """The rows delta-spark reads (all columns, schema order; with row id and row commit version)."""
    df = _reader(spark, path, version)
    columns = list(df.columns)
    if with_ids:
        df = df.select("*", df["_metadata.row_id"].alias(_ROW_ID), df["_metadata.row_commit_version"].alias(_ROW_VERSION))
    return columns, [r.asDict(recursive=False) for r in df.collect()]


def _rows_of(columns: list[str], rows: list[dict]) -> Counter:
    return Counter(tuple(canon(r[c]) for c in columns) for r in rows)


def _ids_of(key: str, rows: list[dict]) -> Counter:
    return Counter((canon(r[key]), r[_ROW_ID], r[_ROW_VERSION]) for r in rows)


def _table_key(path: str) -> str:
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return os.path.realpath(unquote(parsed.path) if parsed.scheme else path)
    return path.rstrip("/")


def read_state(spark, path: str, version: int | None = None, row_tracking: bool = False,
               key: str = "id") -> TableState:
    """What delta-spark reads at ``version`` (default: the latest, with delta-spark's cached view of the table
    dropped first, so that it reads the log as it is on disk now).

    The latest version's properties, protocol features, numFiles and sizeInBytes come from DESCRIBE DETAIL;
    a past version's (which DESCRIBE DETAIL cannot time-travel to) from delta-spark's snapshot of it.
    """
    return _read_state(spark, path, version, row_tracking, key, remember=True)


def _read_state(spark, path: str, version: int | None, row_tracking: bool, key: str, remember: bool) -> TableState:
    snap = _snapshot(spark, path, version, fresh=version is None)
    v = int(snap.version())
    if version is None:
        detail = _detail(spark, path)
        properties = dict(detail["properties"] or {})
        protocol = _protocol(spark, snap, list(detail["tableFeatures"] or []))
        protocol["minReaderVersion"], protocol["minWriterVersion"] = detail["minReaderVersion"], detail["minWriterVersion"]
        num_files, size = int(detail["numFiles"]), int(detail["sizeInBytes"])
    else:
        detail = None
        properties = dict(_java(spark, snap.metadata().configuration()))
        protocol = _protocol(spark, snap)
        num_files, size = int(snap.numOfFiles()), int(snap.sizeInBytes())
    columns, raw = _collect(spark, path, version, row_tracking)
    if version is None and _latest_version(spark, path) != v:
        raise AssertionError(f"{path} changed while the judge read it (version {v}, now {_latest_version(spark, path)})")
    if row_tracking and key not in columns:
        raise ValueError(f"row ids are keyed by column {key!r}, which {path} does not have (columns {columns})")
    state = TableState(version=v, rows=_rows_of(columns, raw), row_ids=_ids_of(key, raw) if row_tracking else None,
                       schema=_schema_json(spark, snap), protocol=protocol, properties=properties,
                       num_files=num_files, size_in_bytes=size, detail=detail)
    if row_tracking:
        _ROW_ID_KEYS[id(state)] = (state, key)
    if remember:
        _STATES[(_table_key(path), v)] = state
    return state


# ---------------------------------------------------------------------------------------------------------
# same table


def assert_same_table(before: TableState, after: TableState) -> None:
    """Rows, row ids, schema, protocol and properties identical (versions, file counts and sizes may differ)."""
    problems = [p for p in (
        _counter_diff("rows", before.rows, after.rows),
        None if (before.row_ids is None) == (after.row_ids is None) else
        f"row ids read for one state only (before: {before.row_ids is not None}, after: {after.row_ids is not None})",
        _counter_diff("row ids (key, row_id, row_commit_version)", before.row_ids, after.row_ids)
        if before.row_ids is not None and after.row_ids is not None else None,
        None if before.schema == after.schema else f"schema differs:\n  before {before.schema}\n  after  {after.schema}",
        _dict_diff("protocol", before.protocol, after.protocol),
        _dict_diff("properties", before.properties, after.properties),
    ) if p]
    if problems:
        raise AssertionError(f"delta-spark reads a different table at version {after.version} than at version "
                             f"{before.version}:\n- " + "\n- ".join(problems))


# ---------------------------------------------------------------------------------------------------------
# DESCRIBE DETAIL against our snapshot


def assert_detail_matches_our_snapshot(spark, path: str, latest: TableState | None = None) -> None:
    """DESCRIBE DETAIL (numFiles, sizeInBytes, properties, partition columns, protocol versions) and delta-spark's
    latest version equal our engine's snapshot of the latest version (``latest``: what :func:`read_state` just
    read of the latest version, whose DESCRIBE DETAIL is used instead of reading it again)."""
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    if latest is not None and latest.detail is not None:
        version, detail = latest.version, latest.detail
    else:
        version = int(_snapshot(spark, path, fresh=True).version())
        detail = _detail(spark, path)
    ours = Snapshot.load(path)
    pairs = {
        "version": (version, ours.version),
        "numFiles": (int(detail["numFiles"]), ours.num_files),
        "sizeInBytes": (int(detail["sizeInBytes"]), ours.size_bytes),
        "properties": (dict(detail["properties"] or {}), dict(ours.metadata.configuration)),
        "partitionColumns": (list(detail["partitionColumns"] or []), ours.partition_columns),
        "minReaderVersion": (int(detail["minReaderVersion"]), ours.protocol.min_reader_version),
        "minWriterVersion": (int(detail["minWriterVersion"]), ours.protocol.min_writer_version),
    }
    differ = {k: {"delta-spark": a, "ours": b} for k, (a, b) in pairs.items() if a != b}
    if differ:
        raise AssertionError(f"DESCRIBE DETAIL of {path} disagrees with our snapshot: {differ}"
                             + (f"; our snapshot distrusted {ours.distrusted}" if ours.distrusted else ""))


# ---------------------------------------------------------------------------------------------------------
# DESCRIBE HISTORY against our commit


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta interval property value (``interval 7 days``, ``168 hours``)."""
    units = {"week": 604_800_000, "day": 86_400_000, "hour": 3_600_000, "minute": 60_000, "second": 1000,
             "millisecond": 1, "microsecond": 0.001}
    parts = re.findall(r"(-?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", text.lower().replace("interval", ""))
    if not parts or any(u not in units for _, u in parts):
        raise ValueError(f"not an interval: {text!r}")
    return int(sum(float(n) * units[u] for n, u in parts))


def _history(spark, path: str) -> dict[int, dict]:
    return {int(r["version"]): r.asDict() for r in spark.sql(f"DESCRIBE HISTORY {_ref(path)}").collect()}


def _json_list(text: str | None) -> list | None:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def expected_optimize_parameters(detail: dict, metrics: dict) -> dict[str, Any]:
    """delta-spark 4.4.0's OPTIMIZE operationParameters for the run ``metrics`` describes, as DESCRIBE HISTORY
    shows them: ``predicate``, ``zOrderBy``, ``clusterBy`` and ``auto`` always (``clusterBy`` is ``[]`` on a
    table that is not clustered), ``isFull`` on a table with clustering columns. A value that delta-spark
    prints in its own way (the predicate's expression text, isFull) is given as a check function."""
    clustering = list(detail.get("clusteringColumns") or [])
    expected: dict[str, Any] = {
        "predicate": (lambda v: (_json_list(v) is not None and bool(_json_list(v)) == (metrics.get("predicate")
                                                                                      is not None)),
                      "a JSON list, empty exactly when the run had no predicate"),
        "zOrderBy": _compact(list(metrics.get("zOrderBy") or [])),
        "clusterBy": _compact(clustering),
        "auto": "true" if "autoCompaction" in metrics else "false",
    }
    if clustering:
        expected["isFull"] = (lambda v: v in ("true", "false"), "true or false")
    return expected


def _check_row(row: dict | None, version: int, operation: str, parameters: dict[str, Any],
               metric_names: tuple[str, ...], metrics: dict, problems: list[str]) -> None:
    if row is None:
        problems.append(f"DESCRIBE HISTORY has no version {version}")
        return
    where = f"version {version}"
    if row["operation"] != operation:
        problems.append(f"{where}: operation {row['operation']!r}, delta-spark writes {operation!r}")
    params = dict(row["operationParameters"] or {})
    missing = [k for k in parameters if k not in params]
    if missing:
        problems.append(f"{where}: operationParameters lack {missing} that delta-spark writes (has {sorted(params)})")
    for name, want in parameters.items():
        if name not in params:
            continue
        if isinstance(want, tuple):
            check, what = want
            if not check(params[name]):
                problems.append(f"{where}: operationParameters[{name!r}] = {params[name]!r}, expected {what}")
        elif params[name] != want:
            problems.append(f"{where}: operationParameters[{name!r}] = {params[name]!r}, expected {want!r}")
    op_metrics = dict(row["operationMetrics"] or {})
    absent = [m for m in metric_names if m not in op_metrics]
    if absent:
        problems.append(f"{where}: operationMetrics lack {absent} that delta-spark writes (has {sorted(op_metrics)})")
    not_reported = [m for m in metric_names if m not in metrics]
    if not_reported:
        problems.append(f"the job's metrics lack {not_reported}, delta-spark's names for this job")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_values(where: str, op_metrics: dict, metrics: dict, names: Iterable[str], problems: list[str]) -> None:
    for name in names:
        if name in op_metrics and _number(metrics.get(name)) and float(op_metrics[name]) != float(metrics[name]):
            problems.append(f"{where}: operationMetrics[{name!r}] = {op_metrics[name]}, the job's metrics say "
                            f"{metrics[name]}")


def assert_history_shows_our_commit(spark, path: str, metrics: dict) -> None:
    """For a committed run, DESCRIBE HISTORY's row for ``metrics["version_committed"]`` (and every other version
    the run committed) has the operation delta-spark writes for the job (OPTIMIZE; VACUUM START and VACUUM END),
    its operationParameters under delta-spark's names, and operationMetrics with delta-spark's names whose values
    equal the job's same-named numbers (every same-named number, delta-spark's or not). A run that committed
    nothing (skipped, dry run, or a job that writes no commit) left the table's latest version at
    ``version_read``."""
    status, operation = metrics.get("status"), metrics.get("operation")
    if status not in ("committed", "skipped", "dry_run"):
        raise AssertionError(f"the {operation} run did not succeed: status {status!r}, {metrics.get('error')!r}")
    history = _history(spark, path)
    committed = metrics.get("version_committed")
    if status != "committed" or committed is None:
        if status == "committed" and operation not in _NO_COMMIT_JOBS:
            raise AssertionError(f"the {operation} run says it committed, but names no version_committed: {metrics}")
        latest = max(history)
        if latest != metrics.get("version_read"):
            raise AssertionError(f"the {operation} run ({status}) committed nothing, yet the table moved from version "
                                 f"{metrics.get('version_read')} to {latest}: {history[latest]['operation']!r}")
        return
    problems: list[str] = []
    if operation == "optimize":
        detail = _detail(spark, path)
        versions = list(metrics.get("versions_committed") or [committed])
        parameters = expected_optimize_parameters(detail, metrics)
        rows = [history.get(v) for v in versions]
        for v, row in zip(versions, rows):
            _check_row(row, v, "OPTIMIZE", parameters, OPTIMIZE_METRICS, metrics, problems)
            if row is not None and not metrics.get("version_read", -1) <= row["readVersion"] < v:
                problems.append(f"version {v}: readVersion {row['readVersion']}, the run read version "
                                f"{metrics.get('version_read')}")
        present = [dict(r["operationMetrics"] or {}) for r in rows if r is not None]
        if len(present) == 1:
            _check_values(f"version {versions[0]}", present[0], metrics, present[0], problems)
        elif present:  # several batches: their sums, the smallest minimum and the largest maximum
            combined = {n: sum(int(m.get(n, 0)) for m in present) for n in _ADDITIVE}
            combined["minFileSize"] = min(int(m["minFileSize"]) for m in present if "minFileSize" in m)
            combined["maxFileSize"] = max(int(m["maxFileSize"]) for m in present if "maxFileSize" in m)
            _check_values(f"versions {versions}", combined, metrics, combined, problems)
    elif operation == "vacuum":
        start = metrics.get("version_vacuum_start")
        detail = _detail(spark, path)
        retention = (detail["properties"] or {}).get("delta.deletedFileRetentionDuration")
        default_ms = parse_interval_ms(retention) if retention else DEFAULT_DELETED_FILE_RETENTION_MS
        specified = (round(float(metrics["retention_hours"]) * 3_600_000)
                     if metrics.get("retention_hours") is not None else None)
        start_parameters: dict[str, Any] = {
            "retentionCheckEnabled": (lambda v: v in ("true", "false"), "true or false"),
            "defaultRetentionMillis": str(default_ms),
        }
        start_row = history.get(start) if start is not None else None
        if start is None:
            problems.append("the vacuum run's metrics name no version_vacuum_start")
        else:
            _check_row(start_row, start, "VACUUM START", start_parameters, VACUUM_START_METRICS, metrics, problems)
        if start_row is not None:
            given = (start_row["operationParameters"] or {}).get("specifiedRetentionMillis")
            if given is not None and specified is not None and int(given) != specified:
                problems.append(f"version {start}: specifiedRetentionMillis {given}, the run's retention is "
                                f"{metrics['retention_hours']} hours")
            _check_values(f"version {start}", dict(start_row["operationMetrics"] or {}), metrics,
                          VACUUM_START_METRICS, problems)
        end_row = history.get(committed)
        _check_row(end_row, committed, "VACUUM END", {"status": "COMPLETED"}, VACUUM_END_METRICS, metrics, problems)
        if end_row is not None:
            _check_values(f"version {committed}", dict(end_row["operationMetrics"] or {}), metrics,
                          dict(end_row["operationMetrics"] or {}), problems)
            if start is not None and not start < committed:
                problems.append(f"VACUUM END (version {committed}) is not after VACUUM START (version {start})")
    else:
        raise AssertionError(f"the {operation} run committed version {committed}, but the judge knows no "
                             "operation delta-spark writes for that job")
    if problems:
        raise AssertionError(f"DESCRIBE HISTORY of {path} does not show the {operation} commit delta-spark would "
                             "have written:\n- " + "\n- ".join(problems))


# ---------------------------------------------------------------------------------------------------------
# checkpoints and log compaction files

_LOG_COMMIT = re.compile(r"^(\d{20})\.json$")
_LOG_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_LOG_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_LOG_V2 = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
_LOG_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_LOG_VERSION_CHECKSUM = re.compile(r"^(\d{20})\.crc$")


@dataclass(frozen=True)
class _CheckpointFiles:
    version: int
    kind: str             # classic, multi-part, v2
    names: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.kind} checkpoint {self.version} ({', '.join(self.names)})"


def _log_dir(path: str) -> str:
    parsed = urlparse(path)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"the judge reads log files on local disk only, not {path}")
    return os.path.join(unquote(parsed.path) if parsed.scheme else path, "_delta_log")


def _log_names(log_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(log_dir) if os.path.isfile(os.path.join(log_dir, n)))


def _checkpoints(names: list[str]) -> list[_CheckpointFiles]:
    out: list[_CheckpointFiles] = []
    parts: dict[tuple[int, int], list[str]] = {}
    for n in names:
        if m := _LOG_CLASSIC.match(n):
            out.append(_CheckpointFiles(int(m.group(1)), "classic", (n,)))
        elif m := _LOG_V2.match(n):
            out.append(_CheckpointFiles(int(m.group(1)), "v2", (n,)))
        elif m := _LOG_MULTIPART.match(n):
            parts.setdefault((int(m.group(1)), int(m.group(3))), []).append(n)
    for (version, total), found in parts.items():
        if len(found) == total:  # an incomplete multi-part checkpoint is no checkpoint
            out.append(_CheckpointFiles(version, "multi-part", tuple(sorted(found))))
    return sorted(out, key=lambda c: (c.version, c.kind, c.names))


def hadoop_checksum_problems(directory: str) -> list[str]:
    """Files in ``directory`` whose Hadoop checksum sidecar (``.<name>.crc``: "crc\\0", bytes per checksum,
    a CRC-32 per chunk) does not match them: delta-spark, reading through Hadoop's checksummed local file
    system, logs a ChecksumException on each of them and retries."""
    problems = []
    for side in sorted(n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".crc")):
        target = os.path.join(directory, side[1:-4])
        if not os.path.isfile(target):
            continue  # an orphaned sidecar is never read
        with open(os.path.join(directory, side), "rb") as fh:
            raw = fh.read()
        with open(target, "rb") as fh:
            data = fh.read()
        if raw[:4] != b"crc\0" or len(raw) < 8:
            problems.append(f"{side}: not a Hadoop checksum file")
            continue
        chunk = int.from_bytes(raw[4:8], "big")
        sums = [int.from_bytes(raw[i:i + 4], "big") for i in range(8, len(raw) - 3, 4)]
        actual = [zlib.crc32(data[i:i + chunk]) for i in range(0, len(data), chunk)] if chunk > 0 else []
        if sums != actual:
            problems.append(f"{side[1:-4]}: its checksum sidecar {side} does not match it "
                            f"({len(data)} bytes now; the sidecar describes {len(sums)} chunk(s) of {chunk} bytes)")
    return problems


def _hide_commit(log_dir: str, name: str) -> None:
    """Keep a commit file's name and its commitInfo (timestamps, in-commit timestamp), drop its actions."""
    target = os.path.join(log_dir, name)
    with open(target, encoding="utf-8") as fh:
        info = [line for line in fh if line.strip() and "commitInfo" in json.loads(line)]
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(info[0] if info else json.dumps({"commitInfo": {"operation": "HIDDEN BY THE JUDGE"}}) + "\n")
    _remove_sidecar(log_dir, name)


def _remove(log_dir: str, name: str) -> None:
    if os.path.exists(os.path.join(log_dir, name)):
        os.remove(os.path.join(log_dir, name))
    _remove_sidecar(log_dir, name)


def _remove_sidecar(log_dir: str, name: str) -> None:
    side = os.path.join(log_dir, f".{name}.crc")
    if os.path.exists(side):
        os.remove(side)


def _hint_names(log_dir: str, cp: _CheckpointFiles) -> bool:
    """``_last_checkpoint`` exists and names this checkpoint (version and kind; a V2 one by its file)."""
    try:
        with open(os.path.join(log_dir, "_last_checkpoint"), encoding="utf-8") as fh:
            hint = json.load(fh)
        if int(hint["version"]) != cp.version:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    v2 = hint.get("v2Checkpoint") or {}
    if v2:
        return cp.kind == "v2" and os.path.basename(str(v2.get("path", ""))) == cp.names[0]
    return (cp.kind == "multi-part") == bool(hint.get("parts"))


def _compaction_layers(compactions: list[tuple[int, int, str]]) -> list[list[tuple[int, int, str]]]:
    """Compaction files in sets of disjoint ranges: delta-spark uses every file of such a set in one read."""
    layers: list[list[tuple[int, int, str]]] = []
    for comp in sorted(compactions):
        for layer in layers:
            if layer[-1][1] < comp[0]:
                layer.append(comp)
                break
        else:
            layers.append([comp])
    return layers


def _compare_states(what: str, expected: TableState, got: TableState) -> None:
    problems = [p for p in (
        None if expected.version == got.version else f"version {got.version}, expected {expected.version}",
        _counter_diff("rows", expected.rows, got.rows),
        _counter_diff("row ids", expected.row_ids, got.row_ids) if expected.row_ids is not None else None,
        None if expected.schema == got.schema else f"schema differs:\n  expected {expected.schema}\n  read     {got.schema}",
        _dict_diff("protocol", expected.protocol, got.protocol),
        _dict_diff("properties", expected.properties, got.properties),
        None if (expected.num_files, expected.size_in_bytes) == (got.num_files, got.size_in_bytes) else
        f"numFiles/sizeInBytes {got.num_files}/{got.size_in_bytes}, expected {expected.num_files}/{expected.size_in_bytes}",
    ) if p]
    if problems:
        raise AssertionError(f"delta-spark reading {what} gets another table:\n- " + "\n- ".join(problems))


def _read_copy(spark, copy: str, what: str, expected: TableState) -> None:
    row_tracking, key = expected.row_ids is not None, "id"
    if row_tracking:
        if id(expected) not in _ROW_ID_KEYS:
            raise ValueError("the expected state's row ids were not read by read_state")
        key = _ROW_ID_KEYS[id(expected)][1]
    try:
        got = _read_state(spark, copy, None, row_tracking, key, remember=False)
    except Exception as exc:  # delta-spark's error, named with the file it could not use
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AssertionError(f"delta-spark cannot read {what}: {first}") from exc
    finally:
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(
            spark._jsparkSession, spark._jvm.org.apache.hadoop.fs.Path(copy))
    _compare_states(what, expected, got)


def assert_log_files_load(spark, path: str, expected: TableState) -> list[str]:
    """delta-spark loads the table's checkpoints and log compaction files and gets ``expected`` from them.

    Each complete checkpoint (classic, multi-part, V2 with or without sidecars) is read in a copy of the table
    where it is the only checkpoint, the commits before it are deleted and its own commit is hidden; each set
    of disjoint compaction files in a copy where they are the only compaction files, the checkpoints from
    their first version on are deleted and the commits they cover are hidden (delta-spark refuses a log
    whose commit files are not all listed, even where a compaction file covers them, so a hidden commit keeps
    its name and commitInfo and loses its actions: the state can only come from the compaction file). Every
    copy loses the version checksum files (``<v>.crc``), so that protocol and metadata come from the file
    under test too. The Hadoop checksum sidecars in ``_delta_log`` must match their files.

    Returns:
        what was loaded, one line per checkpoint or compaction set; an empty list when the table has
        neither checkpoints nor compaction files.
    """
    log_dir = _log_dir(path)
    problems = hadoop_checksum_problems(log_dir)
    if os.path.isdir(os.path.join(log_dir, "_sidecars")):
        problems += hadoop_checksum_problems(os.path.join(log_dir, "_sidecars"))
    if problems:
        raise AssertionError(f"delta-spark would log checksum failures reading {path}:\n- " + "\n- ".join(problems))
    names = _log_names(log_dir)
    commits = {int(m.group(1)) for n in names if (m := _LOG_COMMIT.match(n))}
    checkpoints = _checkpoints(names)
    compactions = [(int(m.group(1)), int(m.group(2)), n) for n in names if (m := _LOG_COMPACTION.match(n))]
    checkpoint_names = {n for c in checkpoints for n in c.names}
    checked: list[str] = []
    if not checkpoints and not compactions:
        return checked

    def copy_table() -> tuple[str, str]:
        root = tempfile.mkdtemp(prefix="delta-judge-")
        copy = os.path.join(root, "table")
        shutil.copytree(os.path.dirname(log_dir), copy)
        copy_log = os.path.join(copy, "_delta_log")
        for n in names:
            if _LOG_VERSION_CHECKSUM.match(n):
                _remove(copy_log, n)
        return root, copy

    for cp in checkpoints:
        root, copy = copy_table()
        copy_log = os.path.join(copy, "_delta_log")
        try:
            for n in checkpoint_names - set(cp.names):
                _remove(copy_log, n)
            for _, _, n in compactions:
                _remove(copy_log, n)
            if not _hint_names(log_dir, cp):
                _remove(copy_log, "_last_checkpoint")
            for v in commits:
                if v < cp.version:
                    _remove(copy_log, f"{v:020d}.json")
                elif v == cp.version:
                    _hide_commit(copy_log, f"{v:020d}.json")
            _read_copy(spark, copy, f"{path} from its {cp.describe()} (earlier commits deleted)", expected)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        checked.append(cp.describe())

    conf = spark.conf.get(_COMPACTIONS_FOR_READS, None)
    spark.conf.set(_COMPACTIONS_FOR_READS, "true")
    try:
        for layer in _compaction_layers(compactions):
            first = layer[0][0]
            base = max((c for c in checkpoints if c.version < first), key=lambda c: c.version, default=None)
            start = base.version + 1 if base else 0
            gap = [v for v in range(start, expected.version + 1) if v not in commits]
            label = ", ".join(f"{s}-{e}" for s, e, _ in layer)
            if gap:
                checked.append(f"compaction files {label}: not loadable alone, commits {gap[:5]} are gone "
                               f"(the table has no checkpoint before version {first} and after them)")
                continue
            root, copy = copy_table()
            copy_log = os.path.join(copy, "_delta_log")
            try:
                for c in checkpoints:
                    if c is not base:
                        for n in c.names:
                            _remove(copy_log, n)
                if base is None or not _hint_names(log_dir, base):
                    _remove(copy_log, "_last_checkpoint")
                for s, e, n in compactions:
                    if (s, e, n) not in layer:
                        _remove(copy_log, n)
                for s, e, _ in layer:
                    for v in range(s, e + 1):
                        _hide_commit(copy_log, f"{v:020d}.json")
                _read_copy(spark, copy, f"{path} through its compaction files {label} (the commits they cover "
                           "hidden)", expected)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            checked.append(f"compaction files {label}" + (f" on {base.describe()}" if base else ""))
    finally:
        if conf is None:
            spark.conf.unset(_COMPACTIONS_FOR_READS)
        else:
            spark.conf.set(_COMPACTIONS_FOR_READS, conf)
    return checked


# ---------------------------------------------------------------------------------------------------------
# delta-spark keeps writing

_INTEGRAL = ("long", "integer", "short", "byte")


@dataclass
class _Plan:
    """How the judge writes the table: which columns it models, which it updates, how it makes new keys."""

    key: str
    key_kind: str                     # "int" or "str"
    modelled: list[str]               # columns the Python model predicts (not identity, not generated)
    value: str | None                 # the column UPDATE and MERGE change; None: an assignment to itself
    value_kind: str | None            # "str", "int", "double"
    assign_to: str                    # the column assigned when value is None
    append_only: bool
    row_tracking: bool
    offset: int = 0                   # new integer keys: old + offset (INSERT), old + 2 * offset (MERGE)

    def literal(self, k: Any) -> str:
        if self.key_kind == "int":
            return str(int(k))
        return "'" + str(k).replace("\\", "\\\\").replace("'", "\\'") + "'"

    def new_key(self, k: Any, n: int) -> Any:
        return k + n * self.offset if self.key_kind == "int" else f"{k}#{n}"

    def new_key_sql(self, n: int) -> str:
        return f"{_q(self.key)} + {n * self.offset}" if self.key_kind == "int" else f"concat({_q(self.key)}, '#{n}')"

    def change(self, v: Any, suffix: str) -> Any:
        if v is None or self.value is None:
            return v
        if self.value_kind == "str":
            return v + suffix
        return v + (1 if suffix == ".u" else 2)

    def change_sql(self, column: str, suffix: str) -> str:
        if self.value is None:
            return column
        if self.value_kind == "str":
            return f"concat({column}, '{suffix}')"
        return f"{column} + {1 if suffix == '.u' else 2}"


def _plan(spark, path: str, key: str, row_tracking: bool) -> _Plan:
    snap = _snapshot(spark, path)
    fields = _top_fields(spark, snap)
    meta = snap.metadata()
    properties = dict(_java(spark, meta.configuration()))
    partitions = set(_java(spark, meta.partitionColumns()))
    by_name = {f["name"]: f for f in fields}
    if key not in by_name:
        raise ValueError(f"assert_keeps_writing keys rows by {key!r}, which {path} does not have")

    def computed(f: dict) -> bool:  # identity and generated columns: delta-spark computes them
        m = f.get("metadata") or {}
        return any(k.startswith("delta.identity.") for k in m) or "delta.generationExpression" in m

    key_type = by_name[key]["type"]
    if key_type in _INTEGRAL:
        key_kind = "int"
    elif key_type == "string":
        key_kind = "str"
    else:
        raise ValueError(f"assert_keeps_writing needs an integer or string key column, {key!r} is {key_type!r}")
    expressions = " ".join([v for k, v in properties.items() if k.startswith("delta.constraints.")]
                           + [(f.get("metadata") or {}).get("delta.generationExpression", "") for f in fields])
    modelled = [f["name"] for f in fields if not computed(f)]
    value, kind = None, None
    for wanted in ("str", "int", "double"):
        for f in fields:
            name, t, m = f["name"], f["type"], f.get("metadata") or {}
            if (name == key or name in partitions or computed(f) or "__CHAR_VARCHAR_TYPE_STRING" in m
                    or re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", expressions, re.IGNORECASE)):
                continue
            if (wanted, t) in (("str", "string"), ("double", "double")) or (wanted == "int" and t in _INTEGRAL):
                value, kind = name, wanted
                break
        if value:
            break
    assign_to = next((c for c in modelled if c != key), key)
    return _Plan(key=key, key_kind=key_kind, modelled=modelled, value=value, value_kind=kind, assign_to=assign_to,
                 append_only=properties.get("delta.appendOnly", "false").lower() == "true", row_tracking=row_tracking)


class _Writer:
    """delta-spark's statements on the table, each checked against the Python model of its rows."""

    def __init__(self, spark, path: str, plan: _Plan):
        self.spark, self.path, self.plan, self.ref = spark, path, plan, _ref(path)
        self.version, self.rows = self.read()

    def read(self) -> tuple[int, list[dict]]:
        version = _latest_version(self.spark, self.path)
        _, rows = _collect(self.spark, self.path, None, self.plan.row_tracking)
        return version, rows

    def project(self, rows: Iterable[dict]) -> Counter:
        return Counter(tuple(canon(r[c]) for c in self.plan.modelled) for r in rows)

    def keys(self, unique: bool = False) -> list[Any]:
        counts = Counter(r[self.plan.key] for r in self.rows if r[self.plan.key] is not None)
        return sorted(k for k, n in counts.items() if n == 1 or not unique)

    def in_list(self, keys: Iterable[Any]) -> str:
        return ", ".join(self.plan.literal(k) for k in keys) or "NULL"

    def run(self, what: str, sql: str, expected: list[dict], touched: set) -> None:
        self.spark.sql(sql)
        version, rows = self.read()
        problem = _counter_diff("rows", self.project(expected), self.project(rows))
        if problem:
            raise AssertionError(f"after delta-spark's {what} (version {version}) the table is not what the model "
                                 f"says: {problem}\n  statement: {sql}")
        if version <= self.version:
            raise AssertionError(f"delta-spark's {what} committed no new version (still {version})\n  statement: {sql}")
        if self.plan.row_tracking:
            self.check_row_ids(what, rows, touched, version)
        self.version, self.rows = version, rows

    def check_row_ids(self, what: str, rows: list[dict], touched: set, version: int) -> None:
        key = self.plan.key
        ids = Counter(r[_ROW_ID] for r in rows)
        dup = [i for i, n in ids.items() if n > 1]
        before = {r[_ROW_ID]: (r[key], r[_ROW_VERSION]) for r in self.rows}
        highest = max(before, default=-1)
        problems = [f"row ids {dup[:5]} are held by more than one row"] if dup else []
        for r in rows:
            rid, rcv, k = r[_ROW_ID], r[_ROW_VERSION], r[key]
            if rid in before:
                old_key, old_rcv = before[rid]
                if canon(old_key) != canon(k):
                    problems.append(f"row id {rid} moved from key {old_key!r} to key {k!r}")
                elif rcv != (version if k in touched else old_rcv):
                    problems.append(f"key {k!r} (row id {rid}): row_commit_version {rcv}, expected "
                                    f"{version if k in touched else old_rcv}")
            elif rid is None or rid <= highest or rcv != version:
                problems.append(f"new row with key {k!r}: row id {rid} (must be fresh: above {highest}), "
                                f"row_commit_version {rcv} (expected {version})")
        if problems:
            raise AssertionError(f"row tracking after delta-spark's {what} (version {version}):\n- "
                                 + "\n- ".join(problems[:10]))

    # -- the statements -----------------------------------------------------------------------------------
    def select(self, key_sql: str, keys: list[Any], with_key: bool) -> str:
        """The modelled columns of the rows with ``keys``, the key as ``key_sql`` (also when the key column is
        one delta-spark computes, for MERGE's join, ``with_key``)."""
        p = self.plan
        cols = [f"{key_sql} AS {_q(c)}" if c == p.key else _q(c) for c in p.modelled]
        if with_key and p.key not in p.modelled:
            cols.insert(0, f"{key_sql} AS {_q(p.key)}")
        return (f"SELECT {', '.join(cols)} FROM {self.ref} VERSION AS OF {self.version} "
                f"WHERE {_q(p.key)} IN ({self.in_list(keys)})")

    def insert(self, keys: list[Any]) -> None:
        p = self.plan
        wanted = set(keys)
        copies = [{**r, p.key: p.new_key(r[p.key], 1)} for r in self.rows if r[p.key] in wanted]
        sql = (f"INSERT INTO {self.ref} ({', '.join(_q(c) for c in p.modelled)}) "
               f"{self.select(p.new_key_sql(1), keys, with_key=False)}")
        self.run("INSERT", sql, self.rows + copies, touched=set())

    def merge(self, update_keys: list[Any], insert_keys: list[Any]) -> None:
        p = self.plan
        upd, ins = set(update_keys), set(insert_keys)
        target = p.value or p.assign_to
        expected = [{**r, target: p.change(r[target], ".m")} if r[p.key] in upd else r for r in self.rows]
        expected += [{**r, p.key: p.new_key(r[p.key], 2)} for r in self.rows if r[p.key] in ins]
        source = (f"{self.select(_q(p.key), update_keys, with_key=True)} UNION ALL "
                  f"{self.select(p.new_key_sql(2), insert_keys, with_key=True)}")
        sql = (f"MERGE INTO {self.ref} AS t USING ({source}) AS s ON t.{_q(p.key)} = s.{_q(p.key)} "
               f"WHEN MATCHED THEN UPDATE SET t.{_q(target)} = {p.change_sql('t.' + _q(target), '.m')} "
               f"WHEN NOT MATCHED THEN INSERT ({', '.join(_q(c) for c in p.modelled)}) "
               f"VALUES ({', '.join('s.' + _q(c) for c in p.modelled)})")
        self.run("MERGE", sql, expected, touched=upd)

    def update(self, keys: list[Any]) -> None:
        p = self.plan
        wanted = set(keys)
        target = p.value or p.assign_to
        expected = [{**r, target: p.change(r[target], ".u")} if r[p.key] in wanted else r for r in self.rows]
        sql = (f"UPDATE {self.ref} SET {_q(target)} = {p.change_sql(_q(target), '.u')} "
               f"WHERE {_q(p.key)} IN ({self.in_list(keys)})")
        self.run("UPDATE", sql, expected, touched=wanted)

    def delete(self, keys: list[Any]) -> None:
        wanted = set(keys)
        expected = [r for r in self.rows if r[self.plan.key] not in wanted]
        sql = f"DELETE FROM {self.ref} WHERE {_q(self.plan.key)} IN ({self.in_list(keys)})"
        self.run("DELETE", sql, expected, touched=set())


def _reconstructable(path: str, version: int) -> bool:
    """delta-spark can build ``version`` from the log: a complete checkpoint at or before it and every commit
    after that up to it, or every commit from 0."""
    names = _log_names(_log_dir(path))
    commits = {int(m.group(1)) for n in names if (m := _LOG_COMMIT.match(n))}
    starts = [c.version for c in _checkpoints(names) if c.version <= version] + [-1]
    return any(all(v in commits for v in range(s + 1, version + 1)) for s in starts)


def _missing_files(spark, path: str, version: int) -> list[str]:
    """The data and deletion-vector files delta-spark's snapshot of ``version`` needs that are not on disk."""
    snap = _snapshot(spark, path, version)
    root = snap.deltaLog().dataPath()
    local_root = root.toUri().getPath()
    missing = []
    for add in snap.allFiles().collectAsList():
        p = add.path()
        wanted = [unquote(urlparse(p).path) if urlparse(p).scheme else os.path.join(local_root, unquote(p))]
        dv = add.deletionVector()
        if dv is not None and dv.isOnDisk():
            wanted.append(dv.absolutePath(root).toUri().getPath())
        missing += [f for f in wanted if not os.path.exists(f)]
    return missing


def _log_stated_rows(spark, path: str, version: int) -> int | None:
    """Rows the log states for ``version`` (numRecords minus deleted rows), None when a file has no statistics."""
    from pyspark.sql import DataFrame, functions as F

    files = DataFrame(_snapshot(spark, path, version).allFiles().toDF(), spark)
    has_dv = "deletionVector" in files.columns
    row = files.select(
        F.count(F.lit(1)).alias("files"),
        F.count(F.get_json_object("stats", "$.numRecords")).alias("with_stats"),
        F.sum(F.get_json_object("stats", "$.numRecords").cast("long")).alias("records"),
        (F.sum(F.coalesce(F.col("deletionVector.cardinality"), F.lit(0))) if has_dv else F.lit(0)).alias("deleted"),
    ).collect()[0]
    if row["files"] != row["with_stats"]:
        return None
    return int(row["records"] or 0) - int(row["deleted"] or 0)


def _live_files(spark, path: str, version: int | None = None) -> dict[str, dict]:
    from pyspark.sql import DataFrame

    files = DataFrame(_snapshot(spark, path, version).allFiles().toDF(), spark)
    cols = [c for c in ("path", "tags", "clusteringProvider") if c in files.columns]
    return {r["path"]: r.asDict() for r in files.select(*cols).collect()}


def _written_by_us(spark, path: str, before_job_version: int) -> set[str]:
    """Live files added after ``before_job_version``: the files our job wrote. When that version can no longer
    be built, every live file that carries a ZCube tag or a clustering provider."""
    live = _live_files(spark, path)
    if _reconstructable(path, before_job_version):
        return set(live) - set(_live_files(spark, path, before_job_version))
    return {p for p, f in live.items() if "ZCUBE_ID" in (f.get("tags") or {}) or f.get("clusteringProvider")}


def assert_keeps_writing(spark, path: str, before_job_version: int, kept_versions: list[int], key: str = "id",
                         row_tracking: bool = False, clustered: bool = False, every_statement: bool = True) -> dict:
    """delta-spark keeps working on the table after our job, in this order:

    1. time travel (VERSION AS OF) to every version in ``kept_versions`` reads what :func:`read_state` read at
       that version before (rows, and row ids when they were read); a version read_state never read must
       give the row count its log states;
    2. its own OPTIMIZE keeps rows and row ids; on a clustered table it rewrites none of the files our job
       wrote (the live files added after ``before_job_version``; counted): our clustering tags them as ZCubes
       (ZCUBE_ID, ZCUBE_ZORDER_BY), which delta-spark's clustering leaves alone;
    3. INSERT (copies of some rows under new keys), then, unless the table is append-only, MERGE (updates
       some keys, inserts new ones), UPDATE and DELETE, each checked against a Python model of the rows (the
       columns delta-spark computes, identity and generated ones, left out of the model; row ids on
       row-tracking tables: kept by untouched and updated rows, fresh for new rows, row commit versions);
    4. unless append-only, RESTORE TABLE to ``before_job_version`` when every file it needs is still there:
       that version's rows (and row ids);
    5. its own VACUUM RETAIN 0 HOURS (the retention check off for that statement alone) keeps the rows.

    Flags come from the arguments (row tracking, clustering) and the table (delta.appendOnly, identity and
    generated columns, CHECK constraints), never from a statement's failure. ``every_statement=False`` runs
    only 1 and 3's INSERT and DELETE: delta-spark appends a file and deletes rows (a deletion vector or a
    rewrite) on the table, at a quarter of the cost.

    Returns:
        what was done: ``statements`` run, ``seconds`` each took, ``restored`` (bool), and on clustered
        tables ``clustered_files_ours`` and ``optimize_removed_ours``.
    """
    table = _table_key(path)
    done: dict[str, Any] = {"statements": [], "restored": False, "seconds": {}}

    @contextlib.contextmanager
    def step(name: str):
        started = time.perf_counter()
        yield
        done["statements"].append(name)
        done["seconds"][name] = round(time.perf_counter() - started, 2)

    # 1. time travel
    for v in sorted(set(kept_versions)):
        with step(f"VERSION AS OF {v}"):
            _time_travel(spark, path, table, v)
    plan = _plan(spark, path, key, row_tracking)
    writer = _Writer(spark, path, plan)
    # 2. delta-spark's OPTIMIZE
    if every_statement:
        with step("OPTIMIZE"):
            ours = _written_by_us(spark, path, before_job_version) if clustered else set()
            before_rows = writer.project(writer.rows)
            before_ids = _ids_of(key, writer.rows) if row_tracking else None
            spark.sql(f"OPTIMIZE {_ref(path)}")
            writer.version, writer.rows = writer.read()
            problem = _counter_diff("rows", before_rows, writer.project(writer.rows)) or (
                _counter_diff("row ids", before_ids, _ids_of(key, writer.rows)) if row_tracking else None)
            if problem:
                raise AssertionError(f"delta-spark's OPTIMIZE of {path} changed the table: {problem}")
            if clustered:
                removed = sorted(ours - set(_live_files(spark, path)))
                done["clustered_files_ours"], done["optimize_removed_ours"] = len(ours), len(removed)
                if removed:
                    raise AssertionError(f"delta-spark's OPTIMIZE of {path} rewrote {len(removed)} of the "
                                         f"{len(ours)} files our job wrote: {_show(removed)}")
    # 3. DML against the model
    keys = writer.keys()
    if plan.key_kind == "int" and keys:
        plan.offset = max(keys) - min(keys) + 1
    with step("INSERT"):
        writer.insert(keys[:3])
    if not plan.append_only:
        if every_statement:
            unique = [k for k in writer.keys(unique=True) if k in set(keys)]
            with step("MERGE"):
                writer.merge(unique[3:6], unique[6:8])
            with step("UPDATE"):
                writer.update(keys[8:12])
        with step("DELETE"):
            writer.delete(keys[12:15])
        # 4. RESTORE
        if every_statement and _reconstructable(path, before_job_version) \
                and not _missing_files(spark, path, before_job_version):
            with step(f"RESTORE TO VERSION AS OF {before_job_version}"):
                _restore(spark, path, table, before_job_version)
                writer.version, writer.rows = writer.read()
            done["restored"] = True
    if not every_statement:
        return done
    # 5. delta-spark's VACUUM
    with step("VACUUM RETAIN 0 HOURS"):
        before_rows = writer.project(writer.rows)
        previous = spark.conf.get(_RETENTION_CHECK, None)
        spark.conf.set(_RETENTION_CHECK, "false")
        try:
            spark.sql(f"VACUUM {_ref(path)} RETAIN 0 HOURS")
        finally:
            if previous is None:
                spark.conf.unset(_RETENTION_CHECK)
            else:
                spark.conf.set(_RETENTION_CHECK, previous)
        _, rows = writer.read()
        problem = _counter_diff("rows", before_rows, writer.project(rows))
        if problem:
            raise AssertionError(f"delta-spark's VACUUM of {path} changed the rows: {problem}")
    return done


def _time_travel(spark, path: str, table: str, v: int) -> None:
    known = _STATES.get((table, v))
    with_ids = known is not None and known.row_ids is not None
    try:
        columns, raw = _collect(spark, path, v, with_ids)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AssertionError(f"delta-spark cannot time-travel to version {v} of {path}, which the job "
                             f"kept: {first}") from exc
    if known is not None:
        problem = _counter_diff("rows", known.rows, _rows_of(columns, raw)) or (
            _counter_diff("row ids", known.row_ids, _ids_of(_ROW_ID_KEYS[id(known)][1], raw)) if with_ids else None)
        if problem:
            raise AssertionError(f"time travel to version {v} of {path} reads another table than before the "
                                 f"job: {problem}")
    else:
        stated = _log_stated_rows(spark, path, v)
        if stated is not None and stated != len(raw):
            raise AssertionError(f"time travel to version {v} of {path} reads {len(raw)} rows; its log "
                                 f"states {stated}")


def _restore(spark, path: str, table: str, version: int) -> None:
    known = _STATES.get((table, version))
    if known is None:  # what delta-spark reads there now, before restoring it
        columns, raw = _collect(spark, path, version, False)
        want_rows = _rows_of(columns, raw)
    else:
        want_rows = known.rows
    spark.sql(f"RESTORE TABLE {_ref(path)} TO VERSION AS OF {version}")
    columns, raw = _collect(spark, path, None, known is not None and known.row_ids is not None)
    problem = _counter_diff("rows", want_rows, _rows_of(columns, raw))
    if not problem and known is not None and known.row_ids is not None:
        problem = _counter_diff("row ids", known.row_ids, _ids_of(_ROW_ID_KEYS[id(known)][1], raw))
    if problem:
        raise AssertionError(f"RESTORE of {path} to version {version} gives another table: {problem}")


