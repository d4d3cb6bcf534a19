"""The maintenance run log: a Delta table with one row per maintenance job run.

Every run of a job (committed, skipped, dry run or failed) can append one row to a run log at a
configured location. The run log is an ordinary, unpartitioned Delta table (reader 1, writer 2)
written through :mod:`.transaction`: each append writes one parquet file under a unique name and
commits it as a blind append with put-if-absent, so concurrent appenders never conflict and never
overwrite each other; a lost race is rebased and retried. Any Delta reader (delta-rs, Spark with a
Delta connector, this core) reads it.

The table keeps itself small: the appender whose commit lands on a multiple of
:data:`MAINTAIN_EVERY` compacts the table's small files into one (a ``dataChange=false``
OPTIMIZE commit, which appends never conflict with), deletes the files that compactions removed
more than the table's deleted-file retention ago, and writes a checkpoint.

Not to be confused with :mod:`.history`, which answers questions about one table's own log.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta_maint.delta.protocol.features import Operation
from airflow_delta_maint.delta.errors import CommitConflictError, CommitFailedError, InvalidArgumentError, NotADeltaTableError, TableNotFoundError
from airflow_delta_maint.delta.log.checkpoint import write_checkpoint
from airflow_delta_maint.delta.log.listing import commit_key
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import Transaction, default_engine_info
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.stats import stats_json, table_stats
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage, normalize_table_uri
from airflow_delta_maint.delta.storage.write_once import put_once

log = logging.getLogger(__name__)

__all__ = [
    "ADDED_COLUMNS", "CPU_COLUMNS", "MAINTAIN_EVERY", "RUN_LOG_SCHEMA", "AppendResult", "append_runs", "create_run_log", "maintain_run_log",
    "read_runs", "run_record",
]

#: the appender whose commit version is a multiple of this compacts and checkpoints the run log
MAINTAIN_EVERY = 20
#: files below this size are compacted together
SMALL_FILE_BYTES = 16 << 20
#: lost races an append rebases over before giving up (blind appends never conflict)
MAX_RETRIES = 100

_UTC_US = pa.timestamp("us", tz="UTC")

#: the run's CPU-seconds (``cpu_s``, the whole; its parts: the process's, its Spark tasks' Python, its executors'
#: JVM) and what a plan predicted, copied from the metrics into columns of their own (null where not measured)
CPU_COLUMNS = ("cpu_s", "cpu_driver_s", "cpu_tasks_s", "cpu_executors_s", "predicted_cpu_s")
#: the run log's columns, in order
RUN_LOG_SCHEMA = pa.schema([
    pa.field("record_id", pa.string(), nullable=False),
    pa.field("table_uri", pa.string()),
    pa.field("operation", pa.string()),
    pa.field("status", pa.string()),
    pa.field("error", pa.string()),
    pa.field("started_at", _UTC_US),
    pa.field("ended_at", _UTC_US),
    pa.field("duration_s", pa.float64()),
    pa.field("version_read", pa.int64()),
    pa.field("version_committed", pa.int64()),
    pa.field("metrics", pa.string()),
    pa.field("dag_id", pa.string()),
    pa.field("dag_run_id", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("map_index", pa.int32()),
    pa.field("try_number", pa.int32()),
    pa.field("spark_app_id", pa.string()),
    pa.field("engine", pa.string()),
    pa.field("store_calls", pa.string()),
    *(pa.field(name, pa.float64()) for name in CPU_COLUMNS),
])
#: columns added after the first run logs were written: a run log without them is still read (they are null)
#: and appended to in its own columns (the whole metrics, these values included, are in ``metrics`` anyway)
ADDED_COLUMNS = frozenset({"store_calls", *CPU_COLUMNS})


@dataclass(frozen=True)
class AppendResult:
    """What one append did.

    Attributes:
        version: the run log version the rows were committed as.
        rows: rows appended.
        attempts: put attempts the commit took.
        maintenance: what the run log's own maintenance did (None when it was not this append's turn).
    """

    version: int
    rows: int
    attempts: int
    maintenance: dict[str, Any] | None = None


def _parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def run_record(metrics: Mapping[str, Any], *, dag_id: str | None = None, dag_run_id: str | None = None,
               task_id: str | None = None, map_index: int | None = None, try_number: int | None = None,
               spark_app_id: str | None = None, ended_at: datetime | None = None) -> dict[str, Any]:
    """One run log row from a run's metrics object (the metrics contract) and where it ran.

    Args:
        metrics: the run's metrics (``operation``, ``table``, ``status``, ``started_at``, ...);
            stored whole as JSON in ``metrics``, except a ``history`` entry; its ``storeCalls`` also in
            ``store_calls`` (JSON), its CPU-seconds also in :data:`CPU_COLUMNS`.
        dag_id, dag_run_id, task_id, map_index, try_number: the Airflow task instance, when known.
        spark_app_id: the Spark application id, when Spark ran.
        ended_at: when the run ended (default: ``started_at + duration_s``, else now).

    Returns:
        A dict with the columns of :data:`RUN_LOG_SCHEMA`.
    """
    started = _parse_time(metrics.get("started_at"))
    duration = metrics.get("duration_s")
    duration_f = float(duration) if isinstance(duration, (int, float)) else None
    if ended_at is None:
        if started is not None and duration_f is not None:
            ended_at = datetime.fromtimestamp(started.timestamp() + duration_f, tz=timezone.utc)
        else:
            ended_at = datetime.now(timezone.utc)
    body = {k: v for k, v in metrics.items() if k != "history" and not str(k).startswith("_")}
    error = metrics.get("error")
    return {
        "record_id": str(uuid.uuid4()),
        "table_uri": None if metrics.get("table") is None else str(metrics["table"]),
        "operation": None if metrics.get("operation") is None else str(metrics["operation"]),
        "status": None if metrics.get("status") is None else str(metrics["status"]),
        "error": None if error is None else str(error),
        "started_at": started,
        "ended_at": ended_at,
        "duration_s": duration_f,
        "version_read": _int(metrics.get("version_read")),
        "version_committed": _int(metrics.get("version_committed")),
        "metrics": json.dumps(body, sort_keys=True, default=str),
        "dag_id": dag_id or None,
        "dag_run_id": dag_run_id or None,
        "task_id": task_id or None,
        "map_index": _int(map_index),
        "try_number": _int(try_number),
        "spark_app_id": spark_app_id or None,
        "store_calls": None if metrics.get("storeCalls") is None else json.dumps(metrics["storeCalls"], sort_keys=True),
        **{name: _float(metrics.get(name)) for name in CPU_COLUMNS},
        # who did the data work: ours, or another engine run by ours (the metrics' "engine")
        "engine": default_engine_info() if metrics.get("engine") in (None, "native")
        else f"{metrics['engine']} via {default_engine_info()}",
    }


def _storage(uri: str | Storage, storage_options: Mapping[str, str] | None, create: bool = False) -> Storage:
    if isinstance(uri, Storage):
        return uri
    root = normalize_table_uri(uri)
    if create and root.startswith("file://"):
        os.makedirs(root[len("file://"):], exist_ok=True)  # a new run log on local disk
    return Storage(uri, storage_options)


def _metadata_action() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "name": "delta_maint_run_log",
            "description": "airflow-delta-maint: one row per maintenance job run",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(_schema_json()),
            "partitionColumns": [], "configuration": {}, "createdTime": int(time.time() * 1000)}


def _schema_json() -> dict[str, Any]:
    types = {pa.string(): "string", _UTC_US: "timestamp", pa.float64(): "double", pa.int64(): "long",
             pa.int32(): "integer"}
    return {"type": "struct", "fields": [
        {"name": f.name, "type": types[f.type], "nullable": f.nullable, "metadata": {}} for f in RUN_LOG_SCHEMA]}


def _check_schema(snapshot: Snapshot) -> pa.Schema:
    """The run log's own columns (:data:`RUN_LOG_SCHEMA`, less the :data:`ADDED_COLUMNS` an older run log lacks)."""
    fields = {f["name"]: f["type"] for f in snapshot.metadata.schema.get("fields", [])}
    wanted = {f["name"]: f["type"] for f in _schema_json()["fields"]}
    missing = [name for name, kind in wanted.items()
               if fields.get(name) != kind and not (name in ADDED_COLUMNS and name not in fields)]
    if missing or snapshot.partition_columns:
        raise InvalidArgumentError(
            f"{snapshot.storage.root} is a Delta table but not a maintenance run log "
            f"(columns missing or of another type: {', '.join(missing) or 'partitioned'})")
    return pa.schema([f for f in RUN_LOG_SCHEMA if f.name in fields])


def _read_file(storage: Storage, path: str, columns: Sequence[str] | None) -> pa.Table:
    """One file of the log's rows: ``columns`` only (those it has), or all."""
    source = pq.ParquetFile(io.BytesIO(storage.read(_key(storage, path))))
    return source.read(columns=None if columns is None else [c for c in columns if c in source.schema_arrow.names])


def _with_every_column(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """A file's rows in :data:`RUN_LOG_SCHEMA` (or its ``columns``), the columns added since it was written null."""
    schema = RUN_LOG_SCHEMA if columns is None else pa.schema([RUN_LOG_SCHEMA.field(c) for c in columns])
    for name in schema.names:
        if name not in table.column_names:
            field = schema.field(name)
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)


def create_run_log(uri: str | Storage, storage_options: Mapping[str, str] | None = None) -> Snapshot:
    """Create an empty run log at ``uri`` (version 0, put-if-absent) unless a table is there; return its snapshot.

    Raises:
        InvalidArgumentError: a Delta table is there that is not a run log.
    """
    storage = _storage(uri, storage_options, create=True)
    try:
        snapshot = Snapshot.load(storage)
    except (TableNotFoundError, NotADeltaTableError):
        info = {"timestamp": int(time.time() * 1000), "operation": "CREATE TABLE",
                "operationParameters": {"partitionBy": "[]", "description": "maintenance run log"},
                "isBlindAppend": True, "engineInfo": default_engine_info(), "txnId": str(uuid.uuid4())}
        body = [{"commitInfo": info}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                {"metaData": _metadata_action()}]
        data = ("\n".join(json.dumps(a, separators=(",", ":")) for a in body) + "\n").encode()
        try:
            put_once(storage, commit_key(0), data)
            log.info("created the maintenance run log at %s", storage.root)
        except AlreadyExistsError:
            pass  # another appender created it first
        snapshot = Snapshot.load(storage)
    _check_schema(snapshot)
    return snapshot


def _to_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema = RUN_LOG_SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _add_action(storage: Storage, table: pa.Table, metadata: Metadata, data_change: bool) -> dict[str, Any]:
    data = _parquet_bytes(table)
    name = f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    put_once(storage, name, data)
    return {"add": {"path": name, "partitionValues": {}, "size": len(data),
                    "modificationTime": int(time.time() * 1000), "dataChange": data_change,
                    "stats": stats_json(table_stats(table, metadata))}}


def append_runs(uri: str | Storage, rows: Iterable[Mapping[str, Any]],
                storage_options: Mapping[str, str] | None = None, *,
                maintain_every: int = MAINTAIN_EVERY) -> AppendResult:
    """Append rows (see :func:`run_record`) to the run log at ``uri``, creating it if needed.

    One parquet file, one blind-append commit. When the committed version is a multiple of
    ``maintain_every`` (0 turns this off), the run log's maintenance runs afterwards; its failure
    is logged and does not undo the append.

    Raises:
        InvalidArgumentError: no rows, or a table is at ``uri`` that is not a run log.
        DeltaError: the store refused the write (the rows were not committed).
    """
    batch = list(rows)
    if not batch:
        raise InvalidArgumentError("no run log rows to append")
    storage = _storage(uri, storage_options, create=True)
    snapshot = create_run_log(storage)
    action = _add_action(storage, _to_table(batch, _check_schema(snapshot)), snapshot.metadata, data_change=True)
    while True:
        txn = Transaction(snapshot, "WRITE", {"mode": "Append", "partitionBy": "[]"}, job=Operation.OPTIMIZE,
                          max_retries=MAX_RETRIES)
        txn.add_actions([action])
        try:
            version = txn.commit({"numFiles": 1, "numOutputRows": len(batch),
                                  "numOutputBytes": action["add"]["size"]})
            break
        except CommitFailedError:  # extremely busy: start again from a fresh snapshot
            snapshot = Snapshot.load(storage)
    maintenance = None
    if maintain_every and version % maintain_every == 0:
        try:
            maintenance = maintain_run_log(storage)
        except Exception as exc:  # the rows are committed; maintenance is retried at the next turn
            log.warning("maintenance of the run log %s failed: %s", storage.root, exc)
            maintenance = {"error": f"{type(exc).__name__}: {exc}"}
    return AppendResult(version=version, rows=len(batch), attempts=txn.attempts, maintenance=maintenance)


def maintain_run_log(uri: str | Storage, storage_options: Mapping[str, str] | None = None, *,
                     now_ms: int | None = None) -> dict[str, Any]:
    """Compact the run log's small files into one, delete expired removed files, write a checkpoint.

    Returns:
        ``compacted_files`` (files rewritten, 0 when fewer than two were small or a concurrent
        compaction won), ``version_compacted``, ``expired_files_deleted``, ``checkpoint_version``.
    """
    storage = _storage(uri, storage_options)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    snapshot = Snapshot.load(storage)
    schema = _check_schema(snapshot)
    out: dict[str, Any] = {"compacted_files": 0, "version_compacted": None, "expired_files_deleted": 0}
    files = snapshot.add_actions()
    small = [a for a in files if int(a["size"]) < SMALL_FILE_BYTES]
    if len(small) >= 2:
        parts = [pq.read_table(io.BytesIO(storage.read(_key(storage, a["path"]))), schema=schema)
                 for a in small]
        merged = pa.concat_tables(parts).sort_by([("started_at", "ascending"), ("record_id", "ascending")])
        txn = Transaction(snapshot, "OPTIMIZE", {"predicate": "[]", "zOrderBy": "[]"}, job=Operation.OPTIMIZE,
                          max_retries=MAX_RETRIES)
        add = _add_action(storage, merged, snapshot.metadata, data_change=False)
        txn.add_actions([{"remove": {"path": a["path"], "deletionTimestamp": now_ms, "dataChange": False,
                                     "extendedFileMetadata": True, "partitionValues": {}, "size": a["size"]}}
                         for a in small] + [add])
        try:
            out["version_compacted"] = txn.commit({"numRemovedFiles": len(small), "numAddedFiles": 1,
                                                   "numRemovedBytes": sum(int(a["size"]) for a in small),
                                                   "numAddedBytes": add["add"]["size"]})
            out["compacted_files"] = len(small)
        except CommitConflictError:  # a concurrent compaction removed the same files: its result stands
            storage.delete(add["add"]["path"])
    # files removed longer ago than the retention: no version inside the window reads them
    horizon = now_ms - snapshot.metadata.properties.deleted_file_retention_ms
    expired = [t["path"] for t in snapshot.tombstone_actions()
               if t.get("deletionTimestamp") is not None and int(t["deletionTimestamp"]) < horizon]
    keys = [k for k in (_key(storage, p) for p in expired) if k is not None]
    if keys:
        storage.delete_many(keys)
        out["expired_files_deleted"] = len(keys)
    out["checkpoint_version"] = write_checkpoint(Snapshot.load(storage), now_ms=now_ms)["version"]
    log.info("maintained the run log %s: %s", storage.root, out)
    return out


def _key(storage: Storage, path: str) -> str:
    key = storage.key_for_path(path)
    if key is None:
        raise InvalidArgumentError(f"run log file {path!r} is outside the table {storage.root}")
    return key


def read_runs(uri: str | Storage, storage_options: Mapping[str, str] | None = None, *,
              tables: Sequence[str] | None = None, columns: Sequence[str] | None = None,
              since_ms: int | None = None, each_file: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """The run log's rows (optionally only those of ``tables``), oldest first.

    ``columns``: only these (and the order's ``started_at`` and ``record_id``) are decoded. ``since_ms``: files
    written before this time (epoch ms) are not read; their rows all started before it, so the rows left out are
    old ones only (a newer file may still hold older rows). ``each_file``: what each file's rows become as it is
    read (a reader that needs a little of each row keeps only that, and a month of runs is never in memory whole);
    it keeps ``started_at`` and ``record_id``.

    Raises:
        TableNotFoundError, NotADeltaTableError: nothing is at ``uri``.
        InvalidArgumentError: the table at ``uri`` is not a run log.
    """
    storage = _storage(uri, storage_options)
    snapshot = Snapshot.load(storage)
    _check_schema(snapshot)
    wanted = None if columns is None else list(dict.fromkeys([*columns, "table_uri", "started_at", "record_id"]))
    shape = each_file or (lambda rows: rows)
    parts = [shape(_with_every_column(_read_file(storage, a["path"], wanted), wanted))
             for a in snapshot.add_actions() if since_ms is None or int(a.get("modificationTime") or 0) >= since_ms]
    table = pa.concat_tables(parts) if parts else shape(_with_every_column(RUN_LOG_SCHEMA.empty_table(), wanted))
    if tables:
        import pyarrow.compute as pc

        table = table.filter(pc.is_in(table.column("table_uri"), pa.array(list(tables), pa.string())))
    return table.sort_by([("started_at", "ascending"), ("record_id", "ascending")])
