"""The maintenance report: one self-contained HTML file from the run log and the tables' logs.

Reads the run log and each table through the Delta core; never starts Spark and needs no
Airflow. Plots are drawn with matplotlib (Agg backend) and embedded as base64 PNG.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from airflow_delta_maint.app.job_definitions.optimize import OPTIMIZE
from airflow_delta_maint.app.job_definitions.vacuum import VACUUM
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.delta.health.run_log import read_runs
from airflow_delta_maint.delta.log.snapshot import Snapshot
from airflow_delta_maint.delta.log.table_state import read_table
from airflow_delta_maint.delta.storage.store import Storage

from airflow_delta_maint.app.jobs.inspect import DEFAULT_SMALL_FILE_BYTES, inspect_table, size_histogram
from airflow_delta_maint.app.report.budget import budget_section_html
from airflow_delta_maint.app.report.lake_health import UNHEALTHY_BELOW, lake_health_nights, lake_health_section_html

log = logging.getLogger("delta_maint")

__all__ = ["html_document", "lake_health_plot", "load_runs", "render_report", "summarize_tables", "table_detail",
           "write_report"]

#: versions sampled for the over-time plots, at most
MAX_SAMPLES = 30
_STATUS_COLORS = {"committed": "#2e7d32", "skipped": "#9e9e9e", "dry_run": "#1976d2", "failed": "#c62828"}


def load_runs(history_uri: str, storage_options: Mapping[str, str] | None = None,
              tables: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The run log's rows as dicts (``metrics`` parsed), oldest first."""
    rows = read_runs(history_uri, storage_options, tables=tables).to_pylist()
    for row in rows:
        try:
            row["metrics"] = json.loads(row["metrics"]) if row.get("metrics") else {}
        except ValueError:
            row["metrics"] = {}
    return rows


def _by_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        out.setdefault(str(run.get("table_uri")), []).append(run)
    return out


def _health(table: str, storage_options: Mapping[str, str] | None,
            small_file_bytes: int) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return read_table(Storage(table, storage_options), lambda state: inspect_table(state, small_file_bytes),
                          what="the report"), None
    except DeltaError as exc:
        return None, str(exc)


def summarize_tables(runs: Sequence[Mapping[str, Any]], storage_options: Mapping[str, str] | None = None,
                     small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> list[dict[str, Any]]:
    """One line per table of the run log: health now, runs, failures, the last run."""
    out = []
    for table, table_runs in sorted(_by_table(runs).items()):
        report, error = _health(table, storage_options, small_file_bytes)
        last = table_runs[-1]
        out.append({
            "table": table,
            "score": report["health"]["score"] if report else None,
            "error": error,
            "num_files": report["num_files"] if report else None,
            "num_small_files": report["num_small_files"] if report else None,
            "runs": len(table_runs),
            "failures": sum(1 for r in table_runs if r.get("status") == "failed"),
            "last_run": last,
        })
    return out


def _sample_versions(runs: Sequence[Mapping[str, Any]], latest: int) -> list[int]:
    versions = {latest}
    for run in runs:
        for key in ("version_read", "version_committed"):
            if run.get(key) is not None and 0 <= int(run[key]) <= latest:
                versions.add(int(run[key]))
    ordered = sorted(versions)
    if len(ordered) > MAX_SAMPLES:
        picks = np.linspace(0, len(ordered) - 1, MAX_SAMPLES).round().astype(int)
        ordered = sorted({ordered[i] for i in picks})
    return ordered


def _over_time(storage: Storage, versions: Sequence[int], small_file_bytes: int) -> list[dict[str, int]]:
    points = []
    for version in versions:
        try:
            snap = Snapshot.load(storage, version)
        except DeltaError:  # cleaned up or unreadable: no point for it
            continue
        sizes = snap.files.column("size").to_numpy(zero_copy_only=False) if snap.num_files else np.zeros(0)
        checkpoint = snap.segment.checkpoint_version
        points.append({"version": version, "num_files": int(len(sizes)),
                       "num_small_files": int((sizes < small_file_bytes).sum()),
                       "commits_since_checkpoint": version - (checkpoint if checkpoint is not None else -1)})
    return points


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plots(report: Mapping[str, Any] | None, optimized: list[dict[str, Any]] | None, optimize_version: int | None,
           points: list[dict[str, int]], runs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    # Figures without pyplot: no global state, so the UI's threads can draw at once (Agg canvas)
    from matplotlib.figure import Figure

    def subplots(size: tuple[float, float]) -> tuple[Any, Any]:
        fig = Figure(figsize=size)
        return fig, fig.subplots()

    plots: dict[str, str] = {}
    if report is not None:
        parts = report["health"]["parts"]
        fig, ax = subplots((6, 2.6))
        names = list(parts)
        ax.barh(names, [parts[n]["weight"] for n in names], color="#e0e0e0", label="weight")
        ax.barh(names, [parts[n]["points_lost"] for n in names], color="#c62828", label="points lost")
        ax.invert_yaxis()
        ax.set_title(f"health {report['health']['score']}/100")
        ax.legend(loc="lower right", fontsize=8)
        plots["health"] = _png(fig)

        fig, ax = subplots((7, 3))
        now = report["file_size_histogram"]
        x = np.arange(len(now))
        ax.bar(x - 0.2, [h["files"] for h in now], 0.4, label=f"now (v{report['version']})")
        if optimized is not None:
            ax.bar(x + 0.2, [h["files"] for h in optimized], 0.4, label=f"after last OPTIMIZE (v{optimize_version})")
        ax.set_xticks(x, [h["bucket"] for h in now], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("files")
        ax.set_title("file sizes")
        ax.legend(fontsize=8)
        plots["file_sizes"] = _png(fig)
    if points:
        fig, ax = subplots((7, 3))
        v = [p["version"] for p in points]
        ax.plot(v, [p["num_small_files"] for p in points], marker="o", label="small files")
        ax.plot(v, [p["num_files"] for p in points], marker=".", label="files", alpha=0.6)
        ax.set_xlabel("table version")
        ax.set_ylabel("files")
        ax2 = ax.twinx()
        ax2.plot(v, [p["commits_since_checkpoint"] for p in points], color="#ef6c00", linestyle="--",
                 label="commits since checkpoint")
        ax2.set_ylabel("log length")
        lines = ax.get_legend_handles_labels()
        more = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
        ax.set_title("small files and log length over time")
        plots["over_time"] = _png(fig)
    if runs:
        labels = [f"{r.get('operation')}\n{_short_time(r.get('started_at'))}" for r in runs]
        x = np.arange(len(runs))
        fig, ax = subplots((max(6, 0.5 * len(runs)), 3))
        rewritten = [_num(r["metrics"].get("numRemovedBytes")) if r.get("operation") == OPTIMIZE.name else 0
                     for r in runs]
        reclaimed = [_num(r["metrics"].get("sizeOfDataToDelete"))
                     if r.get("operation") == VACUUM.name and r.get("status") == "committed" else 0 for r in runs]
        ax.bar(x - 0.2, [b / 2**20 for b in rewritten], 0.4, label="rewritten (OPTIMIZE)")
        ax.bar(x + 0.2, [b / 2**20 for b in reclaimed], 0.4, label="reclaimed (VACUUM)")
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylabel("MiB")
        ax.set_title("bytes rewritten and reclaimed per run")
        ax.legend(fontsize=8)
        plots["bytes"] = _png(fig)

        fig, ax = subplots((max(6, 0.5 * len(runs)), 3))
        ax.bar(x, [r.get("duration_s") or 0 for r in runs],
               color=[_STATUS_COLORS.get(str(r.get("status")), "#616161") for r in runs])
        for i, r in enumerate(runs):
            if r.get("status") == "failed":
                ax.annotate("failed", (i, r.get("duration_s") or 0), ha="center", va="bottom", color="#c62828",
                            fontsize=7)
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title("duration per run (green committed, grey skipped, blue dry run, red failed)")
        plots["durations"] = _png(fig)
    return plots


def lake_health_plot(runs: Sequence[Mapping[str, Any]]) -> str | None:
    """The lake's health over the nights as a PNG data URI (None without a night that has estimates)."""
    nights = lake_health_nights(runs)[::-1]  # oldest first, left to right
    if not nights:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6, 0.6 * len(nights)), 3))
    ax = fig.subplots()
    x = np.arange(len(nights))
    ax.plot(x, [n["median_before"] for n in nights], marker="o", label="median before")
    ax.plot(x, [n["median_after"] for n in nights], marker="o", linestyle="--", label="median predicted after")
    ax.plot(x, [n["min_before"] for n in nights], marker=".", color="#c62828", label="lowest before")
    ax.axhline(UNHEALTHY_BELOW, color="#9e9e9e", linewidth=0.8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("health score")
    ax.set_xticks(x, [n["night"] for n in nights], rotation=30, ha="right", fontsize=7)
    ax.set_title("the lake's health per night (UTC)")
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def _num(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _short_time(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%m-%d %H:%M")
    return str(value or "")[:16]


def table_detail(table: str, runs: Sequence[Mapping[str, Any]], storage_options: Mapping[str, str] | None = None,
                 small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> dict[str, Any]:
    """Everything the report shows for one table: health, histograms, series and plots."""
    report, error = _health(table, storage_options, small_file_bytes)
    optimized = optimize_version = None
    points: list[dict[str, int]] = []
    if report is not None:
        storage = Storage(table, storage_options)
        optimize_version = report.get("last_optimize_version")
        if optimize_version is not None:
            try:
                snap = Snapshot.load(storage, optimize_version)
                sizes = snap.files.column("size").to_numpy(zero_copy_only=False).astype(np.int64) \
                    if snap.num_files else np.zeros(0, dtype=np.int64)
                optimized = size_histogram(sizes)
            except DeltaError as exc:
                log.info("no file sizes at the last OPTIMIZE (version %s) of %s: %s", optimize_version, table, exc)
        points = _over_time(storage, _sample_versions(runs, report["version"]), small_file_bytes)
    return {"table": table, "report": report, "error": error, "optimize_version": optimize_version,
            "optimized_histogram": optimized, "over_time": points, "runs": list(runs),
            "plots": _plots(report, optimized, optimize_version, points, runs)}


def dag_run_link(base_url: str | None, run: Mapping[str, Any]) -> str | None:
    """The Airflow UI address of the DAG run (task instance when known) that made a run."""
    if not base_url or not run.get("dag_id") or not run.get("dag_run_id"):
        return None
    link = f"{base_url.rstrip('/')}/dags/{quote(str(run['dag_id']), safe='')}/runs/{quote(str(run['dag_run_id']), safe='')}"
    if run.get("task_id"):
        link += f"/tasks/{quote(str(run['task_id']), safe='')}"
    return link


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#212121}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}
th{background:#f5f5f5}.failed{color:#c62828;font-weight:bold}.committed{color:#2e7d32}
.score{font-size:1.4em;font-weight:bold}img{max-width:100%;margin:.3em}section{margin-bottom:2em}
td[data-col=night],td[data-col=budget]{white-space:nowrap}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def html_document(title: str, body: str) -> str:
    """
    A whole HTML page in the report's style: the document head (``title`` escaped) around ``body``.

    :param title: the page's title.
    :param body: the page's content, HTML.
    """
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>")


def runs_table_html(runs: Sequence[Mapping[str, Any]], base_url: str | None = None, limit: int = 25) -> str:
    """The last ``limit`` runs as an HTML table, newest first."""
    rows = []
    for r in list(runs)[::-1][:limit]:
        link = dag_run_link(base_url, r)
        where = f'<a href="{_e(link)}" target="_top">{_e(r.get("dag_id"))} / {_e(r.get("task_id"))}</a>' if link \
            else _e(r.get("dag_id") or "command line")
        rows.append(
            f"<tr><td>{_e(_short_time(r.get('started_at')))}</td><td>{_e(r.get('operation'))}</td>"
            f"<td class=\"{_e(r.get('status'))}\">{_e(r.get('status'))}</td>"
            f"<td>{_e(r.get('version_read'))} &rarr; {_e(r.get('version_committed'))}</td>"
            f"<td>{_e(r.get('duration_s'))}</td><td>{where}</td><td>{_e(r.get('error'))}</td></tr>")
    return ("<table><tr><th>started (UTC)</th><th>operation</th><th>status</th><th>versions</th><th>seconds</th>"
            "<th>DAG run</th><th>error</th></tr>" + "".join(rows) + "</table>")


def table_section_html(detail: Mapping[str, Any], base_url: str | None = None) -> str:
    """One table's section: score and parts, plots, recent runs."""
    report = detail["report"]
    out = [f"<h2>{_e(detail['table'])}</h2>"]
    if report is None:
        out.append(f"<p class=\"failed\">cannot read the table: {_e(detail['error'])}</p>")
    else:
        health = report["health"]
        out.append(f"<p><span class=\"score\">health {health['score']}/100</span> at version {report['version']}, "
                   f"{report['num_files']} files, {report['num_small_files']} small</p>")
        out.append("<table><tr><th>part</th><th>weight</th><th>penalty</th><th>points lost</th><th>inputs</th></tr>")
        for name, part in health["parts"].items():
            inputs = ", ".join(f"{k}={v}" for k, v in part.items() if k not in ("weight", "penalty", "points_lost"))
            out.append(f"<tr><td>{_e(name)}</td><td>{part['weight']}</td><td>{part['penalty']}</td>"
                       f"<td>{part['points_lost']}</td><td>{_e(inputs)}</td></tr>")
        out.append("</table>")
    for name, src in detail["plots"].items():
        out.append(f'<img alt="{_e(name)}" data-plot="{_e(name)}" src="{src}">')
    out.append(runs_table_html(detail["runs"], base_url))
    return "<section>" + "".join(out) + "</section>"


def render_report(history_uri: str, tables: Sequence[str] | None = None,
                  storage_options: Mapping[str, str] | None = None, *,
                  small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES, base_url: str | None = None) -> str:
    """The whole report as one HTML document (images embedded)."""
    runs = load_runs(history_uri, storage_options, tables)
    by_table = _by_table(runs)
    names = list(tables) if tables else sorted(by_table)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["<h1>Delta maintenance report</h1>"
           f"<p>history {_e(history_uri)}: {len(runs)} runs on {len(by_table)} tables; generated {generated}</p>"]
    if not runs:
        out.append("<p>No maintenance runs recorded yet.</p>")
    else:
        out.append("<table><tr><th>table</th><th>health</th><th>runs</th><th>failures</th><th>last run</th></tr>")
        for line in summarize_tables(runs, storage_options, small_file_bytes):
            last = line["last_run"]
            score = line["score"] if line["score"] is not None else "unreadable"
            out.append(f"<tr><td>{_e(line['table'])}</td><td>{_e(score)}</td><td>{line['runs']}</td>"
                       f"<td>{line['failures']}</td><td>{_e(last.get('operation'))} "
                       f"<span class=\"{_e(last.get('status'))}\">{_e(last.get('status'))}</span> "
                       f"{_e(_short_time(last.get('started_at')))}</td></tr>")
        out.append("</table>")
        out.append(budget_section_html(runs))
        out.append(lake_health_section_html(runs, lake_health_plot(runs)))
    for name in names:
        if name in by_table:
            out.append(table_section_html(table_detail(name, by_table[name], storage_options, small_file_bytes),
                                          base_url))
    out.append("")  # the body ends with a line break
    return html_document("Delta maintenance report", "\n".join(out))


def write_report(history_uri: str, out_path: str, tables: Sequence[str] | None = None,
                 storage_options: Mapping[str, str] | None = None, **kwargs: Any) -> str:
    """Render the report and write it to ``out_path`` (a local file); return the path."""
    import os

    document = render_report(history_uri, tables, storage_options, **kwargs)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = f"{out_path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(document)
    os.replace(tmp, out_path)
    return os.path.abspath(out_path)
