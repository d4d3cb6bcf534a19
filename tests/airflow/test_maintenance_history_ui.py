"""The maintenance history end to end: recorded by a real DAG run, reported as HTML, shown in the UI.

One ``airflow dags test`` of the nightly DAG (real spark-submit runs) records its runs in a
history table configured through ``[delta_maint] history_uri``; a skip decided on the worker and a
failed run are added; ``delta-maint report`` renders it without Spark; ``airflow api-server`` on
127.0.0.1 serves the plugin's page, checked unauthenticated with plain HTTP and logged in with
Debian's headless Chromium driven by Selenium.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
import ui_browser

from delta_maint_testing import REPO, dags_test, task_results, write_appends

from airflow_delta_maint.app.cli import run  # noqa: E402
from airflow_delta_maint.delta.health.run_log import create_run_log, read_runs  # noqa: E402

pytestmark = pytest.mark.e2e
DAG_ID = "delta_maintenance_nightly"
PLOTS = {"health", "file_sizes", "over_time", "bytes", "durations"}


@pytest.fixture(scope="module")
def lake(airflow_home, tmp_path_factory):
    """A demo-like table maintained by the nightly DAG, with its runs in a history table."""
    root = tmp_path_factory.mktemp("lake")
    table, history = root / "events", root / "history"
    write_appends(table, 10)  # 20 small files
    conf = {"vacuum_retention_hours": 0, "vacuum_ignore_retention_check": True}
    result = dags_test(airflow_home, DAG_ID, conf, AIRFLOW_VAR_DELTA_MAINT_TABLES=json.dumps([str(table)]),
                       AIRFLOW__DELTA_MAINT__HISTORY_URI=str(history))
    state, tasks = task_results(airflow_home, DAG_ID)
    assert state == "success", result.stdout[-6000:] + result.stderr[-3000:]
    return SimpleNamespace(table=table, history=history, tasks=tasks, home=airflow_home)


def test_dag_runs_are_recorded_with_their_airflow_ids(lake):
    rows = read_runs(str(lake.history)).to_pylist()
    by_task = {r["task_id"]: r for r in rows}
    assert set(by_task) == {"maintain.optimize", "maintain.compact_log", "maintain.vacuum"}
    for task_id, row in by_task.items():
        xcom = lake.tasks[(task_id, 0)]["value"]
        assert xcom["history"]["written"] is True and xcom["history"]["uri"] == str(lake.history)
        assert row["dag_id"] == DAG_ID and row["dag_run_id"] and row["try_number"] == 1
        assert row["table_uri"] == str(lake.table) and row["status"] == xcom["status"]
        assert row["version_read"] == xcom["version_read"]
        assert json.loads(row["metrics"])["duration_s"] == xcom["duration_s"]
    optimize = by_task["maintain.optimize"]
    assert optimize["status"] == "committed" and optimize["version_committed"] == 10
    assert json.loads(optimize["metrics"])["numRemovedFiles"] == 20
    assert re.match(r"local-\d+", optimize["spark_app_id"] or "")  # the application's Spark id
    assert by_task["maintain.vacuum"]["status"] == "committed"
    # the health score knows VACUUM (retention 0) deleted every removed file: no tombstone debt
    from airflow_delta_maint.app.jobs.inspect import inspect_table
    from airflow_delta_maint.delta.log.snapshot import Snapshot

    snapshot = Snapshot.load(str(lake.table))
    assert snapshot.tombstones.num_rows == 20
    assert inspect_table(snapshot)["health"]["parts"]["tombstones"]["tombstone_bytes"] == 0


def test_a_skip_on_the_worker_and_a_failure_are_recorded(lake):
    from airflow_delta_maint.operators.maintenance import OptimizeOperator

    ti = SimpleNamespace(dag_id=DAG_ID, run_id="manual__skip", task_id="maintain.optimize", map_index=0,
                         try_number=3)
    op = OptimizeOperator(task_id="optimize_again", table_uri=str(lake.table), history_uri=str(lake.history))
    metrics = op.execute({"ti": ti})  # just optimized: nothing to do, decided without Spark
    assert metrics["status"] == "skipped" and metrics["history"]["written"] is True
    code, failed = run(["optimize", str(lake.table), "--where", "no_such_column = 1", "--json",
                        "--history-uri", str(lake.history)])
    assert code == 2 and failed["status"] == "failed" and failed["history"]["written"] is True
    rows = read_runs(str(lake.history)).to_pylist()
    skip = [r for r in rows if r["dag_run_id"] == "manual__skip"]
    assert len(skip) == 1 and skip[0]["status"] == "skipped" and skip[0]["try_number"] == 3
    assert skip[0]["map_index"] == 0 and skip[0]["spark_app_id"] is None
    assert [r["status"] for r in rows if r["status"] == "failed"] == ["failed"]
    assert "no_such_column" in [r for r in rows if r["status"] == "failed"][0]["error"]


def _run_report(args: list[str]) -> tuple[int, str, bool]:
    """``delta-maint report`` in a fresh interpreter: (exit code, stdout, whether pyspark was imported)."""
    code = ("import sys; from airflow_delta_maint.app.cli import run\n"
            f"c, _ = run({args!r})\n"
            "print('PYSPARK', 'pyspark' in sys.modules); sys.exit(c)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout, "PYSPARK True" in out.stdout


def test_report_renders_the_history_without_spark(lake, tmp_path):
    out = tmp_path / "report.html"
    code, stdout, spark = _run_report(["report", "--history", str(lake.history), "--out", str(out),
                                       "--base-url", "http://airflow.example"])
    assert code == 0 and str(out) in stdout and not spark
    page = out.read_text()
    assert f"<h2>{lake.table}</h2>" in page and "health " in page
    plots = dict(re.findall(r'data-plot="(\w+)" src="data:image/png;base64,([^"]+)"', page))
    assert set(plots) == PLOTS
    assert all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.values())
    assert "http://airflow.example/dags/delta_maintenance_nightly/runs/" in page
    assert 'class="failed">failed<' in page and "no_such_column" in page
    assert not re.search(r'src="(?!data:)', page)  # self-contained: nothing loaded from elsewhere


def test_report_of_an_empty_history(tmp_path):
    create_run_log(str(tmp_path / "history"))
    code, stdout, spark = _run_report(["report", "--history", str(tmp_path / "history"),
                                       "--out", str(tmp_path / "r.html")])
    assert code == 0 and not spark
    page = (tmp_path / "r.html").read_text()
    assert "No maintenance runs recorded yet." in page and "<img" not in page
    code, _, _ = _run_report(["report", "--history", str(tmp_path / "missing"), "--out", str(tmp_path / "x.html")])
    assert code == 2 and not (tmp_path / "x.html").exists()


@pytest.fixture(scope="module")
def api_server(lake, tmp_path_factory):
    """``airflow api-server`` on 127.0.0.1 with the simple auth manager (one admin user), stopped by its pid."""
    with ui_browser.api_server(lake.home, tmp_path_factory.mktemp("api"),
                               AIRFLOW__DELTA_MAINT__HISTORY_URI=str(lake.history)) as server:
        yield server


def test_the_page_needs_airflow_authentication(api_server):
    for path in ("/delta-maint/", "/delta-maint/table?uri=x"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(api_server.base + path, timeout=30)
        assert err.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(api_server.base + "/delta-maint/",
                                                      headers={"Authorization": "Bearer not-a-token"}), timeout=30)
    assert err.value.code in (401, 403)
    plugins = json.load(urllib.request.urlopen(urllib.request.Request(
        api_server.base + "/api/v2/plugins", headers={"Authorization": f"Bearer {ui_browser.token(api_server)}"}),
        timeout=30))
    ours = [p for p in plugins["plugins"] if p["name"] == "delta_maintenance"]
    assert ours and ours[0]["external_views"][0]["href"] == "/delta-maint/"


def test_the_page_in_a_browser(api_server, lake, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with ui_browser.chromium(tmp_path / "chromium-profile") as driver:
        frame = ui_browser.open_plugin_page(driver, api_server)
        row = WebDriverWait(driver, 120).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-table="{lake.table}"]'))[0]
        score = int(row.find_element(By.CSS_SELECTOR, "td.score").text)
        from airflow_delta_maint.app.jobs.inspect import inspect_table
        from airflow_delta_maint.delta.log.snapshot import Snapshot

        assert score == inspect_table(Snapshot.load(str(lake.table)))["health"]["score"]
        driver.switch_to.default_content()
        driver.save_screenshot(str(tmp_path / "delta-maintenance-tables.png"))
        driver.switch_to.frame(frame)
        row.find_element(By.CSS_SELECTOR, "a.table-link").click()
        WebDriverWait(driver, 180).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "img[data-plot]")) == 5)
        images = driver.find_elements(By.CSS_SELECTOR, "img[data-plot]")
        assert {i.get_attribute("data-plot") for i in images} == PLOTS
        assert all(driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i) > 100
                   for i in images)
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a[target=_top]")]
        assert any(f"/dags/{DAG_ID}/runs/" in (link or "") for link in links)
        driver.switch_to.default_content()
        shot = tmp_path / "delta-maintenance-ui.png"
        driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("DELTA_MAINT_UPDATE_SCREENSHOT"):  # refresh the one in the docs
            shutil.copy(shot, REPO / "docs" / "img" / "delta-maintenance-ui.png")
