"""Snapshot: the table state at one version, by the protocol's action reconciliation.

Checkpoints are read as Arrow tables and filtered vectorised; only the actions of the commits
(and compaction files) after the checkpoint are replayed in Python, newest winning.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta_maint.delta.errors import CorruptLogError, InconsistentStateError, InvalidArgumentError, MissingVersionError
from airflow_delta_maint.delta.log.commit_time import commit_info_time, commit_time
from airflow_delta_maint.delta.log.checkpoint_read import CheckpointData, plain_value, read_checkpoint, read_log_files
from airflow_delta_maint.delta.log.listing import Compaction, LogSegment, build_segment, commit_key, parse_json_lines
from airflow_delta_maint.delta.log.snapshot_cache import kept_snapshots
from airflow_delta_maint.delta.log.state_memory import state_too_large
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.reconciliation import (Replay, actions_problem, added_problem, describe_file, drop_keys,
                                                          state_problem)
from airflow_delta_maint.delta.protocol.actions import ADD, ADD_SCHEMA, REMOVE, REMOVE_SCHEMA, Metadata, Protocol
from airflow_delta_maint.delta.storage.store import Storage

log = logging.getLogger(__name__)

class UntrustedLogFile(Exception):
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


# What a reader of file paths needs: no statistics, partition values or tags (the bulk of a
# checkpoint); the other columns of the file actions are then null.


def replay_segment(storage: Storage, segment: LogSegment, base: CheckpointData, verify: bool
                   ) -> tuple[Replay, int | None, list[dict[str, str]]]:
    """Replay the commits (and compaction files) of ``segment`` after its checkpoint on top of the
    checkpoint's non-file actions (``base``; its file actions are not read): the replay, the
    newest commit's timestamp, and the shadowed compaction files found to disagree with their
    commits (with ``verify``). Raises ``UntrustedLogFile`` naming a compaction file that is not a
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
    for (start, end, f), data in zip(segment.replay, read_log_files(storage, [f.key for _, _, f in segment.replay])):
        actions = parse_json_lines(data, f.key)
        if start != end:
            problem = actions_problem(actions, root)
            if problem:
                raise UntrustedLogFile((f.key,), f"not a reconciliation of commits {start} to {end}: {problem}")
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
                    commit_ts = commit_info_time(a["commitInfo"])
                    break
    if commit_ts is None and segment.replay and segment.replay[-1][0] != segment.replay[-1][1]:
        # the newest commit was replayed from a compaction file, which has no commitInfo
        key = commit_key(segment.version)
        try:
            info = next((a["commitInfo"] for a in parse_json_lines(storage.read(key), key) if a.get("commitInfo")), None)
            commit_ts = commit_time(storage, segment.version, info)
        except FileNotFoundError:
            commit_ts = segment.replay[-1][2].mtime_ms
    if commit_ts is None and segment.replay:
        commit_ts = segment.replay[-1][2].mtime_ms
    return replay, commit_ts, mismatches


class Snapshot(TableHeader):
    """The eager state of a Delta table at one version: its header and every live file in memory.

    Attributes (besides the header's, see :class:`TableHeader`):
        files: active add actions (Arrow table, schema ``ADD_SCHEMA``).
        tombstones: remove actions not superseded by a later add (``REMOVE_SCHEMA``).
    """

    def __init__(self, storage: Storage, segment: LogSegment, protocol: Protocol, metadata: Metadata,
                 files: pa.Table, tombstones: pa.Table, txns: dict[str, dict], domains: dict[str, dict],
                 domain_tombstones: dict[str, dict], commit_timestamp: int | None):
        super().__init__(storage, segment, protocol, metadata, txns, domains, domain_tombstones, commit_timestamp)
        self.files = files
        self.tombstones = tombstones

    def scan(self, add_columns: Sequence[str], remove_columns: Sequence[str] | None = None
             ) -> Iterator[tuple[str, pa.Table]]:
        """The live files (and, with ``remove_columns``, the tombstones) as one piece each: the
        scan of a state whose batches are already in memory (see :meth:`TableHeader.scan`)."""
        add_cols = list(dict.fromkeys(["path", "deletionVector", *add_columns]))
        if self.files.num_rows:
            yield "add", self.files.select(add_cols)
        if remove_columns is not None and self.tombstones.num_rows:
            yield "remove", self.tombstones.select(list(dict.fromkeys(["path", "deletionVector", *remove_columns])))

    def part(self, files: pa.Table) -> "Snapshot":
        """An eager state of this header holding only ``files`` (live adds in ``ADD_SCHEMA``)."""
        snap = Snapshot(self.storage, self.segment, self.protocol, self.metadata, files, REMOVE_SCHEMA.empty_table(),
                        self.txns, self.domains, self.domain_tombstones, self.commit_timestamp)
        snap.distrusted = list(self.distrusted)
        return snap

    def eager(self, paths_only: bool = False) -> "Snapshot":
        """This state, whose files are already in memory (``paths_only`` changes nothing)."""
        return self

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
            kept = kept_snapshots()
            verify = compactions == "verify"
            earlier = None
            if kept is not None and not distrusted:
                found = kept.get(storage, segment, paths_only, verify)
                if found is not None:
                    return found
                earlier = kept.nearest(storage, paths_only, verify, lambda k: builds_on(segment, k))
            try:
                snap = ((cls._built_on(earlier, segment, verify) if earlier is not None else None)
                        or cls._from_segment(storage, segment, paths_only, verify=verify))
            except MemoryError:  # told once the except block is left and the partial state freed
                out_of_memory = True
            except UntrustedLogFile as exc:
                for key in exc.keys:
                    log.warning("%s: distrusting %s: %s; reading the log files it stands for instead",
                                storage.root, key, exc.reason)
                    distrusted.append({"file": key, "reason": exc.reason})
                exclude.update(exc.keys)
                continue
            if out_of_memory:
                raise state_too_large(storage, segment)
            snap.distrusted = distrusted + snap.distrusted
            if kept is not None and not snap.distrusted:
                kept.put(storage, segment, paths_only, verify, snap)
            log.debug("loaded %s at version %d: %d files in %.2fs", storage.root, snap.version,
                      snap.files.num_rows, time.perf_counter() - started)
            return snap

    @classmethod
    def _from_segment(cls, storage: Storage, segment: LogSegment, paths_only: bool, verify: bool) -> "Snapshot":
        """Reconcile one segment; raises ``UntrustedLogFile`` naming a derived file that breaks the invariant."""
        root = storage.root
        cp_keys: tuple[str, ...] = ()
        if segment.checkpoint is not None:
            cp_keys = (segment.checkpoint.files[0].key,)
            cp = read_checkpoint(storage, segment.checkpoint, paths_only)
            problem = state_problem(cp.adds, cp.removes, root)
            if problem:
                raise UntrustedLogFile(cp_keys, f"the checkpoint is not a reconciled state: {problem}")
        else:
            cp = CheckpointData(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), None, None, {}, {})
        replay, commit_ts, mismatches = replay_segment(storage, segment, cp, verify)
        protocol, metadata = table_config(replay, segment.version, root)
        merged = _merged(cp.adds, cp.removes, replay, root)
        if isinstance(merged, str):
            suspects = tuple(c.file.key for c in segment.compactions) or cp_keys
            if suspects:
                raise UntrustedLogFile(suspects, f"replaying the log on top of it gives an impossible state at "
                                           f"version {segment.version}: {merged}")
            raise InconsistentStateError(
                f"the log of {root} is inconsistent at version {segment.version}: {merged}")
        return cls._of_replay(storage, segment, protocol, metadata, merged, replay, commit_ts, mismatches)

    @classmethod
    def _built_on(cls, earlier: "Snapshot", segment: LogSegment, verify: bool) -> "Snapshot | None":
        """The state of ``segment`` from an earlier version's kept state and the log files ``segment`` adds to its
        segment (see :func:`builds_on`); None where the new files make an impossible state (the whole read
        then says why, or which derived file it distrusts)."""
        storage, root, done = earlier.storage, earlier.storage.root, len(earlier.segment.replay)
        newer = segment.replay[done:]
        tail = LogSegment(segment.version, None, tuple(f for start, end, f in newer if start == end),
                          tuple(c for c in segment.compactions if c.start > earlier.version), newer,
                          tuple(c for c in segment.shadowed if c.start > earlier.version))
        base = CheckpointData(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), earlier.protocol.raw or
                              earlier.protocol.to_action(), earlier.metadata.to_action(), dict(earlier.txns),
                              {**earlier.domains, **earlier.domain_tombstones})
        replay, commit_ts, mismatches = replay_segment(storage, tail, base, verify)
        protocol = earlier.protocol if replay.protocol is base.protocol else None
        metadata = earlier.metadata if replay.metadata is base.metadata else None
        if protocol is None or metadata is None:
            protocol, metadata = table_config(replay, segment.version, root)
        merged = _merged(earlier.files, earlier.tombstones, replay, root)
        if isinstance(merged, str):
            log.debug("%s: the commits after version %d do not build on its kept state (%s); reading the log",
                      root, earlier.version, merged)
            return None
        return cls._of_replay(storage, segment, protocol, metadata, merged, replay, commit_ts, mismatches)

    @classmethod
    def _of_replay(cls, storage: Storage, segment: LogSegment, protocol: Protocol, metadata: Metadata,
                   merged: tuple[pa.Table, pa.Table], replay: Replay, commit_ts: int | None,
                   mismatches: list[dict[str, str]]) -> "Snapshot":
        domains = {d: v for d, v in replay.domains.items() if not v.get("removed")}
        domain_tombstones = {d: v for d, v in replay.domains.items() if v.get("removed")}
        snap = cls(storage, segment, protocol, metadata, merged[0], merged[1], replay.txns, domains,
                   domain_tombstones, commit_ts)
        snap.distrusted = mismatches
        return snap

    # -- convenience ---------------------------------------------------------------------
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
        return [_strip_nulls(plain_value(a)) for a in self.files.to_pylist()]

    def tombstone_actions(self) -> list[dict]:
        return [_strip_nulls(plain_value(a)) for a in self.tombstones.to_pylist()]


def _merged(adds: pa.Table, removes: pa.Table, replay: Replay, root: str) -> tuple[pa.Table, pa.Table] | str:
    """The live files and tombstones of a reconciled state (``adds``, ``removes``) after ``replay``'s newer
    actions, or why they would hold a path live twice. The base is reconciled and the replay's keys are taken out
    of it, so no file can be live and removed; only a new add can make a path live twice."""
    touched = set(replay.files)
    spellings = {a["path"] for _, a in replay.files.values()}
    new_adds = [a for kind, a in replay.files.values() if kind == "add"]
    new_removes = [a for kind, a in replay.files.values() if kind == "remove"]
    kept_adds = drop_keys(adds, touched, spellings, root)
    problem = added_problem(kept_adds, new_adds, root)
    if problem:
        return problem
    files = pa.concat_tables([
        kept_adds,
        pa.Table.from_struct_array(pa.array(new_adds, type=ADD)) if new_adds else ADD_SCHEMA.empty_table(),
    ])
    tombstones = pa.concat_tables([
        drop_keys(removes, touched, spellings, root),
        pa.Table.from_struct_array(pa.array(new_removes, type=REMOVE)) if new_removes else REMOVE_SCHEMA.empty_table(),
    ])
    return files, tombstones


def builds_on(segment: LogSegment, earlier: LogSegment) -> bool:
    """Whether ``segment`` is ``earlier``'s log files and newer ones only: the same checkpoint, the same files
    replayed up to ``earlier``'s version, and no compaction file to cross-check that starts at or before it.
    Log files do not change once written, so the state of ``segment`` is then ``earlier``'s state and the newer
    files' actions."""
    done = len(earlier.replay)
    return (earlier.version < segment.version and segment.checkpoint == earlier.checkpoint
            and segment.replay[:done] == earlier.replay
            and all(c.start > earlier.version or c in earlier.shadowed for c in segment.shadowed))


def _strip_nulls(d: dict) -> dict:
    return {k: (_strip_nulls(v) if isinstance(v, dict) and k == "deletionVector" else v)
            for k, v in d.items() if v is not None}


__all__ = ["Snapshot", "TableHeader", "UntrustedLogFile", "builds_on", "replay_segment", "table_config"]


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
