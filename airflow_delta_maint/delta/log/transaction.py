"""Transactions: commit a set of actions as the next table version, optimistically.

A :class:`Transaction` is bound to the snapshot it planned from (its read version). ``commit``
checks the feature gate, then writes ``read_version + 1`` with put-if-absent, so a log entry is
never overwritten. When another writer got there first, the winning commits are checked with
delta-spark's conflict rules for the transaction's isolation level; if none conflicts, the
transaction is rebased (feature gate and in-commit timestamp recomputed) and tried at the next
free version, a bounded number of times with exponential backoff and jitter.

Conflict rules against each winning commit:

- a ``protocol`` or ``metaData`` change conflicts (``ProtocolChanged``, ``MetadataChanged``);
- a file we remove that the winner removed too conflicts (``ConcurrentDeleteDelete``), which
  also catches a winner that replaced the file's deletion vector;
- a file we add whose path the winner removed conflicts (``ConcurrentDeleteRead``): a re-added
  live file (new statistics, ``dataChange=false``) would bring back a file the winner deleted or
  gave another deletion vector;
- a ``domainMetadata`` domain or ``txn`` appId we write that the winner wrote too conflicts
  (``ConcurrentDomainMetadata``, ``ConcurrentTransaction``);
- appends never conflict with a transaction whose file actions all have ``dataChange=false``
  (SnapshotIsolation) nor with a blind append; any other data-changing transaction treats a
  concurrent data-changing add as a conflict (``ConcurrentAppend``), as Serializable demands.

For jobs that commit many independent units (OPTIMIZE bins), :func:`conflicting_files` tells
which of a set of input files concurrent commits removed, so the job can drop the units that
read them and commit the rest from the same read version.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import airflow_delta_maint

from airflow_delta_maint.delta.errors import (CommitConflictError, CommitFailedError, InconsistentStateError, InvalidArgumentError,
                                              UnsupportedFeatureError)
from airflow_delta_maint.delta.log.listing import commit_key, list_log, read_commit
from airflow_delta_maint.delta.log.reconciliation import commit_problem
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.protocol.features import Operation, check_supported, table_features
from airflow_delta_maint.delta.log.winning_commits import WinningCommit, canonical_key, conflicting_files, winning_commits
from airflow_delta_maint.delta.protocol.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from airflow_delta_maint.delta.protocol.uniform_iceberg import check_no_iceberg_metadata
from airflow_delta_maint.delta.protocol.row_tracking import assign_fresh_ids, domain_action, row_tracking
from airflow_delta_maint.delta.storage.store import AlreadyExistsError, Storage
from airflow_delta_maint.delta.storage.write_once import put_once

log = logging.getLogger(__name__)

__all__ = [
    "ConflictError", "Transaction", "WinningCommit", "commit_actions", "conflicting_files",
    "default_engine_info", "ict_enabled", "winning_commits",
]

_ACTION_KINDS = ("add", "remove", "domainMetadata", "txn")
_BACKOFF_BASE_S = 0.02
_BACKOFF_MAX_S = 2.0


def default_engine_info() -> str:
    """The ``engineInfo`` written into every commit: ``airflow-delta-maint/<version>``."""
    return f"airflow-delta-maint/{airflow_delta_maint.__version__}"


def ict_enabled(snapshot: TableHeader) -> bool:
    """Whether commits to this table carry an ``inCommitTimestamp`` (feature present and enabled)."""
    _, writer = table_features(snapshot.protocol)
    return "inCommitTimestamp" in writer and snapshot.metadata.properties.in_commit_timestamps


class ConflictError(CommitConflictError):
    """A winning commit conflicts with the transaction.

    Attributes:
        kind: the conflict, named as delta-spark names its exceptions without the suffix
            (``ConcurrentDeleteDelete``, ``ConcurrentDeleteRead``, ``ConcurrentAppend``, ``ProtocolChanged``,
            ``MetadataChanged``, ``ConcurrentDomainMetadata``, ``ConcurrentTransaction``).
        winning_version: the version of the commit that conflicts.
        paths: the file paths (or domains / appIds) both commits touched.
    """

    def __init__(self, kind: str, winning_version: int, paths: Iterable[str] = (), detail: str = ""):
        self.kind = kind
        self.winning_version = winning_version
        self.paths = frozenset(paths)
        shown = sorted(self.paths)
        listed = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
        message = f"{kind}: the concurrent commit at version {winning_version} {detail}"
        if listed:
            message += f" ({listed})"
        super().__init__(message)


class Transaction:
    """Actions to commit as one new version of the table ``snapshot`` was read from.

    Args:
        snapshot: the snapshot the actions were planned from; its version is the read version.
        operation: the commitInfo operation (``OPTIMIZE``, ``VACUUM END``, ...).
        parameters: operation parameters; written as strings (non-strings JSON-encoded).
        job: the feature-gate job checked before every attempt (see ``features.JOBS``).
        max_retries: how many lost races to rebase over before giving up.
        engine_info: the commitInfo ``engineInfo`` (default ``airflow-delta-maint/<version>``).

    Attributes:
        read_version: the snapshot version the transaction is based on.
        txn_id: the uuid4 written as commitInfo ``txnId``.
        attempts: put attempts made by the last ``commit`` call.
    """

    def __init__(self, snapshot: TableHeader, operation: str, parameters: dict | None = None, *,
                 job: Operation | str = Operation.OPTIMIZE, max_retries: int = 15, engine_info: str | None = None):
        if max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be >= 0, got {max_retries}")
        self.snapshot = snapshot
        self.storage: Storage = snapshot.storage
        self.read_version: int = snapshot.version
        self.operation = operation
        self.parameters = dict(parameters or {})
        self.job = job
        self.max_retries = max_retries
        self.engine_info = engine_info or default_engine_info()
        self.txn_id = str(uuid.uuid4())
        self.attempts = 0
        #: commitInfo ``tags`` (e.g. ``delta.rowTracking.preserved``)
        self.tags: dict[str, str] = {}
        self._actions: list[dict] = []
        self._committed: int | None = None
        self._row_tracking = row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains)
        #: the row-id high-water mark the committed version set (None when it assigned no ids)
        self.row_id_high_water_mark: int | None = None

    # -- building --------------------------------------------------------------------------
    def add_actions(self, actions: Iterable[dict]) -> None:
        """Queue raw Delta actions: ``{"add": ...}``, ``{"remove": ...}``, ``{"domainMetadata": ...}``, ``{"txn": ...}``.

        Raises:
            InvalidArgumentError: an action of another kind, or one without its required keys.
        """
        if self._committed is not None:
            raise InvalidArgumentError("the transaction is already committed")
        batch = []
        for action in actions:
            if not isinstance(action, dict) or len(action) != 1 or next(iter(action)) not in _ACTION_KINDS:
                raise InvalidArgumentError(
                    f"a transaction takes single add, remove, domainMetadata or txn actions, got {action!r:.200}")
            kind, body = next(iter(action.items()))
            required = {"add": ("path", "size", "modificationTime", "dataChange"), "remove": ("path", "dataChange"),
                        "domainMetadata": ("domain", "configuration", "removed"),
                        "txn": ("appId", "version")}[kind]
            missing = [k for k in required if not isinstance(body, dict) or k not in body]
            if missing:
                raise InvalidArgumentError(f"{kind} action is missing {', '.join(missing)}: {body!r:.200}")
            if kind in ("add", "remove"):
                action = {kind: _normalise_maps(body)}
            batch.append(action)
        self._actions.extend(batch)

    @property
    def actions(self) -> list[dict]:
        """The queued actions (a copy)."""
        return list(self._actions)

    # -- properties of the action set ----------------------------------------------------------
    def _file_actions(self) -> Iterator[tuple[str, dict]]:
        for action in self._actions:
            kind = next(iter(action))
            if kind in ("add", "remove"):
                yield kind, action[kind]

    @property
    def data_change(self) -> bool:
        """Whether any file action changes data (``dataChange`` true)."""
        return any(bool(body.get("dataChange")) for _, body in self._file_actions())

    @property
    def is_blind_append(self) -> bool:
        """Only data-changing adds and nothing removed: the commit read nothing (txn/domain actions aside)."""
        files = list(self._file_actions())
        return bool(files) and all(k == "add" and body.get("dataChange") for k, body in files)

    @property
    def isolation_level(self) -> str:
        """``SnapshotIsolation`` when no file action changes data, else ``Serializable``."""
        return "Serializable" if self.data_change else "SnapshotIsolation"

    # -- checks ------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        check_supported(self.snapshot.protocol, self.job, self.snapshot.metadata)
        check_no_iceberg_metadata(self.storage, self.snapshot.metadata, self.job)
        _, writer = table_features(self.snapshot.protocol)
        kinds = {next(iter(a)) for a in self._actions}
        if self._assigns_row_ids:
            kinds.add("domainMetadata")  # the row-id high-water mark
        if "domainMetadata" in kinds and "domainMetadata" not in writer:
            raise UnsupportedFeatureError(
                f"cannot run {self.job} on this table: writing domainMetadata needs the writer feature "
                "'domainMetadata', which the table does not have")
        if any(k == "add" and body.get("deletionVector") for k, body in self._file_actions()) \
                and "deletionVectors" not in writer:
            raise UnsupportedFeatureError(
                f"cannot run {self.job} on this table: an add action carries a deletion vector but the "
                "table does not have the writer feature 'deletionVectors'")
        if "appendOnly" in writer and self.snapshot.metadata.properties.append_only:
            if any(k == "remove" and body.get("dataChange") for k, body in self._file_actions()):
                raise UnsupportedFeatureError(
                    f"cannot run {self.job} on this table: it is append-only (delta.appendOnly=true) and "
                    "the commit removes data (a remove with dataChange=true)")

    def _check_winner(self, winner: WinningCommit) -> None:
        v = winner.version
        if winner.protocol_changed:
            raise ConflictError("ProtocolChanged", v, detail="changed the table protocol")
        if winner.metadata_changed:
            raise ConflictError("MetadataChanged", v, detail="changed the table metadata")
        ours_removed = {canonical_key(self.storage, body["path"]) for k, body in self._file_actions() if k == "remove"}
        both = ours_removed & winner.removed_paths
        if both:
            raise ConflictError("ConcurrentDeleteDelete", v, both, detail="removed files this commit removes")
        ours_added = {canonical_key(self.storage, body["path"]) for k, body in self._file_actions() if k == "add"}
        readded = ours_added & winner.removed_paths
        if readded:
            raise ConflictError("ConcurrentDeleteRead", v, readded, detail="removed files this commit adds back")
        if self.data_change and not self.is_blind_append and winner.data_change_adds:
            raise ConflictError("ConcurrentAppend", v,
                                detail=f"added {winner.data_change_adds} data files this commit did not read")
        domains = {a["domainMetadata"]["domain"] for a in self._actions if "domainMetadata" in a}
        if self._assigns_row_ids:
            # fresh row ids are assigned per attempt above the newest mark: no conflict
            domains.discard(ROW_TRACKING_DOMAIN)
        if domains & winner.domains:
            raise ConflictError("ConcurrentDomainMetadata", v, domains & winner.domains,
                                detail="wrote domain metadata this commit writes")
        app_ids = {a["txn"]["appId"] for a in self._actions if "txn" in a}
        if app_ids & winner.app_ids:
            raise ConflictError("ConcurrentTransaction", v, app_ids & winner.app_ids,
                                detail="wrote transaction identifiers this commit writes")

    # -- row tracking ------------------------------------------------------------------------
    @property
    def _assigns_row_ids(self) -> bool:
        """New adds get fresh row ids and commit versions (row tracking supported, not suspended)."""
        return self._row_tracking.assigns_fresh_ids and any(
            k == "add" and body.get("baseRowId") is None for k, body in self._file_actions())

    def _attempt_actions(self, version: int, high_water: int) -> tuple[list[dict], int | None]:
        """The actions as written at ``version``: new adds numbered above ``high_water`` (the
        newest mark any commit up to ``version - 1`` set) and the advanced mark recorded."""
        if not self._assigns_row_ids:
            return self._actions, None
        fresh = [a["add"] for a in self._actions if "add" in a and a["add"].get("baseRowId") is None]
        numbered, mark = assign_fresh_ids(fresh, high_water, version)
        it = iter(numbered)
        out = [{"add": next(it)} if "add" in a and a["add"].get("baseRowId") is None else a for a in self._actions]
        out.append(domain_action(mark))
        return out, mark

    # -- writing -----------------------------------------------------------------------------
    def _commit_info(self, timestamp: int, ict: int | None, metrics: Mapping[str, Any] | None) -> dict:
        info: dict[str, Any] = {}
        if ict is not None:
            info["inCommitTimestamp"] = ict
        info["timestamp"] = timestamp
        info["operation"] = self.operation
        info["operationParameters"] = {str(k): _param(v) for k, v in self.parameters.items()}
        info["readVersion"] = self.read_version
        info["isolationLevel"] = self.isolation_level
        # a commit without file actions (VACUUM START/END) read no file: delta-spark calls it a blind append
        info["isBlindAppend"] = self.is_blind_append or not any(True for _ in self._file_actions())
        info["operationMetrics"] = {str(k): _metric(v) for k, v in (metrics or {}).items() if v is not None}
        if self.tags:
            info["tags"] = dict(self.tags)
        info["engineInfo"] = self.engine_info
        info["txnId"] = self.txn_id
        return info

    def _previous_ict(self, version: int, known: dict[int, int | None]) -> int | None:
        if version < 0:
            return None
        if version not in known:
            ts = None
            for action in read_commit(self.storage, version):
                if action.get("commitInfo") is not None:
                    ts = action["commitInfo"].get("inCommitTimestamp")
                    break
            known[version] = int(ts) if ts is not None else None
        return known[version]

    def _encode(self, info: dict, actions: list[dict]) -> bytes:
        lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
        lines.extend(json.dumps(a, separators=(",", ":")) for a in actions)
        return ("\n".join(lines) + "\n").encode("utf-8")

    def commit(self, metrics: Mapping[str, Any] | None = None, after_version: int | None = None) -> int:
        """Write the queued actions as the next version; return that version.

        Args:
            metrics: ``operationMetrics`` (delta-spark names); every value is written as a string.
            after_version: a version known to exist after the read version (say this job's own
                previous commit): the commits up to it are checked for conflicts first and the
                first attempt goes to the version after it, instead of losing a race to it.

        Raises:
            UnsupportedFeatureError: the feature gate refuses the table for this job.
            InconsistentStateError: the actions are not a valid version on top of the read
                snapshot (a file added twice, a removed file that is not live, a path left
                live twice); nothing is written.
            ConflictError: (a ``CommitConflictError``) a concurrent commit conflicts; names the
                conflict and the winning version.
            CommitFailedError: every retry was lost to non-conflicting commits.
        """
        if self._committed is not None:
            return self._committed
        self._check_writable()
        self._check_consistent()
        use_ict = ict_enabled(self.snapshot)
        seen = _WinnersSeen(high_water=self._row_tracking.high_water_mark)
        version = self.read_version + 1
        if after_version is not None and after_version > self.read_version:
            for winner in winning_commits(self.storage, self.read_version, after_version):
                self._check_winner(winner)
                seen.note(winner)
            version = after_version + 1
        self.attempts = 0
        lost = 0
        while True:
            if self._put_attempt(version, metrics, use_ict, seen):
                return version
            # Lost the race for ``version``: check it and every later commit, then rebase.
            lost += 1
            own, latest = self._check_race_lost(version, seen)
            if own is not None:
                return own
            if lost > self.max_retries:
                raise CommitFailedError(
                    f"could not commit {self.operation} after {self.attempts} attempts: concurrent writers "
                    f"kept winning (last winning version {latest}, read version {self.read_version})")
            self._check_writable()
            version = latest + 1
            delay = min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * (2 ** (lost - 1)))
            time.sleep(delay * random.uniform(0.5, 1.5))
            log.info("rebased %s over versions up to %d; retrying at version %d", self.operation, latest, version)

    def _check_consistent(self) -> None:
        """Refuse (``InconsistentStateError``) actions that are not a valid version on top of the
        read snapshot: a file added twice, a removed file that is not live, a path left live twice."""
        # the live files the commit's file actions touch, from the state's scan (none when it has none)
        live = (table for _kind, table in self.snapshot.scan([])) if any(self._file_actions()) else ()
        problem = commit_problem(live, self.read_version, self._actions, self.storage.root)
        if problem:
            raise InconsistentStateError(f"refusing to commit {self.operation} to {self.storage.root}: {problem}")

    def _put_attempt(self, version: int, metrics: Mapping[str, Any] | None, use_ict: bool,
                     seen: _WinnersSeen) -> bool:
        """Try to write the commit at ``version`` with put-if-absent; False when another writer
        holds that version already."""
        now = int(time.time() * 1000)
        ict = None
        if use_ict:
            previous = self._previous_ict(version - 1, seen.icts)
            ict = max(now, previous + 1) if previous is not None else now
        info = self._commit_info(ict if ict is not None else now, ict, metrics)
        actions, mark = self._attempt_actions(version, seen.high_water)
        self.attempts += 1
        try:
            put_once(self.storage, commit_key(version), self._encode(info, actions))
        except AlreadyExistsError:
            return False
        self._committed = version
        self.row_id_high_water_mark = mark
        log.info("committed %s to %s at version %d (read version %d, %d attempts)", self.operation,
                 self.storage.root, version, self.read_version, self.attempts)
        return True

    def _check_race_lost(self, version: int, seen: _WinnersSeen) -> tuple[int | None, int]:
        """Check the commit that took ``version`` and every later one against this transaction.

        Returns:
            ``(own, latest)``: the version our own earlier attempt landed at, if one did (the
            store reported a failure after writing), else None; and the latest winning version.

        Raises:
            ConflictError: a winner conflicts.
        """
        latest = version
        listed = [v for v in list_log(self.storage, version).commits if v >= version]
        for winner in winning_commits(self.storage, version - 1, max([version, *listed])):
            if winner.commit_info.get("txnId") == self.txn_id:
                self._committed = winner.version
                self.row_id_high_water_mark = winner.row_id_high_water_mark
                return winner.version, latest
            self._check_winner(winner)
            seen.note(winner)
            latest = max(latest, winner.version)
        return None, latest


@dataclass
class _WinnersSeen:
    """What the winning commits checked so far tell the next attempt: their in-commit timestamps
    (by version; a version read for its timestamp alone is cached here too) and the newest
    row-id high-water mark."""

    high_water: int
    icts: dict[int, int | None] = field(default_factory=dict)

    def note(self, winner: WinningCommit) -> None:
        """Take a winner's in-commit timestamp and row-id high-water mark into account."""
        if winner.in_commit_timestamp is not None:
            self.icts[winner.version] = winner.in_commit_timestamp
        if winner.row_id_high_water_mark is not None:
            self.high_water = max(self.high_water, winner.row_id_high_water_mark)


def _normalise_maps(body: dict) -> dict:
    """Map fields as JSON objects: Arrow hands maps back as lists of pairs, and an empty one as []."""
    out = dict(body)
    for name in ("partitionValues", "tags"):
        value = out.get(name)
        if isinstance(value, list):
            out[name] = {k: v for k, v in value}
    if out.get("partitionValues") is None and ("partitionValues" in out or "modificationTime" in out):
        out["partitionValues"] = {}  # required on add; an empty map for an unpartitioned table
    return out


def _param(value: Any) -> Any:
    """An operation parameter as delta-spark writes it: booleans and numbers as JSON values, strings as
    they are, lists and objects as their JSON text (``"zOrderBy": "[\"a\"]"``)."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return json.dumps(value, separators=(",", ":"))


def _metric(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def commit_actions(snapshot: TableHeader, operation: str, actions: Iterable[dict], parameters: dict | None = None,
                   metrics: Mapping[str, Any] | None = None, job: Operation | str = Operation.OPTIMIZE) -> int:
    """Commit ``actions`` on top of ``snapshot`` in one transaction; return the committed version."""
    txn = Transaction(snapshot, operation, parameters, job=job)
    txn.add_actions(actions)
    return txn.commit(metrics)
