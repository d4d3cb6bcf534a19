"""The tables of :data:`tables.TABLES` as delta-spark wrote them, kept in the repository
(``tests/data/delta_spark_tables``) so that a test run copies them instead of building all 27 again.

``make delta-spark-tables`` builds them with delta-spark (:func:`tables.build_all`) and writes
``BUILT.json`` beside them: the delta-spark release and the digest of ``tables.py`` they were built from, and the
empty folders delta-spark left (git keeps no empty folder; a copy recreates them). A run whose ``tables.py`` or
delta-spark release differs from ``BUILT.json`` fails with what to run, never judges stale tables.
``test_tables.py`` builds four of them again and compares their rows with the kept ones.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.delta_spark import tables
from tests.delta_spark_session import DELTA_SPARK_VERSION, REPO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMITTED = REPO / "tests" / "data" / "delta_spark_tables"
STAMP = COMMITTED / "BUILT.json"
REBUILD = "make delta-spark-tables"


def fingerprint() -> dict[str, str]:
    """What the kept tables must have been built from: delta-spark's release and ``tables.py``'s digest."""
    return {"delta_spark": DELTA_SPARK_VERSION,
            "tables_py_sha256": hashlib.sha256(Path(tables.__file__).read_bytes()).hexdigest()}


def built_stamp() -> dict[str, Any] | None:
    """``BUILT.json`` (None: there is none)."""
    return json.loads(STAMP.read_text()) if STAMP.exists() else None


def stale_reason(built: dict[str, Any] | None) -> str | None:
    """Why the kept tables, built as ``built`` says (:func:`built_stamp`), cannot be used (None: they can)."""
    if built is None:
        return f"{COMMITTED.relative_to(REPO)} holds no BUILT.json: {REBUILD}"
    want = fingerprint()
    names = sorted(t.name for t in tables.TABLES)
    if {k: built.get(k) for k in want} != want or sorted(built.get("tables", [])) != names:
        return (f"{COMMITTED.relative_to(REPO)} was built from another tables.py or delta-spark release "
                f"(BUILT.json {json.dumps({k: built.get(k) for k in want})}, now {json.dumps(want)}): {REBUILD}")
    return None


def copies(root: Path) -> dict[str, Path]:
    """Copies of the kept tables under ``root`` (made once per run: pytest-xdist workers share ``root`` under a
    lock), their empty folders recreated; raises RuntimeError when they are stale."""
    built = built_stamp()
    reason = stale_reason(built)
    if reason or built is None:
        raise RuntimeError(reason)
    root.mkdir(parents=True, exist_ok=True)
    done = root / ".copied"
    with open(root / ".copy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            for name in built["tables"]:
                if (root / name).exists():
                    shutil.rmtree(root / name)
                shutil.copytree(COMMITTED / name, root / name)
            for folder in built["empty_folders"]:
                (root / folder).mkdir(parents=True, exist_ok=True)
            done.touch()
    return {name: root / name for name in built["tables"]}


def empty_folders(root: Path) -> list[str]:
    """The folders under ``root`` that hold nothing, relative to it (git keeps none of them)."""
    return sorted(str(Path(d).relative_to(root)) for d, sub, files in os.walk(root) if not sub and not files)


def rebuild(spark: SparkSession) -> None:
    """Build every table with delta-spark into a new folder, then put it in place of the kept one."""
    COMMITTED.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".delta_spark_tables.", dir=COMMITTED.parent))
    try:
        paths = tables.build_all(spark, work)
        for marker in work.glob(".*.built"):
            marker.unlink()
        stamp = {**fingerprint(), "tables": sorted(paths), "empty_folders": empty_folders(work)}
        (work / STAMP.name).write_text(json.dumps(stamp, indent=1) + "\n")
        if COMMITTED.exists():
            shutil.rmtree(COMMITTED)
        work.rename(COMMITTED)
    finally:
        if work.exists():
            shutil.rmtree(work)


def main() -> int:
    from tests.delta_spark_session import start_delta_spark

    # the tables as they were first built: eight shuffle partitions (the tests' sessions take two)
    spark = start_delta_spark(app_name="delta-spark-tables", **{"spark.sql.shuffle.partitions": "8"})
    try:
        rebuild(spark)
    finally:
        spark.stop()
    print(f"built {len(tables.TABLES)} tables into {COMMITTED.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
