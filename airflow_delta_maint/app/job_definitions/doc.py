"""``docs/job-options.md``, written from the jobs' definitions (``python -m
airflow_delta_maint.app.job_definitions.doc`` rewrites it; a test fails when it is stale)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..common_flags import CATALOG, HISTORY_URI, JSON, METRICS_OUT, STORAGE_OPTION, TABLE_NAME
from . import JOBS
from .engine_option import ENGINE

HEADER = f"""# Job options

Generated from the jobs' definitions (`airflow_delta_maint/app/job_definitions/`): each option is declared
once, and the operator keyword, the command-line flag, the fleet's per-job mapping (by keyword or by name) and
this page come from that declaration. Rewrite it with
`.venv/bin/python -m airflow_delta_maint.app.job_definitions.doc docs/job-options.md`.

Every job also takes the table (a path or URI, or `{TABLE_NAME}` with `{CATALOG}`), `{STORAGE_OPTION}`,
`{HISTORY_URI}`, `{JSON}` and `{METRICS_OUT}` ([configuration](configuration.md)); the jobs with an `engine`
take the operators' `engine` keyword (`{ENGINE.flag}`; compact-log's says who writes its checkpoint and cleans up the
expired log). A name an option had before is still taken for one release, with a deprecation warning: it is
listed under its option ("formerly").
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The page's Markdown."""
    parts = [HEADER]
    for name, job in JOBS.items():
        writes = "writes" if job.writes else "changes nothing"
        engines = ", ".join(job.engines)
        parts.append(f"\n## `{name}`\n\n{job.summary} ({writes}; engines: {engines})\n")
        rows = job.options.doc_rows()
        if not rows:
            parts.append("\nNo options of its own.\n")
            continue
        parts.append("\n| operator keyword | flag | type | default | what it does |\n|---|---|---|---|---|\n")
        parts.extend("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in rows)
    return "".join(parts)


if __name__ == "__main__":
    out = render()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(out)
    else:
        sys.stdout.write(out)
