"""The command line's flags that are not a job's options, each written here once: the parsers declare them with
these names, the docs name them, and the Airflow hook builds the application's arguments with them. A job's own
options have their flags from their declarations (:mod:`.job_definitions`). Imports nothing of the project, so the
Airflow side may import it."""

from __future__ import annotations

import argparse

__all__ = ["key_value", "CATALOG", "CATALOG_OPTION", "DRY_RUN", "HISTORY_URI", "JSON", "METRICS_OUT", "SEEN_VERSION", "STORAGE_OPTION",
           "TABLE_NAME"]

#: print the metrics as one JSON object
JSON = "--json"
#: also write the metrics JSON to this URI
METRICS_OUT = "--metrics-out"
#: an object-store option ``K=V`` (repeatable)
STORAGE_OPTION = "--storage-option"
#: the maintenance history table a run is appended to
HISTORY_URI = "--history-uri"
#: the table by its name in a catalog, instead of a path or URI
TABLE_NAME = "--table-name"
#: the catalog a table name is in
CATALOG = "--catalog"
#: a catalog setting ``K=V`` (repeatable)
CATALOG_OPTION = "--catalog-option"
#: the version the submitting task's check saw (the run reports whether it planned on a newer one)
SEEN_VERSION = "--seen-version"
#: ``plan-lake``: print the plan, run nothing
DRY_RUN = "--dry-run"


def key_value(text: str) -> tuple[str, str]:
    """A ``K=V`` argument (a storage option, a catalog option, a budget's limit) as ``(K, V)``; argparse reports a
    malformed one."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value
