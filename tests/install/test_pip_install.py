"""``pip install`` as a user runs it: pip alone, from the package index, no constraints file, no wheels built
beforehand. Beside the wheel's installs (``make test-install``): it spends minutes installing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyspark
from packaging.specifiers import SpecifierSet

from tests.delta_spark_session import DELTA_SPARK_VERSION
from tests.install.conftest import REPO


def test_a_plain_pip_install_gives_one_spark(tmp_path):
    """``pip install airflow-delta-maint[delta-spark]`` in a fresh virtualenv, no constraints file, as a user
    installs a provider: pyspark and pyspark-client are one release, the JVM's jars are that release too,
    and delta-spark is the release built for it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_CONSTRAINT", "UV_CONSTRAINT", "VIRTUAL_ENV"))}
    # --no-compile: the test imports a few modules, not all of pyspark and delta-spark
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
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
