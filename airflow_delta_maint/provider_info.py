"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_delta_maint import __version__

INTEGRATION = "Delta Lake maintenance"

#: the how-to pages, one per operator, sensor and trigger (each built from an example DAG)
HOW_TO_GUIDES = [
    "/docs/howto-optimize-operator.md",
    "/docs/howto-vacuum-operator.md",
    "/docs/howto-log-compaction-operator.md",
    "/docs/howto-inspect-table-operator.md",
    "/docs/howto-compute-stats-operator.md",
    "/docs/howto-commit-interval-sensor.md",
    "/docs/howto-table-commits-trigger.md",
]


def get_provider_info() -> dict[str, Any]:
    """Describe this provider to Airflow (``package-name`` must equal the distribution name)."""
    return {
        "package-name": "airflow-delta-maint",
        "name": INTEGRATION,
        "description": "OPTIMIZE, VACUUM and log compaction of Delta Lake tables on Spark, without the Delta jars.",
        "versions": [__version__],
        "integrations": [{"integration-name": INTEGRATION,
                          "external-doc-url": "https://github.com/delta-io/delta/blob/master/PROTOCOL.md",
                          "how-to-guide": HOW_TO_GUIDES, "tags": ["software"]}],
        "hooks": [{"integration-name": INTEGRATION,
                   "python-modules": ["airflow_delta_maint.hooks.delta_maint",
                                      "airflow_delta_maint.hooks.storage_credentials"]}],
        "operators": [{"integration-name": INTEGRATION,
                       "python-modules": ["airflow_delta_maint.operators.maintenance",
                                         "airflow_delta_maint.operators.fleet"]}],
        "sensors": [{"integration-name": INTEGRATION,
                     "python-modules": ["airflow_delta_maint.sensors.commit_interval"]}],
        "triggers": [{"integration-name": INTEGRATION,
                      "python-modules": ["airflow_delta_maint.triggers.commit_interval",
                                         "airflow_delta_maint.triggers.table_commits"]}],
        "config": {
            "delta_maint": {
                "description": "Settings of the Delta Lake maintenance provider.",
                "options": {
                    "history_uri": {
                        "description": "The maintenance history table every maintenance run is appended to "
                                       "(a path or object-store URI), unless an operator sets its own "
                                       "history_uri. Empty: runs are not recorded.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "s3://lake/_maintenance/history",
                        "default": "",
                    },
                    "execution": {
                        "description": "Where maintenance tasks run unless an operator sets its own "
                                       "execution: spark (submit the application), auto (runs small "
                                       "enough for the worker run in its process, no Spark) or local "
                                       "(always in the worker's process; fleets take it as auto).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "auto",
                        "default": "spark",
                    },
                    "engine": {
                        "description": "Who does the data work of maintenance tasks unless an operator sets its "
                                       "own engine: native (this provider's own engine, no Delta jars needed) or "
                                       "delta-spark (delta-spark's own OPTIMIZE, REORG, VACUUM, checkpoint and "
                                       "expired-log cleanup; the submission carries its jars). Log compaction "
                                       "files are always written by the native engine.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "delta-spark",
                        "default": "native",
                    },
                    "delta_spark_packages": {
                        "description": "Maven coordinates of delta-spark, passed as --packages to runs on the "
                                       "delta-spark engine unless the Spark conf or packages already name "
                                       "delta-spark; must be the release built for the cluster's Spark.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "io.delta:delta-spark_2.13:4.4.0",
                        "default": "io.delta:delta-spark_2.13:4.4.0",
                    },
                    "python_env": {
                        "description": "How Spark's executors get the application's Python: auto (ship for "
                                       "cluster masters, this worker's interpreter for local masters, nothing "
                                       "when conf or executor_python names an interpreter), ship (the packed "
                                       "environment goes with each submission: --archives ENV#environment), "
                                       "worker (this worker's interpreter path) or off (the cluster's own).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "off",
                        "default": "auto",
                    },
                    "python_env_uri": {
                        "description": "A prebuilt environment archive on storage the cluster reads (built with "
                                       "python -m airflow_delta_maint.hooks.python_env build); shipped as it is "
                                       "instead of the one built on the worker.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "hdfs:///apps/delta-maint/delta-maint-python-3.11.tar.gz",
                        "default": "",
                    },
                    "python_env_python_version": {
                        "description": "The Python version of the cluster's machines, when it differs from the "
                                       "worker's: the environment is then built from wheels for that version.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "3.12",
                        "default": "",
                    },
                    "python_env_platform": {
                        "description": "Wheel platform tags of the cluster's machines (comma-separated), when they "
                                       "differ from the worker's.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "manylinux_2_28_aarch64",
                        "default": "",
                    },
                    "executor_python": {
                        "description": "The interpreter the executors run, installed on the cluster's machines "
                                       "(an image or bootstrap script): nothing is shipped.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/venv/bin/python",
                        "default": "",
                    },
                },
            },
        },
    }
