"""The budget's part of the report and the UI page: each night's runs, deferrals, CPU-seconds measured against
predicted, and the runs waiting now, from the maintenance history's rows alone."""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["budget_nights", "budget_section_html", "waiting_now"]

#: nights shown, newest first
NIGHTS_SHOWN = 14


def _metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's metrics (the history's JSON text, or already parsed as the report's ``load_runs`` gives them)."""
    metrics = row.get("metrics") or {}
    return dict(metrics) if isinstance(metrics, Mapping) else json.loads(metrics)


def _night(row: Mapping[str, Any]) -> str:
    return str(row.get("started_at") or "")[:10]


def budget_nights(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per night (UTC date), newest first: runs committed, deferred and left, CPU-seconds measured and, for the
    runs a plan chose, predicted against measured with the median relative error."""
    nights: dict[str, dict[str, Any]] = {}
    for row in runs:
        m = _metrics(row)
        night = nights.setdefault(_night(row), {"night": _night(row), "committed": 0, "deferred": 0, "left": 0,
                                                "cpu_s": 0.0, "predicted_cpu_s": 0.0, "measured_cpu_s": 0.0,
                                                "errors": []})
        if row.get("status") == "committed":
            night["committed"] += 1
            night["cpu_s"] += float(m.get("cpu_s") or 0.0)
            if isinstance(m.get("predicted_cpu_s"), (int, float)) and isinstance(m.get("cpu_s"), (int, float)):
                night["predicted_cpu_s"] += float(m["predicted_cpu_s"])
                night["measured_cpu_s"] += float(m["cpu_s"])
                if m["cpu_s"]:
                    night["errors"].append(abs(m["predicted_cpu_s"] - m["cpu_s"]) / m["cpu_s"])
        elif m.get("left"):
            night["left"] += 1
        elif m.get("deferred"):
            night["deferred"] += 1
    out = []
    for night in sorted(nights.values(), key=lambda n: n["night"], reverse=True):
        errors = night.pop("errors")
        night["median_error"] = round(statistics.median(errors), 3) if errors else None
        out.append({k: round(v, 3) if isinstance(v, float) else v for k, v in night.items()})
    return out


def waiting_now(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The (table, job) runs whose newest record deferred them: what the next night owes."""
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in runs:
        newest[(str(row.get("table_uri")), str(row.get("operation")))] = row
    out = []
    for (table, job), row in sorted(newest.items()):
        m = _metrics(row)
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
           "CPU-s</th><th>median prediction error</th></tr>"]
    for n in nights[:NIGHTS_SHOWN]:
        error = f"{n['median_error']:.0%}" if n["median_error"] is not None else ""
        out.append(f"<tr><td>{_e(n['night'])}</td><td>{n['committed']}</td><td>{n['deferred']}</td>"
                   f"<td>{n['left']}</td><td>{n['cpu_s']:g}</td><td>{n['predicted_cpu_s']:g} / "
                   f"{n['measured_cpu_s']:g}</td><td>{error}</td></tr>")
    out.append("</table>")
    waiting = waiting_now(runs)
    if waiting:
        out.append("<h3>Waiting for the next night</h3><table id=\"budget-waiting\"><tr><th>table</th><th>job</th>"
                   "<th>nights waited</th><th>predicted CPU-s</th><th>why</th></tr>")
        for w in waiting:
            out.append(f"<tr><td>{_e(w['table'])}</td><td>{_e(w['job'])}</td><td>{_e(w['nights_waiting'])}</td>"
                       f"<td>{_e(w['predicted_cpu_s'])}</td><td>{_e(w['reason'])}</td></tr>")
        out.append("</table>")
    return "".join(out)
