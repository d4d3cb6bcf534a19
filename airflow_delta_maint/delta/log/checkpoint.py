"""Checkpoint writer: one parquet file holding the reconciled state of a table version.

What is written, per the protocol's "Checkpoints" section: the protocol and metaData actions,
every live add, the remove tombstones not yet expired (``delta.deletedFileRetentionDuration``),
every txn and the live domainMetadata actions; one action per row, every other column null.
No commitInfo or cdc actions.

Which file is written:

* a table without the ``v2Checkpoint`` feature (or with it and ``delta.checkpointPolicy=classic``)
  gets a classic V1-spec checkpoint ``<v>.checkpoint.parquet``;
* a table with the feature (reader and writer) gets a V2-spec checkpoint: by default UUID-named
  ``<v>.checkpoint.<uuid>.parquet``, with its ``checkpointMetadata`` action and the file actions
  inline (no sidecars). ``naming="classic"`` writes the same V2-spec content under the classic
  name instead, which the protocol allows and recommends now and then so that clients without
  V2 support find a checkpoint, read its protocol and fail cleanly.

Statistics are written as the JSON ``stats`` string. Tables with
``delta.checkpoint.writeStatsAsStruct=true`` also get ``stats_parsed`` and
``partitionValues_parsed`` (best effort: a value that does not parse leaves that column out).
``stats`` is kept even when ``delta.checkpoint.writeStatsAsJson=false``, so that no statistics are
lost; JSON stats missing from the snapshot because the source checkpoint held only
``stats_parsed`` are rebuilt from it.

The file is created with put-if-absent of the complete bytes, so it is written whole or not at
all and never overwrites. When a complete checkpoint of the version is already there (classic,
multi-part or V2, by any writer) nothing is written (``already_existed``); only an explicit
``naming="classic"`` adds a classic-named copy beside a UUID-named V2 checkpoint. Before writing, the
rows are checked against the reconciliation invariant (one live add per path, no file both live
and removed); a state that breaks it is refused.

``_last_checkpoint`` always describes the checkpoint it names (``parts`` for a multi-part one,
``v2Checkpoint`` for a UUID-named V2 one) and is replaced whole, unless it names a newer version
or already names that checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from hashlib import md5
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import DeltaError, InconsistentStateError, InvalidArgumentError
from airflow_delta_maint.delta.log.checkpoint_read import count_actions
from airflow_delta_maint.delta.log.checkpoint_schema import (ADD_CHECKPOINT, CHECKPOINT_METADATA, CHECKPOINT_SCHEMA_V1,
                                                             CHECKPOINT_SCHEMA_V2, DOMAIN, METADATA, PROTOCOL,
                                                             REMOVE_CHECKPOINT, TXN, action_rows, json_value,
                                                             struct_column)
from airflow_delta_maint.delta.log.listing import LAST_CHECKPOINT, LOG_DIR, Checkpoint, classic_checkpoint_key, list_log
from airflow_delta_maint.delta.log.reconciliation import state_problem
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.actions import Metadata
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.protocol.schema import parse_schema, to_arrow_schema
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage
from airflow_delta_maint.delta.storage.write_once import put_once

__all__ = [
    "build_checkpoint_table", "describe_checkpoint", "existing_checkpoint", "last_checkpoint_checksum", "update_hint",
    "uses_v2_spec", "write_checkpoint", "writes_typed_stats",
]

# -- checkpoint column schema (every field nullable) ------------------------------------------

# Tombstones in a checkpoint carry no stats or tags (protocol, "Checkpoints").

# -- intervals --------------------------------------------------------------------------------



# -- _last_checkpoint checksum ----------------------------------------------------------------

def _canonical_pairs(value: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            seg = '"' + quote(str(k), safe="") + '"'
            _canonical_pairs(v, f"{path}+{seg}" if path else seg, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _canonical_pairs(v, f"{path}+{i}" if path else str(i), out)
    elif value is None:
        out.append((path, "null"))
    elif isinstance(value, bool):
        out.append((path, "true" if value else "false"))
    elif isinstance(value, (int, float)):
        out.append((path, json.dumps(value)))
    else:
        out.append((path, '"' + quote(str(value), safe="") + '"'))


def last_checkpoint_checksum(hint: dict) -> str:
    """MD5 of the canonical form of a ``_last_checkpoint`` object (its ``checksum`` key ignored)."""
    pairs: list[tuple[str, str]] = []
    _canonical_pairs({k: v for k, v in hint.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    return md5(",".join(f"{p}={v}" for p, v in pairs).encode("utf-8")).hexdigest()


# -- building the checkpoint table ------------------------------------------------------------

def uses_v2_spec(snapshot: TableHeader) -> bool:
    """Whether the checkpoint of ``snapshot`` follows the V2 spec (the feature, and no classic policy)."""
    p = snapshot.protocol
    supported = "v2Checkpoint" in p.reader_features and "v2Checkpoint" in p.writer_features
    return supported and snapshot.metadata.properties.checkpoint_policy != "classic"


def _live_tombstones(snapshot: Snapshot, now_ms: int) -> pa.Table:
    tombstones = snapshot.tombstones
    if tombstones.num_rows == 0:
        return tombstones
    cutoff = now_ms - snapshot.metadata.properties.deleted_file_retention_ms
    ts = pc.fill_null(tombstones.column("deletionTimestamp"), 0)
    return tombstones.filter(pc.greater(ts, cutoff))


def build_checkpoint_table(snapshot: Snapshot, *, now_ms: int, v2_spec: bool) -> tuple[pa.Table, int]:
    """The checkpoint's rows as an Arrow table, and how many of them are adds."""
    schema = CHECKPOINT_SCHEMA_V2 if v2_spec else CHECKPOINT_SCHEMA_V1
    parts: list[pa.Table] = []
    if v2_spec:
        parts.append(action_rows(schema, "checkpointMetadata",
                           pa.array([{"version": snapshot.version}], type=CHECKPOINT_METADATA)))
    parts.append(action_rows(schema, "protocol", pa.array([snapshot.protocol.to_action()], type=PROTOCOL)))
    meta = dict(snapshot.metadata.raw)
    meta.setdefault("format", {"provider": "parquet", "options": {}})
    parts.append(action_rows(schema, "metaData", pa.array([meta], type=METADATA)))
    if snapshot.txns:
        txns = [snapshot.txns[k] for k in sorted(snapshot.txns)]
        parts.append(action_rows(schema, "txn", pa.array(txns, type=TXN)))
    if snapshot.domains:
        domains = [dict(snapshot.domains[k], removed=False) for k in sorted(snapshot.domains)]
        parts.append(action_rows(schema, "domainMetadata", pa.array(domains, type=DOMAIN)))

    files = _recover_stats(snapshot)
    num_adds = files.num_rows
    typed = _typed_add_columns(snapshot, files) if num_adds else {}
    if typed:
        schema, add_type = with_typed_adds(schema, typed)
        parts = [action_rows(schema, c, t.column(c).combine_chunks()) for t in parts for c in t.column_names
                 if t.column(c).null_count < t.num_rows]
    else:
        add_type = ADD_CHECKPOINT
    if num_adds:
        overrides = {"dataChange": pa.array(np.zeros(num_adds, dtype=bool)), **typed}
        parts.append(action_rows(schema, "add", struct_column(files, add_type, overrides)))
    tombstones = _live_tombstones(snapshot, now_ms)
    if tombstones.num_rows:
        overrides = {"dataChange": pa.array(np.zeros(tombstones.num_rows, dtype=bool))}
        parts.append(action_rows(schema, "remove", struct_column(tombstones, REMOVE_CHECKPOINT, overrides)))
    return pa.concat_tables(parts), num_adds


# -- typed statistics and partition values (delta.checkpoint.writeStatsAsStruct) --------------

def _min_max_type(t: pa.DataType) -> pa.DataType | None:
    """Type of a column in minValues/maxValues; None for columns without bounds."""
    if pa.types.is_struct(t):
        if {f.name for f in t} == {"metadata", "value"}:  # variant
            return None
        children = [(f.name, _min_max_type(f.type)) for f in t]
        kept = [pa.field(n, c) for n, c in children if c is not None]
        return pa.struct(kept) if kept else None
    if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_boolean(t) or isinstance(t, pa.BaseExtensionType):
        return None  # geometry and geography (extension types) included: delta-spark keeps no bounds of them
    return t


def _null_count_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t) and {f.name for f in t} != {"metadata", "value"}:
        return pa.struct([pa.field(f.name, _null_count_type(f.type)) for f in t])
    return pa.int64()


def _json_type(t: pa.DataType) -> pa.DataType:
    """What the JSON reader parses a stats value into (strings for dates and timestamps)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_type(f.type)) for f in t])
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return pa.string()
    return t


def _from_json(arr: pa.Array, t: pa.DataType) -> pa.Array:
    if pa.types.is_struct(t):
        children = [_from_json(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
    if pa.types.is_timestamp(t):
        naive = pc.cast(pc.replace_substring_regex(arr, r"Z$", ""), pa.timestamp("us"))
        return pc.cast(naive, t)
    return pc.cast(arr, t) if arr.type != t else arr


def _stats_parsed(files: pa.Table, data_schema: pa.Schema) -> pa.Array:
    """The ``stats`` JSON of every file parsed into the typed ``stats_parsed`` struct."""
    fields = [pa.field("numRecords", pa.int64()), pa.field("tightBounds", pa.bool_())]
    bounds = [pa.field(f.name, t) for f in data_schema if (t := _min_max_type(f.type)) is not None]
    if bounds:
        fields += [pa.field("minValues", pa.struct(bounds)), pa.field("maxValues", pa.struct(bounds))]
    fields.append(pa.field("nullCount", pa.struct([pa.field(f.name, _null_count_type(f.type)) for f in data_schema])))
    target = pa.struct(fields)
    stats = files.column("stats").combine_chunks()
    lines = pc.if_else(stats.is_null(), "{}", stats)
    data = ("\n".join(lines.to_pylist()) + "\n").encode("utf-8") if len(lines) else b""
    parsed = pa_json.read_json(io.BytesIO(data), parse_options=pa_json.ParseOptions(
        explicit_schema=pa.schema([pa.field(f.name, _json_type(f.type)) for f in target]),
        unexpected_field_behavior="ignore", newlines_in_values=False))
    children = [_from_json(parsed.column(f.name).combine_chunks(), f.type) for f in target]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=stats.is_null())


def _partition_values_parsed(files: pa.Table, partition_fields: list[tuple[str, pa.DataType]]) -> pa.Array:
    """The ``partitionValues`` map parsed into a struct of typed values (physical names)."""
    pv = files.column("partitionValues").combine_chunks()
    children = []
    for name, t in partition_fields:
        raw = pc.map_lookup(pv, name, "first")
        raw = pc.if_else(pc.equal(raw, ""), pa.scalar(None, pa.string()), raw)
        children.append(_from_json(raw, t) if not pa.types.is_binary(t) else pc.cast(raw, t))
    return pa.StructArray.from_arrays(children, fields=[pa.field(n, t) for n, t in partition_fields])


def _recover_stats(snapshot: Snapshot) -> pa.Table:
    """The live adds, with ``stats`` rebuilt from the source checkpoint's ``stats_parsed`` for files
    whose JSON stats the snapshot does not hold (checkpoints written with only typed stats)."""
    files = snapshot.files
    cp = snapshot.segment.checkpoint
    missing = files.column("stats").null_count if files.num_rows else 0
    if not missing or cp is None or any(not f.key.endswith(".parquet") for f in cp.files):
        return files
    recovered: dict[str, str] = {}
    for f in cp.files:
        try:
            pf = pq.ParquetFile(io.BytesIO(snapshot.storage.read(f.key)))
            add = pf.schema_arrow.field("add").type if "add" in pf.schema_arrow.names else None
            if add is None or add.get_field_index("stats_parsed") < 0:
                continue
            got = pf.read(columns=["add.path", "add.stats_parsed"]).column("add").combine_chunks()
        except MemoryError:  # pyarrow's ArrowMemoryError too: not an unreadable file
            raise
        except (pa.ArrowException, OSError, KeyError, FileNotFoundError):
            continue
        for row in got.filter(got.is_valid()).to_pylist():
            if row["stats_parsed"] is not None:
                recovered[row["path"]] = json.dumps(json_value(row["stats_parsed"]), separators=(",", ":"))
    if not recovered:
        return files
    stats = files.column("stats").to_pylist()
    paths = files.column("path").to_pylist()
    filled = [s if s is not None else recovered.get(p) for s, p in zip(stats, paths)]
    return files.set_column(files.schema.get_field_index("stats"), "stats", pa.array(filled, pa.string()))


def with_typed_adds(schema: pa.Schema, typed: dict[str, pa.Array]) -> tuple[pa.Schema, pa.StructType]:
    """A checkpoint schema whose ``add`` struct also holds the typed columns, and that struct."""
    add_type = pa.struct(list(ADD_CHECKPOINT) + [pa.field(k, v.type) for k, v in typed.items()])
    return schema.set(schema.get_field_index("add"), pa.field("add", add_type)), add_type


def writes_typed_stats(metadata: Metadata) -> bool:
    """Whether the table asks its checkpoints for typed statistics (``writeStatsAsStruct``)."""
    return metadata.properties.write_stats_as_struct


def _typed_add_columns(snapshot: Snapshot, files: pa.Table) -> dict[str, pa.Array]:
    return typed_add_columns(snapshot.metadata, files)


def typed_add_columns(metadata: Metadata, files: pa.Table) -> dict[str, pa.Array]:
    """``partitionValues_parsed`` and ``stats_parsed`` of ``files`` for tables that ask for them;
    best effort: a value that cannot be parsed leaves the column out (readers then use the string
    forms)."""
    if not writes_typed_stats(metadata):
        return {}
    out: dict[str, pa.Array] = {}
    try:
        full = to_arrow_schema(metadata, exclude=[])
        logical = parse_schema(metadata)
    except DeltaError:
        return {}
    names = {f.name for f in logical}
    partition_physical = {logical.field(c).physical_name for c in metadata.partition_columns if c in names}
    if partition_physical:
        part_fields = [(f.name, f.type) for f in full if f.name in partition_physical]
        with contextlib.suppress(pa.ArrowException, ValueError):  # unparsable: leave the column out
            out["partitionValues_parsed"] = _partition_values_parsed(files, part_fields)
    data_schema = pa.schema([f for f in full if f.name not in partition_physical])
    with contextlib.suppress(pa.ArrowException, ValueError):  # unparsable: leave the column out
        out["stats_parsed"] = _stats_parsed(files, data_schema)
    return out




def _to_parquet(table: pa.Table, compression: str) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression, row_group_size=256 * 1024,
                   write_statistics=["add.path", "remove.path"] if table.num_rows else True)
    return buf.getvalue()


# -- existing checkpoints and the hint --------------------------------------------------------

def _read_hint(storage: Storage) -> dict | None:
    try:
        data = json.loads(storage.read(LAST_CHECKPOINT))
        return data if isinstance(data, dict) and isinstance(data.get("version"), int) else None
    except (FileNotFoundError, ValueError):
        return None


def describe_checkpoint(storage: Storage, checkpoint: Checkpoint, counts: tuple[int, int] | None = None) -> dict | None:
    """The ``_last_checkpoint`` object that describes ``checkpoint`` (without its checksum):
    ``parts`` for a multi-part checkpoint, ``v2Checkpoint`` for a UUID-named V2 one. None when
    its action count cannot be read cheaply (a V2 checkpoint with sidecars, a JSON one)."""
    counts = counts if counts is not None else count_actions(storage, checkpoint)
    if counts is None:
        return None
    hint: dict[str, Any] = {"version": checkpoint.version, "size": counts[0],
                            "sizeInBytes": sum(f.size for f in checkpoint.files), "numOfAddFiles": counts[1]}
    if checkpoint.kind == "multipart":
        hint["parts"] = len(checkpoint.files)
    elif checkpoint.kind == "v2":
        f = checkpoint.files[0]
        hint["v2Checkpoint"] = {"path": f.key.rpartition("/")[2], "sizeInBytes": f.size,
                                "modificationTime": f.mtime_ms}
    return hint


def existing_checkpoint(storage: Storage, version: int, classic_name: bool) -> Checkpoint | None:
    """A complete checkpoint (classic, multi-part or V2) already at ``version``, if any. When a
    classic name is asked for explicitly, a UUID-named V2 checkpoint does not count: the protocol
    recommends a classic-named copy so that clients without V2 support find one."""
    found = [cp for cp in list_log(storage, version).checkpoints
             if cp.version == version and not (classic_name and cp.kind == "v2")]
    # prefer what readers prefer to find first: a classic file, then parts, then a V2 file
    order = {"classic": 0, "multipart": 1, "v2": 2}
    return min(found, key=lambda cp: order[cp.kind]) if found else None


def _same_checkpoint(current: dict, hint: dict) -> bool:
    """Whether a ``_last_checkpoint`` object already names the checkpoint ``hint`` describes."""
    v2 = (current.get("v2Checkpoint") or {}).get("path") if isinstance(current.get("v2Checkpoint"), dict) else None
    return (current.get("version") == hint["version"] and current.get("parts") == hint.get("parts")
            and v2 == (hint.get("v2Checkpoint") or {}).get("path"))


def update_hint(storage: Storage, hint: dict, wrote: bool) -> bool:
    """Point ``_last_checkpoint`` at the checkpoint ``hint`` describes, unless it names a newer
    version or (when this call wrote nothing) already names this checkpoint."""
    current = _read_hint(storage)
    if current is not None:
        if current["version"] > hint["version"] or (not wrote and _same_checkpoint(current, hint)):
            return False
    hint = dict(hint)
    hint["checksum"] = last_checkpoint_checksum(hint)
    storage.put(LAST_CHECKPOINT, json.dumps(hint, separators=(",", ":")).encode("utf-8"))
    return True


def _assert_reconciled(snapshot: Snapshot, table: pa.Table) -> None:
    """Refuse to write checkpoint rows that are not a reconciled state."""
    adds, removes = (table.column(c).combine_chunks() for c in ("add", "remove"))
    adds, removes = adds.filter(adds.is_valid()), removes.filter(removes.is_valid())
    problem = state_problem(
        pa.table({"path": adds.field("path"), "deletionVector": adds.field("deletionVector")}),
        pa.table({"path": removes.field("path"), "deletionVector": removes.field("deletionVector")}),
        snapshot.storage.root)
    if problem:
        raise InconsistentStateError(f"refusing to write a checkpoint of {snapshot.storage.root} at version "
                                     f"{snapshot.version}: {problem}")


# -- entry point ------------------------------------------------------------------------------

def write_checkpoint(snapshot: Snapshot, *, now_ms: int | None = None,
                     naming: Literal["auto", "classic", "uuid"] = "auto") -> dict:
    """Write a checkpoint of ``snapshot.version`` and point ``_last_checkpoint`` at it.

    Args:
        snapshot: the table state to checkpoint.
        now_ms: the time (epoch ms) tombstone expiry is measured from; default: now.
        naming: ``"auto"``: UUID-named V2 checkpoint on tables with the ``v2Checkpoint``
            feature (unless ``delta.checkpointPolicy=classic``), classic otherwise;
            ``"classic"``: always the classic name (V2-spec content on V2 tables);
            ``"uuid"``: UUID-named V2 checkpoint, only on tables with the feature.

    Returns:
        Metrics: ``version``, ``path`` (key under the table root), ``kind`` (``classic``,
        ``v2`` for UUID-named, ``v2-classic`` for V2 content under the classic name),
        ``num_actions``, ``num_add_files``, ``size_bytes``, ``already_existed`` (nothing was
        written because a checkpoint of the version was there) and ``last_checkpoint_updated``.

    Raises:
        InvalidArgumentError: bad ``naming`` or retention property.
        UnsupportedFeatureError: the table uses a feature this writer does not implement.
    """
    if naming not in ("auto", "classic", "uuid"):
        raise InvalidArgumentError(f"invalid naming {naming!r}: expected 'auto', 'classic' or 'uuid'")
    check_supported(snapshot.protocol, Operation.CHECKPOINT, snapshot.metadata)
    storage = snapshot.storage
    version = snapshot.version
    v2_spec = uses_v2_spec(snapshot)
    if naming == "uuid" and not v2_spec:
        raise InvalidArgumentError("a UUID-named checkpoint needs the v2Checkpoint table feature "
                                   "(and delta.checkpointPolicy other than 'classic')")
    uuid_named = v2_spec and naming != "classic"
    kind = "v2" if uuid_named else ("v2-classic" if v2_spec else "classic")
    classic_key = classic_checkpoint_key(version)
    if now_ms is None:
        now_ms = int(time.time() * 1000)

    existing = existing_checkpoint(storage, version, classic_name=naming == "classic")
    if existing is not None:  # a complete checkpoint of the version is there: write nothing
        hint = describe_checkpoint(storage, existing)
        hint_updated = update_hint(storage, hint, wrote=False) if hint is not None else False
        return {
            "version": version, "path": existing.files[0].key,
            "kind": {"classic": "classic", "multipart": "multipart", "v2": "v2"}[existing.kind],
            "num_actions": hint["size"] if hint else None,
            "num_add_files": hint["numOfAddFiles"] if hint else snapshot.num_files,
            "size_bytes": sum(f.size for f in existing.files), "already_existed": True,
            "last_checkpoint_updated": hint_updated,
        }
    table, num_adds = build_checkpoint_table(snapshot, now_ms=now_ms, v2_spec=v2_spec)
    _assert_reconciled(snapshot, table)
    data = _to_parquet(table, snapshot.metadata.properties.compression_codec)
    key = f"{LOG_DIR}{version:020d}.checkpoint.{uuid.uuid4()}.parquet" if uuid_named else classic_key
    already = False
    try:
        put_once(storage, key, data)
    except AlreadyExistsError:  # a concurrent writer won: its checkpoint is as good as ours
        already = True
    written = Checkpoint(version, "v2" if uuid_named else "classic", (storage.head(key),))
    counts = (table.num_rows, num_adds) if not already else None
    hint = describe_checkpoint(storage, written, counts)
    num_actions = hint["size"] if hint else None
    num_adds = hint["numOfAddFiles"] if hint else num_adds
    size = written.files[0].size
    hint_updated = update_hint(storage, hint, wrote=not already) if hint is not None else False
    return {
        "version": version,
        "path": key,
        "kind": kind,
        "num_actions": num_actions,
        "num_add_files": num_adds,
        "size_bytes": size,
        "already_existed": already,
        "last_checkpoint_updated": hint_updated,
    }
