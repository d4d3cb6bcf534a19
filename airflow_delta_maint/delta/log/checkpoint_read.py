"""Reading checkpoints, whole or streamed, in one place.

A checkpoint is one parquet file, several parts, or a V2 checkpoint (a top-level parquet or JSON
file and its sidecars). :func:`read_checkpoint` reads all of it into Arrow tables (the file
actions) and dicts (the rest), for ``Snapshot.load``. The streamed state and the checkpoint
writer's slices read it the other way: :func:`open_checkpoint_file` opens one parquet file for
batches of the columns asked for (remote files by byte ranges), :func:`flatten_actions` turns a
batch's ``add`` or ``remove`` column into rows (:func:`fill_stats` gives adds whose checkpoint kept
only the typed ``stats_parsed`` their JSON ``stats`` back), and :func:`other_actions` /
:func:`json_manifest_actions` read only the non-file actions. The action schemas these read
into are ``ADD`` and ``REMOVE`` of :mod:`~airflow_delta_maint.delta.protocol.actions`; the ones a
checkpoint is written with live in :mod:`.checkpoint_schema`.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.log.checkpoint_schema import json_value
from airflow_delta_maint.delta.log.listing import LAST_CHECKPOINT, LOG_DIR, Checkpoint, parse_json_lines
from airflow_delta_maint.delta.protocol.actions import ADD, ADD_SCHEMA, REMOVE, REMOVE_SCHEMA, conform
from airflow_delta_maint.delta.storage.range_reader import RangeReader
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["BATCH_ROWS", "CHECKPOINT_COLUMNS", "CheckpointData", "OTHER_COLUMNS", "StreamFallback", "actions_table",
           "checkpoint_files", "count_actions", "dict_actions", "file_actions", "fill_stats", "flatten_actions", "has_column", "json_manifest_actions",
           "open_checkpoint_file", "other_actions", "plain_value", "read_checkpoint", "read_log_file", "read_log_files",
           "read_parquet_actions", "sidecar_key", "sidecar_sizes", "valid_pieces"]


CHECKPOINT_COLUMNS = ("add", "remove", "metaData", "protocol", "txn", "domainMetadata", "sidecar",
                       "checkpointMetadata")


@dataclass
class CheckpointData:
    """The contents of a checkpoint: file actions as Arrow tables, the rest as dicts."""

    adds: pa.Table
    removes: pa.Table
    protocol: dict | None
    metadata: dict | None
    txns: dict[str, dict]
    domains: dict[str, dict]


PATH_COLUMNS = ("add.path", "add.deletionVector", "remove.path", "remove.deletionTimestamp", "remove.deletionVector")


def read_parquet_actions(storage: Storage, key: str, paths_only: bool = False) -> pa.Table:
    """The action columns of a parquet checkpoint file (memory-mapped when local); with
    ``paths_only`` only the file actions' path, deletion vector and deletion time."""
    source: str | io.BytesIO
    if storage.is_local:
        source = storage.local_path(key)
        if not os.path.isfile(source):
            raise CorruptLogError(f"log file listed but missing or unreadable: {key}")
    else:
        source = io.BytesIO(read_log_file(storage, key))
    try:
        pf = pq.ParquetFile(source, memory_map=storage.is_local)
        schema = pf.schema_arrow  # converted from the footer on every access
        names = [c for c in CHECKPOINT_COLUMNS if c in schema.names]
        if paths_only:
            names = [c for c in names if c not in ("add", "remove")] + [
                c for c in PATH_COLUMNS if has_column(schema, c)]
        return pf.read(columns=names)
    except MemoryError:  # pyarrow's ArrowMemoryError too: out of memory, not a corrupt file
        raise
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogError(f"corrupt checkpoint {key}: {exc}") from None


def has_column(schema: pa.Schema, dotted: str) -> bool:
    """Whether a checkpoint file's schema holds the struct field ``top.child`` (``dotted``)."""
    top, _, child = dotted.partition(".")
    if top not in schema.names:
        return False
    t = schema.field(top).type
    return pa.types.is_struct(t) and t.get_field_index(child) >= 0


def json_actions_tables(actions: list[dict]) -> tuple[pa.Table, pa.Table]:
    adds = [a["add"] for a in actions if a.get("add") is not None]
    removes = [a["remove"] for a in actions if a.get("remove") is not None]
    return pa.table({"add": pa.array(adds, type=ADD)}), pa.table({"remove": pa.array(removes, type=REMOVE)})


MAX_RUNS = 64


def valid_pieces(chunk: pa.Array) -> list[pa.Array]:
    """The non-null rows of one chunk: zero-copy slices when they form a few runs, else a filter."""
    nulls = chunk.null_count
    if nulls == 0:
        return [chunk]
    if nulls == len(chunk):
        return []
    valid = chunk.is_valid().to_numpy(zero_copy_only=False)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], valid, [False])).astype(np.int8)))
    if len(edges) // 2 > MAX_RUNS:
        return [chunk.filter(chunk.is_valid())]
    return [chunk.slice(int(lo), int(hi - lo)) for lo, hi in zip(edges[::2], edges[1::2])]


def file_actions(table: pa.Table, column: str, target: pa.StructType) -> pa.Table:
    """The add or remove actions of a checkpoint table, one row each, in ``target``'s schema."""
    schema = pa.schema(list(target))
    if column not in table.column_names:
        return schema.empty_table()
    pieces = [piece for chunk in table.column(column).chunks for piece in valid_pieces(chunk)]
    batches = [pa.RecordBatch.from_struct_array(conform(piece, target)) for piece in pieces]
    if column == "add" and "stats" in schema.names:
        batches = [fill_stats(piece, b) for piece, b in zip(pieces, batches)]
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def fill_stats(add: pa.Array | pa.RecordBatch, adds: pa.RecordBatch | pa.Table) -> Any:
    """``adds`` (the valid rows of the checkpoint's ``add`` struct ``add``, flattened; or of a batch's
    ``add`` column, as :func:`flatten_actions` reads them) with each null ``stats`` rebuilt as JSON from
    the typed ``stats_parsed`` beside it: a checkpoint written with ``delta.checkpoint.writeStatsAsJson=false``
    keeps only that form, and its files have statistics all the same."""
    if isinstance(add, pa.RecordBatch):
        add = add.column(add.schema.get_field_index("add"))
        add = add.filter(add.is_valid()) if add.null_count else add
    if not len(adds) or add.type.get_field_index("stats_parsed") < 0:
        return adds
    idx = adds.schema.get_field_index("stats")
    stats = adds.column(idx)
    if not stats.null_count:
        return adds
    stats = stats.combine_chunks() if isinstance(stats, pa.ChunkedArray) else stats
    missing = pc.indices_nonzero(stats.is_null())
    parsed = pc.take(pc.struct_field(add, "stats_parsed"), missing).to_pylist()
    filled = stats.to_pylist()
    for i, value in zip(missing.to_pylist(), parsed):
        if value is not None:
            filled[i] = json.dumps(json_value(value), separators=(",", ":"))
    return adds.set_column(idx, adds.schema.field(idx), pa.array(filled, pa.string()))


def dict_actions(table: pa.Table, column: str) -> list[dict]:
    if column not in table.column_names:
        return []
    return [plain_value(v) for chunk in table.column(column).chunks for piece in valid_pieces(chunk)
            for v in piece.to_pylist()]


def plain_value(value):
    """Arrow's to_pylist gives maps as lists of pairs; turn them back into dicts."""
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return {k: v for k, v in value}
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    return value


def sidecar_key(path: str) -> str:
    """The storage key of a V2 checkpoint's sidecar file.

    Sidecars always live in ``_delta_log/_sidecars``; the action's path is URI-encoded and is
    usually the bare file name, but may carry a scheme or parent folders. Only the decoded
    file name counts.
    """
    return f"{LOG_DIR}_sidecars/{unquote(path.rstrip('/').rsplit('/', 1)[-1])}"


def read_checkpoint(storage: Storage, checkpoint: Checkpoint, paths_only: bool = False) -> CheckpointData:
    """Read every file of a checkpoint (parts, V2 top-level file and its sidecars); see
    ``Snapshot.load`` for ``paths_only``."""
    add_parts: list[pa.Table] = []
    remove_parts: list[pa.Table] = []
    protocol = metadata = None
    txns: dict[str, dict] = {}
    domains: dict[str, dict] = {}
    sidecars: list[str] = []
    for f in checkpoint.files:
        if f.key.endswith(".json"):
            actions = parse_json_lines(read_log_file(storage, f.key), f.key)
            adds, removes = json_actions_tables(actions)
            add_parts.append(file_actions(adds, "add", ADD))
            remove_parts.append(file_actions(removes, "remove", REMOVE))
            dicts = {c: [a[c] for a in actions if a.get(c) is not None] for c in CHECKPOINT_COLUMNS}
        else:
            table = read_parquet_actions(storage, f.key, paths_only)
            add_parts.append(file_actions(table, "add", ADD))
            remove_parts.append(file_actions(table, "remove", REMOVE))
            dicts = {c: dict_actions(table, c) for c in ("metaData", "protocol", "txn", "domainMetadata", "sidecar")}
        for p in dicts.get("protocol", []):
            protocol = p
        for m in dicts.get("metaData", []):
            metadata = m
        for t in dicts.get("txn", []):
            txns[t["appId"]] = t
        for d in dicts.get("domainMetadata", []):
            domains[d["domain"]] = d
        sidecars.extend(s["path"] for s in dicts.get("sidecar", []))
    for path in sidecars:
        key = sidecar_key(path)
        if key.endswith(".json"):
            adds, removes = json_actions_tables(parse_json_lines(read_log_file(storage, key), key))
            add_parts.append(file_actions(adds, "add", ADD))
            remove_parts.append(file_actions(removes, "remove", REMOVE))
        else:
            table = read_parquet_actions(storage, key, paths_only)
            add_parts.append(file_actions(table, "add", ADD))
            remove_parts.append(file_actions(table, "remove", REMOVE))
    return CheckpointData(
        adds=pa.concat_tables(add_parts) if add_parts else ADD_SCHEMA.empty_table(),
        removes=pa.concat_tables(remove_parts) if remove_parts else REMOVE_SCHEMA.empty_table(),
        protocol=protocol, metadata=metadata, txns=txns, domains=domains)


def read_log_file(storage: Storage, key: str) -> bytes:
    """The bytes of a log file the listing named; a missing one is a corrupt log."""
    try:
        return storage.read(key)
    except FileNotFoundError:
        raise CorruptLogError(f"log file listed but missing or unreadable: {key}") from None


#: log files an object-store reader keeps in flight ahead of the one it replays (its threads), and at most
#: this many more read and waiting: a request costs 10-50 ms on a real store, so one after the other a
#: thousand commits take half a minute
LOG_READ_THREADS = 16
LOG_READ_AHEAD = 64


def read_log_files(storage: Storage, keys: Sequence[str]) -> Iterator[bytes]:
    """The bytes of each log file in ``keys``, in their order (each as :func:`read_log_file`). On an object
    store the files are read on :data:`LOG_READ_THREADS` threads up to :data:`LOG_READ_AHEAD` ahead of the one
    taken; a failed read raises where its file is taken, as one read after the other would. Local disk is read
    one after the other."""
    if storage.is_local or len(keys) < 2:
        for key in keys:
            yield read_log_file(storage, key)
        return
    pool = ThreadPoolExecutor(max_workers=min(LOG_READ_THREADS, len(keys)), thread_name_prefix="log-read")
    pending: deque[Future[bytes]] = deque()
    ahead = iter(keys)
    try:
        for key in itertools.islice(ahead, LOG_READ_AHEAD):
            pending.append(pool.submit(read_log_file, storage, key))
        while pending:
            data = pending.popleft().result()
            for key in itertools.islice(ahead, 1):
                pending.append(pool.submit(read_log_file, storage, key))
            yield data
    finally:  # the reader stopped early (a corrupt file, an error): reads not started are dropped
        pool.shutdown(wait=False, cancel_futures=True)


#: rows per batch read from a checkpoint file; with a read buffer of ``READ_BUFFER`` bytes the
#: pages are read and decoded as the batches need them, not a whole row group at once
BATCH_ROWS = 16_384


READ_BUFFER = 1 << 20

#: a checkpoint file on an object store up to this size is read whole, in one request, when it is opened:
#: read by ranges, the footer and every column chunk a scan asks for is a request of its own (69 for the
#: 4.7 MiB part of a 100,000-file log, some 2.5 s behind 20 ms of latency); larger files are read by ranges,
#: so memory stays bounded
WHOLE_READ_MAX = 16 << 20


OTHER_COLUMNS = ("metaData", "protocol", "txn", "domainMetadata", "sidecar")


class StreamFallback(Exception):
    """The streamed read cannot vouch for the state: load the whole ``Snapshot`` instead."""




def open_checkpoint_file(storage: Storage, key: str, size: int | None = None) -> pq.ParquetFile:
    try:
        if storage.is_local:
            path = storage.local_path(key)
            if not os.path.isfile(path):
                raise CorruptLogError(f"log file listed but missing or unreadable: {key}")
            return pq.ParquetFile(path, memory_map=False, buffer_size=READ_BUFFER, pre_buffer=False)
        if size is None:
            try:
                size = storage.head(key).size
            except FileNotFoundError:
                raise CorruptLogError(f"log file listed but missing or unreadable: {key}") from None
        source: Any = pa.BufferReader(storage.read(key)) if size <= WHOLE_READ_MAX else \
            RangeReader(storage, key, size)
        return pq.ParquetFile(source, buffer_size=READ_BUFFER, pre_buffer=False)
    except MemoryError:  # pyarrow's ArrowMemoryError too: out of memory, not a corrupt file
        raise
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogError(f"corrupt checkpoint {key}: {exc}") from None




def flatten_actions(batch: pa.RecordBatch, top: str, columns: Sequence[str], target: pa.StructType) -> pa.Table:
    """The valid rows of struct column ``top`` as a table of ``columns`` (missing ones null)."""
    idx = batch.schema.get_field_index(top)
    if idx < 0:
        return pa.schema([target.field(c) for c in columns]).empty_table()
    arr = batch.column(idx)
    if arr.null_count:
        arr = arr.filter(arr.is_valid())
    present = {arr.type.field(i).name for i in range(arr.type.num_fields)}
    cols = []
    for c in columns:
        kind = target.field(c).type
        cols.append(pc.struct_field(arr, c) if c in present else pa.nulls(len(arr), kind))
    return pa.table(cols, names=list(columns))


def actions_table(actions: Sequence[Mapping[str, Any]], columns: Sequence[str], target: pa.StructType) -> pa.Table:
    if not actions:
        return pa.schema([target.field(c) for c in columns]).empty_table()
    arr = pa.array(list(actions), type=target)
    return pa.table([pc.struct_field(arr, c) for c in columns], names=list(columns))


def other_actions(storage: Storage, key: str, size: int | None,
                  columns: Sequence[str] = OTHER_COLUMNS) -> dict[str, list[dict]]:
    """The non-file actions (``columns`` of them) of a parquet checkpoint file, read one row
    group at a time; maps come back as dicts."""

    pf = open_checkpoint_file(storage, key, size)
    names = [c for c in columns if c in pf.schema_arrow.names]
    out: dict[str, list[dict]] = {c: [] for c in columns}
    if not names:
        return out
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=names, use_threads=False):
            for name in names:
                col = batch.column(batch.schema.get_field_index(name))
                if col.null_count == len(col):
                    continue
                out[name].extend(plain_value(v) for v in col.filter(col.is_valid()).to_pylist())
    except MemoryError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogError(f"corrupt checkpoint {key}: {exc}") from None
    return out


def json_manifest_actions(storage: Storage, key: str) -> dict[str, list[dict]]:
    """The non-file actions of a V2 checkpoint's top-level JSON file, read whole (it holds the
    protocol, metaData, txn, domainMetadata and sidecar actions: small when its file actions live
    in sidecars).

    Raises:
        StreamFallback: the file holds add or remove actions itself, which a JSON file cannot
            give one row group at a time.
    """

    actions = parse_json_lines(read_log_file(storage, key), key)
    if any(a.get("add") is not None or a.get("remove") is not None for a in actions):
        raise StreamFallback("a JSON checkpoint with file actions of its own is read whole")
    return {c: [a[c] for a in actions if a.get(c) is not None] for c in OTHER_COLUMNS}


def sidecar_sizes(storage: Storage, checkpoint: Checkpoint) -> list[tuple[str, int]]:
    """(key, size in bytes) of every sidecar of a V2 checkpoint, from its sidecar actions (the top
    file's non-file columns only); [] for other checkpoints."""
    if checkpoint.kind != "v2":
        return []
    out: list[tuple[str, int]] = []
    for f in checkpoint.files:
        if f.key.endswith(".json"):
            actions = parse_json_lines(storage.read(f.key), f.key)
            found = [a["sidecar"] for a in actions if a.get("sidecar") is not None]
        else:
            found = other_actions(storage, f.key, f.size)["sidecar"]
        out.extend((sidecar_key(s["path"]), int(s.get("sizeInBytes") or 0)) for s in found)
    return out


def checkpoint_files(storage: Storage, checkpoint: Checkpoint) -> tuple[int, str] | None:
    """How many files the checkpoint holds, as ``(count, what)``: its add actions as
    ``_last_checkpoint`` counts them (``numOfAddFiles``), else the actions its parquet files'
    footers count; None when neither can be read. Reads a few hundred bytes, never a whole file."""
    try:
        hint = json.loads(storage.read(LAST_CHECKPOINT))
        if isinstance(hint, dict) and hint.get("version") == checkpoint.version and \
                isinstance(hint.get("numOfAddFiles"), int):
            return hint["numOfAddFiles"], "files"
    except Exception:  # noqa: BLE001 - a hint only; memory is short, anything may fail here
        pass
    try:
        rows = 0
        for f in checkpoint.files:
            if f.key.endswith(".json"):
                sidecars = json_manifest_actions(storage, f.key)["sidecar"]
            else:
                pf = open_checkpoint_file(storage, f.key, f.size)
                rows += pf.metadata.num_rows
                sidecars = other_actions(storage, f.key, f.size, ("sidecar",))["sidecar"] \
                    if "sidecar" in pf.schema_arrow.names else []
            for s in sidecars:
                rows += open_checkpoint_file(storage, sidecar_key(s["path"])).metadata.num_rows
        return rows, "actions"
    except Exception:  # noqa: BLE001 - as above
        return None


def count_actions(storage: Storage, checkpoint: Checkpoint) -> tuple[int, int] | None:
    """(actions, adds) of a parquet checkpoint (all its parts), read one row group at a time; None
    for one with sidecars, a JSON one, or one that cannot be read."""
    actions = adds = 0
    for f in checkpoint.files:
        if not f.key.endswith(".parquet"):
            return None
        try:
            pf = open_checkpoint_file(storage, f.key, f.size)
            names = pf.schema_arrow.names
            if "sidecar" in names:
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=["sidecar"], use_threads=False):
                    if batch.column(0).null_count != batch.num_rows:
                        return None
            if has_column(pf.schema_arrow, "add.path"):
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=["add.path"], use_threads=False):
                    adds += batch.num_rows - batch.column(0).null_count
            actions += pf.metadata.num_rows
        except MemoryError:  # pyarrow's ArrowMemoryError too: not an unreadable file
            raise
        except (pa.ArrowException, OSError, KeyError, CorruptLogError):
            return None
    return actions, adds
