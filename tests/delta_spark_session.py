"""A local SparkSession with delta-spark's jars, for the tests and benchmarks that let delta-spark judge
(read and keep writing) the tables our jobs touch.

The jars are resolved from Maven Central by Spark itself (``spark.jars.packages``), with Ivy's cache
under ``$XDG_CACHE_HOME/airflow-delta-maint/delta-spark/ivy`` (``~/.cache`` without it), outside the clone,
so that reruns and fresh clones on the same machine need no network. Ivy gets settings of its own
that name Maven Central only: Spark's default chain asks the local Maven repository (``~/.m2``) first,
and an entry there that holds a pom without its jar (Maven leaves those for parents and plugins' needs)
fails the whole resolution. When Ivy cannot resolve
them (its launcher exits before the session starts), Maven copies the same artifact and its
dependencies to ``maven`` beside it and the session takes them as ``spark.jars``.
``DELTA_MAINT_DELTA_JARS=maven`` skips Ivy.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from airflow_delta_maint.hooks.delta_spark_jars import IVY_SETTINGS  # the hook's: Maven Central only

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-delta-maint" / "delta-spark"
# the jar release for pyspark 4.2.0; the delta-spark Python package of the test extra is the same release
# (PyPI's 4.4.1 would ask Ivy for a 4.4.1 jar that Maven Central does not serve)
DELTA_SPARK_VERSION = "4.4.0"
DELTA_SPARK_PACKAGE = f"io.delta:delta-spark_2.13:{DELTA_SPARK_VERSION}"
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

log = logging.getLogger(__name__)


def ivy_conf() -> dict[str, str]:
    """The conf that has Spark resolve delta-spark with Ivy, from Maven Central only, into the machine's cache."""
    settings = CACHE / "ivysettings.xml"
    if not settings.exists() or settings.read_text() != IVY_SETTINGS:
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(IVY_SETTINGS)
    return {"spark.jars.packages": DELTA_SPARK_PACKAGE, "spark.jars.ivy": str(CACHE / "ivy"),
            "spark.jars.ivySettings": str(settings)}


def maven_jars(dest: Path = CACHE / "maven") -> list[Path]:
    """delta-spark and its runtime dependencies copied by Maven to ``dest`` (once); their paths."""
    stamp = dest / f".{DELTA_SPARK_VERSION}.done"
    if not stamp.exists():
        dest.mkdir(parents=True, exist_ok=True)
        group, artifact, version = DELTA_SPARK_PACKAGE.split(":")
        pom = dest / "pom.xml"
        pom.write_text(textwrap.dedent(f"""\
            <project xmlns="http://maven.apache.org/POM/4.0.0">
              <modelVersion>4.0.0</modelVersion>
              <groupId>local.airflow-delta-maint</groupId><artifactId>delta-spark-jars</artifactId>
              <version>1</version><packaging>pom</packaging>
              <dependencies><dependency>
                <groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
              </dependency></dependencies>
            </project>
            """))
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("delta-spark's jars: Ivy could not resolve them and Maven (mvn) is not installed")
        done = subprocess.run([mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
                               "-DincludeScope=runtime", f"-DoutputDirectory={dest / 'jars'}"],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"delta-spark's jars: Maven could not copy them:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        stamp.touch()
    return sorted((dest / "jars").glob("*.jar"))


def start_delta_spark(master: str = "local[2]", app_name: str = "delta-spark-judge", **conf: str):
    """A SparkSession with delta-spark's extension and catalog (Ivy first, Maven if Ivy fails)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    def build(jar_conf: dict[str, str]):
        builder = SparkSession.builder.master(master).appName(app_name)
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            # tables of a few hundred rows: delta-spark's MERGE, UPDATE and DELETE shuffle into two tasks, not eight
            # (the matrix's chains took 9% less time)
            "spark.sql.shuffle.partitions": "2",
            "spark.python.worker.reuse": "true",
            "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
            # small test tables: no 50-task stages for delta-spark's state reconstruction
            "spark.databricks.delta.snapshotPartitions": "2",
            # nor a 10,000-task listing job in each of delta-spark's VACUUMs (30 s on 2 cores; the engine
            # sets the same for its own VACUUM: LISTING_PARALLELISM in app/engines/delta_spark.py)
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
            # a test process keeps one session for its whole run, and delta-spark caches a DeltaLog for every
            # table it reads: with the default 1 GiB the old generation stayed 65-97% full after eight minutes
            # of the matrix, with a concurrent collection every few seconds
            "spark.driver.memory": "2g",
            **DELTA_SESSION_CONF, **jar_conf, **conf,
        }
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("WARN")
        return session

    if os.environ.get("DELTA_MAINT_DELTA_JARS") != "maven":
        try:
            return build(ivy_conf())
        except Exception as exc:  # Ivy's failure ends the launcher before a JVM gateway exists
            log.warning("Ivy could not resolve %s (%s); resolving it with Maven", DELTA_SPARK_PACKAGE, exc)
    return build({"spark.jars": ",".join(str(p) for p in maven_jars())})
