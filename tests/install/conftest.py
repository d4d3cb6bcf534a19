"""The package as users install it: its wheel in fresh virtualenvs, with no extra and with each documented
extra, nothing of the test extra. Built and installed once per test session (uv, from its cache when warm)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.storage.servers import start_moto

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
#: the wheels of the source-only pins (pyspark, pyspark-client) that ``make`` builds once per machine
WHEELS = Path(os.environ.get("DELTA_MAINT_WHEELS", Path.home() / ".cache" / "airflow-delta-maint" / "wheels"))
#: the extras README.md documents, each installed into a virtualenv of its own
EXTRAS = ("amazon", "microsoft-azure", "google", "catalogs", "openlineage", "delta-spark")


@dataclass
class Install:
    """A virtualenv holding the wheel (with ``extra``, or none)."""

    root: Path
    extra: str | None

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, **more: str) -> dict[str, str]:
        """This install's environment: its programs first on PATH, its interpreter for Spark's workers, no test
        virtualenv or source folder to borrow from."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", PYSPARK_PYTHON=str(self.python),
                   VIRTUAL_ENV=str(self.root), **more)
        return env

    def run(self, args: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
        """Run one of this install's programs (``delta-maint``, ``airflow``, ``python``) in ``cwd``."""
        program = str(self.bin / args[0])
        return subprocess.run([program, *args[1:]], cwd=cwd, env=env or self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def distributions(self) -> set[str]:
        """The names of the distributions installed, normalised."""
        out = subprocess.run([str(UV), "pip", "list", "--python", str(self.python), "--format", "freeze"],
                             check=True, capture_output=True, text=True).stdout
        return {line.split("==")[0].lower().replace("_", "-") for line in out.splitlines() if "==" in line}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The package's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([str(UV), "build", "--wheel", "--quiet", "--out-dir", str(out), str(REPO)], check=True)
    (built,) = out.glob("airflow_delta_maint-*.whl")
    return built


@pytest.fixture(scope="session")
def install(wheel, tmp_path_factory) -> Callable[[str | None], Install]:
    """A fresh virtualenv with the wheel and ``extra`` (None: no extra) installed, made once per extra. Only
    the pins of ``constraints.txt`` (the versions ``make`` installs), never a package of the test extra."""
    made: dict[str | None, Install] = {}

    def get(extra: str | None) -> Install:
        if extra not in made:
            root = tmp_path_factory.mktemp(f"install-{extra or 'plain'}") / "venv"
            subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(root)], check=True)
            target = f"{wheel}[{extra}]" if extra else str(wheel)
            # no --compile-bytecode: a process compiles what it imports (its first run caches it), instead of
            # every install compiling all of Airflow and pyspark (minutes of CPU over seven installs)
            subprocess.run([str(UV), "pip", "install", "--quiet", "--python",
                            str(root / "bin" / "python"), "--constraint", str(REPO / "constraints.txt"),
                            *(["--find-links", str(WHEELS)] if WHEELS.is_dir() else []), target],
                           check=True, timeout=900)
            made[extra] = Install(root, extra)
        return made[extra]

    return get


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory):
    """A moto S3 server (from the test virtualenv: the store is the test's, the client is the install's)."""
    server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        import boto3

        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="lake")
        yield server
    finally:
        server.stop()
