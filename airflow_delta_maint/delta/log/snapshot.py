"""Snapshot: the table state at one version, by the protocol's action reconciliation.

Checkpoints are read as Arrow tables and filtered vectorised; only the actions of the commits
(and compaction files) after the checkpoint are replayed in Python, newest winning.
"""

from __future__ import annotations

import io
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CorruptLogError, InconsistentStateError, InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.listing import LOG_DIR, Checkpoint, Compaction, LogSegment, build_segment, commit_key, parse_json_lines
from airflow_delta_maint.delta.log.reconciliation import Replay, actions_problem, added_problem, describe_file, state_problem
from airflow_delta_maint.delta.protocol.actions import ADD, ADD_SCHEMA, REMOVE, REMOVE_SCHEMA, Metadata, Protocol, conform, dv_unique_id
from airflow_delta_maint.delta.protocol.paths import _file_name, canonical_path, maybe_noncanonical
from airflow_delta_maint.delta.storage.store import FileInfo, Storage

log = logging.getLogger(__name__)

_CHECKPOINT_COLUMNS = ("add", "remove", "metaData", "protocol", "txn", "domainMetadata", "sidecar",
                       "checkpointMetadata")


class _Untrusted(Exception):
    """A derived log file (checkpoint, compaction file) that breaks the reconciliation invariant."""

    def __init__(self, keys: tuple[str, ...], reason: str):
        super().__init__(reason)
        self.keys, self.reason = keys, reason


def _cross_check(storage: Storage, comp: Compaction, window: Replay) -> str | None:
    """Why a compaction file differs from the reconciliation of the commits it covers, or None."""
    try:
        actions = parse_json_lines(storage.read(comp.file.key), comp.file.key)
    except (FileNotFoundError, CorruptLogError) as exc:
        return f"unreadable: {exc}"
    problem = actions_problem(actions, storage.root)
    if problem:
        return f"not a reconciliation of commits {comp.start} to {comp.end}: {problem}"
    theirs = Replay(root=storage.root)
    theirs.apply_commit(actions, comp.file.key, reconciled=True)
    ours, got = window.file_kinds(), theirs.file_kinds()
    if ours != got:
        for key in sorted(set(ours) | set(got)):
            if ours.get(key) != got.get(key):
                return (f"the commits leave {describe_file(*key)} {_state_word(ours.get(key))}, the compaction file "
                        f"{_state_word(got.get(key))}")
    for name in ("protocol", "metadata"):
        if getattr(window, name) is not None and getattr(window, name) != getattr(theirs, name):
            return f"its {'metaData' if name == 'metadata' else name} action differs from the newest one of its commits"
    return None


def _state_word(kind: str | None) -> str:
    return {"add": "live", "remove": "removed", None: "unmentioned"}[kind]


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
    source: str | io.BytesIO
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
    except MemoryError:  # pyarrow's ArrowMemoryError too: out of memory, not a corrupt file
        raise
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


def replay_segment(storage: Storage, segment: LogSegment, base: CheckpointData, verify: bool
                   ) -> tuple[Replay, int | None, list[dict[str, str]]]:
    """Replay the commits (and compaction files) of ``segment`` after its checkpoint on top of the
    checkpoint's non-file actions (``base``; its file actions are not read): the replay, the
    newest commit's timestamp, and the shadowed compaction files found to disagree with their
    commits (with ``verify``). Raises ``_Untrusted`` naming a compaction file that is not a
    reconciled state."""
    root = storage.root
    replay = Replay(root=root, protocol=base.protocol, metadata=base.metadata, txns=dict(base.txns),
                    domains=dict(base.domains))
    pending: dict[int, list[Compaction]] = {}
    for c in segment.shadowed if verify else ():
        pending.setdefault(c.start, []).append(c)
    open_windows: list[tuple[Compaction, Replay]] = []
    mismatches: list[dict[str, str]] = []
    commit_ts = None
    for start, end, f in segment.replay:
        actions = parse_json_lines(_read(storage, f.key), f.key)
        if start != end:
            problem = actions_problem(actions, root)
            if problem:
                raise _Untrusted((f.key,), f"not a reconciliation of commits {start} to {end}: {problem}")
        replay.apply_commit(actions, f.key, reconciled=start != end)
        if start == end:
            open_windows.extend((c, Replay(root=root)) for c in pending.pop(start, ()))
            for comp, window in open_windows:
                window.apply_commit(actions, f.key)
                if comp.end == start:
                    reason = _cross_check(storage, comp, window)
                    if reason:
                        log.warning("%s: %s disagrees with the commits it covers: %s; the commits are used",
                                    root, comp.file.key, reason)
                        mismatches.append({"file": comp.file.key, "reason": reason})
            open_windows = [(c, w) for c, w in open_windows if c.end != start]
        if start == end == segment.version:
            for a in actions:
                if a.get("commitInfo"):
                    ci = a["commitInfo"]
                    commit_ts = ci.get("inCommitTimestamp") or ci.get("timestamp")
                    break
    if commit_ts is None and segment.replay and segment.replay[-1][0] != segment.replay[-1][1]:
        # the newest commit was replayed from a compaction file, which has no commitInfo
        key = commit_key(segment.version)
        try:
            info: dict[str, Any] = next((a["commitInfo"] for a in parse_json_lines(storage.read(key), key)
                         if a.get("commitInfo")), {})
            commit_ts = info.get("inCommitTimestamp") or info.get("timestamp") or storage.head(key).mtime_ms
        except FileNotFoundError:
            commit_ts = segment.replay[-1][2].mtime_ms
    if commit_ts is None and segment.replay:
        commit_ts = segment.replay[-1][2].mtime_ms
    return replay, commit_ts, mismatches


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
        distrusted: derived log files (checkpoints, compaction files) found not to agree with
            the log, each ``{"file", "reason"}``; none of them shaped the state.
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
        self.distrusted: list[dict[str, str]] = []

    @classmethod
    def load(cls, table: str | Storage, version: int | None = None,
             storage_options: Mapping[str, str] | None = None, compactions: str = "verify",
             paths_only: bool = False) -> "Snapshot":
        """Load the snapshot at ``version`` (default: latest) of the table at a path or URI.

        Derived log files are hints (checkpoints, compaction files). Each one used is checked
        against the reconciliation invariant (:mod:`.reconciliation`); one that fails is
        distrusted: the state is rebuilt from the log files it stands for (an earlier
        checkpoint, the commits), with a warning naming it, and the read is refused with a
        ``CorruptLogError`` naming it when those are gone. The state returned always holds one
        live add per path and no file both live and removed (else ``InconsistentStateError``).
        A state that does not fit in memory raises ``StateTooLargeError`` (a ``MemoryError``),
        never a corruption error.

        Args:
            table: the table path or URI, or its Storage.
            version: the version to load (default: the latest).
            storage_options: object-store options.
            compactions: how to use log compaction files. ``"verify"`` (the default, and what
                every job that writes uses): replay the commits wherever they exist, use a
                compaction file only for commits that are gone, and cross-check each compaction
                file that could have stood in for present commits against them (a mismatch is
                logged and listed in ``distrusted``). ``"trust"``: replay compaction files in
                place of their commits once they pass the cheap structural checks (fewer reads).
                ``"ignore"``: never read them.
            paths_only: read the parquet checkpoint's file actions for their path, deletion
                vector and deletion time only (their other columns are null; actions from JSON
                files stay whole): far less to read for a job that only needs to know which
                files are referenced, such as VACUUM.
        """
        if compactions not in ("verify", "trust", "ignore"):
            raise InvalidArgumentError(f"invalid compactions {compactions!r}: expected 'verify', 'trust' or 'ignore'")
        started = time.perf_counter()
        storage = table if isinstance(table, Storage) else Storage(table, storage_options)
        exclude: set[str] = set()
        distrusted: list[dict[str, str]] = []
        while True:
            try:
                segment = build_segment(storage, version, use_compactions=compactions != "ignore",
                                        prefer_commits=compactions == "verify", exclude=frozenset(exclude))
            except MissingVersionError as exc:
                if not distrusted:
                    raise
                last = distrusted[-1]
                raise CorruptLogError(
                    f"cannot read {storage.root} at version {version if version is not None else 'latest'}: "
                    f"{last['file']} is not trustworthy ({last['reason']}) and the log files it stands for "
                    f"are gone ({exc})") from None
            out_of_memory = False
            try:
                snap = cls._from_segment(storage, segment, paths_only, verify=compactions == "verify")
            except MemoryError:  # told once the except block is left and the partial state freed
                out_of_memory = True
            except _Untrusted as exc:
                for key in exc.keys:
                    log.warning("%s: distrusting %s: %s; reading the log files it stands for instead",
                                storage.root, key, exc.reason)
                    distrusted.append({"file": key, "reason": exc.reason})
                exclude.update(exc.keys)
                continue
            if out_of_memory:
                from airflow_delta_maint.delta.log.state_memory import state_too_large

                raise state_too_large(storage, segment)
            snap.distrusted = distrusted + snap.distrusted
            log.debug("loaded %s at version %d: %d files in %.2fs", storage.root, snap.version,
                      snap.files.num_rows, time.perf_counter() - started)
            return snap

    @classmethod
    def _from_segment(cls, storage: Storage, segment: LogSegment, paths_only: bool, verify: bool) -> "Snapshot":
        """Reconcile one segment; raises ``_Untrusted`` naming a derived file that breaks the invariant."""
        root = storage.root
        cp_keys: tuple[str, ...] = ()
        if segment.checkpoint is not None:
            cp_keys = (segment.checkpoint.files[0].key,)
            cp = read_checkpoint(storage, segment.checkpoint, paths_only)
            problem = state_problem(cp.adds, cp.removes, root)
            if problem:
                raise _Untrusted(cp_keys, f"the checkpoint is not a reconciled state: {problem}")
        else:
            cp = CheckpointData(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), None, None, {}, {})
        replay, commit_ts, mismatches = replay_segment(storage, segment, cp, verify)
        protocol, metadata = table_config(replay, segment.version, root)

        touched = set(replay.files)
        spellings = {a["path"] for _, a in replay.files.values()}
        new_adds = [a for kind, a in replay.files.values() if kind == "add"]
        new_removes = [a for kind, a in replay.files.values() if kind == "remove"]
        kept_adds = _drop_keys(cp.adds, touched, spellings, root)
        files = pa.concat_tables([
            kept_adds,
            pa.Table.from_struct_array(pa.array(new_adds, type=ADD)) if new_adds else ADD_SCHEMA.empty_table(),
        ])
        tombstones = pa.concat_tables([
            _drop_keys(cp.removes, touched, spellings, root),
            pa.Table.from_struct_array(pa.array(new_removes, type=REMOVE)) if new_removes else REMOVE_SCHEMA.empty_table(),
        ])
        # The checkpoint is a reconciled state (checked above) and the replay's keys were taken out
        # of it, so no file can be live and removed; only a new add can make a path live twice.
        problem = added_problem(kept_adds, new_adds, root)
        if problem:
            suspects = tuple(c.file.key for c in segment.compactions) or cp_keys
            if suspects:
                raise _Untrusted(suspects, f"replaying the log on top of it gives an impossible state at "
                                           f"version {segment.version}: {problem}")
            raise InconsistentStateError(
                f"the log of {root} is inconsistent at version {segment.version}: {problem}")
        domains = {d: v for d, v in replay.domains.items() if not v.get("removed")}
        domain_tombstones = {d: v for d, v in replay.domains.items() if v.get("removed")}
        snap = cls(storage, segment, protocol, metadata, files, tombstones, replay.txns, domains,
                   domain_tombstones, commit_ts)
        snap.distrusted = mismatches
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


__all__ = ["CheckpointData", "Snapshot", "canonical_path", "read_checkpoint", "replay_segment", "sidecar_key", "FileInfo"]


def table_config(replay: Any, version: int, root: str) -> tuple[Protocol, Metadata]:
    """The protocol and metaData a replayed segment ends with; a missing or invalid one is a corrupt log."""
    if replay.protocol is None:
        raise CorruptLogError(f"the log has no protocol action at version {version}: {root}")
    if replay.metadata is None:
        raise CorruptLogError(f"the log has no metaData action at version {version}: {root}")
    try:
        return Protocol.from_action(replay.protocol), Metadata.from_action(replay.metadata)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(f"invalid protocol or metaData action: {exc}") from None
