"""The install is deterministic: pyspark and pyspark-client (which share the pyspark/ folder) are the
same release, so every file they both ship is the same whichever wheel was unpacked last."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import distribution
from pathlib import Path

import pyspark
import pytest
from packaging.specifiers import SpecifierSet

from tests.delta_spark_session import DELTA_SPARK_VERSION

REPO = Path(__file__).resolve().parents[1]


def _recorded(name: str) -> dict[str, str]:
    return {str(f): f.hash.value for f in distribution(name).files or [] if f.hash and str(f).startswith("pyspark/")}


def test_pyspark_and_pyspark_client_are_one_release():
    full, client = distribution("pyspark"), distribution("pyspark-client")
    assert full.version == client.version == pyspark.__version__


def test_shared_files_are_what_both_wheels_recorded():
    full, client = _recorded("pyspark"), _recorded("pyspark-client")
    shared = sorted(set(full) & set(client))
    assert len(shared) > 100  # the Python sources they both ship
    located = distribution("pyspark")
    wrong = []
    for name in shared:
        data = located.locate_file(name).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if not digest == full[name] == client[name]:
            wrong.append(name)
    assert not wrong, f"{len(wrong)} files differ between the two wheels or on disk, e.g. {wrong[:3]}"


def test_the_makefile_installs_with_the_constraints():
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (REPO / "constraints.txt").read_text(), re.M))
    assert pins["pyspark"] == pins["pyspark-client"] == pyspark.__version__
    makefile = (REPO / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "uv pip install" in line and " -e " in line]
    assert installs and all("--constraint constraints.txt" in line for line in installs)


@pytest.mark.e2e
def test_a_plain_pip_install_gives_one_spark(tmp_path):
    """``pip install airflow-delta-maint[delta-spark]`` in a fresh virtualenv, no constraints file, as a user
    installs a provider: pyspark and pyspark-client are one release, the JVM's jars are that release too,
    and delta-spark is the release built for it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_CONSTRAINT", "UV_CONSTRAINT", "VIRTUAL_ENV"))}
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           f"{REPO}[delta-spark]"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = textwrap.dedent("""\
        import json, pathlib, importlib.metadata as md, pyspark
        jars = pathlib.Path(pyspark.__file__).parent / "jars"
        core = [p.name for p in jars.glob("spark-core_*.jar")]
        print(json.dumps({"python_side": pyspark.__version__, "pyspark": md.version("pyspark"),
                          "pyspark-client": md.version("pyspark-client"), "delta-spark": md.version("delta-spark"),
                          "delta_needs": [r for r in md.requires("delta-spark") if r.startswith("pyspark")],
                          "core": core}))
        """)
    seen = json.loads(subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True,
                                     env=env).stdout)
    assert seen["python_side"] == seen["pyspark"] == seen["pyspark-client"] == pyspark.__version__, seen
    assert seen["core"] == [f"spark-core_2.13-{seen['pyspark']}.jar"], seen  # the JVM side is the same release
    assert seen["delta-spark"] == DELTA_SPARK_VERSION
    # the pyspark that delta-spark's own requirement accepts is the one installed
    spec = SpecifierSet(seen["delta_needs"][0].removeprefix("pyspark").split(";")[0].strip())
    assert seen["pyspark"] in spec, seen
