"""The budget's part of the "Delta maintenance" page, in a browser: four nights of a lake maintained under a budget.

Three tables on moto's S3, read and written through an Airflow connection holding a secret. Each night a real
``MaintainTablesOperator(budget=...)`` plans the lake on the worker, runs what it chose in its own process and
records every run, chosen or deferred, in the maintenance history (the night is the clock of the application's
metrics, set to 03:00 UTC of the night at the unit's edge). ``airflow api-server`` serves the plugin's page, read
with its own credentials for the lake; Debian's headless Chromium shows it. What a user reads there is checked
against the operator's own results: the nights, newest first, chosen and deferred runs, predicted and measured
CPU-seconds and their error, the budget and what the night used of it, and the runs still waiting with their
reason; and neither secret is on the page.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from ui_browser import api_server as start_api_server
from ui_browser import chromium, open_plugin_page

from tests.storage.servers import start_moto

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

KEY_ID, SECRET = "AKIDBUDGETNIGHTS", "budget-night-secret-7c41e2"
UI_KEY_ID, UI_SECRET = "AKIDUIREADER", "ui-reader-secret-90d3ab"
TABLES = {"s3://lake/busy": 12, "s3://lake/some": 6, "s3://lake/few": 3}
#: (night, budget, appends to the busy table before it): the busy table wins two nights, a night's CPU budget is too
#: small for anything, then the two tables that waited three nights go first
NIGHTS = [("2026-11-23", {"max_tables": 1}, 0), ("2026-11-24", {"max_tables": 1}, 12),
          ("2026-11-25", {"cpu_s": 0.001}, 6), ("2026-11-26", {"max_tables": 2, "cpu_s": 600}, 6)]


class NightTI:
    """The task instance of one night's DAG run: its ids and its XCom pushes (at the unit's edge)."""

    def __init__(self, night: str) -> None:
        self.dag_id, self.run_id, self.task_id = "nightly_lake", f"scheduled__{night}T03:00:00+00:00", "maintain"
        self.map_index, self.try_number = -1, 1
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = json.loads(json.dumps(value))


def _append(uri: str, appends: int, options: dict[str, str]) -> None:
    from deltalake import write_deltalake

    for i in range(appends):
        write_deltalake(uri, pa.table({"id": pa.array([i, i + 1000], pa.int64()), "part": ["p", "q"]}),
                        mode="append", partition_by=["part"], storage_options=options)


def _core_score(uri: str, options: dict[str, str]) -> int:
    """The table's health score now, by the core's own score of its snapshot."""
    from airflow_delta_maint.app.jobs.inspect import DEFAULT_SMALL_FILE_BYTES
    from airflow_delta_maint.delta.health.score import health_inputs, health_score
    from airflow_delta_maint.delta.log.history import log_state
    from airflow_delta_maint.delta.log.snapshot import Snapshot
    from airflow_delta_maint.delta.storage.store import Storage

    snapshot = Snapshot.load(Storage(uri, options))
    return int(health_score(health_inputs(snapshot, DEFAULT_SMALL_FILE_BYTES, log_state(snapshot.storage)))["score"])


@pytest.fixture(scope="module")
def nights(airflow_home, tmp_path_factory):
    """The four nights recorded in a history; yields the server's lake, the history and each night's results."""
    from airflow_delta_maint.app import metrics
    from airflow_delta_maint.operators.fleet import MaintainTablesOperator

    work = tmp_path_factory.mktemp("budget-nights")
    moto = start_moto(work)
    options = {"AWS_ENDPOINT_URL": moto.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    history = work / "history"
    try:
        with pytest.MonkeyPatch.context() as mp:
            import boto3

            boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id=KEY_ID,
                         aws_secret_access_key=SECRET).create_bucket(Bucket="lake")
            for key in [k for k in __import__("os").environ if k.startswith(("AWS_", "AZURE_", "GOOGLE_"))]:
                mp.delenv(key)
            mp.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({
                "conn_type": "aws", "login": KEY_ID, "password": SECRET,
                "extra": {"region_name": "us-east-1", "endpoint_url": moto.endpoint}}))
            for uri, appends in TABLES.items():
                _append(uri, appends, options)
            recorded = []
            for night, budget, busy_appends in NIGHTS:
                _append("s3://lake/busy", busy_appends, options)
                scores = {uri: _core_score(uri, options) for uri in TABLES}  # as the night's plan will see them
                clock = (f"{night}T03:{m // 60:02d}:{m % 60:02d}.000Z" for m in itertools.count())
                mp.setattr(metrics, "now_iso", lambda: next(clock))
                ti = NightTI(night)
                for name, value in (("DAG_ID", ti.dag_id), ("DAG_RUN_ID", ti.run_id), ("TASK_ID", ti.task_id),
                                    ("TRY_NUMBER", "1")):  # as Airflow's task runner sets them for the task
                    mp.setenv(f"AIRFLOW_CTX_{name}", value)
                op = MaintainTablesOperator(task_id="maintain", tables=list(TABLES),
                                            jobs={"optimize": {"lease_seconds": 0}}, storage_conn_id="lake_s3",
                                            storage_options={"AWS_ALLOW_HTTP": "true"}, history_uri=str(history),
                                            budget=budget, execution="auto")
                results = op.execute(context={"ti": ti})
                recorded.append(SimpleNamespace(night=night, budget=budget, results=results,
                                                plan=ti.pushed["lake_plan"], scores=scores))
        reader = {"AWS_ENDPOINT_URL": moto.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                  "AWS_ACCESS_KEY_ID": UI_KEY_ID, "AWS_SECRET_ACCESS_KEY": UI_SECRET}
        yield SimpleNamespace(history=history, nights=recorded, reader=reader, work=work, home=airflow_home)
    finally:
        moto.stop()


def test_the_nights_ran_what_their_budget_bought(nights):
    """The history the page shows is the one the plans made (the page's test below relies on it)."""
    ran = [[(e["table"], e["jobs"][0]["status"]) for e in n.results] for n in nights.nights]
    assert ran[0] == [("s3://lake/busy", "committed"), ("s3://lake/some", "skipped"), ("s3://lake/few", "skipped")]
    assert [s for _, s in ran[2]] == ["skipped"] * 3  # nothing fits in a thousandth of a CPU-second
    assert {t for t, s in ran[3] if s == "committed"} == {"s3://lake/some", "s3://lake/few"}  # they waited 3 nights
    assert all(p["reason"].startswith("its table needed work 3 nights without a run")
               for p in nights.nights[3].plan["chosen"])


@pytest.fixture(scope="module")
def api_server(nights):
    with start_api_server(nights.home, nights.work, AIRFLOW__DELTA_MAINT__HISTORY_URI=str(nights.history),
                          **nights.reader) as server:
        yield server


def _expected(night: SimpleNamespace) -> dict[str, Any]:
    """What the budget's row of a night must say, from the operator's results of that night."""
    jobs = [e["jobs"][0] for e in night.results]
    ran = [j for j in jobs if j["status"] == "committed"]
    predicted, measured = sum(j["predicted_cpu_s"] for j in ran), sum(j["cpu_s"] for j in ran)
    errors = [abs(j["predicted_cpu_s"] - j["cpu_s"]) / j["cpu_s"] for j in ran]
    return {"runs": len(ran), "deferred": sum(1 for j in jobs if j.get("deferred")), "predicted": predicted,
            "measured": measured, "error": statistics.median(errors) if errors else None}


def _cells(row: Any) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    return {td.get_attribute("data-col"): td.text for td in row.find_elements(By.CSS_SELECTOR, "td[data-col]")}


def test_the_budget_section_in_a_browser(api_server, nights, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(tmp_path / "profile") as driver:
        open_plugin_page(driver, api_server)
        rows = WebDriverWait(driver, 120).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#budget-nights tr[data-night]"))
        shown = {r.get_attribute("data-night"): _cells(r) for r in rows}
        assert [r.get_attribute("data-night") for r in rows] == [n.night for n in reversed(nights.nights)]
        for night in nights.nights:
            cells, want = shown[night.night], _expected(night)
            assert int(cells["runs"]) == want["runs"] and int(cells["deferred"]) == want["deferred"], cells
            predicted, measured = (float(x) for x in re.findall(r"[\d.]+", cells["predicted-measured"]))
            assert predicted == pytest.approx(want["predicted"], abs=2e-3)
            assert measured == pytest.approx(want["measured"], abs=2e-3)
            if want["error"] is None:
                assert cells["error"] == ""
            else:  # a whole percent, of the median rounded to three places
                assert abs(float(cells["error"].removesuffix("%")) - 100 * want["error"]) <= 0.6, cells
            assert set(cells["budget"].split(", ")) == {f"{k}={v:g}" for k, v in night.budget.items()}
        # the night that could buy nothing says so
        assert shown["2026-11-25"]["used"].startswith("0 of 0.001 CPU-s")
        # deferred on the last two nights: by the CPU budget, then by the two tables that had waited longer
        (deferred,) = [e["jobs"][0] for e in nights.nights[3].results if e["jobs"][0].get("deferred")]
        assert deferred["nights_waiting"] == 2 and "max_tables" in deferred["reason"]
        waiting = [_cells(r) for r in driver.find_elements(By.CSS_SELECTOR, "#budget-waiting tr[data-table]")]
        assert [(w["table"], w["job"], w["nights"], w["reason"]) for w in waiting] == [
            ("s3://lake/busy", "optimize", "2", deferred["reason"])]
        assert float(waiting[0]["predicted"]) == deferred["predicted_cpu_s"]
        # every table's last run links to the last night's DAG run, chosen or deferred
        last_run = nights.nights[-1]
        links = {r.get_attribute("data-table"): r.find_element(By.CSS_SELECTOR, "a[target=_top]").get_attribute("href")
                 for r in driver.find_elements(By.CSS_SELECTOR, "#tables tr[data-table]")}
        assert set(links) == set(TABLES)
        assert all(f"/dags/nightly_lake/runs/scheduled__{last_run.night}T03" in (link or "") for link in links.values())
        page = driver.page_source
        driver.switch_to.default_content()
        driver.save_screenshot(str(tmp_path / "budget.png"))
        for secret in (SECRET, KEY_ID, UI_SECRET, UI_KEY_ID):
            assert secret not in page and secret not in driver.page_source


def _lake_health(night: SimpleNamespace) -> dict[str, float]:
    """What the lake-health row of a night must say: each table's score by the core just before the night, and after
    it what its committed run's estimate predicted (its score before when nothing was committed)."""
    from airflow_delta_maint.app.report.lake_health import UNHEALTHY_BELOW

    before = [night.scores[t] for t in TABLES]
    after = [e["jobs"][0]["estimate"]["gain"]["score_after"] if e["jobs"][0]["status"] == "committed"
             else night.scores[e["table"]] for e in night.results]
    return {"tables": len(TABLES), "median-before": statistics.median(before), "min-before": min(before),
            "median-after": statistics.median(after), "below-before": sum(s < UNHEALTHY_BELOW for s in before),
            "below-after": sum(s < UNHEALTHY_BELOW for s in after)}


def test_each_plan_saw_the_scores_the_core_gives(nights):
    """Every run a plan weighed, chosen or not, carries the estimate of the table as the core scores it."""
    for night in nights.nights:
        for entry in night.results:
            (job,) = entry["jobs"]
            assert job["estimate"]["gain"]["score_before"] == night.scores[entry["table"]], (night.night, job)
    first = nights.nights[0].results[0]["jobs"][0]
    assert first["status"] == "committed" and first["estimate"]["gain"]["score_after"] > nights.nights[0].scores["s3://lake/busy"]


def test_the_lake_health_section_in_a_browser_and_in_the_report(api_server, nights, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from airflow_delta_maint.app.report.page import write_report

    want = {n.night: _lake_health(n) for n in nights.nights}
    with chromium(tmp_path / "profile") as driver:
        open_plugin_page(driver, api_server)
        rows = WebDriverWait(driver, 120).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#lake-health tr[data-night]"))
        assert [r.get_attribute("data-night") for r in rows] == [n.night for n in reversed(nights.nights)]
        shown = {r.get_attribute("data-night"): {k: float(v) for k, v in _cells(r).items() if k != "night"}
                 for r in rows}
        assert driver.find_element(By.XPATH, "//h2[text()='Lake health over time']").is_displayed()
        assert not driver.find_elements(By.CSS_SELECTOR, "img[data-plot=lake_health]")  # the page draws no plot
    assert shown == want
    # the night that could buy nothing leaves the lake as it was; the last one's two runs leave it healthier
    assert want["2026-11-25"]["median-after"] == want["2026-11-25"]["median-before"]
    assert want["2026-11-26"]["median-after"] > want["2026-11-26"]["median-before"]
    report = write_report(str(nights.history), str(tmp_path / "report.html"), storage_options=nights.reader)
    text = open(report, encoding="utf-8").read()
    assert "<h2>Lake health over time</h2>" in text and 'data-plot="lake_health"' in text
    rows_in_report = re.findall(r'<tr data-night="([^"]+)">((?:<td data-col="[^"]+">[^<]*</td>)+)</tr>',
                                text.split('id="lake-health"')[1].split("</table>")[0])
    assert {night: {k: float(v) for k, v in re.findall(r'data-col="([^"]+)">([^<]*)<', cells) if k != "night"}
            for night, cells in rows_in_report} == want
    for secret in (SECRET, KEY_ID, UI_SECRET, UI_KEY_ID):
        assert secret not in text
