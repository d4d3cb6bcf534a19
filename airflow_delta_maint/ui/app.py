"""The FastAPI app behind the "Delta maintenance" page: read-only, behind Airflow's authentication.

Every route depends on Airflow's own ``requires_access_view(AccessView.PLUGINS)``: the caller is
identified by the API server's JWT (the UI's session cookie or a bearer token) and must be allowed
to see plugins; anyone else gets 401/403. The pages read the maintenance history
(``[delta_maint] history_uri``) and the tables through the Delta core; nothing is written.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any, Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse

from airflow_delta_maint.app.report.budget import budget_section_html
from airflow_delta_maint.app.report.lake_health import lake_health_section_html
from airflow_delta_maint.app.report.page import (dag_run_link, html_document, load_runs, summarize_tables,
                                                 table_detail, table_section_html)
from airflow_delta_maint.delta.errors import DeltaError

URL_PREFIX = "/delta-maint"
#: how long a page's data is reused (the history and table logs are read at most this often)
CACHE_SECONDS = 30.0

_cache: dict[tuple[str, ...], tuple[float, Any]] = {}
_lock = threading.Lock()


def _cached(key: tuple[str, ...], compute: Callable[[], Any]) -> Any:
    now = time.monotonic()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
    value = compute()
    with _lock:
        _cache[key] = (now, value)
    return value


def _history_uri() -> str | None:
    from airflow.configuration import conf

    value = conf.get("delta_maint", "history_uri", fallback=None)
    return value.strip() or None if value else None


def _ui_base() -> str:
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback=None) or "/").rstrip("/") or "/"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(html_document(title, body))


def _access() -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return Depends(requires_access_view(AccessView.PLUGINS))


def create_app() -> FastAPI:
    """The plugin's FastAPI app (mounted by the API server under :data:`URL_PREFIX`)."""
    app = FastAPI(title="Delta maintenance", dependencies=[_access()], docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def tables() -> HTMLResponse:
        uri = _history_uri()
        if uri is None:
            return _page("Delta maintenance", "<h1>Delta maintenance</h1><p>No maintenance history is configured: "
                         "set <code>[delta_maint] history_uri</code>.</p>")
        try:
            runs = _cached(("all runs", uri), lambda: load_runs(uri))
            lines = _cached(("tables", uri), lambda: summarize_tables(runs))
        except DeltaError as exc:
            return _page("Delta maintenance", f"<h1>Delta maintenance</h1><p class=\"failed\">cannot read the "
                         f"maintenance history {_e(uri)}: {_e(exc)}</p>")
        base = _ui_base()
        rows = []
        for line in lines:
            last = line["last_run"]
            link = dag_run_link(base, last)
            score = line["score"] if line["score"] is not None else "unreadable"
            dag = f"<a href=\"{_e(link)}\" target=\"_top\">{_e(last.get('dag_id'))}</a>" if link else ""
            rows.append(
                f"<tr data-table=\"{_e(line['table'])}\"><td><a class=\"table-link\" "
                f"href=\"table?uri={quote(line['table'], safe='')}\">{_e(line['table'])}</a></td>"
                f"<td class=\"score\">{_e(score)}</td><td>{_e(line['num_files'])}</td>"
                f"<td>{_e(line['num_small_files'])}</td><td>{line['runs']}</td><td>{line['failures']}</td>"
                f"<td>{_e(last.get('operation'))} <span class=\"{_e(last.get('status'))}\">{_e(last.get('status'))}"
                f"</span> {_e(last.get('started_at'))}</td>"
                f"<td>{dag}</td></tr>")
        body = (f"<h1>Delta maintenance</h1><p>history {_e(uri)}</p><table id=\"tables\"><tr><th>table</th>"
                "<th>health</th><th>files</th><th>small files</th><th>runs</th><th>failures</th><th>last run</th>"
                "<th>DAG</th></tr>" + "".join(rows) + "</table>")
        if not rows:
            body += "<p>No maintenance runs recorded yet.</p>"
        return _page("Delta maintenance", body + budget_section_html(runs) + lake_health_section_html(runs))

    @app.get("/table", response_class=HTMLResponse)
    def table(uri: str = Query(..., description="the table, as recorded in the history")) -> HTMLResponse:
        history = _history_uri()
        if history is None:
            return _page("Delta maintenance", "<p>No maintenance history is configured.</p>")
        try:
            runs = _cached(("runs", history, uri), lambda: load_runs(history, tables=[uri]))
        except DeltaError as exc:
            return _page("Delta maintenance", f"<p class=\"failed\">cannot read the maintenance history: "
                         f"{_e(exc)}</p>")
        if not runs:
            return HTMLResponse(f"<p>{_e(uri)} has no runs in the maintenance history.</p>", status_code=404)
        detail = _cached(("detail", history, uri), lambda: table_detail(uri, runs))
        return _page(f"Delta maintenance: {uri}",
                     "<p><a href=\"./\">all tables</a></p>" + table_section_html(detail, _ui_base()))

    return app
