"""Running one OPTIMIZE plan: reserve its partitions, rewrite its bins (Spark tasks, threads of this
process under local execution, a shuffle for Z-order and clustering, or delta-spark's OPTIMIZE) and
commit them group by group as they are rewritten."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import uuid
from typing import Any, Callable

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.auto_compaction import AutoDecision, partition_key, partition_label
from airflow_delta_maint.delta.plans.clustering import clustering_quality, tag_clustered_files
from airflow_delta_maint.delta.plans.optimize import Bin, OptimizePlan
from airflow_delta_maint.delta.plans.optimize_options import OptimizeOptions
from airflow_delta_maint.delta.storage.leases import reserve_partitions
from airflow_delta_maint.delta.protocol.features import table_features
from airflow_delta_maint.delta.protocol.row_tracking import row_tracking

from ..context import JobContext
from ..engines import DELTA_SPARK
from .optimize_metrics import run_metrics
from airflow_delta_maint.app.rewrite.commit import AFTER_REWRITE, BinCommitter, GroupResult
from airflow_delta_maint.app.rewrite.bin_copy import rewrite_bin
from airflow_delta_maint.app.rewrite.data_files import RewriteSpec, delete_run_outputs, output_dir
from airflow_delta_maint.app.rewrite.partition_columns import writes_partition_columns
from airflow_delta_maint.app.rewrite.rebase import BinOutputs
from airflow_delta_maint.app.rewrite.rewrite_counts import RewriteCounts
from airflow_delta_maint.app.rewrite.rewrite_cadence import (RewriteCadence, busy_unit_bins, commit_groups, rewrite_and_commit,
                                                          rewrite_units)
from airflow_delta_maint.app.runners.tasks import Tasks, raise_worker_error

#: Z-order and liquid clustering record a row map (8 bytes a row, compressed, on the driver) so that
#: a bin can be rebased onto concurrent deletion vectors; above this many input rows they do not
#: (tables with row tracking map rows through their stable row ids instead and need none)
MAX_ROW_MAP_ROWS = 50_000_000
log = logging.getLogger("delta_maint.optimize")


def execute_bins(tasks: Tasks, spec: RewriteSpec, bins: list[Bin], max_concurrent: int | None,
                 label: str, counts: dict[int, RewriteCounts] | None = None) -> list[list[dict]]:
    """Rewrite bins, one task each (largest first); returns the add actions per bin, in order, and puts
    what each bin copied and re-encoded into ``counts`` (by the bin's index)."""
    order = sorted(range(len(bins)), key=lambda i: -bins[i].input_bytes)
    waves = [order] if not max_concurrent else [order[i:i + max_concurrent] for i in range(0, len(order), max_concurrent)]
    results: dict[int, Any] = {}
    for wave in waves:
        payload = [(i, bins[i].files, bins[i].partition_values) for i in wave]
        log.info("%s: rewriting %d bins (%.1f MiB)", label, len(wave), sum(bins[i].input_bytes for i in wave) / 2**20)
        results.update(tasks.map_slices(lambda items: [(i, rewrite_bin(spec, files, pvs)) for i, files, pvs in items],
                                        payload, len(payload), f"{label} bins"))
    if counts is not None:
        counts.update((i, r.counts) for i, r in results.items())
    return [results[i].adds for i in range(len(bins))]


def _delete_run_outputs(spec: RewriteSpec, bins: list[Bin], committed: frozenset[str] | set[str] = frozenset()
                        ) -> None:
    """After a failed Spark job: delete what this run's tasks wrote and no commit of the run
    references (``committed``: storage keys of committed outputs). Best effort: a task still running
    when its job failed may write after this, and VACUUM removes that file later."""
    try:
        n = delete_run_outputs(spec, [output_dir(spec.storage, b.files) for b in bins], keep=committed)
    except Exception as exc:  # orphans are harmless: VACUUM removes them after the retention period
        log.warning("could not delete the files of the failed rewrite: %s", exc)
        return
    if n:
        log.warning("OPTIMIZE %s: the rewrite failed; deleted the %d files its tasks had written", spec.storage.root, n)


def commit_batch(snapshot: Snapshot, plan: OptimizePlan, bins: list[Bin], outputs: list[list[dict]],
                 parameters: dict, after_version: int | None = None) -> tuple[int | None, list[int]]:
    """Commit one batch of bins in one commit, rebased onto concurrent deletion vectors (see
    ``optimize_commit``); bins whose inputs were removed meanwhile are dropped.

    Returns (committed version or None, indexes of the bins dropped).
    """
    committer = BinCommitter(snapshot, plan, parameters)
    committer.after = after_version
    result = committer.commit(bins, [BinOutputs(o) for o in outputs])
    return result.version, sorted(result.dropped)


def check_spark_for(ctx: JobContext, layout: str) -> None:
    """Z-order and liquid clustering shuffle: refused under local execution."""
    if layout in ("zorder", "hilbert") and not ctx.spark_allowed:
        what = "Liquid clustering" if layout == "hilbert" else "Z-order"
        raise InvalidArgumentError(f"{what} of {ctx.storage.root} needs Spark (a shuffle), which local execution "
                                   "does not start; run it with execution 'spark'")


def run_plan(ctx: JobContext, options: OptimizeOptions, snapshot: Snapshot, plan: OptimizePlan,
             decision: AutoDecision | None, added_sizes: list[int] | None = None,
             load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True,
             path: RewriteCadence | None = None) -> dict[str, Any]:
    """Run one plan of ``snapshot`` (the whole table, or a round of a large one: ``whole_table``
    false, and no clustering quality, which needs every file) with the run's ``options``: reserve its
    partitions, rewrite and commit. ``added_sizes`` collects the committed files' sizes; ``load_base``
    loads the snapshot a commit is rebased onto (see ``BinCommitter``); ``path``: the run's rewrite
    path (None: ``bins_per_commit`` fixes the units)."""
    out: dict[str, Any] = {"version_read": snapshot.version, "predicate": plan.predicate,
                           "compression": options.compression,
                           "zOrderBy": plan.zorder_by, "minFileSizeSetting": plan.min_file_size,
                           "maxFileSizeSetting": plan.target_file_size}
    if decision is not None:
        out["autoCompaction"] = decision.metrics()
    # partitions left for a later run (past max_partitions, reserved by another run)
    deferred = sum(1 for r in decision.skipped.values() if r.startswith("beyond")) if decision is not None else 0
    clustered = plan.layout == "hilbert"
    if clustered:
        out["clusteringBy"] = plan.clustering_by
        out["clusteringStats"] = plan.clustering_stats
        if whole_table:
            out["clusteringQualityBefore"] = clustering_quality(snapshot.add_actions(), plan.zorder_columns)
    if options.dry_run:
        return {**out, "status": "dry_run", "plan": plan.summary()}
    empty = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0}
    if plan.is_empty:
        reason = decision.reason() if decision is not None else (
            "nothing to cluster" if clustered else "nothing to compact")
        return {**out, "status": "skipped", "reason": reason, **empty}
    check_spark_for(ctx, plan.layout)
    ctx.storage.require_put_if_absent()  # refuse a store without put-if-absent before any file is written
    lease = options.lease_seconds
    run = functools.partial(_execute, ctx, options, snapshot, plan, out, added_sizes=added_sizes, load_base=load_base,
                            whole_table=whole_table, path=path)
    if options.engine == DELTA_SPARK:
        from ..engines.delta_spark import session

        session(ctx)  # a session that cannot run delta-spark fails before any partition is reserved
    if not lease:
        return run(restricted=decision is not None, deferred=deferred)
    labels = {id(b): partition_label(partition_key(b.partition_values)) for b in plan.bins}
    with reserve_partitions(ctx.storage, sorted(set(labels.values())), lease_seconds=lease) as reservation:
        if reservation.taken_by_others:
            out["partitionsReservedByOthers"] = dict(sorted(reservation.taken_by_others.items()))
            log.info("OPTIMIZE %s: %d partitions are being optimized by another run; leaving them out",
                     ctx.storage.root, len(reservation.taken_by_others))
            plan.bins = [b for b in plan.bins if labels[id(b)] in reservation.held]
            deferred += len(reservation.taken_by_others)
            if plan.is_empty:
                return {**out, "status": "skipped", **empty,
                        "reason": "every partition of the plan is reserved by another OPTIMIZE run"}
        return run(restricted=decision is not None or bool(reservation.taken_by_others), deferred=deferred)


def _execute(ctx: JobContext, options: OptimizeOptions, snapshot: Snapshot, plan: OptimizePlan,
             out: dict[str, Any], *, restricted: bool, deferred: int, added_sizes: list[int] | None = None,
             load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True,
             path: RewriteCadence | None = None) -> dict[str, Any]:
    """Run the plan with the engine. delta-spark gets the plan's partitions as its WHERE clause when the
    run is limited to some (the auto-compaction policy's choice, partitions reserved by other runs);
    ``deferred``: the partitions left for a later run."""
    if options.engine != DELTA_SPARK:
        return _execute_plan(ctx, options, snapshot, plan, out, deferred, added_sizes, load_base, whole_table, path)
    from ..engines import delta_spark

    partitions: list[dict[str, str | None]] | None = None
    if restricted:
        seen: dict[tuple, dict[str, str | None]] = {}
        for b in plan.bins:
            seen.setdefault(partition_key(b.partition_values), dict(b.partition_values))
        partitions = list(seen.values())
    return {**out, **delta_spark.optimize(ctx, options.purged(), snapshot, plan, partitions)}


#: the function that rewrites one unit of bins (its index, its bins), and how many units may be
#: rewritten at once
UnitRewriter = tuple[Callable[[int, list[Bin]], list[BinOutputs]], int]


def _execute_plan(ctx: JobContext, options: OptimizeOptions, snapshot: Snapshot, plan: OptimizePlan,
                  out: dict[str, Any], deferred: int, added_sizes: list[int] | None = None,
                  load_base: Callable[[int], Snapshot] | None = None, whole_table: bool = True,
                  path: RewriteCadence | None = None) -> dict[str, Any]:
    """Rewrite the plan's bins and commit them group by group as they are rewritten."""
    clustered = plan.layout == "hilbert"
    spec = _rewrite_spec(ctx, options, snapshot, plan)
    parameters = _commit_parameters(options, plan, deferred)
    if path is not None:
        path.decide(ctx.storage, snapshot.version)
    per_unit, eager = rewrite_units(options, len(plan.bins), path)
    units = commit_groups(plan.bins, options.batch_bytes, per_unit)
    if plan.layout in ("zorder", "hilbert") and per_unit == 0:
        units = [list(range(len(plan.bins)))]  # one shuffle for the whole plan
    log.info("OPTIMIZE %s at version %d: %d bins, %d files, %.1f MiB to rewrite in %d units%s", ctx.storage.root,
             snapshot.version, len(plan.bins), plan.input_files, plan.input_bytes / 2**20, len(units),
             f" ({path.path} path: {path.cadence.reason()})" if path is not None and path.cadence else "")
    # a quiet run records no row maps (about a tenth of a Z-order's time): a bin whose inputs a writer
    # deletes from meanwhile is dropped instead of rebased, and the run turns busy for the rest
    rewriter = _group_rewriter(ctx, options, spec, plan, per_unit, row_maps=path is None or path.busy)
    run = _PlanRun(ctx, options, plan, spec, BinCommitter(snapshot, plan, parameters, load_base), units, eager, path,
                   rewriters=[rewriter])
    try:
        rewrite_and_commit(plan.bins, run.units, run.rewrite_unit, run.rewritten, run.concurrency)
        run.flush()
    except BaseException:
        _delete_run_outputs(spec, plan.bins, run.committed_keys)
        raise
    if added_sizes is not None:
        added_sizes.extend(a["size"] for _, r in run.results for i in r.committed for a in r.adds.get(i, []))
    copies = run.copy_counts if plan.layout == "binpack" else None
    return {**out, **run_metrics(plan, run.results, clustered and whole_table, snapshot, copies),
            "numBatches": len(run.results),
            **(path.metrics() if path is not None else {})}


def _rewrite_spec(ctx: JobContext, options: OptimizeOptions, snapshot: Snapshot, plan: OptimizePlan) -> RewriteSpec:
    """How the plan's tasks write their files: the table's metadata, compression, target size,
    tight bounds, row tracking, a token of this run, the statistics clustering needs, whether files hold
    the partition columns (``partition_columns.py``)."""
    clustered = plan.layout == "hilbert"
    # On a table with deletion vectors every file's stats say whether they are exact; ours are.
    tight_bounds = True if "deletionVectors" in table_features(snapshot.protocol)[1] else None
    rows = row_tracking(snapshot.protocol, snapshot.metadata, snapshot.domains)
    return RewriteSpec(ctx.storage, snapshot.metadata.to_action(), compression=options.compression,
                       row_group_bytes=options.row_group_bytes, copy_row_groups=options.copy_row_groups,
                       target_file_size=plan.target_file_size, tight_bounds=tight_bounds,
                       run_token=uuid.uuid4().hex[:8], row_tracking=rows,
                       required_stats_columns=tuple(c.logical_path for c in plan.zorder_columns) if clustered else (),
                       materialize_partitions=writes_partition_columns(ctx.storage, snapshot, plan))


def _commit_parameters(options: OptimizeOptions, plan: OptimizePlan, deferred: int) -> dict[str, Any]:
    """The commits' ``operationParameters``, in delta-spark's names and order: predicate, zOrderBy,
    clusterBy (always; [] unless clustered), auto, and isFull on a clustered table; then ours."""
    clustered = plan.layout == "hilbert"
    parameters: dict[str, Any] = {"predicate": [plan.predicate] if plan.predicate else [], "zOrderBy": plan.zorder_by,
                                  "clusterBy": plan.clustering_by if clustered else [],
                                  "auto": options.auto}
    if clustered:
        parameters["isFull"] = options.full
    if plan.layout == "even":
        parameters["targetFiles"] = plan.target_files
    # partitions left for a later run (reserved by another run, past max_partitions): the
    # auto-compaction policy looks past this commit for them
    if deferred or options.auto:
        parameters["partitionsDeferred"] = deferred
    return parameters


@dataclasses.dataclass
class _PlanRun:
    """One plan's rewrite under way: its units (``units[n + 1:]`` may be cut again when the run
    turns busy), the rewritten units held for one commit, and the commits made.

    Units are held and committed together until the log moves; on a busy table (or with
    ``eager``) each goes in as soon as it is rewritten.
    """

    ctx: JobContext
    options: OptimizeOptions
    plan: OptimizePlan
    spec: RewriteSpec
    committer: BinCommitter
    #: the bins' indexes of each unit, the list ``rewrite_and_commit`` works through
    units: list[list[int]]
    #: commit each unit as soon as it is rewritten
    eager: bool
    path: RewriteCadence | None
    #: the unit rewriters, the newest in use (a run that turns busy adds one of smaller units)
    rewriters: list[UnitRewriter]
    results: list[tuple[list[int], GroupResult]] = dataclasses.field(default_factory=list)
    #: storage keys of the files committed so far (kept when a failed run deletes its outputs)
    committed_keys: set[str] = dataclasses.field(default_factory=set)
    held: list[tuple[list[int], list[BinOutputs]]] = dataclasses.field(default_factory=list)
    #: what each rewritten bin (by its index in the plan) copied and re-encoded
    copy_counts: dict[int, RewriteCounts] = dataclasses.field(default_factory=dict)
    #: units rewritten so far
    done: int = 0
    #: another writer committed during the run and the run does not wait for writers: commit each
    #: unit as soon as it is rewritten
    busy: bool = False

    @property
    def wait(self) -> float:
        """How long a commit waits for a writer at work (``wait_for_writer``; 0: not at all)."""
        return self.options.wait_for_writer or 0.0

    def rewrite_unit(self, n: int, bins: list[Bin]) -> list[BinOutputs]:
        """Rewrite unit ``n`` with the rewriter in use."""
        return self.rewriters[-1][0](n, bins)

    def concurrency(self) -> int:
        """How many units the rewriter in use may rewrite at once."""
        return self.rewriters[-1][1]

    def flush(self) -> None:
        """Commit the held units in one commit (rebased, bins whose inputs went dropped)."""
        if not self.held:
            return
        group = [i for g, _ in self.held for i in g]
        outputs = [o for _, outs in self.held for o in outs]
        self.held.clear()
        result = self.committer.commit([self.plan.bins[i] for i in group], outputs, wait_for_writer_s=self.wait)
        self.results.append((group, result))
        storage = self.ctx.storage
        for adds in result.adds.values():
            self.committed_keys.update(k for k in (storage.key_for_path(a["path"]) for a in adds) if k)
        log.info("OPTIMIZE %s: %d bins %s; %d/%d units rewritten", storage.root, len(group),
                 f"committed as version {result.version}" if result.version is not None else "dropped",
                 self.done, len(self.units))

    def rewritten(self, n: int, outputs: list[BinOutputs]) -> None:
        """Unit ``n`` is rewritten: hold it, and commit what is held when the run commits eagerly,
        is busy or holds a batch's bytes; a quiet run that sees the log move turns busy."""
        self.done += 1
        bins = self.plan.bins
        for hook in list(AFTER_REWRITE):
            hook([bins[i] for i in self.units[n]])
        self.held.append((self.units[n], outputs))
        self.copy_counts.update((i, o.counts) for i, o in zip(self.units[n], outputs) if o.counts is not None)
        held_bytes = sum(bins[i].input_bytes for g, _ in self.held for i in g)
        # held units go in one commit; once someone else has committed during this run (a busy
        # table: the sooner a bin lands, the fewer writer commits it is rebased over), each unit
        # goes in as soon as it is rewritten
        moved = not self.busy and self.committer.log_moved()
        self.busy = self.busy or (not self.wait and moved)
        if self.eager or self.busy or held_bytes >= self.options.batch_bytes:
            self.flush()
        if moved and self.path is not None and not self.path.busy:
            self.turn_busy(n)

    def turn_busy(self, n: int) -> None:
        """A quiet run saw another writer's commit: the units left are rewritten the busy way."""
        units = self.units
        left = [i for g in units[n + 1:] for i in g]
        if not left or self.path is None or not self.path.turn_busy(
                f"another writer committed while unit {n + 1} of {len(units)} was rewritten"):
            return
        units[n + 1:] = commit_groups([self.plan.bins[i] for i in left], self.options.batch_bytes,
                                      busy_unit_bins(len(left)))
        units[n + 1:] = [[left[j] for j in g] for g in units[n + 1:]]
        self.eager = False
        self.busy = not self.wait
        # units of few bins, more of them at once
        self.rewriters.append(_group_rewriter(self.ctx, self.options, self.spec, self.plan, busy_unit_bins(len(left)),
                                              row_maps=True))
        log.info("OPTIMIZE %s: another writer committed during the run; the %d bins left are rewritten in %d "
                 "units, each committed as soon as it is rewritten", self.ctx.storage.root, len(left), len(units) - n - 1)


def _group_rewriter(ctx: JobContext, options: OptimizeOptions, spec: RewriteSpec, plan: OptimizePlan,
                    per_commit: int, row_maps: bool = True) -> UnitRewriter:
    """The function that rewrites one group of bins, and how many groups may be rewritten at once;
    ``row_maps``: Z-order and clustering record the row maps a rebase needs (see ``MAX_ROW_MAP_ROWS``)."""
    max_bins = options.max_concurrent_bins
    if plan.layout in ("zorder", "hilbert"):
        from airflow_delta_maint.app.rewrite.zorder import execute_zorder

        want_maps = row_maps and not spec.row_tracking.materializes and \
            sum(_num_records(f) for b in plan.bins for f in b.files) <= MAX_ROW_MAP_ROWS

        def zorder(n: int, bins: list[Bin]) -> list[BinOutputs]:
            maps: list[list[bytes]] | None = [] if want_maps else None
            try:
                adds = execute_zorder(ctx.spark(), spec, dataclasses.replace(plan, bins=bins), maps)
            except Exception as exc:
                raise_worker_error(exc)
                raise
            if plan.layout == "hilbert":  # each bin became one new ZCube
                adds = [tag_clustered_files(o, plan.zorder_columns) for o in adds]
            return [BinOutputs(a, maps[i] if maps is not None else None) for i, a in enumerate(adds)]

        return zorder, 1  # a shuffle keeps every core busy: one at a time, committed while the next runs
    tasks = ctx.tasks(f"OPTIMIZE {ctx.storage.root}", threads=int(max_bins) if max_bins else None)
    if plan.layout == "even":
        from airflow_delta_maint.app.rewrite.even_split import execute_even

        def even(n: int, bins: list[Bin]) -> list[BinOutputs]:
            adds = execute_even(tasks, spec, dataclasses.replace(plan, bins=bins), f"commit {n + 1}")
            return [BinOutputs(a) for a in adds]

        return even, 1
    if per_commit == 0:
        concurrency = 1
    else:
        concurrency = max(1, math.ceil(tasks.parallelism / per_commit))
        if max_bins:
            concurrency = max(1, min(concurrency, int(max_bins) // per_commit or 1))

    def binpack(n: int, bins: list[Bin]) -> list[BinOutputs]:
        counts: dict[int, RewriteCounts] = {}
        adds = execute_bins(tasks, spec, bins, max_bins, f"commit {n + 1}", counts)
        return [BinOutputs(a, counts=counts.get(i)) for i, a in enumerate(adds)]

    return binpack, concurrency


def _num_records(add: dict) -> int:
    try:
        return int(json.loads(add.get("stats") or "{}").get("numRecords") or 0)
    except ValueError:
        return 0

