"""Snapshot: the table state at one version, by the protocol's action reconciliation.

Checkpoints are read as Arrow tables and filtered vectorised; only the actions of the commits
(and compaction files) after the checkpoint are replayed in Python, newest winning.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .actions import ADD, ADD_SCHEMA, REMOVE, REMOVE_SCHEMA, Metadata, Protocol, conform, dv_unique_id
from .errors import CorruptLogError
from .log import LOG_DIR, Checkpoint, LogSegment, build_segment, commit_key, parse_json_lines
from .storage import FileInfo, Storage

log = logging.getLogger(__name__)

_CHECKPOINT_COLUMNS = ("add", "remove", "metaData", "protocol", "txn", "domainMetadata", "sidecar",
                       "checkpointMetadata")


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)
#: Paths whose reconciliation key differs from the path itself: absolute, with a scheme, or escaped.
_NEEDS_CANONICAL = r"^/|^[A-Za-z][A-Za-z0-9+.\-]*:|%"
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def canonical_path(path: str, root: str) -> str:
    """The reconciliation key of a file path as the log stores it.

    Log paths are URIs: relative to the table root (URL-encoded) or absolute. The same file may
    be written as ``/a/b``, ``file:/a/b`` or ``file:///a/b``, or as an absolute URI under the
    table root where another action used the relative form. All spellings of one file map to
    one key: the decoded path relative to ``root`` when the file is inside the table, else the
    decoded absolute URI (scheme-less absolute paths qualified with the root's file system).
    """
    m = _SCHEME.match(path)
    if m is None:
        if not path.startswith("/"):
            return unquote(path)
        scheme, rest = root.split(":", 1)
        authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
        absolute = f"{scheme}://{authority}{unquote(path)}"
    else:
        scheme, rest = _SCHEME_ALIASES.get(m.group(1).lower(), m.group(1).lower()), m.group(2)
        if rest.startswith("//"):
            authority, _, tail = rest[2:].partition("/")
            tail = "/" + tail
        else:
            authority, tail = "", rest
        if scheme == "file" and authority == "localhost":
            authority = ""
        absolute = f"{scheme}://{authority}{unquote(tail)}"
    base = unquote(root).rstrip("/") + "/"
    return absolute[len(base):] if absolute.startswith(base) else absolute


@dataclass
class _Replay:
    """Accumulates reconciled state while replaying log files (file keys: canonical path, dv id)."""

    root: str = ""
    protocol: dict | None = None
    metadata: dict | None = None
    txns: dict[str, dict] = field(default_factory=dict)
    domains: dict[str, dict] = field(default_factory=dict)  # latest per domain, tombstones included
    files: dict[tuple[str, str], tuple[str, dict]] = field(default_factory=dict)  # key -> (kind, action)

    def apply(self, actions: Iterable[dict], newer_wins: bool = True) -> None:
        for action in actions:
            if "add" in action and action["add"] is not None:
                a = action["add"]
                self.files[(canonical_path(a["path"], self.root), dv_unique_id(a.get("deletionVector")))] = ("add", a)
            elif "remove" in action and action["remove"] is not None:
                r = action["remove"]
                self.files[(canonical_path(r["path"], self.root), dv_unique_id(r.get("deletionVector")))] = \
                    ("remove", r)
            elif "metaData" in action and action["metaData"] is not None:
                self.metadata = action["metaData"]
            elif "protocol" in action and action["protocol"] is not None:
                self.protocol = action["protocol"]
            elif "txn" in action and action["txn"] is not None:
                self.txns[action["txn"]["appId"]] = action["txn"]
            elif "domainMetadata" in action and action["domainMetadata"] is not None:
                self.domains[action["domainMetadata"]["domain"]] = action["domainMetadata"]


@dataclass
class CheckpointData:
    """The contents of a checkpoint: file actions as Arrow tables, the rest as dicts."""

    adds: pa.Table
    removes: pa.Table
    protocol: dict | None
    metadata: dict | None
    txns: dict[str, dict]
    domains: dict[str, dict]


# What a reader of file paths needs: no statistics, partition values or tags (the bulk of a
# checkpoint); the other columns of the file actions are then null.
_PATH_COLUMNS = ("add.path", "add.deletionVector", "remove.path", "remove.deletionTimestamp", "remove.deletionVector")


def _read_parquet_actions(storage: Storage, key: str, paths_only: bool = False) -> pa.Table:
    """The action columns of a parquet checkpoint file (memory-mapped when local); with
    ``paths_only`` only the file actions' path, deletion vector and deletion time."""
    if storage.is_local:
        source = storage.local_path(key)
        if not os.path.isfile(source):
            raise CorruptLogError(f"log file listed but missing or unreadable: {key}")
    else:
        source = io.BytesIO(_read(storage, key))
    try:
        pf = pq.ParquetFile(source, memory_map=storage.is_local)
        names = [c for c in _CHECKPOINT_COLUMNS if c in pf.schema_arrow.names]
        if paths_only:
            names = [c for c in names if c not in ("add", "remove")] + [
                c for c in _PATH_COLUMNS if _has_field(pf.schema_arrow, c)]
        return pf.read(columns=names)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogError(f"corrupt checkpoint {key}: {exc}") from None


def _has_field(schema: pa.Schema, dotted: str) -> bool:
    top, _, child = dotted.partition(".")
    if top not in schema.names:
        return False
    t = schema.field(top).type
    return pa.types.is_struct(t) and t.get_field_index(child) >= 0


def _json_actions_table(actions: list[dict]) -> tuple[pa.Table, pa.Table]:
    adds = [a["add"] for a in actions if a.get("add") is not None]
    removes = [a["remove"] for a in actions if a.get("remove") is not None]
    return pa.table({"add": pa.array(adds, type=ADD)}), pa.table({"remove": pa.array(removes, type=REMOVE)})


_MAX_RUNS = 64
_MAX_SLICES = 10_000
_SCAN_BLOCK = 1 << 20


def _valid_pieces(chunk: pa.Array) -> list[pa.Array]:
    """The non-null rows of one chunk: zero-copy slices when they form a few runs, else a filter."""
    nulls = chunk.null_count
    if nulls == 0:
        return [chunk]
    if nulls == len(chunk):
        return []
    valid = chunk.is_valid().to_numpy(zero_copy_only=False)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], valid, [False])).astype(np.int8)))
    if len(edges) // 2 > _MAX_RUNS:
        return [chunk.filter(chunk.is_valid())]
    return [chunk.slice(int(lo), int(hi - lo)) for lo, hi in zip(edges[::2], edges[1::2])]


def _file_actions(table: pa.Table, column: str, target: pa.StructType) -> pa.Table:
    """The add or remove actions of a checkpoint table, one row each, in ``target``'s schema."""
    schema = pa.schema(list(target))
    if column not in table.column_names:
        return schema.empty_table()
    batches = [pa.RecordBatch.from_struct_array(conform(piece, target))
               for chunk in table.column(column).chunks for piece in _valid_pieces(chunk)]
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def _dict_actions(table: pa.Table, column: str) -> list[dict]:
    if column not in table.column_names:
        return []
    return [_clean(v) for chunk in table.column(column).chunks for piece in _valid_pieces(chunk)
            for v in piece.to_pylist()]


def _clean(value):
    """Arrow's to_pylist gives maps as lists of pairs; turn them back into dicts."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return {k: v for k, v in value}
    if isinstance(value, list):
        return [_clean(v) for v in value]
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
            actions = parse_json_lines(_read(storage, f.key), f.key)
            adds, removes = _json_actions_table(actions)
            add_parts.append(_file_actions(adds, "add", ADD))
            remove_parts.append(_file_actions(removes, "remove", REMOVE))
            dicts = {c: [a[c] for a in actions if a.get(c) is not None] for c in _CHECKPOINT_COLUMNS}
        else:
            table = _read_parquet_actions(storage, f.key, paths_only)
            add_parts.append(_file_actions(table, "add", ADD))
            remove_parts.append(_file_actions(table, "remove", REMOVE))
            dicts = {c: _dict_actions(table, c) for c in ("metaData", "protocol", "txn", "domainMetadata", "sidecar")}
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
            adds, removes = _json_actions_table(parse_json_lines(_read(storage, key), key))
            add_parts.append(_file_actions(adds, "add", ADD))
            remove_parts.append(_file_actions(removes, "remove", REMOVE))
        else:
            table = _read_parquet_actions(storage, key, paths_only)
            add_parts.append(_file_actions(table, "add", ADD))
            remove_parts.append(_file_actions(table, "remove", REMOVE))
    return CheckpointData(
        adds=pa.concat_tables(add_parts) if add_parts else ADD_SCHEMA.empty_table(),
        removes=pa.concat_tables(remove_parts) if remove_parts else REMOVE_SCHEMA.empty_table(),
        protocol=protocol, metadata=metadata, txns=txns, domains=domains)


def _read(storage: Storage, key: str) -> bytes:
    try:
        return storage.read(key)
    except FileNotFoundError:
        raise CorruptLogError(f"log file listed but missing or unreadable: {key}") from None


def maybe_noncanonical(paths: pa.Array) -> np.ndarray:
    """Rows whose path may differ from its canonical key: it has '%' or ':', or starts with '/'.

    A byte scan of the string data (no per-row Python), as fast as memory allows.
    """
    n = len(paths)
    flags = np.zeros(n, dtype=bool)
    if n == 0 or paths.null_count == n:
        return flags
    width = np.int64 if pa.types.is_large_string(paths.type) else np.int32
    _, offset_buf, data_buf = paths.buffers()
    offsets = np.frombuffer(offset_buf, dtype=width, count=n + 1, offset=paths.offset * np.dtype(width).itemsize)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    for start in range(lo, hi, _SCAN_BLOCK):  # cache-sized blocks: no full-size temporaries
        block = data[start:min(hi, start + _SCAN_BLOCK)]
        mask = block == 0x25
        mask |= block == 0x3A
        if mask.any():
            hits = np.flatnonzero(mask) + start
            flags[np.searchsorted(offsets, hits, side="right") - 1] = True
    starts = offsets[:-1]
    nonempty = offsets[1:] > starts
    flags[nonempty] |= data[starts[nonempty]] == 0x2F
    return flags


def _file_name(path: str) -> str:
    """The last segment of ``canonical_path(path, root)`` for any root, computed cheaply.

    Escapes never straddle a literal '/', so it is the raw last segment, decoded (and cut again
    if the decoding produced a '/').
    """
    m = _SCHEME.match(path)
    if m is not None:  # the scheme and authority are never part of the last segment
        rest = m.group(2)
        path = "/" + rest[2:].partition("/")[2] if rest.startswith("//") else rest
    name = path.rpartition("/")[2]
    return unquote(name).rpartition("/")[2] if "%" in name else name


def _drop_keys(table: pa.Table, keys: set[tuple[str, str]], spellings: set[str], root: str) -> pa.Table:
    """Rows of an add/remove table whose (canonical path, dv id) is not in ``keys``.

    ``spellings`` holds the paths as the replayed actions wrote them. A row can match only if
    its path is one of those or one of the canonical keys, or is not canonical itself (see
    :func:`maybe_noncanonical`); only such rows are canonicalised in Python.
    """
    if not keys or table.num_rows == 0:
        return table
    key_paths = {p for p, _ in keys}
    key_names = {p.rpartition("/")[2] for p in key_paths}
    value_set = pa.array(sorted(spellings | key_paths), pa.string())
    drop: list[int] = []
    base = 0
    for batch in table.to_batches():
        path_col = batch.column(batch.schema.get_field_index("path"))
        candidate = pc.is_in(path_col, value_set=value_set).to_numpy(zero_copy_only=False)
        candidate = candidate | maybe_noncanonical(path_col)
        idx = np.flatnonzero(candidate)
        if len(idx):
            hit_paths = path_col.take(pa.array(idx, pa.int64())).to_pylist()
            canonical = [(int(i), canonical_path(p, root)) for i, p in zip(idx, hit_paths)
                         if p is not None and _file_name(p) in key_names]
            matched = [(i, c) for i, c in canonical if c in key_paths]
            if matched:
                rows = pa.array([i for i, _ in matched], pa.int64())
                dvs = batch.column(batch.schema.get_field_index("deletionVector")).take(rows).to_pylist()
                drop.extend(base + i for (i, c), dv in zip(matched, dvs) if (c, dv_unique_id(dv)) in keys)
        base += batch.num_rows
    if not drop:
        return table
    return _without_rows(table, drop)


def _without_rows(table: pa.Table, rows: list[int]) -> pa.Table:
    """``table`` without the rows at ``rows`` (ascending): zero-copy slices around a few rows,
    a filter (which copies) around many."""
    if len(rows) > _MAX_SLICES:
        keep = np.ones(table.num_rows, dtype=bool)
        keep[rows] = False
        return table.filter(pa.array(keep))
    pieces, start = [], 0
    for row in rows:
        if row > start:
            pieces.append(table.slice(start, row - start))
        start = row + 1
    if start < table.num_rows:
        pieces.append(table.slice(start))
    return pa.concat_tables(pieces) if pieces else table.schema.empty_table()


class Snapshot:
    """The state of a Delta table at one version.

    Attributes:
        version: the table version.
        protocol, metadata: the latest Protocol and Metadata.
        files: active add actions (Arrow table, schema ``ADD_SCHEMA``).
        tombstones: remove actions not superseded by a later add (``REMOVE_SCHEMA``).
        txns: latest txn per appId.
        domains: live domain metadata per domain (tombstoned domains left out).
        domain_tombstones: domains whose latest action has ``removed: true``.
    """

    def __init__(self, storage: Storage, segment: LogSegment, protocol: Protocol, metadata: Metadata,
                 files: pa.Table, tombstones: pa.Table, txns: dict[str, dict], domains: dict[str, dict],
                 domain_tombstones: dict[str, dict], commit_timestamp: int | None):
        self.storage = storage
        self.segment = segment
        self.version = segment.version
        self.protocol = protocol
        self.metadata = metadata
        self.files = files
        self.tombstones = tombstones
        self.txns = txns
        self.domains = domains
        self.domain_tombstones = domain_tombstones
        self.commit_timestamp = commit_timestamp

    @classmethod
    def load(cls, table: str | Storage, version: int | None = None,
             storage_options: Mapping[str, str] | None = None, use_compactions: bool = True,
             paths_only: bool = False) -> "Snapshot":
        """Load the snapshot at ``version`` (default: latest) of the table at a path or URI.

        With ``paths_only`` the parquet checkpoint's file actions are read for their path,
        deletion vector and deletion time only (their other columns are null; actions from
        JSON files stay whole): far less to read and decode for a job that only needs to know
        which files are referenced, such as VACUUM.
        """
        started = time.perf_counter()
        storage = table if isinstance(table, Storage) else Storage(table, storage_options)
        segment = build_segment(storage, version, use_compactions=use_compactions)
        if segment.checkpoint is not None:
            cp = read_checkpoint(storage, segment.checkpoint, paths_only)
        else:
            cp = CheckpointData(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), None, None, {}, {})
        replay = _Replay(root=storage.root, protocol=cp.protocol, metadata=cp.metadata, txns=dict(cp.txns), domains=dict(cp.domains))
        commit_ts = None
        for start, end, f in segment.replay:
            actions = parse_json_lines(_read(storage, f.key), f.key)
            replay.apply(actions)
            if start == end == segment.version:
                for a in actions:
                    if a.get("commitInfo"):
                        ci = a["commitInfo"]
                        commit_ts = ci.get("inCommitTimestamp") or ci.get("timestamp")
                        break
        if commit_ts is None and segment.replay and segment.replay[-1][0] != segment.replay[-1][1]:
            # the newest commit was replayed from a compaction file, which has no commitInfo
            key = commit_key(segment.version)
            info = next((a["commitInfo"] for a in parse_json_lines(_read(storage, key), key)
                         if a.get("commitInfo")), {})
            commit_ts = info.get("inCommitTimestamp") or info.get("timestamp") or storage.head(key).mtime_ms
        if commit_ts is None and segment.replay:
            commit_ts = segment.replay[-1][2].mtime_ms
        if replay.protocol is None:
            raise CorruptLogError(f"the log has no protocol action at version {segment.version}: {storage.root}")
        if replay.metadata is None:
            raise CorruptLogError(f"the log has no metaData action at version {segment.version}: {storage.root}")
        try:
            protocol = Protocol.from_action(replay.protocol)
            metadata = Metadata.from_action(replay.metadata)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptLogError(f"invalid protocol or metaData action: {exc}") from None

        touched = set(replay.files)
        spellings = {a["path"] for _, a in replay.files.values()}
        new_adds = [a for kind, a in replay.files.values() if kind == "add"]
        new_removes = [a for kind, a in replay.files.values() if kind == "remove"]
        files = pa.concat_tables([
            _drop_keys(cp.adds, touched, spellings, storage.root),
            pa.Table.from_struct_array(pa.array(new_adds, type=ADD)) if new_adds else ADD_SCHEMA.empty_table(),
        ])
        tombstones = pa.concat_tables([
            _drop_keys(cp.removes, touched, spellings, storage.root),
            pa.Table.from_struct_array(pa.array(new_removes, type=REMOVE)) if new_removes else REMOVE_SCHEMA.empty_table(),
        ])
        domains = {d: v for d, v in replay.domains.items() if not v.get("removed")}
        domain_tombstones = {d: v for d, v in replay.domains.items() if v.get("removed")}
        snap = cls(storage, segment, protocol, metadata, files, tombstones, replay.txns, domains,
                   domain_tombstones, commit_ts)
        log.debug("loaded %s at version %d: %d files in %.2fs", storage.root, snap.version, files.num_rows,
                  time.perf_counter() - started)
        return snap

    # -- convenience ---------------------------------------------------------------------
    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.configuration)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @property
    def size_bytes(self) -> int:
        return int(pc.sum(self.files.column("size")).as_py() or 0) if self.files.num_rows else 0

    @property
    def paths(self) -> list[str]:
        return self.files.column("path").to_pylist()

    def add_actions(self) -> list[dict]:
        """Active files as plain action dicts (maps as dicts, nulls dropped)."""
        return [_strip_nulls(_clean(a)) for a in self.files.to_pylist()]

    def tombstone_actions(self) -> list[dict]:
        return [_strip_nulls(_clean(a)) for a in self.tombstones.to_pylist()]


def _strip_nulls(d: dict) -> dict:
    return {k: (_strip_nulls(v) if isinstance(v, dict) and k == "deletionVector" else v)
            for k, v in d.items() if v is not None}


__all__ = ["CheckpointData", "Snapshot", "canonical_path", "read_checkpoint", "sidecar_key", "FileInfo"]
