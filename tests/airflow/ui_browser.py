"""The "Delta maintenance" page as a user sees it: ``airflow api-server`` on 127.0.0.1 (simple auth manager, one
admin user, stopped by its process id) and Debian's headless Chromium driven by Selenium, logged in with the UI's
session cookie."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from delta_maint_testing import BIN, airflow_env, stop_process_group

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_server(home: Path, work: Path, **env: str) -> Iterator[SimpleNamespace]:
    """``airflow api-server`` of the Airflow home ``home`` (its log in ``work``), with ``env`` added; yields
    ``base`` (its URL) and ``password`` (the admin's)."""
    password = "pw-" + os.urandom(6).hex()
    (work / "passwords.json").write_text(json.dumps({"admin": password}))
    port = free_port()
    environ = airflow_env(home, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
                          AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(work / "passwords.json"), **env)
    log_path = work / "api-server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1"], env=environ, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            try:
                urllib.request.urlopen(base + "/api/v2/version", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, "api-server did not start"
                time.sleep(1)
        yield SimpleNamespace(base=base, password=password, log=log_path)
    finally:
        stop_process_group(proc)


def token(server: SimpleNamespace) -> str:
    """The admin's JWT from the API server."""
    request = urllib.request.Request(server.base + "/auth/token", method="POST",
                                     data=json.dumps({"username": "admin", "password": server.password}).encode(),
                                     headers={"Content-Type": "application/json"})
    return str(json.load(urllib.request.urlopen(request, timeout=30))["access_token"])


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium WebDriver (quit on exit)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER), \
        "install Debian's chromium and chromium-driver (make chromium does, as root)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def open_plugin_page(driver: Any, server: SimpleNamespace, timeout: float = 120) -> Any:
    """Log in (the UI's session cookie), open the plugin's nav route and switch into its frame; return the frame."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(server.base + "/api/v2/version")
    driver.add_cookie({"name": "_token", "value": token(server), "path": "/"})
    driver.get(server.base + "/plugin/delta-maintenance")  # the nav link's route: the page in a frame
    frame = WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.TAG_NAME, "iframe"))[0]
    driver.switch_to.frame(frame)
    return frame
