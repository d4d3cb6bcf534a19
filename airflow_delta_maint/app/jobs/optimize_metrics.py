"""OPTIMIZE's metrics from what each of its commits did: files and bytes added and removed, bins
dropped and rebased, the versions committed, the clustering quality after the run, and what the
bin-packing rewrite copied and re-encoded."""

from __future__ import annotations

from typing import Any, Mapping

from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.plans.auto_compaction import partition_key, partition_label
from airflow_delta_maint.delta.plans.clustering import clustering_quality
from airflow_delta_maint.delta.plans.optimize import OptimizePlan, size_percentiles
from airflow_delta_maint.app.rewrite.commit import GroupResult
from airflow_delta_maint.app.rewrite.rewrite_counts import RewriteCounts


def run_metrics(plan: OptimizePlan, results: list[tuple[list[int], GroupResult]], clustered: bool,
                snapshot: Snapshot, copies: Mapping[int, RewriteCounts] | None = None) -> dict[str, Any]:
    """The run's metrics from what each commit did; ``copies``: what each bin's rewrite copied and
    re-encoded (bin-packing), summed over the bins committed."""
    totals = {"numAddedFiles": 0, "numRemovedFiles": 0, "numAddedBytes": 0, "numRemovedBytes": 0,
              "numDeletionVectorsRemoved": 0}
    added_sizes: list[int] = []
    versions: list[int] = []
    dropped: list[dict[str, Any]] = []
    rebased = carried = 0
    committed_removed: set[str] = set()
    committed_added: list[dict] = []
    for group, result in results:
        if result.version is not None:
            versions.append(result.version)
        for i, reason in result.dropped.items():
            b = plan.bins[group[i]]
            dropped.append({"partition": partition_label(partition_key(b.partition_values)), "files": len(b.files),
                            "bytes": b.input_bytes, "reason": reason})
        rebased += len(result.rebased)
        carried += result.carried
        for i in result.committed:
            for r in result.removed.get(i, []):
                rm = r["remove"]
                totals["numRemovedFiles"] += 1
                totals["numRemovedBytes"] += rm["size"]
                totals["numDeletionVectorsRemoved"] += 1 if rm.get("deletionVector") else 0
                committed_removed.add(rm["path"])
            for a in result.adds.get(i, []):
                totals["numAddedFiles"] += 1
                totals["numAddedBytes"] += a["size"]
                added_sizes.append(a["size"])
                committed_added.append(a)
    out: dict[str, Any] = {}
    if copies is not None:
        out.update(RewriteCounts.total(copies.get(group[i]) for group, r in results for i in r.committed).metrics())
    if clustered:
        after = [a for a in snapshot.add_actions() if a["path"] not in committed_removed] + committed_added
        out["clusteringQualityAfter"] = clustering_quality(after, plan.zorder_columns)
    versions.sort()
    return {**out, **totals, **size_percentiles(added_sizes),
            "status": "committed" if versions else "skipped",
            **({} if versions else {"reason": "every bin was dropped: concurrent commits removed or rewrote "
                                              "its input files"}),
            "version_committed": versions[-1] if versions else None, "versions_committed": versions,
            "numBins": len(plan.bins), "numBinsDroppedByConflicts": len(dropped), "droppedBins": dropped,
            "numBinsRebased": rebased, "numDeletionVectorsCarried": carried,
            **({"leftOut": plan.left_out} if plan.left_out else {}),
            "totalConsideredFiles": plan.num_table_files,
            "totalFilesSkipped": plan.num_table_files - totals["numRemovedFiles"]}

