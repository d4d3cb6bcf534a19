"""Report a table's health without Spark: files, sizes, small files, tombstones, log state.

A large table's files are streamed from the log into aggregates
(:mod:`airflow_delta_maint.delta.health.state_summary`) rather than loaded; the report is the same.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.health.estimates import EstimateInputs
from airflow_delta_maint.delta.health.score import HealthInputs, health_score, inputs_from_aggregates
from airflow_delta_maint.delta.health.state_summary import StateSummary, summarize_state
from airflow_delta_maint.delta.log.cleanup import plan_log_cleanup
from airflow_delta_maint.delta.log.history import LogState, last_operation_version, log_state
from airflow_delta_maint.delta.log.table_header import TableHeader
from airflow_delta_maint.delta.log.table_state import TableState
from airflow_delta_maint.delta.storage.store import Storage
from airflow_delta_maint.delta.protocol.features import Operation, check_supported, table_features

from ..context import JobContext
from ..job_definitions.inspect import INSPECT
from ..state_reading import read_state

NAME = INSPECT.name
DEFAULT_SMALL_FILE_BYTES = 128 * 1024 * 1024
_HIST_EDGES = [0, 1 << 10, 1 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30]




def _label(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size}{unit}"
    return f"{n}B"


def size_histogram(sizes: np.ndarray) -> list[dict[str, Any]]:
    """File counts and bytes per size bucket (fixed, human-readable edges)."""
    edges = _HIST_EDGES + [max(int(sizes.max()) + 1 if len(sizes) else 0, (1 << 30) + 1)]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        mask = (sizes >= lo) & (sizes < hi)
        label = f"[{_label(lo)}, {_label(hi)})" if hi != edges[-1] else f">= {_label(lo)}"
        out.append({"bucket": label, "files": int(mask.sum()), "bytes": int(sizes[mask].sum())})
    return out


def _report_head(storage: Storage, snapshot: TableHeader) -> dict[str, Any]:
    """The report's first keys: the table's header."""
    readers, writers = table_features(snapshot.protocol)
    return {"table": storage.root, "version": snapshot.version,
            "protocol": {"min_reader_version": snapshot.protocol.min_reader_version,
                         "min_writer_version": snapshot.protocol.min_writer_version,
                         "reader_features": sorted(readers), "writer_features": sorted(writers)},
            "partition_columns": snapshot.partition_columns, "properties": dict(snapshot.metadata.configuration)}


def inspect_table(state: TableHeader, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
                  with_files: bool = False) -> dict[str, Any]:
    """The health report of a table's state (no Spark), from aggregates of its scan: the same for
    the eager state and the streamed one; ``with_files`` lists the live files' paths too."""
    shell = state
    check_supported(shell.protocol, Operation.INSPECT)
    summary, health, log_now = _summary(state, small_file_bytes)
    storage = state.storage
    at_latest = shell.version == log_now.latest_version
    last_optimize = last_operation_version(storage, ["OPTIMIZE"], shell.version, max_commits=10_000, stop_at=0)
    histogram = []
    for i, lo in enumerate(_HIST_EDGES):
        label = f"[{_label(lo)}, {_label(_HIST_EDGES[i + 1])})" if i + 1 < len(_HIST_EDGES) else f">= {_label(lo)}"
        histogram.append({"bucket": label, "files": summary.bucket_files[i], "bytes": summary.bucket_bytes[i]})
    checkpoint = shell.segment.checkpoint_version
    report: dict[str, Any] = {
        **_report_head(storage, shell),
        "num_files": summary.num_files,
        "size_bytes": summary.size_bytes,
        "avg_file_bytes": int(summary.size_bytes / summary.num_files) if summary.num_files else 0,
        "small_file_bytes": small_file_bytes,
        "num_small_files": summary.num_small_files,
        "small_files_bytes": summary.small_files_bytes,
        "num_files_with_deletion_vectors": summary.dv_files,
        # files data skipping cannot use; compute-stats gives them statistics
        "num_files_without_stats": summary.files_without_stats,
        "num_files_missing_stats_columns": summary.files_missing_stats_columns,
        "file_size_histogram": histogram,
        "num_tombstones": summary.num_tombstones,
        "tombstone_bytes": summary.tombstone_total_bytes,
        "last_checkpoint_version": checkpoint,
        "commits_since_checkpoint": shell.version - (checkpoint if checkpoint is not None else -1),
        "last_compaction_end": log_now.last_compaction_end if at_latest else None,
        "commits_since_compaction": log_now.commits_since_compaction if at_latest else None,
        "last_optimize_version": last_optimize,
        "commits_since_optimize": shell.version - last_optimize if last_optimize is not None else None,
        # checkpoints and compaction files that disagree with the log: readers that trust them
        # (other engines) see another table than the commits say
        "distrusted_log_files": list(state.distrusted),
        "health": health_score(health),
        # what each job would gain and cost here, from these aggregates alone
        "estimates": job_estimates(_inputs(state, summary, health, with_expired_log=True)),
    }
    if with_files:
        report["files"] = [p for _kind, table in state.scan([]) for p in table.column("path").to_pylist()]
    return report


def _summary(state: TableHeader, small_file_bytes: int) -> tuple[StateSummary, HealthInputs, LogState]:
    """The state's aggregates, the health score's inputs from them, and the log's state now."""
    summary = summarize_state(state, small_file_bytes, _HIST_EDGES)
    log_now = log_state(state.storage)
    health = inputs_from_aggregates(
        state, log_now if state.version == log_now.latest_version else None, num_files=summary.num_files,
        size_bytes=summary.size_bytes, target_file_bytes=int(small_file_bytes),
        num_small_files=summary.num_small_files, small_files_bytes=summary.small_files_bytes,
        excess_small_files=summary.excess_small_files(int(small_file_bytes)) if summary.num_small_files else 0,
        num_records=summary.num_records, deleted_rows=summary.deleted_rows,
        tombstone_bytes=summary.tombstone_gone_bytes, files_without_stats=summary.files_without_stats or 0,
        files_missing_stats_columns=summary.files_missing_stats_columns or 0)
    return summary, health, log_now


def estimate_inputs(state: TableHeader, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES, *,
                    with_expired_log: bool = True) -> EstimateInputs:
    """What the jobs' estimates read of a table's state (the health report's aggregates, no data file read);
    ``with_expired_log``: the expired log's cleanup planned too (else its estimate is unknown)."""
    check_supported(state.protocol, Operation.INSPECT)
    summary, health, _ = _summary(state, small_file_bytes)
    return _inputs(state, summary, health, with_expired_log=with_expired_log)


def _inputs(state: TableHeader, summary: StateSummary, health: HealthInputs, *,
            with_expired_log: bool) -> EstimateInputs:
    expired, expired_bytes = expired_log(state) if with_expired_log else (None, 0)
    return EstimateInputs(health, summary.dv_files, summary.num_tombstones, expired, expired_bytes,
                          checkpointed=state.segment.checkpoint_version is not None)


def expired_log(state: TableHeader) -> tuple[int | None, int]:
    """The log files the expired log's cleanup would delete now under the table's own retention, and their bytes
    (the cleanup's own plan: one listing of the log, the oldest commits' times); None files where the cleanup
    does not apply (a table feature it does not support)."""
    try:
        plan = plan_log_cleanup(state.storage, snapshot=state)
    except (DeltaError, OSError):  # a feature it does not support, a log file gone since the listing
        return None, 0
    return len(plan.files), sum(f.size for f in plan.files)


def job_estimates(inputs: EstimateInputs) -> dict[str, dict[str, Any]]:
    """Each job's estimate on the table ``inputs`` describe (the jobs that change something and have one)."""
    from ..job_definitions import JOBS

    return {name: found.as_dict() for name, job in JOBS.items() if (found := job.estimate(inputs)) is not None}


def _estimate_line(name: str, e: dict[str, Any]) -> str:
    gain, cost = e["gain"], e["cost"]
    gained = [f"{label} {gain[key] if key != 'bytes_freed' and key != 'dv_bytes_purged' else _label(gain[key])}"
              for key, label in (("files_removed", "files removed"), ("dv_bytes_purged", "deleted rows purged"),
                                 ("files_given_stats", "files given statistics"),
                                 ("log_files_not_replayed", "log files not replayed"), ("bytes_freed", "freed"))
              if gain[key]]
    if not gained:
        return f"  {name:<14} nothing to gain"
    return (f"  {name:<14} {', '.join(gained)}; health {gain['score_before']} -> {gain['score_after']}; "
            f"reads {_label(cost['bytes_read'])}, writes {_label(cost['bytes_written'])}, ~{cost['cpu_s']:g} CPU s")


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    def inspect(state: TableState) -> dict[str, Any]:
        ctx.version_read = state.version
        report = inspect_table(state, args.small_file_bytes, args.files)
        report.pop("table")
        return {"status": "skipped", "version_read": state.version, **report}

    # a list of every file keeps the order of the state in memory
    return read_state(ctx.storage, inspect, args.version, NAME, streamed=not args.files)


def format_human(m: dict[str, Any]) -> str:
    lines = [
        f"table            {m['table']}",
        f"version          {m['version']}",
        f"protocol         reader {m['protocol']['min_reader_version']}, writer {m['protocol']['min_writer_version']}"
        + (f"; features {', '.join(sorted(set(m['protocol']['reader_features']) | set(m['protocol']['writer_features'])))}"
           if m['protocol']['reader_features'] or m['protocol']['writer_features'] else ""),
        f"partitioned by   {', '.join(m['partition_columns']) or '-'}",
        f"files            {m['num_files']} ({_label(m['size_bytes'])}, avg {_label(m['avg_file_bytes'])})",
        f"small files      {m['num_small_files']} below {_label(m['small_file_bytes'])} ({_label(m['small_files_bytes'])})",
        f"deletion vectors {m['num_files_with_deletion_vectors']} files",
        f"tombstones       {m['num_tombstones']} ({_label(m['tombstone_bytes'])})",
        f"checkpoint       {m['last_checkpoint_version']} ({m['commits_since_checkpoint']} commits since)",
        f"log compaction   {m['last_compaction_end']} ({m['commits_since_compaction']} commits since)",
        f"last OPTIMIZE    {m['last_optimize_version']}"
        + (f" ({m['commits_since_optimize']} commits since)" if m['last_optimize_version'] is not None else ""),
        f"health           {m['health']['score']}/100 ("
        + ", ".join(f"{k} -{v['points_lost']:g}" for k, v in m['health']['parts'].items() if v['points_lost']) + ")",
        "file sizes:",
    ]
    for d in m.get("distrusted_log_files") or ():
        lines.append(f"DISTRUSTED       {d['file']}: {d['reason']}")
    width = max((h["files"] for h in m["file_size_histogram"]), default=0) or 1
    for h in m["file_size_histogram"]:
        bar = "#" * max(1 if h["files"] else 0, round(40 * h["files"] / width))
        lines.append(f"  {h['bucket']:>18} {h['files']:>8} {bar}")
    if m.get("estimates"):
        lines.append("each job here would (estimated from the log):")
        lines.extend(_estimate_line(name, e) for name, e in m["estimates"].items())
    if "files" in m:
        lines.append("files:")
        lines.extend(f"  {p}" for p in m["files"])
    return "\n".join(lines)
