"""A faster start of the spark-submit driver JVM (client and local mode): JIT tier 1 only and a
class-data-sharing archive of the driver's classes, dumped by a first run and mapped by the next."""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from pathlib import Path

from airflow_delta_maint.hooks.spark_install import pyspark_home

_OWN_OPTIONS = ("-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit=", "-XX:TieredStopAtLevel=")


def fast_start_options(java_options: str, folder: Path) -> tuple[str, tuple[Path, Path] | None]:
    """The driver's ``extraJavaOptions`` for a fast start, and the dump this run makes, if any.

    The archive is named after the Spark and Java installation; while it does not exist, this run
    dumps one at exit to a name of its own: the dump is ``(that file, the archive)``, for
    :func:`keep_class_archive` once the run is over. Options of an earlier fast start in
    ``java_options`` are replaced, the others kept.
    """
    folder.mkdir(parents=True, exist_ok=True)
    java = hashlib.sha256(f"{pyspark_home()}|{os.environ.get('JAVA_HOME', '')}".encode()).hexdigest()[:12]
    archive = folder / f"spark-driver-{java}.jsa"
    dump: tuple[Path, Path] | None
    if archive.exists():
        cds = f"-XX:SharedArchiveFile={archive}"
        dump = None
    else:  # this run dumps it at exit, to a name of its own; moved in place once whole
        tmp = folder / f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        cds = f"-XX:ArchiveClassesAtExit={tmp}"
        dump = (tmp, archive)
    base = " ".join(o for o in str(java_options).split() if not o.startswith(_OWN_OPTIONS))
    return " ".join(filter(None, [base, "-XX:TieredStopAtLevel=1", cds])), dump


def keep_class_archive(dump: tuple[Path, Path]) -> None:
    """Keep a class-data-sharing archive a run dumped (a partial one never replaces anything)."""
    tmp, archive = dump
    with contextlib.suppress(OSError):
        if tmp.exists() and tmp.stat().st_size > 0 and not archive.exists():
            os.replace(tmp, archive)
    with contextlib.suppress(OSError):
        tmp.unlink()
