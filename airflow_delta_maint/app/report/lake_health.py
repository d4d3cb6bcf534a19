"""The lake's health over time, for the report and the UI page: per night, the health scores of the tables as the
night's plan saw them and what the night's runs were predicted to leave, from the maintenance history's rows alone.

Only rows whose metrics carry a plan's ``estimate`` count (runs a plan under a budget chose, deferred, left or
skipped for having nothing to gain); the rows of fleets run without a budget carry none and add nothing. Per night
(the UTC date of ``started_at``) and table:

- **score before**: the ``gain.score_before`` of the table's earliest row of the night that carries an estimate
  (the night's first look at the table; every estimate of one look gives the same score);
- **score after**: the score before plus the points each of the table's *committed* runs of the night was
  predicted to win (``score_after - score_before`` of its estimate), held within 0-100. The runs of one night mostly
  mend different parts of the score (OPTIMIZE the small files, VACUUM the tombstones, a checkpoint the log), so
  their gains add up; a second plan on the same night predicts from the state the first one left. A table whose
  runs were deferred, left, failed or had nothing to gain keeps its score before.

A night shows the tables seen, the median and the lowest score before, the median score after, and the tables
below :data:`UNHEALTHY_BELOW` before and after.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_delta_maint.app.report.budget import NIGHTS_SHOWN, html_row, night_of, run_metrics

__all__ = ["UNHEALTHY_BELOW", "lake_health_nights", "lake_health_section_html"]

#: a table scoring below this is counted as unhealthy: it has lost more points than the small-file part alone can
#: take (30 of 100), so at least two kinds of debt are piling up, or one is at its worst
UNHEALTHY_BELOW = 70


@dataclass
class _TableNight:
    """One table's night: its score at the night's first look and the points its committed runs should win."""

    before: float
    gained: float = 0.0

    @property
    def after(self) -> float:
        return min(100.0, max(0.0, self.before + self.gained))


def _gain_scores(metrics: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(score_before, score_after)`` of a run's estimate, or None when it carries none."""
    estimate = metrics.get("estimate")
    gain = estimate.get("gain") if isinstance(estimate, Mapping) else None
    if not isinstance(gain, Mapping):
        return None
    before, after = gain.get("score_before"), gain.get("score_after")
    if not isinstance(before, (int, float)) or isinstance(before, bool):
        return None
    return float(before), float(after) if isinstance(after, (int, float)) else float(before)


def _tables_by_night(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, _TableNight]]:
    nights: dict[str, dict[str, _TableNight]] = {}
    for row in sorted(runs, key=lambda r: str(r.get("started_at") or "")):
        scores = _gain_scores(run_metrics(row))
        if scores is None:
            continue
        tables = nights.setdefault(night_of(row), {})
        table = tables.setdefault(str(row.get("table_uri")), _TableNight(scores[0]))
        if row.get("status") == "committed":
            table.gained += scores[1] - scores[0]
    return nights


def lake_health_nights(runs: Sequence[Mapping[str, Any]], nights_shown: int = NIGHTS_SHOWN) -> list[dict[str, Any]]:
    """Per night with estimates, newest first (at most ``nights_shown``): ``tables`` seen, ``median_before``,
    ``min_before``, ``median_after``, and ``below_before``/``below_after``, the tables under
    :data:`UNHEALTHY_BELOW`."""
    out = []
    for night, tables in sorted(_tables_by_night(runs).items(), reverse=True)[:nights_shown]:
        before = [t.before for t in tables.values()]
        after = [t.after for t in tables.values()]
        out.append({"night": night, "tables": len(tables), "median_before": statistics.median(before),
                    "min_before": min(before), "median_after": statistics.median(after),
                    "below_before": sum(1 for s in before if s < UNHEALTHY_BELOW),
                    "below_after": sum(1 for s in after if s < UNHEALTHY_BELOW)})
    return out


def lake_health_section_html(runs: Sequence[Mapping[str, Any]], plot: str | None = None) -> str:
    """The section ``<h2>Lake health over time</h2>`` with its table ``#lake-health`` (empty when no night has an
    estimate); ``plot``: an image's ``src`` shown under the table."""
    nights = lake_health_nights(runs)
    if not nights:
        return ""
    out = ["<h2>Lake health over time</h2><p>Each night's tables as its plan saw them (health 0-100) and what the "
           f"night's committed runs were predicted to leave; unhealthy: below {UNHEALTHY_BELOW}.</p>"
           "<table id=\"lake-health\"><tr><th>night (UTC)</th><th>tables</th><th>median score before</th>"
           "<th>lowest score before</th><th>median score predicted after</th>"
           f"<th>below {UNHEALTHY_BELOW} before</th><th>below {UNHEALTHY_BELOW} predicted after</th></tr>"]
    for n in nights:
        cells = {"night": n["night"], "tables": n["tables"], "median-before": f"{n['median_before']:g}",
                 "min-before": f"{n['min_before']:g}", "median-after": f"{n['median_after']:g}",
                 "below-before": n["below_before"], "below-after": n["below_after"]}
        out.append(html_row("night", n["night"], cells))
    out.append("</table>")
    if plot:
        out.append(f"<img alt=\"lake health\" data-plot=\"lake_health\" src=\"{html.escape(plot)}\">")
    return "".join(out)
