"""delta-spark's jars and session configuration, for runs on the delta-spark engine.

The Airflow hook adds them to a submission (:mod:`airflow_delta_maint.hooks.delta_spark_jars`), and the
command line to the session it starts itself outside spark-submit (a job with ``engine='delta-spark'``);
both call :func:`add_delta_spark`.

The Spark conf or ``--packages`` the user gives wins when it already names delta-spark (``io.delta``);
else the configured coordinates (the hook: ``[delta_maint] delta_spark_packages``; default
``io.delta:delta-spark_2.13:4.4.0``, the release for Spark 4.2) are added. The session gets
delta-spark's extension and catalog. Ivy resolves the packages with settings of its own that name
Maven Central only (unless the conf sets ``spark.jars.ivySettings``): Spark's default chain asks the
local Maven repository (``~/.m2``) first, and an entry there holding a pom without its jar fails the
whole resolution.

Runs on the native engine never get any of this: our engine needs no Delta jars.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_delta_maint.app.text_files import write_text_once

from . import DEFAULT_PACKAGE, DELTA_CATALOG, DELTA_EXTENSION

IVY_SETTINGS = """\
<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""
IVY_SETTINGS_KEY = "spark.jars.ivySettings"
PACKAGES_KEY = "spark.jars.packages"


def carries_delta_spark(conf: Mapping[str, Any], packages: str | None) -> bool:
    """True when the user's conf or packages already put delta-spark on the classpath."""
    named = [str(conf.get(k) or "") for k in ("spark.jars.packages", "spark.jars")] + [str(packages or "")]
    return any("io.delta" in text or "delta-spark" in text for text in named)


def ivy_settings_file(folder: Path) -> Path:
    """The Ivy settings (Maven Central only) written into ``folder`` (once, whole)."""
    return write_text_once(folder / "ivysettings-maven-central.xml", IVY_SETTINGS)


def add_delta_spark(conf: dict[str, Any], packages: str | None, configured_packages: str | None,
                    cache_dir: Path) -> str | None:
    """Add what the delta-spark engine needs to ``conf`` (in place); returns the ``--packages`` value.

    Args:
        conf: the submission's Spark conf.
        packages: the ``--packages`` the user gave.
        configured_packages: ``[delta_maint] delta_spark_packages`` (None: the default coordinates).
        cache_dir: where the Ivy settings file is written.
    """
    if not carries_delta_spark(conf, packages):
        # spark-submit's --packages replaces the conf's spark.jars.packages: keep both (hadoop-aws, ...)
        packages = ",".join(filter(None, [str(conf.pop(PACKAGES_KEY, "") or "").strip(" ,"), packages,
                                          configured_packages or DEFAULT_PACKAGE]))
    if IVY_SETTINGS_KEY not in conf:
        conf[IVY_SETTINGS_KEY] = str(ivy_settings_file(cache_dir))
    extensions = [e.strip() for e in str(conf.get("spark.sql.extensions") or "").split(",") if e.strip()]
    if DELTA_EXTENSION not in extensions:
        conf["spark.sql.extensions"] = ",".join([*extensions, DELTA_EXTENSION])
    conf.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return packages
