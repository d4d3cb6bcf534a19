"""delta-spark's jars: resolved once from Maven Central, then offline; Maven when Ivy cannot resolve them.

Each test starts its own delta-spark session in a child process (a JVM's jars are fixed at its start).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.delta_spark_session import CACHE, DELTA_SPARK_VERSION, REPO

pytestmark = pytest.mark.delta_spark

PROBE = textwrap.dedent("""\
    import sys
    from tests.delta_spark_session import start_delta_spark
    conf = dict(arg.split("=", 1) for arg in sys.argv[2:])
    spark = start_delta_spark(**conf)
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    path = sys.argv[1]
    spark.range(10).write.format("delta").option("delta.enableDeletionVectors", "true").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id < 3")
    print("ROWS", spark.read.format("delta").load(path).count(), "MAVEN" if "/maven/" in jars else "IVY")
    spark.stop()
    """)


def _probe(tmp_path: Path, command_prefix: list[str], *args: str, **env: str) -> str:
    done = subprocess.run([*command_prefix, sys.executable, "-c", PROBE, str(tmp_path / "t"), *args],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), **env),
                          capture_output=True, text=True, timeout=500)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    return lines[-1]


def test_the_ivy_cache_serves_a_rerun_without_network(spark, tmp_path):
    """The session fixture resolved the jars into the machine's cache; a process with no network (only loopback, in a
    network namespace of its own) starts delta-spark from that cache."""
    assert (CACHE / "ivy" / "jars" / f"io.delta_delta-spark_2.13-{DELTA_SPARK_VERSION}.jar").exists()
    offline = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "offline"]
    assert _probe(tmp_path, offline, SPARK_LOCAL_IP="127.0.0.1") == "ROWS 7 IVY"


def test_maven_resolves_the_same_jars_when_ivy_cannot(tmp_path):
    assert _probe(tmp_path, [], DELTA_MAINT_DELTA_JARS="maven") == "ROWS 7 MAVEN"
    names = {p.name for p in (CACHE / "maven" / "jars").glob("*.jar")}
    assert {f"delta-spark_2.13-{DELTA_SPARK_VERSION}.jar", f"delta-storage-{DELTA_SPARK_VERSION}.jar"} <= names


def test_ivy_ignores_a_local_maven_repository_that_holds_poms_without_jars(tmp_path):
    """Maven leaves poms without their jars in ~/.m2 (a dependency's parents, its plugins' needs); Spark's
    default Ivy chain asks ~/.m2 first and fails on such an entry. Ours asks Maven Central only."""
    home = tmp_path / "home"
    pom_only = home / ".m2" / "repository" / "org" / "slf4j" / "slf4j-api" / "2.0.13"
    pom_only.mkdir(parents=True)
    (pom_only / "slf4j-api-2.0.13.pom").write_text(
        '<project><modelVersion>4.0.0</modelVersion><groupId>org.slf4j</groupId>'
        '<artifactId>slf4j-api</artifactId><version>2.0.13</version></project>')
    assert _probe(tmp_path, [], f"spark.jars.ivy={tmp_path / 'ivy'}",
                  f"spark.driver.extraJavaOptions=-Duser.home={home}") == "ROWS 7 IVY"
    assert (tmp_path / "ivy" / "jars" / "org.slf4j_slf4j-api-2.0.13.jar").exists()
