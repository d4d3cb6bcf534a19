"""The budget's part of the report and the UI page: each night's runs, deferrals, CPU-seconds measured against
predicted, and the runs waiting now, from the maintenance history's rows alone."""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["budget_nights", "budget_section_html", "budget_text", "budget_used", "html_row", "night_of", "run_metrics",
           "waiting_now"]

#: nights shown, newest first
NIGHTS_SHOWN = 14
#: a budget's limits, in the order they are shown
LIMITS = ("cpu_s", "bytes_rewritten", "max_tables", "deadline_s", "cores")


def run_metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's metrics (the history's JSON text, or already parsed as the report's ``load_runs`` gives them)."""
    metrics = row.get("metrics") or {}
    return dict(metrics) if isinstance(metrics, Mapping) else json.loads(metrics)


def night_of(row: Mapping[str, Any]) -> str:
    """A row's night: the UTC date of its ``started_at`` (``2026-11-23``)."""
    return str(row.get("started_at") or "")[:10]


def _new_night(name: str) -> dict[str, Any]:
    return {"night": name, "committed": 0, "deferred": 0, "left": 0, "cpu_s": 0.0, "predicted_cpu_s": 0.0,
            "measured_cpu_s": 0.0, "budget": None, "tables": set(), "bytes_rewritten": 0, "duration_s": 0.0,
            "errors": []}


def _add_planned_run(night: dict[str, Any], row: Mapping[str, Any], m: Mapping[str, Any]) -> None:
    """A committed run a plan chose: its prediction beside its measure, and what it used of the budget."""
    night["predicted_cpu_s"] += float(m["predicted_cpu_s"])
    night["measured_cpu_s"] += float(m["cpu_s"])
    if m["cpu_s"]:
        night["errors"].append(abs(m["predicted_cpu_s"] - m["cpu_s"]) / m["cpu_s"])
    night["tables"].add(str(row.get("table_uri")))
    night["bytes_rewritten"] += int(m.get("numRemovedBytes") or 0) if row.get("operation") == "optimize" else 0
    night["duration_s"] += float(row.get("duration_s") or 0.0)


def budget_nights(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per night (UTC date), newest first: runs committed, deferred and left, CPU-seconds measured and, for the
    runs a plan chose, predicted against measured with the median relative error; the night's budget (the limits
    its newest plan recorded, None before any) and what the chosen runs used of it (``tables``,
    ``bytes_rewritten``, ``duration_s``)."""
    nights: dict[str, dict[str, Any]] = {}
    for row in runs:
        m = run_metrics(row)
        night = nights.setdefault(night_of(row), _new_night(night_of(row)))
        if isinstance(m.get("budget"), Mapping):
            night["budget"] = dict(m["budget"])
        if row.get("status") == "committed":
            night["committed"] += 1
            night["cpu_s"] += float(m.get("cpu_s") or 0.0)
            if isinstance(m.get("predicted_cpu_s"), (int, float)) and isinstance(m.get("cpu_s"), (int, float)):
                _add_planned_run(night, row, m)
        elif m.get("left"):
            night["left"] += 1
        elif m.get("deferred"):
            night["deferred"] += 1
    out = []
    for night in sorted(nights.values(), key=lambda n: n["night"], reverse=True):
        errors = night.pop("errors")
        night["median_error"] = round(statistics.median(errors), 3) if errors else None
        night["tables"] = len(night["tables"])
        out.append({k: round(v, 3) if isinstance(v, float) else v for k, v in night.items()})
    return out


def budget_used(night: Mapping[str, Any]) -> str:
    """What a night's chosen runs used of each limit of its budget, e.g. ``1.2 of 60 CPU-s predicted, 1 of 2
    tables`` (empty without a budget)."""
    budget = night.get("budget") or {}
    parts = []
    if budget.get("cpu_s") is not None:
        parts.append(f"{night['predicted_cpu_s']:g} of {budget['cpu_s']:g} CPU-s predicted")
    if budget.get("bytes_rewritten") is not None:
        parts.append(f"{_mib(night['bytes_rewritten'])} of {_mib(budget['bytes_rewritten'])} MiB rewritten")
    if budget.get("max_tables") is not None:
        parts.append(f"{night['tables']} of {budget['max_tables']:g} tables")
    if budget.get("deadline_s") is not None:
        parts.append(f"{night['duration_s']:g} of {budget['deadline_s']:g} s")
    return ", ".join(parts)


def _mib(size: float) -> str:
    return f"{size / 2**20:.3g}"


def budget_text(budget: Mapping[str, Any] | None) -> str:
    """A budget's limits as they are given (``cpu_s=3600, max_tables=200``), in the order of :data:`LIMITS`."""
    limits = sorted((budget or {}).items(), key=lambda kv: LIMITS.index(kv[0]) if kv[0] in LIMITS else len(LIMITS))
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in limits
                     if isinstance(v, (int, float)))


def waiting_now(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The (table, job) runs whose newest record deferred them: what the next night owes."""
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in runs:
        newest[(str(row.get("table_uri")), str(row.get("operation")))] = row
    out = []
    for (table, job), row in sorted(newest.items()):
        m = run_metrics(row)
        if row.get("status") == "skipped" and m.get("deferred"):
            out.append({"table": table, "job": job, "reason": m.get("reason"),
                        "nights_waiting": m.get("nights_waiting"), "predicted_cpu_s": m.get("predicted_cpu_s")})
    return out


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def budget_section_html(runs: Sequence[Mapping[str, Any]]) -> str:
    """The budget's section (empty when no run was planned under a budget or measured)."""
    nights = budget_nights(runs)
    if not any(n["deferred"] or n["left"] or n["predicted_cpu_s"] for n in nights):
        return ""
    out = ["<h2>Budget</h2><table id=\"budget-nights\"><tr><th>night (UTC)</th><th>runs</th><th>deferred</th>"
           "<th>left when the budget ran out</th><th>CPU-s measured</th><th>planned runs: predicted / measured "
           "CPU-s</th><th>median prediction error</th><th>budget</th><th>used of the budget</th></tr>"]
    for n in nights[:NIGHTS_SHOWN]:
        error = f"{n['median_error']:.0%}" if n["median_error"] is not None else ""
        cells = {"night": n["night"], "runs": n["committed"], "deferred": n["deferred"], "left": n["left"],
                 "cpu": f"{n['cpu_s']:g}", "predicted-measured": f"{n['predicted_cpu_s']:g} / {n['measured_cpu_s']:g}",
                 "error": error, "budget": budget_text(n["budget"]), "used": budget_used(n)}
        out.append(html_row("night", n["night"], cells))
    out.append("</table>")
    waiting = waiting_now(runs)
    if waiting:
        out.append("<h3>Waiting for the next night</h3><table id=\"budget-waiting\"><tr><th>table</th><th>job</th>"
                   "<th>nights waited</th><th>predicted CPU-s</th><th>why</th></tr>")
        for w in waiting:
            cells = {"table": w["table"], "job": w["job"], "nights": w["nights_waiting"],
                     "predicted": w["predicted_cpu_s"], "reason": w["reason"]}
            out.append(html_row("table", w["table"], cells))
        out.append("</table>")
    return "".join(out)


def html_row(key: str, value: Any, cells: Mapping[str, Any]) -> str:
    """A table row whose ``data-<key>`` and cells' ``data-col`` name what they hold (escaped)."""
    return (f"<tr data-{key}=\"{_e(value)}\">"
            + "".join(f"<td data-col=\"{_e(col)}\">{_e(text)}</td>" for col, text in cells.items()) + "</tr>")
