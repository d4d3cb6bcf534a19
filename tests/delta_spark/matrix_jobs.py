"""The jobs of the delta-spark matrix: each of our maintenance jobs as a user runs it, on one table.

``MatrixJob.argv(table, path, version)`` gives the ``delta-maint`` arguments; ``kept_versions`` says which
versions the job promised to keep readable (time travel), given the version read before and after it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from tests.delta_spark.tables import TABLES, DeltaSparkTable

#: ``DELTA_MAINT_MATRIX=covering`` (CI: ``.ci/run``) runs the matrix on fewer tables and statements; the default
#: (``make test-delta-spark``, ``make test-compatibility``) runs all of it
COVERING = os.environ.get("DELTA_MAINT_MATRIX", "all") == "covering"
#: in a covering run, delta-spark runs every statement of its keeps-writing case (MERGE, UPDATE, RESTORE, its own
#: OPTIMIZE and VACUUM besides INSERT and DELETE) only on these tables, where those statements take paths of their
#: own: deletion vectors with MERGE and UPDATE, row tracking, clustering (its OPTIMIZE leaves our files alone),
#: identity and generated columns, type widening, column mapping by id, shredded variants, v2 checkpoints; on the
#: other tables it inserts and deletes only, at a quarter of the cost (``judge.assert_keeps_writing``'s
#: ``every_statement``)
EVERY_STATEMENT_TABLES = frozenset({
    "dv-merge-partitioned", "row-tracking", "iceberg-compat-v3", "clustered-optimized", "generated-identity-defaults",
    "type-widening", "column-mapping-id", "variant-shredding", "checkpoint-v2-parquet",
})


@functools.cache
def covering_tables() -> tuple[str, ...]:
    """The fewest tables, chosen greedily, whose features together are every feature of the matrix's tables: the
    tables of a covering run (21 of the 27: each of the other six only repeats features these have)."""
    left = {label for t in TABLES for label in t.features}
    chosen: list[str] = []
    while left:
        best = max(TABLES, key=lambda t: (len(left & set(t.features)), -len(t.features)))
        chosen.append(best.name)
        left -= set(best.features)
    return tuple(chosen)


def in_this_run(table_name: str) -> bool:
    """Whether the matrix runs this table's chain in this run."""
    return not COVERING or table_name in covering_tables()


def every_statement(table_name: str) -> bool:
    """Whether delta-spark's keeps-writing case runs every statement on this table in this run."""
    return not COVERING or table_name in EVERY_STATEMENT_TABLES


# VACUUM and log cleanup that keep nothing old: the judge then proves the table survives the sharpest
# setting (time travel is only promised for the versions named, and the latest)
NO_RETENTION = ["--retention-hours", "0", "--ignore-retention-check"]


def write_inventory(table_path: Path) -> Path:
    """A parquet inventory of every object under the table (delta-spark's VACUUM USING INVENTORY columns),
    written beside the table."""
    rows = []
    for folder, dirs, files in os.walk(table_path):
        for name in files:
            full = Path(folder) / name
            st = full.stat()
            rows.append((full.as_uri(), st.st_size, False, int(st.st_mtime * 1000)))
    inventory = table_path.parent / f"{table_path.name}.inventory.parquet"
    pq.write_table(pa.table({"path": [r[0] for r in rows], "length": [r[1] for r in rows],
                             "isDir": [r[2] for r in rows], "modificationTime": [r[3] for r in rows]}), inventory)
    return inventory


@dataclass(frozen=True)
class MatrixJob:
    name: str        # column of docs/compatibility.md
    title: str       # what the column means
    args: Callable[[DeltaSparkTable, Path, int], list[str]]
    # versions a reader may still time-travel to afterwards: f(version before the job, version after it)
    kept: Callable[[int, int], list[int]] = lambda before, after: [before, after]
    restorable: bool = True   # RESTORE to the version before the job still works afterwards
    pre: tuple[str, ...] = ()  # a job run first, as a user would (cleanup-log after a checkpoint)
    # on a copy of its own of the table as delta-spark wrote it, outside the chain (the jobs before it would
    # leave it nothing to do)
    own_copy: bool = False
    # the job runs this many days after the chain's last write (its clock moved ahead): a cleanup whose cut-off is
    # a midnight then finds every commit before it, whatever the hour of the run or the day the tables were built
    days_later: int = 0


def _zorder(table: DeltaSparkTable, path: Path, version: int) -> list[str]:
    if table.clustered:
        return ["optimize", str(path), "--full"]
    return ["optimize", str(path), "--zorder-by", ",".join(table.zorder_by)]


def _keep_middle(before: int) -> int:
    return max(0, before - 3)


JOBS: list[MatrixJob] = [
    MatrixJob("inspect", "inspect", lambda t, p, v: ["inspect", str(p)]),
    MatrixJob("optimize", "OPTIMIZE (bin-packing; clustering on clustered tables)", lambda t, p, v: ["optimize", str(p)]),
    MatrixJob("zorder", "OPTIMIZE ZORDER BY two columns (OPTIMIZE FULL on clustered tables)", _zorder),
    MatrixJob("copy", "OPTIMIZE --copy-row-groups always (every row group copied where it is exact, on the table as "
              "delta-spark wrote it)",
              lambda t, p, v: ["optimize", str(p), "--copy-row-groups", "always"], own_copy=True),
    MatrixJob("dv-purge", "OPTIMIZE purging every deletion vector (--dv-ratio 0)",
              lambda t, p, v: ["optimize", str(p), "--dv-ratio", "0"]),
    MatrixJob("target-files", "OPTIMIZE --target-files 2", lambda t, p, v: ["optimize", str(p), "--target-files", "2"]),
    MatrixJob("auto", "OPTIMIZE --policy auto (the auto-compaction policy, every partition, 2 small files suffice)",
              lambda t, p, v: ["optimize", str(p), "--policy", "auto", "--all-partitions", "--min-num-files", "2"]),
    MatrixJob("vacuum-full", "VACUUM full, retention 0 hours",
              lambda t, p, v: ["vacuum", str(p), "--mode", "full", *NO_RETENTION],
              kept=lambda before, after: [after], restorable=False),
    MatrixJob("vacuum-lite", "VACUUM LITE, retention 0 hours",
              lambda t, p, v: ["vacuum", str(p), "--mode", "lite", *NO_RETENTION],
              kept=lambda before, after: [after], restorable=False),
    # an inventory is taken before the run, so a retention of 0 would put it before the cut-off (refused as
    # stale): an hour, and a planted orphan of 30 days for it to find
    MatrixJob("vacuum-inventory", "VACUUM USING INVENTORY (parquet), retention 1 hour",
              lambda t, p, v: ["vacuum", str(p), "--inventory", str(write_inventory(p)),
                               "--retention-hours", "1", "--ignore-retention-check"],
              kept=lambda before, after: [after], restorable=False),
    MatrixJob("vacuum-keep", "VACUUM full, retention 0 hours, keeping an older version",
              lambda t, p, v: ["vacuum", str(p), *NO_RETENTION, "--keep-versions", str(_keep_middle(v))],
              kept=lambda before, after: [_keep_middle(before), after], restorable=False),
    MatrixJob("compute-stats", "compute-stats (statistics of every covered column, re-added without rewriting)",
              lambda t, p, v: ["compute-stats", str(p)]),
    MatrixJob("compact-log", "log compaction files (--interval 2)",
              lambda t, p, v: ["compact-log", str(p), "--interval", "2"]),
    MatrixJob("checkpoint", "a checkpoint of the latest version", lambda t, p, v: ["checkpoint", str(p)]),
    MatrixJob("cleanup-log", "expired-log cleanup after a checkpoint, retention 0 hours, two days after the last write",
              lambda t, p, v: ["cleanup-log", str(p), "--retention-hours", "0"],
              kept=lambda before, after: [after], restorable=False, pre=("checkpoint",), days_later=2),
]
# the order of a table's chain: each job runs on what the ones before it left, as in a nightly DAG; the rewrites
# first (the DV purge before the others take the deletion vectors away), then the log files, then the deletes
CHAIN = [next(j for j in JOBS if j.name == name) for name in (
    "inspect", "copy", "dv-purge", "auto", "optimize", "zorder", "target-files", "compute-stats", "compact-log", "checkpoint",
    "vacuum-keep", "vacuum-lite", "vacuum-inventory", "vacuum-full", "cleanup-log")]
assert sorted(j.name for j in CHAIN) == sorted(j.name for j in JOBS)
JOB_NAMES = [j.name for j in JOBS]
