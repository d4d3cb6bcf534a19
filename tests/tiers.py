"""The test tiers, given from what a test uses.

- ``spark``: a SparkSession in the test process (the ``spark`` fixture);
- ``services``: servers the test starts (object stores, an Airflow home with its database);
- ``e2e``: spark-submit, ``airflow dags test``, a scheduler, a Spark master or Spark Connect server;
- ``delta_spark``: judged by delta-spark (``tests/delta_spark``, a pytest process of its own);
- ``cluster``: a namespaced Spark cluster (``tests/airflow/cluster``, as root).

A test without any of them is in the fast tier (``make test-fast``). Markers come from the fixtures a test
requests and the folder it lives in; a module may add more with ``pytestmark``. :func:`tier_guard` keeps
that true: a fast test that starts Spark or one of the e2e programs fails with the marker it lacks.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("spark", "services", "e2e", "delta_spark", "cluster")
#: the pytest ``-m`` expression of the fast tier
FAST = " and ".join(f"not {tier}" for tier in TIERS)

#: fixture -> the tiers a test that requests it (directly or through another fixture) belongs to
FIXTURE_TIERS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "servers_dir": ("services",),
    "s3_store": ("services",),
    "s3_locked": ("services",),
    "azure_store": ("services",),
    "gcs_store": ("services",),
    "iam_s3": ("services",),
    "azurite": ("services",),
    "airflow_home": ("services",),
    "glue_catalog": ("services",),  # tests/airflow/catalogs: moto's Glue and S3
    "hive_metastore": ("services",),  # tests/airflow/catalogs: a Hive metastore's Thrift server (a JVM)
    "unity_catalog": ("services",),  # tests/airflow/catalogs: a Unity Catalog contract server (HTTP)
    "api_server": ("services", "e2e"),
    "connect_server": ("e2e",),
    "standalone_master": ("e2e",),
    "cluster": ("e2e", "cluster"),
}
#: folder -> the tiers of every test in it
FOLDER_TIERS: dict[Path, tuple[str, ...]] = {
    TESTS / "delta_spark": ("delta_spark", "spark"),
    TESTS / "airflow" / "cluster": ("cluster", "e2e"),
    TESTS / "storage": ("services",),
    TESTS / "install": ("services", "e2e"),  # the wheel in fresh virtualenvs (make test-install)  # object stores (moto, Azurite, a GCS emulator), also as parameters
}
#: programs whose start makes a test end to end
E2E_PROGRAMS = frozenset({"spark-submit", "spark-class", "pyspark", "java", "airflow", "delta-maint",
                          "start-master.sh", "start-worker.sh", "start-connect-server.sh"})


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers of a collected test: its markers, its fixtures' and its folder's."""
    tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
    for fixture in getattr(item, "fixturenames", ()):
        tiers.update(FIXTURE_TIERS.get(fixture, ()))
    path = Path(str(item.path)).resolve()
    for folder, folder_tiers in FOLDER_TIERS.items():
        if folder in path.parents:
            tiers.update(folder_tiers)
    return tiers


def mark_tiers(items: list[pytest.Item]) -> None:
    """Add the tier markers each test earns (:func:`tiers_of`)."""
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        for tier in sorted(tiers_of(item) - have):
            item.add_marker(getattr(pytest.mark, tier))


def _program(args) -> tuple[str, list[str]]:
    argv = [os.fspath(args)] if isinstance(args, (str, bytes, os.PathLike)) else [os.fspath(a) for a in args]
    argv = [a.decode() if isinstance(a, bytes) else a for a in argv]
    return (os.path.basename(argv[0].split()[0]) if argv and argv[0] else ""), argv


def e2e_program(args) -> str | None:
    """The program of a process start that makes a test end to end, or None."""
    program, argv = _program(args)
    if program in E2E_PROGRAMS:
        return program
    if program in ("sh", "bash") and "-c" in argv:  # a shell line: its first word
        words = argv[argv.index("-c") + 1:][:1]
        first = os.path.basename(words[0].split()[0]) if words and words[0].split() else ""
        return first if first in E2E_PROGRAMS else None
    return None


def _spark_started() -> bool:
    """A SparkSession runs in this process (never imports pyspark to find out)."""
    if "pyspark.sql" not in sys.modules:
        return False
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


@contextlib.contextmanager
def tier_guard(item: pytest.Item) -> Iterator[None]:
    """Run a fast-tier test's setup or body; fail it when it starts Spark or an e2e program."""
    if any(mark.name in TIERS for mark in item.iter_markers()):
        yield
        return
    real_init = subprocess.Popen.__init__
    started: list[str] = []

    def guarded_init(self, args, *a, **kw):
        program = e2e_program(args)
        if program is not None:
            started.append(program)
            raise RuntimeError(f"{item.nodeid} starts {program}: request the spark fixture (a SparkSession in "
                               "this process), or mark it e2e (a program of its own), or request a fixture that does")
        real_init(self, args, *a, **kw)

    spark_before = _spark_started()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", guarded_init)
        yield
    if started:
        pytest.fail(f"starts {', '.join(started)} but is not marked e2e (tests/tiers.py)", pytrace=False)
    if not spark_before and _spark_started():
        pytest.fail("starts a SparkSession but is not marked spark: request the spark fixture (tests/tiers.py)",
                    pytrace=False)
