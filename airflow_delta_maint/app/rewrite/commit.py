"""OPTIMIZE's commits: each group of rewritten bins committed on its own, rebased onto the deletion
vectors concurrent writers committed meanwhile instead of dropped.

A :class:`BinCommitter` belongs to one run. Its groups all come from one plan (one read version).
Before each attempt it brings the group up to the newest version it knows: for every input a later
commit touched (see ``delta/plans/dv_rebase.py``), a new deletion vector that is a superset of the one
read is carried onto the outputs (a deletion vector on the output file for exactly the rows it
adds); an input removed outright, or a vector that is not a superset, drops the bin, with the
reason kept for the metrics. The commit then goes on top of that version; a writer that wins the
race for it with another deletion vector on an input is answered by loading the newer version and
rebasing again, a bounded number of times.

Whatever the failure, files written for bins that are not committed (outputs and the deletion
vectors written for them) are deleted before the error goes on, unless the commit may have
landed. :data:`BEFORE_COMMIT` and :data:`AFTER_REWRITE` are seams for tests: callables run before
every commit attempt and after each unit of bins is rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from airflow_delta_maint.delta.protocol.features import Operation
from airflow_delta_maint.delta.errors import CommitFailedError
from airflow_delta_maint.delta.log.listing import list_log, read_commit
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.transaction import ConflictError, Transaction, winning_commits
from airflow_delta_maint.delta.plans.auto_compaction import partition_key, partition_label
from airflow_delta_maint.delta.plans.dv_rebase import InputChange, input_changes, with_deletion_vector
from airflow_delta_maint.delta.plans.optimize import Bin, OptimizePlan, size_percentiles
from airflow_delta_maint.delta.protocol.deletion_vectors import dv_file_key, write_deletion_vector
from airflow_delta_maint.delta.protocol.row_tracking import PRESERVED_TAG, row_tracking
from airflow_delta_maint.delta.storage.store import Storage

from airflow_delta_maint.app.rewrite.rebase import BinOutputs, Carry, carry_deletions

log = logging.getLogger("delta_maint.optimize")

#: commit attempts of one group, each after loading the version that beat the previous one
MAX_ATTEMPTS = 25


@dataclass
class CommitAttempt:
    """What a :data:`BEFORE_COMMIT` hook is told about the attempt about to be made."""

    storage: Storage
    base_version: int
    bins: list[Bin]
    attempt: int


#: called before every commit attempt (a test's writer commits here, between our rewrite and commit)
BEFORE_COMMIT: list[Callable[[CommitAttempt], None]] = []
#: called with the bins of each unit as soon as it is rewritten, before the run decides to commit it
AFTER_REWRITE: list[Callable[[list[Bin]], None]] = []


@dataclass
class GroupResult:
    """What committing one group of bins did.

    Attributes:
        version: the version committed (None when every bin was dropped).
        committed: indexes (into the group) of the bins committed.
        dropped: index -> why the bin was dropped.
        rebased: indexes of committed bins whose inputs had changed since the read version.
        carried: deletion vectors carried onto committed outputs.
        adds: index -> the add actions committed for that bin.
        removed: index -> the remove actions committed for that bin.
    """

    version: int | None
    committed: list[int] = field(default_factory=list)
    dropped: dict[int, str] = field(default_factory=dict)
    rebased: list[int] = field(default_factory=list)
    carried: int = 0
    adds: dict[int, list[dict]] = field(default_factory=dict)
    removed: dict[int, list[dict]] = field(default_factory=dict)


def remove_action(add: dict, now: int) -> dict:
    """The ``remove`` of a live file, carrying its deletion vector and row-tracking fields."""
    rm = {"path": add["path"], "deletionTimestamp": now, "dataChange": False, "extendedFileMetadata": True,
          "partitionValues": add.get("partitionValues") or {}, "size": add["size"]}
    for key in ("stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(key) is not None:
            rm[key] = add[key]
    return {"remove": rm}


def delete_outputs(storage: Storage, paths: list[str]) -> None:
    """Remove files this run wrote but will never commit (best effort)."""
    keys = [k for k in (storage.key_for_path(p) for p in paths) if k]
    if not keys:
        return
    try:
        storage.delete_many(keys)
    except Exception as exc:  # orphans are harmless: VACUUM removes them after the retention period
        log.warning("could not delete %d uncommitted files: %s", len(keys), exc)


_UNKNOWN = -1


def landed_version(storage: Storage, from_version: int, txn_ids: list[str]) -> int | None:
    """The version of a commit after ``from_version`` carrying one of ``txn_ids``, None if none,
    ``_UNKNOWN`` when the log cannot be read."""
    if not txn_ids:
        return None
    try:
        for winner in winning_commits(storage, from_version):
            if winner.commit_info.get("txnId") in txn_ids:
                return winner.version
    except Exception as exc:  # cannot tell: keep the files (VACUUM removes orphans later)
        log.warning("could not check whether the failed commit landed: %s", exc)
        return _UNKNOWN
    return None


@dataclass
class _BinState:
    """One bin of the group being committed."""

    bin: Bin
    outputs: BinOutputs
    #: the inputs as live at the version the bin was last brought up to
    current: list[dict]
    carry: Carry = field(default_factory=Carry)
    #: what the changes looked like when ``carry`` was computed
    signature: tuple = ()
    #: output index -> (digest of the rows, descriptor) of the deletion vector written for it
    dvs: dict[int, tuple[str, dict]] = field(default_factory=dict)


class BinCommitter:
    """Commits the groups of one OPTIMIZE run (see the module docstring)."""

    def __init__(self, snapshot: Snapshot, plan: OptimizePlan, parameters: dict[str, Any],
                 load_base: Callable[[int], Snapshot] | None = None):
        self.plan_snapshot = snapshot
        #: the snapshot at a version to rebase onto: the whole state, or (a large table planned in
        #: rounds) the live files among the plan's inputs
        self.load_base = load_base or (lambda version: Snapshot.load(self.storage, version))
        self.plan = plan
        self.parameters = parameters
        self.storage = snapshot.storage
        self.row_tracking = row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains)
        #: the snapshot commits are built on; advanced when a writer's commit must be rebased over
        self.base = snapshot
        #: this run's newest commit above ``base`` (the next goes on top of it)
        self.after: int | None = None
        self._actions: dict[int, list[dict]] = {}

    # -- the log since the read version -----------------------------------------------------------
    def _commit(self, version: int) -> list[dict]:
        if version not in self._actions:
            self._actions[version] = read_commit(self.storage, version)
        return self._actions[version]

    def _changes(self, until: int, paths: list[str]) -> dict[str, InputChange]:
        scan = input_changes(((v, self._commit(v)) for v in range(self.plan_snapshot.version + 1, until + 1)),
                             paths, self.storage.root)
        if scan.schema_change is not None:
            version, what = scan.schema_change
            kind = "ProtocolChanged" if what == "protocol" else "MetadataChanged"
            raise ConflictError(kind, version, detail=f"changed the table {what}")
        return scan.changes

    def log_moved(self) -> bool:
        """Whether another writer committed since this run's newest known version."""
        known = max(self.base.version, self.after if self.after is not None else -1)
        try:
            return self._latest(known) > known
        except Exception as exc:  # only a hint: commit now
            log.debug("could not list the log: %s", exc)
            return True

    def _latest(self, above: int) -> int:
        listed = [v for v in list_log(self.storage, above + 1).commits if v > above]
        return max(listed, default=above)

    # -- one group ---------------------------------------------------------------------------------
    def wait_for_writer(self, seconds: float, poll_s: float = 0.05) -> int | None:
        """Wait up to ``seconds`` for a commit by another writer; return its version, or None when
        none came. Right after a writer's commit its next statement has usually not started yet, so
        a commit then fails none of its statements."""
        known = max(self.base.version, self.after if self.after is not None else -1)
        deadline = time.monotonic() + seconds
        while True:
            latest = self._latest(known)
            if latest > known:
                return latest
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)

    def commit(self, bins: list[Bin], outputs: list[BinOutputs], wait_for_writer_s: float = 0) -> GroupResult:
        """Commit the group's bins (rebased or dropped as the log requires); see the module docstring.

        With ``wait_for_writer_s``, the commit waits up to that long for another writer's commit
        and goes in right after it (:meth:`wait_for_writer`)."""
        states = {i: _BinState(b, o, list(b.files)) for i, (b, o) in enumerate(zip(bins, outputs))}
        result = GroupResult(None)
        txn_ids: list[str] = []
        synced = self.plan_snapshot.version
        base_at_start = self.after if self.after is not None else self.base.version
        superseded: list[str] = []  # deletion vector files replaced by a later computation
        try:
            if wait_for_writer_s > 0:
                self._rebase_after_writer(wait_for_writer_s, bins)
            for attempt in range(1, MAX_ATTEMPTS + 1):
                if self.base.version > synced:
                    self._bring_up(states, result, superseded)
                    synced = self.base.version
                if not states:  # every bin dropped: nothing of this group lands
                    delete_outputs(self.storage, superseded)
                    return result
                if self._try_commit(states, result, superseded, attempt, txn_ids):
                    states.clear()
                    return result
            raise CommitFailedError(f"could not commit OPTIMIZE to {self.storage.root} after {MAX_ATTEMPTS} attempts: "
                                    "concurrent writers kept changing its input files")
        except BaseException:
            if self._landed_despite_failure(states, result, superseded, base_at_start, txn_ids):
                return result
            raise
        finally:
            if superseded and result.version is not None:
                delete_outputs(self.storage, superseded)

    def _rebase_after_writer(self, seconds: float, bins: list[Bin]) -> None:
        """Wait up to ``seconds`` for another writer's commit; when it changed the group's inputs,
        rebase onto it now rather than after a lost attempt."""
        seen = self.wait_for_writer(seconds)
        paths = [f["path"] for b in bins for f in b.files]
        if seen is not None and self._changes(seen, paths):
            self.base = self.load_base(seen)
            self.after = None

    def _try_commit(self, states: dict[int, _BinState], result: GroupResult, superseded: list[str], attempt: int,
                    txn_ids: list[str]) -> bool:
        """One attempt to commit the group's bins on top of ``self.base``; True when it committed (and
        is recorded in ``result``), False when a concurrent commit deleted from or removed an input
        (the base then moved to the latest version, to bring the bins up to it).

        Raises:
            ConflictError: any other conflict (a protocol or metadata change fails the run).
        """
        for hook in list(BEFORE_COMMIT):
            hook(CommitAttempt(self.storage, self.base.version, [s.bin for s in states.values()], attempt))
        now = int(time.time() * 1000)
        removes = {i: [remove_action(f, now) for f in s.current] for i, s in states.items()}
        adds = {i: self._final_adds(s, superseded) for i, s in states.items()}
        txn = Transaction(self.base, "OPTIMIZE", self.parameters, job=Operation.OPTIMIZE)
        if self.row_tracking.materializes:
            txn.tags[PRESERVED_TAG] = "true"  # every copied row keeps its stable id and commit version
        txn_ids.append(txn.txn_id)
        txn.add_actions([r for i in states for r in removes[i]] + [{"add": a} for i in states for a in adds[i]])
        after = self.after if self.after is not None and self.after > self.base.version else None
        try:
            version = txn.commit(self._metrics(states, removes, adds, result), after_version=after)
        except ConflictError as exc:
            if exc.kind != "ConcurrentDeleteDelete":
                raise
            latest = self._latest(exc.winning_version)
            self._changes(latest, [])  # a protocol or metadata change in between fails the run
            log.info("OPTIMIZE %s: version %d changed inputs of this commit; rebasing onto version %d",
                     self.storage.root, exc.winning_version, latest)
            self.base = self.load_base(latest)
            self.after = None
            return False
        self.after = version
        result.version = version
        for i, s in states.items():
            result.committed.append(i)
            result.adds[i] = adds[i]
            result.removed[i] = removes[i]
            if s.carry.changed_inputs:
                result.rebased.append(i)
            result.carried += sum(1 for a in adds[i] if a.get("deletionVector"))
            dropped_outputs = {a["path"] for a in s.outputs.adds} - {a["path"] for a in adds[i]}
            delete_outputs(self.storage, sorted(dropped_outputs))  # every row of them deleted meanwhile
        return True

    def _landed_despite_failure(self, states: dict[int, _BinState], result: GroupResult, superseded: list[str],
                                base_at_start: int, txn_ids: list[str]) -> bool:
        """After a failure: True when one of the group's attempts landed all the same (the store
        failed after writing; ``result`` then names that version and the commit's files stay).
        Otherwise the files the group wrote are deleted, unless the log cannot tell whether an
        attempt landed (VACUUM removes the orphans then), and False is returned."""
        landed = landed_version(self.storage, base_at_start, txn_ids)
        if landed == _UNKNOWN:  # cannot tell whether it landed: keep the files (VACUUM removes orphans)
            return False
        if landed is not None:  # the store failed after writing: the commit stands, keep its files
            log.warning("OPTIMIZE %s: the commit reported a failure but landed as version %d",
                        self.storage.root, landed)
            result.version = landed
            self.after = landed
            result.committed = sorted(states)
            return True
        paths = [a["path"] for s in states.values() for a in s.outputs.adds]
        log.warning("OPTIMIZE %s: the commit failed; deleting the %d files this group wrote",
                    self.storage.root, len(paths))
        delete_outputs(self.storage, paths + [p for s in states.values() for p in self._dv_paths(s)] + superseded)
        return False

    def _bring_up(self, states: dict[int, _BinState], result: GroupResult, superseded: list[str]) -> None:
        """Rebase every bin of the group onto ``self.base``: carry new deletions, or drop the bin."""
        paths = [f["path"] for s in states.values() for f in s.bin.files]
        changes = self._changes(self.base.version, paths)
        for i in list(states):
            s = states[i]
            mine = {f["path"]: changes[f["path"]] for f in s.bin.files if f["path"] in changes}
            signature = tuple(sorted((p, c.kind, c.version, c.dv_id) for p, c in mine.items()))
            if signature == s.signature:
                continue
            carry = carry_deletions(self.storage, self.plan.layout, self.row_tracking, s.bin.files, s.outputs, mine)
            if isinstance(carry, str):
                label = partition_label(partition_key(s.bin.partition_values))
                log.warning("OPTIMIZE %s: dropping a bin of %d files in %s: %s", self.storage.root,
                            len(s.bin.files), label, carry)
                result.dropped[i] = carry
                delete_outputs(self.storage, [a["path"] for a in s.outputs.adds] + self._dv_paths(s))
                del states[i]
                continue
            s.signature = signature
            s.carry = carry
            s.current = [mine[f["path"]].add if f["path"] in mine else f for f in s.bin.files]  # type: ignore[misc]
            if carry.changed_inputs:
                log.info("OPTIMIZE %s: carrying %d concurrently deleted rows of %d inputs onto %d outputs",
                         self.storage.root, sum(len(r) for r in carry.rows.values()), carry.changed_inputs,
                         len(carry.rows))

    def _dv_paths(self, s: _BinState) -> list[str]:
        return [k for k in (dv_file_key(self.storage, d) for _, d in s.dvs.values()) if k]

    def _final_adds(self, s: _BinState, superseded: list[str]) -> list[dict]:
        """The bin's outputs as committed: each with the deletion vector of the rows carried onto it
        (written once per distinct set of rows); an output whose every row is deleted is left out."""
        out = []
        for j, add in enumerate(s.outputs.adds):
            rows = s.carry.rows.get(j)
            if rows is None or not rows.size:
                if j in s.dvs:
                    superseded.extend(k for k in [dv_file_key(self.storage, s.dvs.pop(j)[1])] if k)
                out.append(add)
                continue
            if rows.size >= _physical_rows(add):  # every row deleted meanwhile: the file goes uncommitted
                if j in s.dvs:
                    superseded.extend(k for k in [dv_file_key(self.storage, s.dvs.pop(j)[1])] if k)
                continue
            digest = hashlib.sha256(np.asarray(rows, dtype="<u8").tobytes()).hexdigest()
            if j not in s.dvs or s.dvs[j][0] != digest:
                if j in s.dvs:
                    superseded.extend(k for k in [dv_file_key(self.storage, s.dvs[j][1])] if k)
                s.dvs[j] = (digest, write_deletion_vector(self.storage, rows))
            out.append(with_deletion_vector(add, s.dvs[j][1]))
        return out

    def _metrics(self, states: dict[int, _BinState], removes: dict[int, list[dict]], adds: dict[int, list[dict]],
                 result: GroupResult) -> dict[str, Any]:
        rm = [r["remove"] for i in states for r in removes[i]]
        ad = [a for i in states for a in adds[i]]
        sizes = [a["size"] for a in ad]
        return {
            "numRemovedFiles": len(rm), "numAddedFiles": len(ad),
            "numRemovedBytes": sum(r["size"] for r in rm), "numAddedBytes": sum(sizes),
            "numDeletionVectorsRemoved": sum(1 for r in rm if r.get("deletionVector")), "numBatches": 1,
            "totalConsideredFiles": self.plan.num_table_files,
            "totalFilesSkipped": self.plan.num_table_files - len(rm),
            "numBinsRebased": sum(1 for s in states.values() if s.carry.changed_inputs),
            "numDeletionVectorsCarried": sum(1 for a in ad if a.get("deletionVector")),
            "numBinsDroppedByConflicts": len(result.dropped),
            **size_percentiles(sizes),
        }


def _physical_rows(add: dict) -> int:
    return int(json.loads(add.get("stats") or "{}").get("numRecords", -1))
