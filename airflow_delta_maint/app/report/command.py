"""``delta-maint report``: the maintenance report as one HTML file (no Spark)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from airflow_delta_maint.delta.errors import DeltaError

from airflow_delta_maint.app.common_flags import STORAGE_OPTION, key_value
from airflow_delta_maint.app.jobs.inspect import DEFAULT_SMALL_FILE_BYTES

log = logging.getLogger("delta_maint")

REPORT = "report"


def add_report_parser(sub: Any) -> None:
    """Add the ``report`` sub-command to the ``delta-maint`` parser's sub-parsers."""
    p = sub.add_parser(REPORT, help="write the maintenance report (HTML with plots) from the maintenance history")
    p.add_argument("--history", required=True, metavar="URI", help="the maintenance history table")
    p.add_argument("--tables", nargs="+", metavar="TABLE", help="only these tables (as recorded)")
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument(STORAGE_OPTION, action="append", type=key_value, default=[], metavar="K=V",
                   help="object-store option for the history and the tables (repeatable)")
    p.add_argument("--small-file-bytes", type=int, default=DEFAULT_SMALL_FILE_BYTES,
                   help="files below this size count as small (default 128 MiB)")
    p.add_argument("--base-url", metavar="URL", help="the Airflow UI's address, for links to the DAG runs")


def run_report(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """Write the report; print its path. Returns (exit code, {"report": path} or {"error": ...})."""
    from airflow_delta_maint.app.report.page import write_report

    try:
        path = write_report(args.history, args.out, args.tables, dict(args.storage_option),
                            small_file_bytes=args.small_file_bytes, base_url=args.base_url)
    except DeltaError as exc:
        print(f"delta-maint report: error: {exc}", file=sys.stderr)
        return 2, {"status": "failed", "error": str(exc)}
    print(path)
    return 0, {"status": "committed", "report": path}
