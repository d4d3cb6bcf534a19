"""Checkpoints of large tables, written in slices by parallel tasks and published once.

:func:`~airflow_delta_maint.delta.log.checkpoint.write_checkpoint` builds the whole checkpoint in
one Arrow table from a loaded ``Snapshot``. For a large table this module writes the same state
without ever holding it:

1. :func:`plan_checkpoint_parts` (driver) takes a :class:`StreamedState`, first streams its file
   actions' paths and deletion vectors once to check the reconciliation invariant (raising
   ``StreamFallback`` as the worker's checks do, before anything is written), then cuts the source
   checkpoint files (parts, sidecars) into slices of whole row groups;
2. :class:`SliceWriter` (a task, no Spark import: ``mapPartitions``-shaped) reads its slice's add
   and remove columns, drops what the commits after the source checkpoint superseded and the
   tombstones past ``delta.deletedFileRetentionDuration``, and writes one output file with
   put-if-absent: a part of a multi-part checkpoint (tables without ``v2Checkpoint``) or a sidecar
   of a V2 checkpoint;
3. :func:`publish_checkpoint_parts` (driver) writes last the file that makes the checkpoint
   complete: the multi-part checkpoint's last part, or the V2 checkpoint's top file with its
   ``sidecar`` actions. Both hold protocol, metaData, txn, domainMetadata and the few file
   actions of the replayed commits; then ``_last_checkpoint`` is updated.

Read back, the checkpoint holds exactly the actions the in-memory writer writes. Until the last
file is written, a reader sees no checkpoint (an incomplete multi-part set and unreferenced sidecars
are ignored). A failed run deletes the parts it wrote (:func:`discard_parts`); sidecars its tasks
wrote before the failure stay unreferenced until expired-log cleanup removes them.
"""

from __future__ import annotations

import io
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta_maint.delta.errors import CommitFailedError, CorruptLogError, InvalidArgumentError
from airflow_delta_maint.delta.log import checkpoint as ckpt
from airflow_delta_maint.delta.log.listing import LOG_DIR, Checkpoint, classic_checkpoint_key, list_log
from airflow_delta_maint.delta.log import checkpoint_schema as cs
from airflow_delta_maint.delta.log.checkpoint_read import (BATCH_ROWS, StreamFallback, actions_table, count_actions,
                                                           fill_stats, flatten_actions, has_column, open_checkpoint_file)
from airflow_delta_maint.delta.log.reconciliation import drop_keys
from airflow_delta_maint.delta.log.state_stream import StreamedState
from airflow_delta_maint.delta.protocol.actions import ADD, Metadata
from airflow_delta_maint.delta.protocol.features import Operation, check_supported
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage
from airflow_delta_maint.delta.storage.write_once import put_once

__all__ = ["CheckpointParts", "CheckpointSlice", "SliceWriter", "discard_parts", "plan_checkpoint_parts",
           "publish_checkpoint_parts", "write_checkpoint_in_parts"]

#: source rows per slice (one output file each): a task holds one slice's columns, some 100-200 MiB
SLICE_ROWS = 500_000
SIDECAR_SCHEMA = pa.schema([("add", cs.ADD_CHECKPOINT), ("remove", cs.REMOVE_CHECKPOINT)])
_REMOVE_COLUMNS = [f.name for f in cs.REMOVE_CHECKPOINT]
_ADD_COLUMNS = [f.name for f in ADD]


@dataclass(frozen=True)
class CheckpointSlice:
    """Whole row groups of one source checkpoint file, written to output number ``index``."""

    index: int
    key: str
    size: int | None
    row_groups: tuple[int, ...]


@dataclass
class SliceWriter:
    """Writes the output file of each slice it is given; pickled to the tasks.

    Yields per slice ``{"index", "key", "rows", "adds", "size", "mtime"}``.
    """

    storage: Storage
    version: int
    layout: Literal["multipart", "sidecars"]
    parts: int
    compression: str
    tombstone_cutoff_ms: int
    touched: set[tuple[str, str]]
    spellings: set[str]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    #: the table's metadata when it asks for typed statistics (``writeStatsAsStruct``), else None
    typed: Metadata | None = None

    def output_key(self, index: int) -> str:
        if self.layout == "multipart":
            return f"{LOG_DIR}{self.version:020d}.checkpoint.{index:010d}.{self.parts:010d}.parquet"
        return f"{LOG_DIR}_sidecars/{self.version:020d}.checkpoint.{self.run_id}-{index:06d}.{uuid.uuid4()}.parquet"

    def __call__(self, slices: Iterable[CheckpointSlice]) -> Iterator[dict[str, Any]]:
        for s in slices:
            yield self.write(s)

    def write(self, s: CheckpointSlice) -> dict[str, Any]:
        table, adds = self.rows(s)
        key = self.output_key(s.index)
        if self.layout == "sidecars" and table.num_rows == 0:
            return {"index": s.index, "key": None, "rows": 0, "adds": 0, "size": 0, "mtime": 0}
        data = _to_parquet(table, self.compression)
        try:
            put_once(self.storage, key, data)
        except AlreadyExistsError:
            raise CommitFailedError(f"checkpoint part {key} was written by someone else meanwhile; "
                                    "nothing was published, run the checkpoint again") from None
        return {"index": s.index, "key": key, "rows": table.num_rows, "adds": adds, "size": len(data),
                "mtime": int(time.time() * 1000)}

    def rows(self, s: CheckpointSlice) -> tuple[pa.Table, int]:
        """The slice's checkpoint rows (adds, then tombstones) and how many are adds."""
        schema = SIDECAR_SCHEMA if self.layout == "sidecars" else cs.CHECKPOINT_SCHEMA_V1
        root = self.storage.root
        pf = open_checkpoint_file(self.storage, s.key, s.size)
        src = pf.schema_arrow
        wanted = [f"add.{c}" for c in _ADD_COLUMNS if has_column(src, f"add.{c}")]
        typed_stats = has_column(src, "add.stats_parsed")
        if typed_stats:
            wanted.append("add.stats_parsed")
        wanted += [f"remove.{c}" for c in _REMOVE_COLUMNS if has_column(src, f"remove.{c}")]
        add_pieces: list[pa.Table] = []
        remove_pieces: list[pa.Table] = []
        if not wanted:
            return schema.empty_table(), 0
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=list(s.row_groups), columns=wanted,
                                         use_threads=False):
                adds = flatten_actions(batch, "add", _ADD_COLUMNS, ADD)
                if typed_stats:
                    adds = fill_stats(batch, adds)
                adds = drop_keys(adds, self.touched, self.spellings, root)
                removes = flatten_actions(batch, "remove", _REMOVE_COLUMNS, cs.REMOVE_CHECKPOINT)
                removes = drop_keys(removes, self.touched, self.spellings, root)
                removes = _unexpired(removes, self.tombstone_cutoff_ms)
                if adds.num_rows:
                    add_pieces.append(adds)
                if removes.num_rows:
                    remove_pieces.append(removes)
        except (pa.ArrowException, OSError) as exc:
            raise CorruptLogError(f"corrupt checkpoint {s.key}: {exc}") from None
        adds = pa.concat_tables(add_pieces) if add_pieces else None
        return _file_action_rows(schema, adds, remove_pieces, self.typed), adds.num_rows if adds is not None else 0


def _file_action_rows(schema: pa.Schema, adds: pa.Table | None, removes: list[pa.Table],
                      typed: Metadata | None) -> pa.Table:
    """Checkpoint rows of the adds and tombstones; with ``typed`` (a table asking for typed
    statistics) the adds also carry ``stats_parsed`` and ``partitionValues_parsed``, as the
    in-memory writer writes them."""
    add_type = cs.ADD_CHECKPOINT
    extra: dict[str, pa.Array] = {}
    if typed is not None and adds is not None and adds.num_rows:
        extra = ckpt.typed_add_columns(typed, adds)
        if extra:
            schema, add_type = ckpt.with_typed_adds(schema, extra)
    pieces = []
    if adds is not None and adds.num_rows:
        overrides = {"dataChange": pa.array(np.zeros(adds.num_rows, dtype=bool)), **extra}
        pieces.append(cs.action_rows(schema, "add", cs.struct_column(adds, add_type, overrides)))
    pieces += [_file_rows(schema, "remove", r, cs.REMOVE_CHECKPOINT) for r in removes]
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _unexpired(tombstones: pa.Table, cutoff_ms: int) -> pa.Table:
    if tombstones.num_rows == 0:
        return tombstones
    ts = pc.fill_null(tombstones.column("deletionTimestamp"), 0)
    return tombstones.filter(pc.greater(ts, cutoff_ms))


def _file_rows(schema: pa.Schema, column: str, table: pa.Table, target: pa.StructType) -> pa.Table:
    overrides = {"dataChange": pa.array(np.zeros(table.num_rows, dtype=bool))}
    return cs.action_rows(schema, column, cs.struct_column(table, target, overrides))


def _to_parquet(table: pa.Table, compression: str) -> bytes:
    buf = io.BytesIO()
    names = [n for n in ("add", "remove") if n in table.column_names]
    pq.write_table(table, buf, compression=compression, row_group_size=256 * 1024,
                   write_statistics=[f"{n}.path" for n in names] if table.num_rows else True)
    return buf.getvalue()


@dataclass
class CheckpointParts:
    """A checkpoint to write in parts: the slices for the tasks, what the driver publishes."""

    state: StreamedState
    writer: SliceWriter
    slices: list[CheckpointSlice]
    kind: str  # "multipart", "v2" (UUID-named top file), "v2-classic"
    now_ms: int
    live_files: int


def _slices(state: StreamedState, first_index: int = 1) -> list[CheckpointSlice]:
    out: list[CheckpointSlice] = []
    for key, size in state.part_files:
        pf = open_checkpoint_file(state.storage, key, size)
        if "add" not in pf.schema_arrow.names and "remove" not in pf.schema_arrow.names:
            continue
        meta = pf.metadata
        group: list[int] = []
        rows = 0
        for i in range(meta.num_row_groups):
            group.append(i)
            rows += meta.row_group(i).num_rows
            if rows >= SLICE_ROWS:
                out.append(CheckpointSlice(first_index + len(out), key, size, tuple(group)))
                group, rows = [], 0
        if group:
            out.append(CheckpointSlice(first_index + len(out), key, size, tuple(group)))
    return out


def _verified_live_files(state: StreamedState) -> int:
    """Stream the paths and deletion vectors once: the reconciliation checks of the stream
    (``StreamFallback`` when it cannot vouch for the state); the number of live files."""
    live = 0
    for kind, table in state.scan([], []):
        if kind == "add":
            live += table.num_rows
    return live


def plan_checkpoint_parts(state: StreamedState, *, now_ms: int | None = None,
                          naming: Literal["auto", "classic", "uuid"] = "auto") -> CheckpointParts:
    """Check the state and cut the work into slices (see the module docstring).

    Raises:
        StreamFallback: the streamed state cannot be vouched for.
        InvalidArgumentError, UnsupportedFeatureError: as ``write_checkpoint``.
    """
    if naming not in ("auto", "classic", "uuid"):
        raise InvalidArgumentError(f"invalid naming {naming!r}: expected 'auto', 'classic' or 'uuid'")
    shell = state
    check_supported(shell.protocol, Operation.CHECKPOINT, shell.metadata)
    v2_spec = ckpt.uses_v2_spec(shell)
    if naming == "uuid" and not v2_spec:
        raise InvalidArgumentError("a UUID-named checkpoint needs the v2Checkpoint table feature "
                                   "(and delta.checkpointPolicy other than 'classic')")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    live = _verified_live_files(state)
    slices = _slices(state)
    layout: Literal["multipart", "sidecars"] = "sidecars" if v2_spec else "multipart"
    parts = len(slices) + 1
    if layout == "multipart" and any(cp.version == state.version and cp.kind == "multipart"
                                     and len(cp.files) == parts for cp in list_log(state.storage, state.version).checkpoints):
        raise StreamFallback("a multi-part checkpoint with as many parts is already there")
    cutoff = now - shell.metadata.properties.deleted_file_retention_ms
    touched = set(state.replay_files)
    spellings = {a["path"] for _, a in state.replay_files.values()}
    writer = SliceWriter(state.storage, state.version, layout, parts, shell.metadata.properties.compression_codec, cutoff, touched,
                         spellings, typed=shell.metadata if ckpt.writes_typed_stats(shell.metadata) else None)
    kind = "multipart" if not v2_spec else ("v2" if naming != "classic" else "v2-classic")
    return CheckpointParts(state, writer, slices, kind, now, live)


def _header_table(plan: CheckpointParts, sidecars: list[dict]) -> tuple[pa.Table, int]:
    """The file the driver writes last: non-file actions, the replayed commits' file actions and
    (V2) the sidecar actions. Returns the table and its add count."""
    state, writer = plan.state, plan.writer
    shell = state
    v2 = plan.kind != "multipart"
    new_adds = [a for k, a in state.replay_files.values() if k == "add"]
    new_removes = [a for k, a in state.replay_files.values() if k == "remove"]
    adds = actions_table(new_adds, _ADD_COLUMNS, ADD) if new_adds else None
    removes = _unexpired(actions_table(new_removes, _REMOVE_COLUMNS, cs.REMOVE_CHECKPOINT), writer.tombstone_cutoff_ms)
    # the file actions first: typed statistics widen the add struct, and every row shares the schema
    files = _file_action_rows(cs.CHECKPOINT_SCHEMA_V2 if v2 else cs.CHECKPOINT_SCHEMA_V1, adds,
                              [removes] if removes.num_rows else [], writer.typed)
    schema = files.schema
    parts: list[pa.Table] = []
    if v2:
        parts.append(cs.action_rows(schema, "checkpointMetadata",
                                pa.array([{"version": state.version}], type=cs.CHECKPOINT_METADATA)))
    parts.append(cs.action_rows(schema, "protocol", pa.array([shell.protocol.to_action()], type=cs.PROTOCOL)))
    meta = dict(shell.metadata.raw)
    meta.setdefault("format", {"provider": "parquet", "options": {}})
    parts.append(cs.action_rows(schema, "metaData", pa.array([meta], type=cs.METADATA)))
    if state.txns:
        parts.append(cs.action_rows(schema, "txn", pa.array([state.txns[k] for k in sorted(state.txns)], type=cs.TXN)))
    if state.domains:
        domains = [dict(state.domains[k], removed=False) for k in sorted(state.domains)]
        parts.append(cs.action_rows(schema, "domainMetadata", pa.array(domains, type=cs.DOMAIN)))
    if sidecars:
        parts.append(cs.action_rows(schema, "sidecar", pa.array(sidecars, type=cs.SIDECAR)))
    return pa.concat_tables([*parts, files]), len(new_adds)


def publish_checkpoint_parts(plan: CheckpointParts, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the file that completes the checkpoint and point ``_last_checkpoint`` at it.

    Returns ``write_checkpoint``'s metrics, plus ``parts`` (files written, the last one included).
    """
    storage, writer, version = plan.state.storage, plan.writer, plan.state.version
    results = sorted(results, key=lambda r: r["index"])
    written = [r for r in results if r["key"] is not None]
    sidecars = [{"path": r["key"].rpartition("/")[2], "sizeInBytes": r["size"], "modificationTime": r["mtime"]}
                for r in written] if writer.layout == "sidecars" else []
    header, header_adds = _header_table(plan, sidecars)
    data = _to_parquet(header, writer.compression)
    if plan.kind == "multipart":
        key = writer.output_key(writer.parts)
    elif plan.kind == "v2":
        key = f"{LOG_DIR}{version:020d}.checkpoint.{uuid.uuid4()}.parquet"
    else:
        key = classic_checkpoint_key(version)
    try:
        put_once(storage, key, data)
    except AlreadyExistsError:
        discard_parts(storage, written)
        raise CommitFailedError(f"{key} was written by someone else meanwhile; this run's parts were discarded") \
            from None
    top = storage.head(key)
    actions = header.num_rows + sum(r["rows"] for r in written)
    adds = header_adds + sum(r["adds"] for r in written)
    total_bytes = top.size + sum(r["size"] for r in written)
    hint: dict[str, Any] = {"version": version, "size": actions, "sizeInBytes": total_bytes, "numOfAddFiles": adds}
    if plan.kind == "multipart":
        hint["parts"] = writer.parts
        files = tuple(storage.head(r["key"]) for r in written) + (top,)
        checkpoint = Checkpoint(version, "multipart", files)
    else:
        if plan.kind == "v2":
            hint["v2Checkpoint"] = {"path": key.rpartition("/")[2], "sizeInBytes": top.size,
                                    "modificationTime": top.mtime_ms}
        checkpoint = Checkpoint(version, "v2" if plan.kind == "v2" else "classic", (top,))
    updated = ckpt.update_hint(storage, hint, wrote=True)
    return {"version": version, "path": checkpoint.files[0].key if plan.kind == "multipart" else key,
            "kind": plan.kind, "num_actions": actions, "num_add_files": adds, "size_bytes": total_bytes,
            "already_existed": False, "last_checkpoint_updated": updated, "parts": len(written) + 1}


def discard_parts(storage: Storage, results: Iterable[dict[str, Any]]) -> None:
    """Delete output files of a run that published nothing (best effort)."""
    for r in results:
        if r.get("key"):
            try:
                storage.delete(r["key"])
            except FileNotFoundError:
                pass


def existing_checkpoint(state: StreamedState, naming: str = "auto") -> dict[str, Any] | None:
    """``write_checkpoint``'s metrics when a complete checkpoint of the version is already there
    (nothing is written; ``_last_checkpoint`` is pointed at it), read in bounded memory; else None."""
    storage = state.storage
    found = ckpt.existing_checkpoint(storage, state.version, classic_name=naming == "classic")
    if found is None:
        return None
    counts = count_actions(storage, found)
    hint = ckpt.describe_checkpoint(storage, found, counts) if counts is not None else None
    updated = ckpt.update_hint(storage, hint, wrote=False) if hint is not None else False
    return {"version": state.version, "path": found.files[0].key, "kind": found.kind,
            "num_actions": hint["size"] if hint else None,
            "num_add_files": hint["numOfAddFiles"] if hint else _verified_live_files(state),
            "size_bytes": sum(f.size for f in found.files), "already_existed": True,
            "last_checkpoint_updated": updated}


def write_checkpoint_in_parts(state: StreamedState, *, now_ms: int | None = None,
                              naming: Literal["auto", "classic", "uuid"] = "auto",
                              run_slices: Any = None) -> dict[str, Any]:
    """Write a checkpoint of ``state`` in parts: plan, run the slices (``run_slices(writer,
    slices)``, default: one after another in this process), publish. Metrics as ``write_checkpoint``.

    Raises:
        StreamFallback: use ``write_checkpoint`` on the loaded ``Snapshot`` instead (nothing written).
    """
    already = existing_checkpoint(state, naming)
    if already is not None:
        return already
    plan = plan_checkpoint_parts(state, now_ms=now_ms, naming=naming)
    results: list[dict[str, Any]] = []
    try:
        if run_slices is None:
            results = list(plan.writer(plan.slices))
        else:
            results = list(run_slices(plan.writer, plan.slices))
    except CommitFailedError:  # a part of that name was someone else's: leave every part alone
        raise
    except BaseException:
        discard_parts(state.storage, [{"key": plan.writer.output_key(s.index)} for s in plan.slices]
                      if plan.writer.layout == "multipart" else results)
        raise
    return publish_checkpoint_parts(plan, results)
