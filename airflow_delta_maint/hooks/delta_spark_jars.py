"""delta-spark's jars on the cluster, for runs on the delta-spark engine.

The Spark conf or ``--packages`` the user gives wins when it already names delta-spark (``io.delta``);
else ``[delta_maint] delta_spark_packages`` (default ``io.delta:delta-spark_2.13:4.4.0``, the release
for Spark 4.2) goes to ``--packages``. The session gets delta-spark's extension and catalog. Ivy
resolves the packages with settings of its own that name Maven Central only (unless the conf sets
``spark.jars.ivySettings``): Spark's default chain asks the local Maven repository (``~/.m2``) first,
and an entry there holding a pom without its jar fails the whole resolution.

The same code sets up the session the command line starts itself for ``engine='delta-spark'``: it
lives in :mod:`airflow_delta_maint.app.engines.delta_spark_jars`, below both.

Runs on the native engine never get any of this: our engine needs no Delta jars.
"""

from __future__ import annotations

from airflow_delta_maint.app.engines.delta_spark_jars import (IVY_SETTINGS, IVY_SETTINGS_KEY, PACKAGES_KEY,
                                                              add_delta_spark, carries_delta_spark, ivy_settings_file)

__all__ = ["IVY_SETTINGS", "IVY_SETTINGS_KEY", "PACKAGES_KEY", "add_delta_spark", "carries_delta_spark",
           "ivy_settings_file"]
