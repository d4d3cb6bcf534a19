"""The budget's section of the report and the UI page, from history rows: each night's budget and what it used,
escaping, and the empty states."""

from __future__ import annotations

import json
from datetime import timezone

from airflow_delta_maint.app.report.budget import budget_nights, budget_section_html, budget_used
from airflow_delta_maint.delta.health.run_log import run_record


def _row(night: str, table: str, status: str, **metrics: object) -> dict:
    """One history row as the run log stores it (metrics as JSON text)."""
    return run_record({"operation": "optimize", "table": table, "status": status, "duration_s": 2.0,
                       "started_at": f"{night}T03:00:00Z", **metrics})


def test_each_night_shows_its_budget_and_what_the_chosen_runs_used_of_it():
    budget = {"cpu_s": 60.0, "bytes_rewritten": 2 * 2**20, "max_tables": 2}
    runs = [_row("2026-01-01", "s3://l/a", "committed", cpu_s=1.0, predicted_cpu_s=1.5, numRemovedBytes=2**20,
                 budget=budget),
            _row("2026-01-01", "s3://l/b", "skipped", deferred=True, nights_waiting=1, predicted_cpu_s=9.0,
                 reason="deferred: over the budget's cpu_s", budget=budget),
            _row("2026-01-02", "s3://l/c", "committed", cpu_s=0.5)]  # a fleet without a budget
    second, first = budget_nights(runs)
    assert (first["night"], first["committed"], first["deferred"], first["tables"]) == ("2026-01-01", 1, 1, 1)
    assert first["budget"] == budget and first["bytes_rewritten"] == 2**20 and first["duration_s"] == 2.0
    assert budget_used(first) == "1.5 of 60 CPU-s predicted, 1 of 2 MiB rewritten, 1 of 2 tables"
    assert second["budget"] is None and budget_used(second) == ""
    html = budget_section_html(runs)
    assert '<tr data-night="2026-01-02">' in html and html.index("2026-01-02") < html.index("2026-01-01")
    assert '<td data-col="budget">cpu_s=60, bytes_rewritten=2097152, max_tables=2</td>' in html
    assert '<td data-col="reason">deferred: over the budget&#x27;s cpu_s</td>' in html


def test_what_a_table_or_a_reason_holds_is_escaped():
    table = 's3://l/<img src=x onerror="alert(1)">'
    runs = [_row("2026-01-01", table, "skipped", deferred=True, nights_waiting=2, predicted_cpu_s=1.0,
                 reason="deferred: <b>over</b> & out", budget={"max_tables": 1})]
    html = budget_section_html(runs)
    assert "<img" not in html and "<b>" not in html
    assert 'data-table="s3://l/&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"' in html
    assert "deferred: &lt;b&gt;over&lt;/b&gt; &amp; out" in html


def test_no_budget_and_no_history_give_no_section():
    assert budget_section_html([]) == ""
    plain = [_row("2026-01-01", "s3://l/a", "committed", cpu_s=1.0)]
    assert budget_section_html(plain) == ""
    assert json.loads(plain[0]["metrics"])["cpu_s"] == 1.0 and plain[0]["started_at"].tzinfo == timezone.utc
