"""docs/compatibility.md from the delta-spark matrix's results, and the page read back into results.

Each result is what one of our jobs did to one table delta-spark wrote, judged by delta-spark:
``{"verdict": "maintained", "status": <the run's status>}`` or ``{"verdict": "refused", "reason": <message>}``.
``DELTA_MAINT_WRITE_COMPATIBILITY=1 make test-delta-spark`` rewrites the page from a full run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

Results = Mapping[tuple[str, str], Mapping[str, str]]

INTRO = """\
# Compatibility with delta-spark

Every table on this page was written by delta-spark 4.4.0 (on Spark 4.2.0) from
`tests/delta_spark/tables.py` and is kept as written in `tests/data/delta_spark_tables` (`make delta-spark-tables`
writes them again), and every job of ours ran on a fresh copy of it
(`tests/delta_spark/test_matrix.py`, `make test-delta-spark`). A job either maintained the table or
refused it with one message and changed nothing. *Maintained* is what delta-spark says afterwards:

- it reads exactly the rows it read before (deletion vectors applied), the same `_metadata.row_id` and
  `_metadata.row_commit_version` on row-tracking tables, the same schema, protocol and properties;
- `DESCRIBE DETAIL` reports the file count and bytes of our snapshot; `DESCRIBE HISTORY` shows our
  commit with delta-spark's own operation, parameter and metric names;
- it loads our checkpoints and log compaction files with the commits they cover hidden;
- time travel to every version the job promised to keep reads what it read before;
- it keeps writing: INSERT, MERGE, UPDATE, DELETE, RESTORE, its own OPTIMIZE and VACUUM.

The jobs run on each table one after the other, as a nightly DAG runs them, each on what the ones
before it left; the last column is delta-spark writing on the table after all of them.

Where we differ from delta-spark on purpose:

- A VACUUM that finds nothing to delete reports `skipped` and commits nothing; delta-spark commits
  `VACUUM START` and `VACUUM END` all the same. A nightly VACUUM of a quiet table does not grow its
  log by two commits a night.
- Our OPTIMIZE commits carry a few metrics and parameters delta-spark does not write (`numBatches`,
  `numBinsRebased`, `targetFiles`, `partitionsDeferred`, ...); every name both write means the same.
- A `--where` predicate is recorded as written (`part = '1'`), delta-spark records its own
  expression text.
- Log compaction files are ours alone: delta-spark 4.4 reads them (by default) but has no writer.

This page is generated from the matrix's results; a test fails when the two differ.
"""


def _cell(result: Mapping[str, str] | None, reasons: list[str]) -> str:
    if result is None:
        return "not run"
    if result["verdict"] == "maintained":
        return f"maintained ({result['status']})"
    reason = result["reason"]
    if reason not in reasons:
        reasons.append(reason)
    return f"refused [{reasons.index(reason) + 1}]"


def render(results: Results, tables: Sequence, jobs: Sequence, feature_labels: Mapping[str, str]) -> str:
    """The page: tables × jobs, the refusals' reasons, and features × jobs."""
    reasons: list[str] = []
    out = [INTRO, "## Jobs", ""]
    out += [f"- `{job.name}`: {job.title}" for job in jobs]
    out += ["", "## Tables × jobs", ""]
    out.append("| table | features | " + " | ".join(f"`{job.name}`" for job in jobs) + " |")
    out.append("|---|---|" + "---|" * len(jobs))
    for table in tables:
        cells = [_cell(results.get((table.name, job.name)), reasons) for job in jobs]
        out.append(f"| `{table.name}` | {', '.join(table.features)} | " + " | ".join(cells) + " |")
    out += ["", "## Why a job refused a table", ""]
    out += [f"{i}. {reason}" for i, reason in enumerate(reasons, 1)] or ["No job refused any table."]
    out += ["", "## Features × jobs", "",
            "A job is *maintained* on a feature when it maintained every table with that feature; otherwise the "
            "reasons of the tables it refused are named.", ""]
    out.append("| feature | what delta-spark wrote | " + " | ".join(f"`{job.name}`" for job in jobs) + " |")
    out.append("|---|---|" + "---|" * len(jobs))
    for label, meaning in feature_labels.items():
        having = [t for t in tables if label in t.features]
        if not having:
            continue
        cells = []
        for job in jobs:
            got = [results.get((t.name, job.name)) for t in having]
            refused = sorted({reasons.index(r["reason"]) + 1 for r in got if r and r["verdict"] == "refused"})
            if any(r is None for r in got):
                cells.append("not run")
            elif refused:
                cells.append("refused " + ", ".join(f"[{n}]" for n in refused))
            else:
                cells.append("maintained")
        out.append(f"| {label} | {meaning} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


_ROW = re.compile(r"^\| `(?P<table>[^`]+)` \| [^|]* \| (?P<cells>.*) \|$")


def parse(page: str, jobs: Sequence) -> dict[tuple[str, str], str]:
    """The page's tables × jobs cells, keyed by (table, job), with refusals' reasons spelled out."""
    reasons = dict(re.findall(r"^(\d+)\. (.*)$", page.split("## Why a job refused a table", 1)[-1]
                              .split("## Features × jobs", 1)[0], re.M))
    section = page.split("## Tables × jobs", 1)[-1].split("## Why a job refused a table", 1)[0]
    cells: dict[tuple[str, str], str] = {}
    for line in section.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        for job, cell in zip(jobs, [c.strip() for c in m["cells"].split(" | ")]):
            ref = re.fullmatch(r"refused \[(\d+)\]", cell)
            cells[(m["table"], job.name)] = f"refused: {reasons.get(ref[1])}" if ref else cell
    return cells


def expected_cell(result: Mapping[str, str]) -> str:
    """A result as :func:`parse` reads its cell back."""
    if result["verdict"] == "maintained":
        return f"maintained ({result['status']})"
    return f"refused: {result['reason']}"
