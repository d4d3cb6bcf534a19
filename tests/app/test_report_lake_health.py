"""The lake's health over time in the report and the UI page, from history rows: each table's score at the night's
first look, what its committed runs were predicted to leave, rows without estimates left out, a failed run, the
nights shown, escaping, and the section in a report written from a real history."""

from __future__ import annotations

import base64
import re
from typing import Any

from airflow_delta_maint.app.report.budget import NIGHTS_SHOWN
from airflow_delta_maint.app.report.lake_health import UNHEALTHY_BELOW, lake_health_nights, lake_health_section_html
from airflow_delta_maint.app.report.page import lake_health_plot, write_report
from airflow_delta_maint.delta.health.run_log import append_runs, run_record


def _estimate(before: int, after: int, operation: str = "optimize") -> dict[str, Any]:
    return {"operation": operation, "gain": {"files_removed": 1, "score_before": before, "score_after": after},
            "cost": {"cpu_s": 0.1}, "assumptions": []}


def _row(at: str, table: str, status: str, operation: str = "optimize", **metrics: Any) -> dict[str, Any]:
    """One history row as the run log stores it (metrics as JSON text); ``at``: ``2026-01-01T03:00``."""
    return run_record({"operation": operation, "table": table, "status": status, "duration_s": 1.0,
                       "started_at": f"{at}:00Z", **metrics})


def _three_nights() -> list[dict[str, Any]]:
    budget = {"max_tables": 2}
    first = [
        _row("2026-01-01T03:00", "s3://l/a", "committed", estimate=_estimate(60, 85), budget=budget),
        _row("2026-01-01T03:01", "s3://l/a", "committed", "vacuum", estimate=_estimate(60, 70, "vacuum"),
             budget=budget),
        _row("2026-01-01T03:00", "s3://l/a", "skipped", "checkpoint", estimate=_estimate(60, 60, "checkpoint"),
             reason="nothing to gain, by the estimate from the log"),
        _row("2026-01-01T02:59", "s3://l/b", "skipped", deferred=True, nights_waiting=1, predicted_cpu_s=3.0,
             estimate=_estimate(50, 80), budget=budget, reason="deferred: over the budget's max_tables"),
        # chosen, but failed: the plan saw the table, nothing was mended
        _row("2026-01-01T03:02", "s3://l/c", "failed", estimate=_estimate(90, 95), budget=budget, error="boom"),
        # its log could not be read: no estimate, not seen
        _row("2026-01-01T03:00", "s3://l/d", "failed", error="not a Delta table"),
        _row("2026-01-01T04:00", "s3://l/e", "committed", cpu_s=1.0),  # a fleet without a budget
    ]
    second = [_row("2026-01-02T03:00", "s3://l/a", "committed", cpu_s=1.0)]  # no budget that night
    third = [
        # a second plan the same night, recorded first here: it predicts from what the first one left
        _row("2026-01-03T05:00", "s3://l/b", "committed", estimate=_estimate(90, 96), budget=budget),
        _row("2026-01-03T03:00", "s3://l/b", "committed", estimate=_estimate(55, 90), budget=budget),
        _row("2026-01-03T03:00", "s3://l/a", "committed", estimate=_estimate(95, 100), budget=budget),
        _row("2026-01-03T03:01", "s3://l/a", "committed", "vacuum", estimate=_estimate(95, 100, "vacuum"),
             budget=budget),
        _row("2026-01-03T03:02", "s3://l/a", "committed", "checkpoint", estimate=None, budget=budget),
    ]
    return first + second + third


def test_each_night_shows_its_tables_before_and_what_its_runs_should_leave():
    third, first = lake_health_nights(_three_nights())
    # a: 60, +25 and +10 by its two committed runs; b: deferred, stays 50; c: its run failed, stays 90
    assert first == {"night": "2026-01-01", "tables": 3, "median_before": 60, "min_before": 50, "median_after": 90,
                     "below_before": 2, "below_after": 1}
    # a: 95 and +5 +5, held at 100; b: 55 at the first look, +35 then +6 by the second plan
    assert third == {"night": "2026-01-03", "tables": 2, "median_before": 75, "min_before": 55, "median_after": 98,
                     "below_before": 1, "below_after": 0}
    assert UNHEALTHY_BELOW == 70


def test_the_section_lists_the_nights_newest_first():
    html = lake_health_section_html(_three_nights())
    assert html.startswith("<h2>Lake health over time</h2>") and 'id="lake-health"' in html
    nights = re.findall(r'<tr data-night="([^"]+)">', html)
    assert nights == ["2026-01-03", "2026-01-01"]  # the night without an estimate is not shown
    assert ('<tr data-night="2026-01-03"><td data-col="night">2026-01-03</td><td data-col="tables">2</td>'
            '<td data-col="median-before">75</td><td data-col="min-before">55</td><td data-col="median-after">98</td>'
            '<td data-col="below-before">1</td><td data-col="below-after">0</td></tr>') in html
    assert "<img" not in html
    with_plot = lake_health_section_html(_three_nights(), plot='data:image/png;base64,AA"><script>')
    assert 'data-plot="lake_health" src="data:image/png;base64,AA&quot;&gt;&lt;script&gt;"' in with_plot


def test_at_most_as_many_nights_as_the_budget_shows_and_halves_stay():
    rows = [_row(f"2026-02-{day:02d}T03:00", f"s3://l/{t}", "skipped", deferred=True,
                 estimate=_estimate(40 + t + day, 99))
            for day in range(1, NIGHTS_SHOWN + 3) for t in (0, 1)]
    nights = lake_health_nights(rows)
    assert len(nights) == NIGHTS_SHOWN and nights[0]["night"] == f"2026-02-{NIGHTS_SHOWN + 2:02d}"
    assert nights[-1]["night"] == "2026-02-03"
    assert nights[0]["median_before"] == 40 + NIGHTS_SHOWN + 2 + 0.5  # two tables: the mean of the middle two
    assert f'<td data-col="median-before">{40 + NIGHTS_SHOWN + 2.5:g}</td>' in lake_health_section_html(rows)


def test_what_a_row_holds_is_escaped_and_bad_estimates_count_for_nothing():
    rows = [{"table_uri": "s3://l/x", "status": "skipped", "started_at": "<script>alert(1)</script>",
             "metrics": {"estimate": _estimate(10, 20)}},
            _row("2026-01-01T03:00", "s3://l/y", "skipped", estimate={"gain": "none"}),
            _row("2026-01-01T03:00", "s3://l/z", "skipped", estimate={"gain": {"score_before": True}})]
    html = lake_health_section_html(rows)
    assert "<script" not in html and 'data-night="&lt;script&gt;al"' in html
    assert [n["tables"] for n in lake_health_nights(rows)] == [1]


def test_no_estimate_and_no_history_give_no_section():
    assert lake_health_section_html([]) == "" and lake_health_nights([]) == []
    plain = [_row("2026-01-01T03:00", "s3://l/a", "committed", cpu_s=1.0),
             _row("2026-01-01T03:00", "s3://l/b", "failed", error="boom")]
    assert lake_health_section_html(plain) == "" and lake_health_plot(plain) is None


def test_the_report_holds_the_section_and_its_plot(tmp_path):
    history = str(tmp_path / "history")
    append_runs(history, _three_nights())
    page = (tmp_path / "report.html")
    write_report(history, str(page))
    text = page.read_text()
    assert "<h2>Lake health over time</h2>" in text and text.index('id="budget-nights"') < text.index("lake-health")
    assert re.findall(r'<tr data-night="([^"]+)"><td data-col="night">[^<]+</td><td data-col="tables">',
                      text) == ["2026-01-03", "2026-01-01"]
    (src,) = re.findall(r'data-plot="lake_health" src="data:image/png;base64,([^"]+)"', text)
    assert base64.b64decode(src).startswith(b"\x89PNG\r\n\x1a\n")
