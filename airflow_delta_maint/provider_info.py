"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_delta_maint import __version__


def get_provider_info() -> dict:
    """Describe this provider to Airflow (``package-name`` must equal the distribution name)."""
    return {
        "package-name": "airflow-delta-maint",
        "name": "Delta Lake maintenance",
        "description": "OPTIMIZE, VACUUM and log compaction of Delta Lake tables on Spark, without the Delta jars.",
        "versions": [__version__],
        "integrations": [{"integration-name": "Delta Lake maintenance", "external-doc-url":
                          "https://github.com/delta-io/delta/blob/master/PROTOCOL.md", "tags": ["software"]}],
        "hooks": [{"integration-name": "Delta Lake maintenance",
                   "python-modules": ["airflow_delta_maint.hooks.delta_maint"]}],
        "operators": [{"integration-name": "Delta Lake maintenance",
                       "python-modules": ["airflow_delta_maint.operators.maintenance"]}],
        "sensors": [{"integration-name": "Delta Lake maintenance",
                     "python-modules": ["airflow_delta_maint.sensors.commit_interval"]}],
        "triggers": [{"integration-name": "Delta Lake maintenance",
                      "python-modules": ["airflow_delta_maint.triggers.commit_interval"]}],
    }
