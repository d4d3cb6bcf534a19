"""The auto-compaction policy: which partitions deserve an OPTIMIZE, decided from the log alone.

Modeled on delta-spark's auto compaction. The partitions considered are those that received
data files (``add`` with ``dataChange=true``) since the newest OPTIMIZE commit in the log, or
every partition when there is none (or when the commits after it are gone, or on request). A
considered partition is chosen when it has at least ``min_num_files`` files smaller than
``min_file_size``, or a file whose deletion vector deletes more than ``max_deleted_rows_ratio``
of its rows. At most ``max_partitions`` are chosen, the worst first (most small files, then
most small-file bytes). A liquid-clustered or unpartitioned table is one partition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.listing import list_log, read_commit
from airflow_delta_maint.delta.log.table_header import TableHeader

__all__ = ["AutoDecision", "PartitionCounts", "DEFAULT_MAX_DELETED_ROWS_RATIO", "DEFAULT_MAX_PARTITIONS", "DEFAULT_MIN_NUM_FILES",
           "PartitionKey", "choose_partitions", "partition_key", "partition_label", "touched_partitions"]

DEFAULT_MIN_NUM_FILES = 50
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05
DEFAULT_MAX_PARTITIONS = 128

PartitionKey = tuple[tuple[str, Any], ...]


def partition_key(values: Any) -> PartitionKey:
    """A hashable, ordered key of a file's partition values (a dict or Arrow's list of pairs)."""
    items = values.items() if isinstance(values, dict) else (values or [])
    return tuple(sorted((str(k), v) for k, v in items))


def partition_label(key: PartitionKey) -> str:
    return "/".join(f"{k}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for k, v in key) or "<table>"


MAX_COMMITS_SCANNED = 10_000


def _complete(info: dict) -> bool:
    """Whether an OPTIMIZE commit left no eligible partition behind: no partition predicate and
    no partition deferred (to another run's reservation or past ``max_partitions``)."""
    params = info.get("operationParameters") or {}
    predicate = params.get("predicate")
    deferred = params.get("partitionsDeferred")
    return predicate in (None, "", "[]", []) and deferred in (None, "0", 0)


def touched_partitions(snapshot: TableHeader, max_commits: int = MAX_COMMITS_SCANNED
                       ) -> tuple[set[PartitionKey] | None, int | None]:
    """Partitions that received data files since an OPTIMIZE last covered them, and the version
    of the newest complete OPTIMIZE (one with no predicate and nothing deferred) the scan stopped
    at. Commits are read newest first: an OPTIMIZE that covered only some partitions (a predicate,
    partitions deferred) settles the partitions it rewrote, and the scan goes on.

    ``(None, None)`` means every partition: no complete OPTIMIZE in the log, some commit after it
    no longer there to read, or none within the newest ``max_commits`` commits.
    """
    storage = snapshot.storage
    lowest = max(0, snapshot.version - max_commits + 1)
    listed = set(list_log(storage, lowest).commits)
    touched: set[PartitionKey] = set()
    settled: set[PartitionKey] = set()
    for version in range(snapshot.version, lowest - 1, -1):
        if version not in listed:
            return None, None
        actions = read_commit(storage, version)
        info: dict = next((a["commitInfo"] for a in actions if a.get("commitInfo") is not None), {}) or {}
        if str(info.get("operation", "")).upper() == "OPTIMIZE":
            if _complete(info):
                return touched, version
            settled.update(partition_key(a["remove"].get("partitionValues")) for a in actions
                           if a.get("remove") is not None)
            continue
        for a in actions:
            add = a.get("add")
            if add is not None and add.get("dataChange", True):
                key = partition_key(add.get("partitionValues"))
                if key not in settled:
                    touched.add(key)
    return None, None


@dataclass
class PartitionCounts:
    """What the policy weighs of one partition: its live files, those smaller than the minimum
    size and their bytes, and those whose deletion vector is past the deleted-rows ratio."""

    files: int = 0
    small: int = 0
    small_bytes: int = 0
    deletes: int = 0


@dataclass
class AutoDecision:
    """The policy's verdict: chosen partitions (worst first) and why each other one was skipped."""

    considered: int
    chosen: list[PartitionKey] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    small_files: dict[str, int] = field(default_factory=dict)
    last_optimize_version: int | None = None

    def metrics(self) -> dict[str, Any]:
        return {"partitionsConsidered": self.considered, "partitionsChosen": len(self.chosen),
                "partitionsSkipped": len(self.skipped), "chosenPartitions": [partition_label(k) for k in self.chosen],
                "skippedPartitions": dict(sorted(self.skipped.items())),
                "smallFilesPerChosenPartition": self.small_files, "lastOptimizeVersion": self.last_optimize_version}

    def reason(self) -> str:
        if self.chosen:
            return f"{len(self.chosen)} of {self.considered} partitions chosen"
        if not self.considered:
            return "no partition received data files since the last OPTIMIZE"
        return f"none of the {self.considered} partitions considered needs compaction"


def deleted_ratio_exceeded(add: dict, ratio: float) -> bool:
    dv = add.get("deletionVector")
    if not dv:
        return False
    try:
        records = json.loads(add["stats"]).get("numRecords") if add.get("stats") else None
    except ValueError:
        records = None
    return not records or (dv.get("cardinality") or 0) / records > ratio


def _count(state: TableHeader, min_file_size: int, ratio: float, whole_table: bool
           ) -> dict[PartitionKey, PartitionCounts]:
    """The live files' numbers per partition, from the state's scan (eager or streamed)."""
    counts: dict[PartitionKey, PartitionCounts] = {}
    adds = (add for _kind, table in state.scan(["partitionValues", "size", "stats"]) for add in table.to_pylist())
    for add in adds:
        key = () if whole_table else partition_key(add.get("partitionValues"))
        c = counts.get(key)
        if c is None:
            c = counts[key] = PartitionCounts()
        c.files += 1
        if add["size"] < min_file_size:
            c.small += 1
            c.small_bytes += add["size"]
        if deleted_ratio_exceeded(add, ratio):
            c.deletes += 1
    return counts


def choose_partitions(snapshot: TableHeader, *, min_file_size: int, min_num_files: int = DEFAULT_MIN_NUM_FILES,
                      max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
                      max_partitions: int = DEFAULT_MAX_PARTITIONS, all_partitions: bool = False,
                      whole_table: bool = False,
                      counts: Mapping[PartitionKey, PartitionCounts] | None = None) -> AutoDecision:
    """Apply the policy to ``snapshot`` (see the module docstring).

    ``whole_table`` treats the table as one partition (liquid clustering). ``counts`` are the
    live files' numbers per partition (keys ``()`` with ``whole_table``) when the caller counted
    them already (streamed from the log); else they are counted from the state's scan.
    """
    if min_num_files < 1 or max_partitions < 1 or min_file_size <= 0:
        raise InvalidArgumentError(f"min num files ({min_num_files}), max partitions ({max_partitions}) and min file "
                                   f"size ({min_file_size}) must be positive")
    if not 0 <= max_deleted_rows_ratio <= 1:
        raise InvalidArgumentError(f"max deleted rows ratio must be between 0 and 1, got {max_deleted_rows_ratio}")
    touched, last = (None, None) if all_partitions else touched_partitions(snapshot)
    if whole_table and touched is not None:
        touched = {()} if touched else set()
    if counts is None:
        counts = _count(snapshot, min_file_size, max_deleted_rows_ratio, whole_table)
    seen = {k: c for k, c in counts.items() if c.files and (touched is None or k in touched)}
    decision = AutoDecision(considered=len(seen), last_optimize_version=last)
    eligible = []
    for key, c in seen.items():
        n = c.small
        if n >= min_num_files or c.deletes:
            eligible.append(key)
        else:
            decision.skipped[partition_label(key)] = (
                f"{n} small files (fewer than {min_num_files}) and no file past the deleted-rows ratio")
    eligible.sort(key=lambda k: (-seen[k].small, -seen[k].small_bytes, partition_label(k)))
    for key in eligible[max_partitions:]:
        decision.skipped[partition_label(key)] = f"beyond the {max_partitions} worst partitions of this run"
    decision.chosen = eligible[:max_partitions]
    decision.small_files = {partition_label(k): seen[k].small for k in decision.chosen}
    return decision

