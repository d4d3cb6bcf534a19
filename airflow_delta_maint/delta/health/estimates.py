"""What a maintenance operation would gain and cost on a table, from the log alone (no Spark, no data file read).

Each estimate starts from the numbers the health score reads (:class:`~.score.HealthInputs`) and a few more
aggregates of the same scan (:class:`EstimateInputs`), and says:

- **gain**: files removed, bytes no longer scanned through deletion vectors, files given statistics, log files
  a reader no longer replays, bytes freed on storage, and the health score before and after;
- **cost**: bytes read and written, files listed and deleted, log files read, and predicted CPU-seconds from
  :class:`CpuRates` (documented defaults, which a calibration on the maintenance history replaces).

The estimates are keyed by the core's :class:`~airflow_delta_maint.delta.protocol.features.Operation`; a job's
definition names its operation and so its estimate. They are approximations by design: a plan is exact, and
costs a read of every candidate's statistics; an estimate costs nothing beyond the health report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_delta_maint.delta.health.score import HealthInputs, score_of
from airflow_delta_maint.delta.protocol.features import Operation

__all__ = ["CHECKPOINT_BYTES_PER_FILE", "COST_TERMS", "COST_UNITS", "FIRST_CHECKPOINT_COMMITS", "READS_EXPIRED_LOG", "Cost", "CpuRates",
           "DEFAULT_RATES", "Estimate", "EstimateInputs", "Gain", "estimate", "gains"]

#: bytes a checkpoint spends per live file (an add row in parquet: path, size, stats, partition values)
CHECKPOINT_BYTES_PER_FILE = 300
#: the commits a table's first checkpoint costs each read: a reader's read of a small parquet checkpoint (54 columns,
#: 1.5 to 3 ms here) costs what replaying some ten small commits does (0.2 to 0.3 ms each), and every later read of the
#: table pays it; writers that checkpoint on their own do it every 10 commits by default. Only the commits beyond are
#: a first checkpoint's gain.
FIRST_CHECKPOINT_COMMITS = 10
#: the operations whose estimate needs the expired log's cleanup planned (``EstimateInputs.expired_log_files``: a
#: listing of the whole log and the oldest commits' times), which a look does only for tables that run one
READS_EXPIRED_LOG = frozenset({Operation.CLEANUP_LOG})


@dataclass(frozen=True)
class EstimateInputs:
    """The health score's inputs and the scan's other aggregates an estimate needs."""

    health: HealthInputs
    num_files_with_deletion_vectors: int = 0
    num_tombstones: int = 0  # removed files VACUUM may delete (their bytes: ``health.tombstone_bytes``)
    #: log files the expired log's cleanup would delete now under the table's own log retention (None: not
    #: looked at, or the cleanup does not apply), and their bytes
    expired_log_files: int | None = None
    expired_log_bytes: int = 0
    #: whether the log has a checkpoint (a table's first one adds a parquet file to every read of it)
    checkpointed: bool = True

    @property
    def avg_file_bytes(self) -> int:
        h = self.health
        return h.size_bytes // h.num_files if h.num_files else 0


@dataclass(frozen=True)
class Gain:
    """What a run would leave better."""

    files_removed: int = 0
    dv_bytes_purged: int = 0
    files_given_stats: int = 0
    log_files_not_replayed: int = 0
    bytes_freed: int = 0
    #: files whose deletion vectors a reader no longer reads before their rows
    deletion_vectors_dropped: int = 0
    #: a table's first checkpoint: a parquet file every read now opens in place of commits (not a gain: its read is
    #: netted out of ``log_files_not_replayed``, see FIRST_CHECKPOINT_COMMITS)
    checkpoint_files_added: int = 0
    score_before: int = 100
    score_after: int = 100

    @property
    def any(self) -> bool:
        """Whether the run would gain anything at all."""
        return bool(self.files_removed or self.dv_bytes_purged or self.files_given_stats
                    or self.log_files_not_replayed or self.bytes_freed or self.deletion_vectors_dropped)


@dataclass(frozen=True)
class CpuRates:
    """CPU-seconds per unit of work, by kind; ``fixed_s`` per run. The defaults are the native engine's measures
    on two cores (docs/benchmarks.md: OPTIMIZE re-encoding 900 MB in 3.5 CPU-s, VACUUM full deleting 50,000
    files in 3.5 CPU-s, the health report reading a commit in some 4 ms, a run's own start in some 50 ms);
    docs/health.md, "Estimates"."""

    per_gib_rewritten: float = 4.0
    per_gib_read: float = 2.0
    per_file_deleted: float = 0.0001
    per_file_listed: float = 0.00002
    per_log_file: float = 0.004
    fixed_s: float = 0.05
    #: a data file opened to be read (its footer, its column chunks), whatever its bytes: small files cost a reader
    #: by their number more than by their size (OPTIMIZE's inputs here: about 0.5 ms each at a learnt scale of about
    #: 0.12)
    per_file_read: float = 0.004
    #: a reader's replay of one commit since the checkpoint (not a cost of the run: what a checkpoint or a log
    #: compaction saves each later read). Far below ``per_log_file``, which is a job's read, its commit and its
    #: writes per log file: this machine replays a small commit in 0.28 ms while its learnt scale is about 0.12
    #: (docs/fleet.md, "Planning order")
    per_commit_replayed: float = 0.0023
    #: a reader's read of a small table's log before the commits it replays (its hint, listing, checkpoint and
    #: aggregates: 4.5 to 6.2 ms here at a learnt scale of about 0.12): what prices a night's first plan, before the
    #: history has measured any run, from what the plan's own look at the lake cost
    per_table_read: float = 0.04


DEFAULT_RATES = CpuRates()
GIB = 1 << 30


@dataclass(frozen=True)
class Cost:
    """What a run would spend."""

    bytes_read: int = 0
    bytes_written: int = 0
    files_listed: int = 0
    files_deleted: int = 0
    log_files_read: int = 0
    cpu_s: float = 0.0
    #: data files opened to be read (OPTIMIZE's inputs, the files compute-stats scans)
    files_read: int = 0

    @property
    def bytes_rewritten(self) -> int:
        """The bytes decoded and written again: a rewrite's reads (a run that reads and writes), else none."""
        return self.bytes_read if self.bytes_written else 0

    def terms(self, rates: CpuRates) -> dict[str, float]:
        """The predicted CPU-seconds by rate (:data:`COST_TERMS`): what each kind of work costs at ``rates``."""
        rewritten = self.bytes_rewritten
        return {"fixed_s": rates.fixed_s, "per_gib_rewritten": rates.per_gib_rewritten * rewritten / GIB,
                "per_gib_read": rates.per_gib_read * max(0, self.bytes_read - rewritten) / GIB,
                "per_file_read": rates.per_file_read * self.files_read,
                "per_file_deleted": rates.per_file_deleted * self.files_deleted,
                "per_file_listed": rates.per_file_listed * self.files_listed,
                "per_log_file": rates.per_log_file * self.log_files_read}

    def priced(self, rates: CpuRates) -> Cost:
        """This cost with its CPU-seconds predicted from ``rates``."""
        return dataclasses.replace(self, cpu_s=round(sum(self.terms(rates).values()), 4))  # a small table's: ms


#: the rates a run's cost is priced by, each a kind of work whose scale the cost model learns
COST_TERMS = tuple(Cost().terms(DEFAULT_RATES))
#: the units of work a cost counts (its fields but the predicted CPU-seconds)
COST_UNITS = frozenset(f.name for f in dataclasses.fields(Cost)) - {"cpu_s"}


@dataclass(frozen=True)
class Estimate:
    """One operation's gain and cost on one table state."""

    operation: str
    gain: Gain
    cost: Cost
    assumptions: tuple[str, ...] = field(default=())
    #: the table as the run would leave it: what a later job of the same night is estimated on (None: not known)
    after: EstimateInputs | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        # flat dataclasses of numbers: their fields copied, without asdict's deep copies
        return {"operation": self.operation, "gain": dict(vars(self.gain)), "cost": dict(vars(self.cost)),
                "assumptions": list(self.assumptions)}


def _score(h: HealthInputs) -> int:
    return score_of(h)


def _with_commits(h: HealthInputs, commits: int) -> HealthInputs:
    """``h`` after ``commits`` more commits (a job's own): more log after the checkpoint and the compaction."""
    return dataclasses.replace(h, commits_since_checkpoint=h.commits_since_checkpoint + commits,
                               uncovered_commits=h.uncovered_commits + commits)


def _optimize(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]]:
    h = x.health
    removed = max(0, h.excess_small_files)
    deleted_share = h.deleted_rows / h.num_records if h.num_records else 0.0
    dv_bytes = int(deleted_share * h.size_bytes)
    dv_input = x.num_files_with_deletion_vectors * x.avg_file_bytes
    read = h.small_files_bytes + dv_input
    written = max(0, read - dv_bytes)
    after = dataclasses.replace(h, num_files=h.num_files - removed, excess_small_files=0,
                                num_small_files=max(0, h.num_small_files - removed), deleted_rows=0,
                                tombstone_bytes=h.tombstone_bytes + read, size_bytes=h.size_bytes - dv_bytes)
    gain = Gain(files_removed=removed, dv_bytes_purged=dv_bytes,
                deletion_vectors_dropped=x.num_files_with_deletion_vectors)
    assumptions = ("every partition's small files are compacted, as a full OPTIMIZE plans",
                   "files with deletion vectors are rewritten; their deleted rows are spread evenly over the table")
    files = h.num_small_files + x.num_files_with_deletion_vectors
    return after, gain, Cost(bytes_read=read, bytes_written=written, files_read=files), assumptions


def _compute_stats(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]]:
    h = x.health
    files = h.files_without_stats + h.files_missing_stats_columns
    after = dataclasses.replace(h, files_without_stats=0, files_missing_stats_columns=0)
    read = files * x.avg_file_bytes
    return after, Gain(files_given_stats=files), Cost(bytes_read=read, files_read=files), (
        "the files needing statistics are of the table's average size",)


def _vacuum(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]]:
    h = x.health
    after = dataclasses.replace(h, tombstone_bytes=0)
    cost = Cost(files_listed=h.num_files + x.num_tombstones, files_deleted=x.num_tombstones)
    return after, Gain(bytes_freed=h.tombstone_bytes), cost, (
        "every removed file is past the retention window (an upper bound for a shorter retention)",
        "a full VACUUM lists every file under the table")


def _checkpoint(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]]:
    h = x.health
    commits = max(0, h.commits_since_checkpoint)
    after = dataclasses.replace(h, commits_since_checkpoint=0, uncovered_commits=0)
    cost = Cost(bytes_written=(h.num_files + x.num_tombstones) * CHECKPOINT_BYTES_PER_FILE, log_files_read=commits)
    if x.checkpointed:
        return after, Gain(log_files_not_replayed=commits), cost, ()
    saved = max(0, commits - FIRST_CHECKPOINT_COMMITS)
    return after, Gain(log_files_not_replayed=saved, checkpoint_files_added=int(saved > 0)), cost, (
        f"a table's first checkpoint costs each read what replaying {FIRST_CHECKPOINT_COMMITS} commits does",)


def _compact_log(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]]:
    h = x.health
    interval = max(1, h.compaction_interval)
    windows = max(0, h.uncovered_commits) // interval
    after = dataclasses.replace(h, uncovered_commits=h.uncovered_commits - windows * interval)
    cost = Cost(log_files_read=windows * interval)
    return after, Gain(log_files_not_replayed=windows * (interval - 1)), cost, ()


def _cleanup_log(x: EstimateInputs) -> tuple[HealthInputs, Gain, Cost, tuple[str, ...]] | None:
    if x.expired_log_files is None:
        return None
    files = x.expired_log_files
    return x.health, Gain(bytes_freed=x.expired_log_bytes if files else 0), Cost(files_deleted=files), (
        "the table's own log retention; the files deleted are older than the checkpoint every reader starts from",)


#: commits a run of the operation adds to the log (VACUUM: its start and its end)
_COMMITS: Mapping[Operation, int] = {Operation.OPTIMIZE: 1, Operation.COMPUTE_STATS: 1, Operation.VACUUM: 2}

_ESTIMATORS: Mapping[Operation, Callable[[EstimateInputs], tuple[HealthInputs, Gain, Cost, tuple[str, ...]] | None]] = {
    Operation.OPTIMIZE: _optimize,
    Operation.COMPUTE_STATS: _compute_stats,
    Operation.VACUUM: _vacuum,
    Operation.CHECKPOINT: _checkpoint,
    Operation.COMPACT_LOG: _compact_log,
    Operation.CLEANUP_LOG: _cleanup_log,
}


def gains(operation: Operation | str, inputs: EstimateInputs) -> bool | None:
    """Whether a run of ``operation`` would gain anything on the table ``inputs`` describe (None: no estimate), at a
    fraction of :func:`estimate`'s cost: no health score, no price (a plan asks this of every job of every table)."""
    estimator = _ESTIMATORS.get(Operation(operation))
    found = estimator(inputs) if estimator is not None else None
    return None if found is None else found[1].any


def estimate(operation: Operation | str, inputs: EstimateInputs, rates: CpuRates = DEFAULT_RATES) -> Estimate | None:
    """``operation``'s gain and cost on the table ``inputs`` describe; None for an operation without an estimate
    (it reads only, or what it gains is not in ``inputs``: the expired log's cleanup when the look did not plan it)."""
    op = Operation(operation)
    estimator = _ESTIMATORS.get(op)
    found = estimator(inputs) if estimator is not None else None
    if found is None:
        return None
    after, gain, cost, assumptions = found
    after = _with_commits(after, _COMMITS.get(op, 0))
    before = _score(inputs.health)
    gain = dataclasses.replace(gain, score_before=before, score_after=_score(after) if gain.any else before)
    left = _inputs_after(op, inputs, after, gain) if gain.any else inputs
    return Estimate(str(op), gain, cost.priced(rates), assumptions, left)


def _inputs_after(op: Operation, inputs: EstimateInputs, after: HealthInputs, gain: Gain) -> EstimateInputs:
    """The inputs of a later job's estimate once a run of ``op`` gained ``gain``: its health, and what else it
    changed (OPTIMIZE drops the deletion vectors it purges and leaves the files it rewrote removed; VACUUM
    deletes the removed files; a checkpoint is the table's checkpoint from then on)."""
    changes: dict[str, Any] = {"health": after}
    if op == Operation.OPTIMIZE:
        changes.update(num_files_with_deletion_vectors=0,
                       num_tombstones=inputs.num_tombstones + inputs.health.num_small_files
                       + inputs.num_files_with_deletion_vectors)
    elif op == Operation.VACUUM:
        changes["num_tombstones"] = 0
    elif op == Operation.CHECKPOINT:
        changes["checkpointed"] = True
    return dataclasses.replace(inputs, **changes)
