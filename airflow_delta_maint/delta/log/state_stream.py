"""The table state streamed in bounded memory, for the checks the Airflow worker runs.

:class:`~airflow_delta_maint.delta.log.snapshot.Snapshot` holds every live file in one Arrow
table (about 1.2 GiB per million files with statistics). The worker's checks need aggregates,
not the files, so :func:`open_state` reads a table the other way round:

1. the log segment is chosen as ``Snapshot.load`` chooses it (``compactions="verify"``);
2. the checkpoint's non-file actions (protocol, metaData, txn, domainMetadata, sidecar) are read
   column by column, one row group at a time (a V2 checkpoint's top-level JSON file, which holds
   only those when its file actions live in sidecars, is read whole);
3. the commits after the checkpoint (few) are replayed in memory exactly as the snapshot replays
   them (:func:`~airflow_delta_maint.delta.log.snapshot.replay_segment`);
4. :meth:`StreamedState.scan` then streams the checkpoint's file actions (every part of a
   multi-part checkpoint, every sidecar of a V2 one) one row group at a time, reading only the
   columns the caller asks for, drops the rows the replayed commits superseded (a file removed
   later, the old half of a deletion-vector update), and finally yields the replay's own live
   adds and tombstones. Nothing is kept per file except a 64-bit hash of its path.

The hashes check the reconciliation invariant of the checkpoint (one live add per path, no
logical file both live and removed) and that no later add makes a path live twice, as the
snapshot checks them. They are kept in memory up to a million files, then spilled to 64 bucket
files in a temporary folder and checked one bucket at a time, so memory stays flat whatever the
table's size. At most ``MAX_CONCURRENT_SCANS`` scans read checkpoints at once in a process (the
fleet's decision runs checks on threads). Equal paths always hash equal, so no problem goes
unseen; when the hashes show a possible problem (a real one, or a hash collision), when a
compaction file is not a reconciled state, or when a JSON checkpoint file holds file actions
itself, the scan raises :class:`StreamFallback` and the caller loads the whole ``Snapshot``
instead, whose answer (or error) is then the answer. The
streamed answers are thus always those of the in-memory snapshot.

Reads: ``_delta_log`` listing, ``_last_checkpoint``, the checkpoint files' columns the caller
names (remote files by byte ranges, never whole), the commits after the checkpoint.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import CorruptLogError
from airflow_delta_maint.delta.log.checkpoint_read import (BATCH_ROWS, CheckpointData, StreamFallback, actions_table,
                                                           fill_stats, flatten_actions, has_column, json_manifest_actions,
                                                           open_checkpoint_file, other_actions, sidecar_key)
from airflow_delta_maint.delta.log.listing import LogSegment, build_segment
from airflow_delta_maint.delta.log.reconciliation import added_problem, drop_keys
from airflow_delta_maint.delta.log.snapshot import Snapshot, UntrustedLogFile, replay_segment, table_config
from airflow_delta_maint.delta.log.state_memory import state_too_large
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.actions import ADD, ADD_SCHEMA, REMOVE, REMOVE_SCHEMA, Metadata, Protocol
from airflow_delta_maint.delta.protocol.paths import canonical_paths
from airflow_delta_maint.delta.storage.scratch import make_scratch, remove_scratch
from airflow_delta_maint.delta.storage.store import Storage

__all__ = ["StreamFallback", "StreamedState", "open_state", "path_hashes"]

#: checkpoint scans running at once in this process (the fleet's decision runs its tables' checks
#: on threads: memory is then bounded by this many scans, not by the number of threads)
MAX_CONCURRENT_SCANS = 2
_SCANS = threading.BoundedSemaphore(MAX_CONCURRENT_SCANS)
#: hashes kept in memory before they are spilled to bucket files
SPILL_AT = 1 << 20
_BUCKET_BITS = 6
_HASH_ROWS = 4096
_MULT = np.uint64(0x100000001B3)


# -- hashing paths ---------------------------------------------------------------------------------
_POW: np.ndarray = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> np.ndarray:
    global _POW
    if len(_POW) < n:
        size = max(n, 2 * len(_POW), 1024)
        with np.errstate(over="ignore"):
            _POW = np.cumprod(np.concatenate(([1], np.full(size - 1, _MULT))).astype(np.uint64), dtype=np.uint64)
    return _POW


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads the polynomial hash over all bits."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(30))
        h = h * np.uint64(0xBF58476D1CE4E5B9)
        h = h ^ (h >> np.uint64(27))
        h = h * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def path_hashes(strings: pa.Array) -> np.ndarray:
    """A 64-bit hash of every string of an Arrow string array (no nulls), vectorised.

    Equal strings hash equal; different ones collide with a chance of about 2^-64 per pair.
    """
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if strings.type != pa.large_string():
        strings = strings.cast(pa.large_string())
    n = len(strings)
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    _, off_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=strings.offset * 8)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    with np.errstate(over="ignore"):
        for lo in range(0, n, _HASH_ROWS):
            hi = min(n, lo + _HASH_ROWS)
            offs = offsets[lo:hi + 1]
            lengths = np.diff(offs)
            start, end = int(offs[0]), int(offs[-1])
            h = lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            if end > start:
                chunk = data[start:end].astype(np.uint64) + np.uint64(1)
                ends = np.repeat(offs[1:] - start, lengths)
                from_end = ends - 1 - np.arange(end - start, dtype=np.int64)
                weights = _powers(int(lengths.max()))[from_end]
                nonempty = lengths > 0
                starts = (offs[:-1] - start)[nonempty]
                h[nonempty] += np.add.reduceat(chunk * weights, starts)
            out[lo:hi] = _mix(h)
    return out


def _dv_ids(dv: pa.Array) -> pa.Array:
    """``dv_unique_id`` of every row of a deletion-vector struct column ('' for none), vectorised."""
    n = len(dv)
    if dv.null_count == n:
        return pa.array([""] * n, pa.string()) if n else pa.array([], pa.string())
    names = {dv.type.field(i).name for i in range(dv.type.num_fields)}

    def child(name: str, kind: pa.DataType) -> pa.Array:
        return pc.struct_field(dv, name) if name in names else pa.nulls(n, kind)

    storage_type = pc.cast(child("storageType", pa.string()), pa.string()).fill_null("None")
    inline = pc.cast(child("pathOrInlineDv", pa.string()), pa.string()).fill_null("None")
    offset = child("offset", pa.int32())
    at = pc.if_else(offset.is_valid(), pc.binary_join_element_wise("@", pc.cast(offset, pa.string()), ""), "")
    uid = pc.binary_join_element_wise(storage_type, inline, at, "")
    return pc.if_else(dv.is_valid(), uid, "")


class _HashSets:
    """Hashes of the checkpoint's live paths, live (path, dv) keys and removed (path, dv) keys,
    in memory up to ``SPILL_AT``, then in bucket files."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {"paths": [], "adds": [], "removes": []}
        self.held = 0
        self.folder: str | None = None
        self.files: dict[tuple[str, int], Any] = {}

    def add(self, kind: str, hashes: np.ndarray) -> None:
        if not len(hashes):
            return
        self.parts[kind].append(hashes)
        self.held += len(hashes)
        if self.held >= SPILL_AT:
            self._spill()

    def _spill(self) -> None:
        if self.folder is None:
            self.folder = make_scratch("delta-state-")
        for kind, parts in self.parts.items():
            if not parts:
                continue
            hashes = np.concatenate(parts)
            buckets = (hashes >> np.uint64(64 - _BUCKET_BITS)).astype(np.int64)
            order = np.argsort(buckets, kind="stable")
            hashes, buckets = hashes[order], buckets[order]
            bounds = np.searchsorted(buckets, np.arange((1 << _BUCKET_BITS) + 1))
            for b in range(1 << _BUCKET_BITS):
                lo, hi = bounds[b], bounds[b + 1]
                if hi > lo:
                    handle = self.files.get((kind, b))
                    if handle is None:
                        handle = self.files[(kind, b)] = open(os.path.join(self.folder, f"{kind}-{b}"), "ab")
                    hashes[lo:hi].tofile(handle)
            parts.clear()
        self.held = 0

    def _buckets(self) -> Iterator[dict[str, np.ndarray]]:
        if self.folder is None:
            yield {k: np.concatenate(v) if v else np.zeros(0, np.uint64) for k, v in self.parts.items()}
            return
        self._spill()
        for handle in self.files.values():
            handle.close()
        for b in range(1 << _BUCKET_BITS):
            out = {}
            for kind in self.parts:
                name = os.path.join(self.folder, f"{kind}-{b}")
                out[kind] = np.fromfile(name, dtype=np.uint64) if os.path.exists(name) else np.zeros(0, np.uint64)
            yield out

    def problem(self) -> bool:
        """True when a path may be live twice, or a logical file may be both live and removed."""
        try:
            for bucket in self._buckets():
                paths = bucket["paths"]
                paths.sort()
                if len(paths) > 1 and bool((paths[1:] == paths[:-1]).any()):
                    return True
                if len(bucket["removes"]) and len(bucket["adds"]) and \
                        bool(np.isin(bucket["removes"], bucket["adds"]).any()):
                    return True
            return False
        finally:
            self.close()

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
        self.files.clear()
        if self.folder is not None:
            remove_scratch(self.folder)
            self.folder = None


# -- reading checkpoint files ------------------------------------------------------------------


class StreamedState(TableHeader):
    """A table's state at one version, with its files still in the log (see the module docstring).

    Attributes (besides the header's, see :class:`TableHeader`):
        replay_files: the file actions of the commits after the checkpoint, newest per file.
        part_files: (key, size) of the checkpoint's parquet files whose file actions the scan reads.
    """

    def __init__(self, storage: Storage, segment: LogSegment, protocol: Protocol, metadata: Metadata,
                 txns: dict[str, dict], domains: dict[str, dict], domain_tombstones: dict[str, dict],
                 commit_timestamp: int | None, distrusted: list[dict[str, str]],
                 replay_files: dict[tuple[str, str], tuple[str, dict]],
                 part_files: list[tuple[str, int | None]] | None = None):
        super().__init__(storage, segment, protocol, metadata, txns, domains, domain_tombstones, commit_timestamp,
                         distrusted)
        self.replay_files = replay_files
        self.part_files: list[tuple[str, int | None]] = list(part_files or [])

    def part(self, files: pa.Table) -> Snapshot:
        """An eager state of this header holding only ``files`` (live adds in ``ADD_SCHEMA``): for a
        job that works on a part of the table at a time."""
        snap = Snapshot(self.storage, self.segment, self.protocol, self.metadata, files, REMOVE_SCHEMA.empty_table(),
                        self.txns, self.domains, self.domain_tombstones, self.commit_timestamp)
        snap.distrusted = list(self.distrusted)
        return snap

    def eager(self, paths_only: bool = False) -> Snapshot:
        """The same version loaded whole in memory (``Snapshot.load``), for what only every file at
        once can answer; ``paths_only`` as there."""
        return Snapshot.load(self.storage, self.version, paths_only=paths_only)

    def scan(self, add_columns: Sequence[str], remove_columns: Sequence[str] | None = None
             ) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``("add", table)`` pieces of the live files and, with ``remove_columns``,
        ``("remove", table)`` pieces of the tombstones, each with the columns asked for (``path``
        and ``deletionVector`` always included). Raises :class:`StreamFallback` at the end when
        the checkpoint or the replay on top of it may break the reconciliation invariant."""
        root = self.storage.root
        add_cols = list(dict.fromkeys(["path", "deletionVector", *add_columns]))
        rem_cols = list(dict.fromkeys(["path", "deletionVector", *(remove_columns or ())]))
        touched = set(self.replay_files)
        spellings = {a["path"] for _, a in self.replay_files.values()}
        new_adds = [a for kind, a in self.replay_files.values() if kind == "add"]
        new_removes = [a for kind, a in self.replay_files.values() if kind == "remove"]
        if added_problem(ADD_SCHEMA.empty_table(), new_adds, root):
            raise StreamFallback("two live adds of one path among the commits after the checkpoint")
        new_paths = pa.array(sorted({p for p in canonical_paths(pa.array([a["path"] for a in new_adds], pa.string()),
                                                                         root).to_pylist()}), pa.string()) \
            if new_adds else None
        hashes = _HashSets()
        scanning = bool(self.part_files)
        if scanning:
            _SCANS.acquire()
        try:
            for key, size in self.part_files:
                pf = open_checkpoint_file(self.storage, key, size)
                schema = pf.schema_arrow
                wanted = [f"add.{c}" for c in add_cols if has_column(schema, f"add.{c}")]
                typed_stats = "stats" in add_cols and has_column(schema, "add.stats_parsed")
                if typed_stats:
                    wanted.append("add.stats_parsed")
                wanted += [f"remove.{c}" for c in rem_cols if has_column(schema, f"remove.{c}")]
                if not wanted:
                    continue
                try:
                    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=wanted, use_threads=False):
                        adds = flatten_actions(batch, "add", add_cols, ADD)
                        if typed_stats:
                            adds = fill_stats(batch, adds)
                        removes = flatten_actions(batch, "remove", rem_cols, REMOVE)
                        yield from self._checkpoint_rows(adds, removes, hashes, touched, spellings, new_paths,
                                                         remove_columns is not None)
                except MemoryError:
                    raise state_too_large(self.storage, self.segment) from None
                except (pa.ArrowException, OSError) as exc:
                    raise CorruptLogError(f"corrupt checkpoint {key}: {exc}") from None
            if hashes.problem():
                raise StreamFallback("the checkpoint may hold a path live twice, or a file both live and removed")
        finally:
            hashes.close()
            if scanning:
                _SCANS.release()
        if new_adds:
            yield "add", actions_table(new_adds, add_cols, ADD)
        if remove_columns is not None and new_removes:
            yield "remove", actions_table(new_removes, rem_cols, REMOVE)

    def _checkpoint_rows(self, adds: pa.Table, removes: pa.Table, hashes: _HashSets, touched: set,
                         spellings: set[str], new_paths: pa.Array | None, want_removes: bool
                         ) -> Iterator[tuple[str, pa.Table]]:
        root = self.storage.root
        if adds.num_rows:
            keys = canonical_paths(adds.column("path"), root)
            if keys.null_count:
                raise StreamFallback("an add action without a path")
            hashes.add("paths", path_hashes(keys))
            hashes.add("adds", path_hashes(pc.binary_join_element_wise(
                keys, _dv_ids(adds.column("deletionVector").combine_chunks()), "\x00")))
            kept = drop_keys(adds, touched, spellings, root)
            if new_paths is not None and kept.num_rows:
                kept_keys = canonical_paths(kept.column("path"), root)
                if pc.any(pc.is_in(kept_keys, value_set=new_paths)).as_py():
                    raise StreamFallback("a later add makes a checkpoint path live twice")
            if kept.num_rows:
                yield "add", kept
        if removes.num_rows:
            keys = canonical_paths(removes.column("path"), root)
            if keys.null_count:
                raise StreamFallback("a remove action without a path")
            hashes.add("removes", path_hashes(pc.binary_join_element_wise(
                keys, _dv_ids(removes.column("deletionVector").combine_chunks()), "\x00")))
            if want_removes:
                kept = drop_keys(removes, touched, spellings, root)
                if kept.num_rows:
                    yield "remove", kept


def open_state(table: str | Storage, version: int | None = None,
               storage_options: Mapping[str, str] | None = None) -> StreamedState:
    """The state at ``version`` (default: the latest), its files left in the log for
    :meth:`StreamedState.scan`.

    Raises:
        StreamFallback: the log needs what only ``Snapshot.load`` does (a distrusted derived
            file, a JSON checkpoint or sidecar holding file actions).
        DeltaError: a missing table or version, or a corrupt log, as ``Snapshot.load`` raises it.
    """
    storage = table if isinstance(table, Storage) else Storage(table, storage_options)
    segment = build_segment(storage, version, use_compactions=True, prefer_commits=True, exclude=frozenset())
    protocol_action = metadata_action = None
    txns: dict[str, dict] = {}
    domains: dict[str, dict] = {}
    part_files: list[tuple[str, int | None]] = []
    if segment.checkpoint is not None:
        sidecars: list[str] = []
        for f in segment.checkpoint.files:
            try:
                if f.key.endswith(".json"):
                    found = json_manifest_actions(storage, f.key)
                else:
                    found = other_actions(storage, f.key, f.size)
                    part_files.append((f.key, f.size))
            except MemoryError:
                raise state_too_large(storage, segment) from None
            for p in found["protocol"]:
                protocol_action = p
            for m in found["metaData"]:
                metadata_action = m
            for t in found["txn"]:
                txns[t["appId"]] = t
            for d in found["domainMetadata"]:
                domains[d["domain"]] = d
            sidecars.extend(s["path"] for s in found["sidecar"])
        for path in sidecars:
            key = sidecar_key(path)
            if key.endswith(".json"):
                raise StreamFallback("a JSON sidecar is read whole")
            part_files.append((key, None))
    base = CheckpointData(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), protocol_action, metadata_action,
                          txns, domains)
    try:
        replay, commit_ts, mismatches = replay_segment(storage, segment, base, verify=True)
    except UntrustedLogFile as exc:
        raise StreamFallback(exc.reason) from None
    root = storage.root
    protocol, metadata = table_config(replay, segment.version, root)
    live_domains = {d: v for d, v in replay.domains.items() if not v.get("removed")}
    domain_tombstones = {d: v for d, v in replay.domains.items() if v.get("removed")}
    return StreamedState(storage, segment, protocol, metadata, replay.txns, live_domains, domain_tombstones,
                         commit_ts, mismatches, replay.files, part_files)
